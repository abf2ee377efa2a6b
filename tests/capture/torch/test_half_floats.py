"""float16 / bfloat16 graphs through torch.compile: autocast, model.half(), model.bfloat16() and single ops compile
(no eager fallback) with torch's dtypes, each op computed in float32 and rounded at its boundary as PyTorch's CPU
kernels round. Accuracy as eager's: the error against a float64 run within a few times eager's own error; targets
without the dtype (GL, WebGPU) refuse with the missing dtype named, and the graph runs in eager PyTorch."""
import pytest
import torch

from fxc.capture.torch.recorder import recording
from fxc.driver.options import bf16_everywhere
from fxc.relay_like.builder import Builder
from fxc.relay_like.context import PassContext
from fxc.relay_like.passes.use_bf16 import use_bf16
from fxc.relay_like.passes.use_winograd import use_winograd
from fxc.target import Target
from fxc.testing import resnet18

from ...targets import CPU_TARGETS

ULP = {torch.float16: 2.0 ** -11, torch.bfloat16: 2.0 ** -8}     # half an ulp at 1.0: a rounding's relative error


def run(fn, args, target, autocast=None):
    """fn compiled for `target` on args (under autocast to that dtype if given), and what fell back."""
    torch._dynamo.reset()
    c = torch.compile(fn, backend="fxc", options={"target": target})
    with recording() as rec, torch.no_grad():
        with torch.autocast("cpu", dtype=autocast, enabled=autocast is not None):
            out = c(*args)
    torch._dynamo.reset()
    return out, rec


def assert_as_accurate_as_eager(got, eager, exact, dtype, times=4.0):
    """got's error against the float64 result `exact` is at most `times` eager's own (at least a rounding of the
    largest value: eager's result may be the float64 one rounded), and got has eager's dtype."""
    for g, e, x in zip(*(o if isinstance(o, (tuple, list)) else (o,) for o in (got, eager, exact))):
        assert g.dtype == e.dtype and g.shape == e.shape
        if not g.dtype.is_floating_point:
            assert torch.equal(g, e)
            continue
        err_fxc = (g.double() - x.double()).abs().max().item()
        err_eager = (e.double() - x.double()).abs().max().item()
        floor = ULP[dtype] * x.double().abs().max().item()
        assert err_fxc <= times * max(err_eager, floor), (err_fxc, err_eager, floor)


def double(args):
    return [a.double() if a.is_floating_point() else a for a in args]


# -- ResNet-18 (small input): the three ways a user gets a 16-bit graph -----------------------------------------------
@pytest.mark.cpu_targets
@pytest.mark.parametrize("mode", ["autocast_bf16", "half", "bfloat16"])
def test_resnet18_in_16_bit_floats_compiles_and_is_as_accurate_as_eager(mode, target):
    torch.manual_seed(0)
    model = resnet18(num_classes=10).eval()
    x = torch.randn(1, 3, 32, 32)
    with torch.no_grad():
        exact = model.double()(x.double())
    dtype = torch.bfloat16 if "bf" in mode else torch.float16
    if mode == "autocast_bf16":
        model = model.float()
        got, rec = run(model, (x,), target, autocast=torch.bfloat16)
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
            eager = model(x)
    else:
        model, x = model.to(dtype), x.to(dtype)
        got, rec = run(model, (x,), target)
        with torch.no_grad():
            eager = model(x)
    assert not rec.fallback_ops and not rec.failures, str(rec)
    assert got.dtype == dtype
    assert_as_accurate_as_eager(got, eager, exact, dtype)
    if dtype == torch.bfloat16:
        assert_bf16_dot_products_where_the_cpu_has_them(rec.kernels, Target.parse(target))


def assert_bf16_dot_products_where_the_cpu_has_them(kernels, target):
    """A bfloat16 graph's convs/matmuls over weights (operands exactly bf16) take the packed bf16 ops on a CPU with
    AVX-512 BF16: every such conv where its vdpbf16ps beats its FMAs (bf16_everywhere), the weight-streaming matmul
    (the fc) everywhere; without it (llvm -mcpu=haswell) the float32 form."""
    kernels = " ".join(map(str, kernels))
    if not target.caps.bf16_dot:
        assert "packed_bf16" not in kernels and "conv2d" in kernels, kernels
        return
    assert "matmul_packed_bf16" in kernels, kernels
    assert ("conv2d_packed_bf16" in kernels) == bf16_everywhere(target), kernels


def _bf16_conv_graph(dtype: str):
    """conv2d(x, w) of a graph input x and a weight w, both `dtype` widened as the builder widens a 16-bit op's
    operands (float32: plain)."""
    b = Builder()
    x = b.graph.input((1, 8, 10, 10), dtype, "x")
    w = b.graph.input((16, 8, 3, 3), dtype, "w")
    b.graph.weights.add(w.id)
    y = b.call("conv2d", b.widen([x, w]), stride=(2, 2))
    b.graph.outputs = [b.narrow(y, dtype)]
    return b.graph


def test_bf16_operands_choose_the_packed_ops_and_a_float32_graph_asks_no_measurement():
    """use_bf16 on a CPU with AVX-512 BF16: the conv over bfloat16 operands becomes conv2d_packed_bf16 (bf16_exact
    says every op), its float32 twin is left as it is without asking bf16_exact (the speed probe), and a CPU without
    bf16_dot keeps the float32 conv."""
    def never():
        raise AssertionError("a float32 graph asked for the bf16 measurement")
    ops = lambda g: [n.op for n in g.nodes]      # noqa: E731
    zen4, haswell = Target.parse("llvm -mcpu=znver4"), Target.parse("llvm -mcpu=haswell")
    assert zen4.caps.bf16_dot and not haswell.caps.bf16_dot
    assert "conv2d_packed_bf16" in ops(use_bf16(_bf16_conv_graph("bfloat16"), PassContext(zen4,
                                                                                           bf16_exact=lambda: True)))
    fp32 = _bf16_conv_graph("float32")
    before = str(fp32)
    assert str(use_bf16(fp32, PassContext(zen4, bf16_exact=never))) == before
    assert "packed_bf16" not in " ".join(ops(use_bf16(_bf16_conv_graph("bfloat16"),
                                                       PassContext(haswell, bf16_exact=never))))
    # float16 operands are no bf16 values: left in float32
    assert "packed_bf16" not in " ".join(ops(use_bf16(_bf16_conv_graph("float16"), PassContext(zen4))))


def _bf16_conv3x3_graph(dtype: str, c: int, hw: int):
    """conv2d(pad(x, 1), w): a stride-1 3x3 conv over a weight (Winograd's kind), operands `dtype` widened."""
    b = Builder()
    x = b.graph.input((1, c, hw, hw), dtype, "x")
    w = b.graph.input((c, c, 3, 3), dtype, "w")
    b.graph.weights.add(w.id)
    xw, ww = b.widen([x, w])
    y = b.call("conv2d", [b.call("pad", [xw], pad=(1, 1, 1, 1)), ww])
    b.graph.outputs = [b.narrow(y, dtype)]
    return b.graph


@pytest.mark.parametrize("c,hw,direct", [(64, 14, True), (256, 14, True), (64, 56, False)])
def test_bf16_3x3_convs_take_the_bf16_direct_kernel_where_it_is_the_faster(c, hw, direct):
    """A bfloat16 graph's stride-1 3x3 conv on a CPU whose bf16 direct conv runs at twice the float32 rate
    (bf16_exact_direct): below 28x28 the bf16 direct kernel (exact on bf16 operands) instead of float32 Winograd; on
    a 56x56 map float32 Winograd F(4x4) stays (it beats the bf16 direct kernel there). The bf16 Winograd form of
    precision="bf16" (rounded transformed weights) is never taken; a CPU whose measure says otherwise, and a float32
    graph (which asks nothing), keep today's Winograd."""
    def never():
        raise AssertionError("a float32 graph asked for the bf16 measurement")
    ops = lambda g: [n.op for n in g.nodes]      # noqa: E731
    zen4 = Target.parse("llvm -mcpu=znver4")
    passes = lambda g, ctx: use_bf16(use_winograd(g, ctx), ctx)      # noqa: E731
    got = ops(passes(_bf16_conv3x3_graph("bfloat16", c, hw), PassContext(zen4, bf16_exact_direct=lambda: True)))
    assert ("conv2d_packed_bf16" in got, "conv2d_winograd" in got) == (direct, not direct), got
    assert "pack_bf16_pairs" not in got or direct         # pairs only for the direct kernel: no bf16 Winograd
    slow = ops(passes(_bf16_conv3x3_graph("bfloat16", c, hw), PassContext(zen4, bf16_exact_direct=lambda: False)))
    assert "conv2d_winograd" in slow and "conv2d_packed_bf16" not in slow, slow
    fp32 = ops(passes(_bf16_conv3x3_graph("float32", c, hw), PassContext(zen4, bf16_exact_direct=never)))
    assert "conv2d_winograd" in fp32, fp32


# -- a sample of ops of every family in both 16-bit dtypes ------------------------------------------------------------
def _ops():
    g = torch.Generator().manual_seed(0)
    r = lambda *s: torch.randn(*s, generator=g)     # noqa: E731
    return {
        "elementwise": (lambda x: torch.sigmoid(x) * torch.tanh(x) + torch.exp(x) / 3 - 1, [r(4, 33)]),
        "gelu_where": (lambda x: torch.where(x > 0, torch.nn.functional.gelu(x), x.abs().sqrt()), [r(4, 33)]),
        "broadcast": (lambda x, y: (x - y) * y + 2.5, [r(4, 33), r(33)]),
        "sum_mean_amax": (lambda x: (x.sum(1), x.mean(0), x.amax(1), x.argmax(1)), [r(16, 65)]),
        "softmax": (lambda x: torch.softmax(x, -1), [r(4, 40)]),
        "layer_norm": (lambda x, w, b: torch.nn.functional.layer_norm(x, (32,), w, b), [r(6, 32), r(32), r(32)]),
        "matmul": (lambda a, b: a @ b, [r(8, 64), r(64, 24)]),
        "linear_relu": (lambda x, w, b: torch.relu(torch.nn.functional.linear(x, w, b)), [r(3, 48), r(20, 48),
                                                                                          r(20)]),
        "conv2d_pool": (lambda x, w: torch.nn.functional.max_pool2d(torch.nn.functional.conv2d(x, w, padding=1), 2),
                        [r(1, 8, 10, 10), r(12, 8, 3, 3)]),
        "movement": (lambda x, y: torch.cat([x.permute(1, 0), y], 0).reshape(-1, 4)[1:], [r(4, 6), r(2, 4)]),
        "cumsum": (lambda x: torch.cumsum(x, 1), [r(3, 50)]),
    }


OPS = _ops()


@pytest.mark.targets(*CPU_TARGETS, "opencl")
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("name", sorted(OPS))
def test_ops_in_16_bit_floats_compile_and_are_as_accurate_as_eager(name, dtype, target):
    fn, args = OPS[name]
    args16 = [a.to(dtype) for a in args]
    got, rec = run(fn, args16, target)
    assert not rec.fallback_ops and not rec.failures, str(rec)
    with torch.no_grad():
        assert_as_accurate_as_eager(got, fn(*args16), fn(*double(args16)), dtype)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_elementwise_ops_round_as_eager_bit_for_bit(dtype):
    """PyTorch computes a 16-bit elementwise op in float32 and rounds its result to nearest even: so does fxc, op by
    op, inside one fused kernel."""
    def f(h):
        return (h * 3 + 1) / 7 - h * h
    h = (torch.randn(257) * 10).to(dtype)
    got, rec = run(f, [h], "llvm")
    assert not rec.fallback_ops
    assert torch.equal(got.view(torch.int16), f(h).view(torch.int16))


def test_autocast_casts_are_ops_of_the_graph():
    """Under autocast the float32 input and weights are rounded to bfloat16 where autocast casts them (a linear's
    operands), the result is bfloat16, and an op autocast runs in float32 (mse_loss) takes its bfloat16 operand
    widened exactly."""
    g = torch.Generator().manual_seed(1)
    x, w, z = (torch.randn(*s, generator=g) for s in ((5, 40), (30, 40), (5, 30)))

    def f(x, w, z):
        y = torch.nn.functional.linear(x, w)
        return y, torch.nn.functional.mse_loss(y, z)
    got, rec = run(f, [x, w, z], "llvm", autocast=torch.bfloat16)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        eager = f(x, w, z)
    assert not rec.fallback_ops and not rec.failures, str(rec)
    assert [t.dtype for t in got] == [t.dtype for t in eager] == [torch.bfloat16, torch.float32]
    exact = f(x.bfloat16().double(), w.bfloat16().double(), z.double())    # the operands as autocast rounds them
    assert_as_accurate_as_eager(got, eager, exact, torch.bfloat16)


# -- targets without the dtype: refused with the reason, the graph runs in eager PyTorch ------------------------------
@pytest.mark.targets("opengl", "webgpu")
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_targets_without_16_bit_floats_refuse_with_the_reason(dtype, target):
    def f(x):
        return torch.relu(x) * 2
    x = torch.randn(2, 9).to(dtype)
    got, rec = run(f, [x], target)
    assert torch.equal(got, f(x))
    reasons = " ".join(str(f) for f in rec.failures)
    assert rec.failures and f"is {str(dtype).split('.')[1]}, and the {target} target has no" in reasons, str(rec)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_from_torch_of_a_16_bit_model_and_its_artifact(dtype, tmp_path):
    """fxc.from_torch takes a 16-bit model (its parameters become constants of their dtype) and matches eager; the
    exported artifact gives the same bits (bfloat16 as uint16 patterns on the numpy side)."""
    import numpy as np

    import fxc
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 3)).to(dtype)
    x = torch.randn(4, 8).to(dtype)
    f = fxc.from_torch(model, (x,))
    got = f(x)
    with torch.no_grad():
        assert_as_accurate_as_eager(got, model(x), model.double()(x.double()), dtype)
    loaded = fxc.load(fxc.export(f, tmp_path / "m.fxc"))
    bits16 = lambda t: t.view(torch.int16).numpy().view(np.uint16 if dtype == torch.bfloat16 else np.float16)  # noqa: E731
    out = loaded(bits16(x))
    np.testing.assert_array_equal(out[0] if isinstance(out, list) else out, bits16(got))
