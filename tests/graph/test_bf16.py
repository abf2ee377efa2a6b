"""precision="bf16": conv/matmul over weights with bfloat16 operands (AVX-512 BF16 vdpbf16ps), float32 accumulation.

Error bound used throughout: each operand is rounded to bf16 (8 significant bits: relative error <= 2^-8), so a
product is off by at most (2^-7 + 2^-16)|x w|, and float32 accumulation of K terms adds at most K 2^-24 sum|x w|;
so for y = sum x_i w_i (+ bias, relu, residual add: 1-Lipschitz, exact up to float32 rounding)
    |y_bf16 - y| <= (2^-7 + K 2^-23) * sum_i |x_i| |w_i|     (+ 1e-6 for the float32 epilogue),
checked element by element against float64 eager. A wrong pairing of channels or halves breaks it by O(1).
Every test also checks that bf16 really ran: the kernels are the bf16 ones, the IR calls vdpbf16ps and the
result differs from the float32 build.
"""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import fxc
from fxc.backends.llvm.compile import target_machine
from fxc.errors import TargetError
from fxc.relay_like.context import PassContext

HAS_BF16 = "+avx512bf16" in target_machine()[3].split(",")
needs_bf16 = pytest.mark.skipif(not HAS_BF16, reason="the CPU lacks AVX-512 BF16 (test_bf16_unavailable covers it)")


# every eligible op in bf16, also where this CPU's vdpbf16ps is slower than its FMAs (the default there is only the
# weight-streaming ops; test_weight_bound_mode checks that choice)
BF16_ALL = {"precision": "bf16", "bf16": "all"}


class ConvBlock(torch.nn.Module):
    def __init__(self, c, o, k, stride=1, padding=0, residual=False):
        super().__init__()
        self.conv = torch.nn.Conv2d(c, o, k, stride=stride, padding=padding)
        self.residual = residual

    def forward(self, x, r=None):
        y = self.conv(x)
        if self.residual:
            y = y + r
        return torch.relu(y)


def _bound(x, w, k_terms):
    """(2^-7 + K 2^-23) * conv(|x|, |w|) in float64, plus 1e-6."""
    return (2.0 ** -7 + k_terms * 2.0 ** -23) * F.conv2d(x.abs().double(), w.abs().double()) + 1e-6


def _compile_both(model, inputs):
    bf = fxc.from_torch(model, inputs, **BF16_ALL)
    fp = fxc.from_torch(model, inputs)
    return bf, fp


def _assert_bf16_ran(bf, fp, inputs, anchor):
    assert any(anchor in line for line in bf.module.kernels), bf.module.kernels
    assert "llvm.x86.avx512bf16.dpbf16ps" in bf.module.source
    assert "dpbf16ps" not in fp.module.source
    assert not torch.equal(bf(*inputs), fp(*inputs))


CONVS = [  # (C, O, kernel, stride, padding, H, W): 3x3, 1x1 as GEMM (full and 4-lane tail), 1x1 direct, strided, odd
    (16, 32, 3, 1, 1, 14, 14),
    (64, 48, 1, 1, 0, 28, 28),
    (16, 64, 1, 1, 0, 14, 14),
    (64, 32, 1, 1, 0, 7, 7),
    (8, 20, 3, 2, 1, 15, 15),
    (5, 7, 3, 1, 0, 9, 11),
    (3, 24, 7, 2, 3, 30, 30),
    (5, 24, 1, 1, 0, 23, 25),       # 1x1 GEMM reading odd float32 channels through the fused pairing, position tail
]


@needs_bf16
@pytest.mark.parametrize("c,o,k,stride,padding,h,w", CONVS)
def test_conv_within_bf16_bound(c, o, k, stride, padding, h, w):
    torch.manual_seed(0)
    model = ConvBlock(c, o, k, stride, padding).eval()
    x = torch.randn(2 if c == 8 else 1, c, h, w)
    bf, fp = _compile_both(model, (x,))
    got = bf(x)
    conv = model.conv
    xp = F.pad(x, (padding,) * 4)
    exact = torch.relu(F.conv2d(xp.double(), conv.weight.double(), conv.bias.double(), stride))
    bound = _bound(xp, conv.weight, c * k * k)[..., ::stride, ::stride]
    err = (got.double() - exact).abs()
    assert (err <= bound).all(), f"max err {err.max():.3g}, worst err/bound {(err / bound).max():.3g}"
    assert err.max() > 0
    # on the bf16-rounded operands (round to nearest even, as torch) only the float32 accumulation differs
    xb, wb = xp.to(torch.bfloat16).double(), conv.weight.to(torch.bfloat16).double()
    on_bf16 = torch.relu(F.conv2d(xb, wb, conv.bias.double(), stride))
    acc_bound = c * k * k * 2.0 ** -23 * F.conv2d(xb.abs(), wb.abs(), stride=stride) + 1e-6
    assert ((got.double() - on_bf16).abs() <= acc_bound).all()
    _assert_bf16_ran(bf, fp, (x,), "conv2d_packed_bf16")
    gemm = k == 1 and stride == 1 and not (h * w < 512 and c > o)
    fused = any("pack_bf16_pairs+conv2d_packed_bf16" in line for line in bf.module.kernels)
    assert fused == gemm, bf.module.kernels       # a 1x1 GEMM pairs its float32 input as it loads it


@needs_bf16
def test_conv_residual_epilogue():
    torch.manual_seed(1)
    model = ConvBlock(24, 24, 3, 1, 1, residual=True).eval()      # < 32 channels: not a Winograd conv
    x, r = torch.randn(1, 24, 10, 10), torch.randn(1, 24, 10, 10)
    bf, fp = _compile_both(model, (x, r))
    got = bf(x, r)
    conv = model.conv
    exact = torch.relu(F.conv2d(x.double(), conv.weight.double(), conv.bias.double(), padding=1) + r.double())
    bound = _bound(F.pad(x, (1, 1, 1, 1)), conv.weight, 24 * 9)
    assert ((got.double() - exact).abs() <= bound).all()
    assert any("conv2d_packed_bf16" in k and "add" in k and "relu" in k for k in bf.module.kernels), bf.module.kernels
    _assert_bf16_ran(bf, fp, (x, r), "conv2d_packed_bf16")


@needs_bf16
@pytest.mark.parametrize("m,k,n", [(3, 101, 70), (1, 512, 1000), (20, 64, 16), (30, 2048, 64)])
def test_linear_within_bf16_bound(m, k, n):
    torch.manual_seed(2)
    model = torch.nn.Linear(k, n).eval()
    x = torch.randn(m, k)
    bf, fp = _compile_both(model, (x,))
    got = bf(x)
    exact = x.double() @ model.weight.double().T + model.bias.double()
    bound = (2.0 ** -7 + k * 2.0 ** -23) * (x.abs().double() @ model.weight.abs().double().T) + 1e-6
    err = (got.double() - exact).abs()
    assert (err <= bound).all(), f"worst err/bound {(err / bound).max():.3g}"
    _assert_bf16_ran(bf, fp, (x,), "matmul_packed_bf16")


class SmallNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = torch.nn.Conv2d(3, 16, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(16)
        self.c2 = torch.nn.Conv2d(16, 32, 3, stride=2, padding=1)
        self.dw = torch.nn.Conv2d(32, 32, 3, padding=1, groups=32)
        self.c3 = torch.nn.Conv2d(32, 24, 1)
        self.fc = torch.nn.Linear(24, 10)

    def forward(self, x):
        x = torch.relu(self.bn(self.c1(x)))
        x = torch.relu(self.c2(x))
        x = self.c3(torch.relu(self.dw(x)))
        return self.fc(x.mean((2, 3)))


@needs_bf16
def test_small_model_torch_compile():
    """torch.compile(options={"precision": "bf16"}) vs float32 eager: within 2% of the output scale (bf16 keeps
    8 significant bits; a few layers deep the relative errors add up to ~1%), and not the float32 result."""
    torch.manual_seed(3)
    model = SmallNet().eval()
    with torch.no_grad():
        model.bn.running_mean.uniform_(-0.5, 0.5)
        model.bn.running_var.uniform_(0.5, 2.0)
    x = torch.randn(2, 3, 24, 24)
    with torch.inference_mode():
        expected = model(x)
        got = torch.compile(model, backend="fxc", options=BF16_ALL)(x)
        torch._dynamo.reset()
        fp32 = torch.compile(model, backend="fxc")(x)
    scale = expected.abs().max().item()
    err = (got - expected).abs().max().item()
    assert err <= 2e-2 * scale, (err, scale)
    assert (got - fp32).abs().max().item() > 0          # bf16 ran: the float32 build gives another result
    torch.testing.assert_close(fp32, expected, rtol=1e-4, atol=1e-5 * max(scale, 1.0))


@needs_bf16
def test_weight_bound_mode():
    """Where vdpbf16ps is slower per multiply-add than FMAs, only the weight-streaming ops (a batch-1 linear) go
    bf16; the build option bf16="weight_bound" forces that choice on any CPU."""
    model = torch.nn.Sequential(torch.nn.Conv2d(8, 16, 3), torch.nn.Flatten(), torch.nn.Linear(16 * 6 * 6, 40)).eval()
    x = torch.randn(1, 8, 8, 8)
    bf = fxc.from_torch(model, x, precision="bf16", bf16="weight_bound")
    kernels = "\n".join(bf.module.kernels)
    assert "matmul_packed_bf16" in kernels and "conv2d_packed_bf16" not in kernels, kernels
    assert "dpbf16ps" in bf.module.source
    with torch.no_grad():
        torch.testing.assert_close(bf(x), model(x), rtol=2e-2, atol=2e-2)


def test_unknown_precision_is_an_error():
    model = torch.nn.Linear(4, 4)
    with pytest.raises(TargetError, match="'fp32', 'bf16'"):
        fxc.from_torch(model, torch.randn(2, 4), precision="fp16")
    with pytest.raises(Exception, match="'fp32', 'bf16'"):
        torch.compile(model, backend="fxc", options={"precision": "half"})(torch.randn(2, 4))


def test_unknown_bf16_mode_is_named():
    from fxc.errors import FxcError
    with pytest.raises(FxcError, match="unknown bf16='everywhere'; valid: 'auto', 'all', 'weight_bound'"):
        fxc.from_torch(torch.nn.Linear(4, 4), torch.randn(2, 4), bf16="everywhere")


def test_bf16_unavailable():
    """On a CPU without AVX-512 BF16 (this host's own CPU with the feature taken off) bf16 is refused with a clear
    error (more targets: tests/backends/test_targets.py)."""
    with pytest.raises(TargetError, match="AVX-512 BF16"):
        fxc.from_torch(torch.nn.Linear(4, 4), torch.randn(2, 4), target="llvm -mattr=-avx512bf16", precision="bf16")


def _graph():
    """conv(pad(x), w1), conv(x, w2), conv(x, w3) (x read by two convs); a @ b^T (weight); a @ c (activations)."""
    from fxc.relay_like.graph import Graph
    g = Graph()
    x, a, c = g.input((1, 6, 9, 9), "float32"), g.input((4, 10), "float32"), g.input((10, 16), "float32")
    w1, w2, b = g.input((16, 6, 3, 3), "float32"), g.input((8, 6, 1, 1), "float32"), g.input((32, 10), "float32")
    w3 = g.input((4, 6, 1, 1), "float32")
    g.weights.update({w1.id, w2.id, w3.id, b.id})
    xp = g.call1("pad", [x], pad=(1, 1, 1, 1), value=0.0, mode="constant")
    g.outputs = [g.call1("conv2d", [xp, w1]), g.call1("conv2d", [x, w2]), g.call1("conv2d", [x, w3]),
                 g.call1("matmul", [a, b], trans_b=True), g.call1("matmul", [a, c])]
    return g


def test_use_bf16_rewrites_ops_over_weights_only():
    from fxc.relay_like.passes.use_bf16 import use_bf16
    g = use_bf16(_graph(), PassContext(precision="bf16"))
    ops = [n.op for n in g.nodes]
    assert ops.count("conv2d_packed_bf16") == 3 and ops.count("matmul_packed_bf16") == 1
    assert ops.count("matmul") == 1                       # activation x activation stays float32
    packs = [n for n in g.nodes if n.op == "pack_bf16_pairs"]
    assert sorted((n.inputs[0].shape, n.attrs["axis"]) for n in packs) == \
        [((1, 6, 9, 9), 1), ((4, 10), 1)]               # x once for its three convs (the pad moves after), a along K
    conv = next(n for n in g.nodes if n.op == "conv2d_packed_bf16" and n.outputs[0].shape[1] == 16)
    assert conv.inputs[0].node.op == "pad" and conv.inputs[0].node.inputs[0].node.op == "pack_bf16_pairs"
    assert conv.inputs[0].type.shape == (1, 3, 11, 11) and conv.inputs[0].dtype == "int32"
    assert conv.inputs[1].node.op == "pack_lanes" and conv.inputs[1].node.attrs["pair_axis"] == 1
    assert [o.dtype for o in g.outputs] == ["float32"] * 5


def test_use_bf16_weight_bound_keeps_compute_bound_ops():
    from fxc.relay_like.passes.use_bf16 import use_bf16
    g = use_bf16(_graph(), PassContext(precision="bf16", bf16_everywhere=False))
    ops = [n.op for n in g.nodes]
    assert "conv2d_packed_bf16" not in ops             # 81 output rows per channel: compute-bound
    assert ops.count("matmul_packed_bf16") == 1         # 4 rows: streams its weight


@needs_bf16
def test_default_mode_follows_the_measured_dot_rate():
    """By default (bf16="auto"), bf16 goes everywhere only where vdpbf16ps does more multiply-adds per second than
    FMAs."""
    from fxc.backends.llvm.probe import bf16_dot_gain
    from fxc.driver.build import bf16_everywhere
    gain = bf16_dot_gain()
    assert 0.1 < gain < 8.0, gain
    assert bf16_everywhere() == (gain >= 1.0)


def test_use_bf16_takes_a_weight_folded_with_a_constant_scale():
    """A batch norm folded into a constant weight (fold_scale_axis; fxc.from_torch bakes the weights in) leaves a
    conv over mul(w, scale), values of constants only: still a conv over a weight, so it runs in bf16 (it once
    stayed float32 for every batch-normed conv of a from_torch model)."""
    from fxc.relay_like.graph import Graph
    from fxc.relay_like.passes import fold_scale_axis, infer_types
    from fxc.relay_like.passes.use_bf16 import use_bf16
    rng = np.random.default_rng(0)
    g = Graph()
    x = g.input((1, 4, 8, 8), "float32", "x")
    w = g.const(rng.standard_normal((8, 4, 1, 1)).astype(np.float32))
    var = g.const(rng.random(8).astype(np.float32) + 0.5)
    scale = g.call1("reshape", [g.call1("rsqrt", [var])], shape=(8, 1, 1))
    y = g.call1("mul", [g.call1("conv2d", [x, w]), scale])
    g.outputs = [g.call1("add", [y, g.const(np.ones((8, 1, 1), np.float32))])]
    ctx = PassContext(precision="bf16")
    g = use_bf16(fold_scale_axis(infer_types(g, ctx), ctx), ctx)
    ops = [n.op for n in g.nodes]
    assert "conv2d_packed_bf16" in ops and "conv2d" not in ops, ops


def _winograd_abs(x, w, m):
    """|A^T| [ |G| |w| |G^T| . |B^T| |d| |B| ] |A| per m x m tile (float64, padding 1, stride 1): what bounds the
    rounding of Winograd's operands, as conv(|x|, |w|) does for the direct conv's."""
    from fxc.ops.winograd import MATRICES
    at, bt, g = [np.abs(np.array(t, np.float64)) for t in MATRICES[m]]
    n, c, h, wd = x.shape
    a = m + 2
    th, tw = -(-h // m), -(-wd // m)
    xp = np.zeros((n, c, th * m + 2, tw * m + 2))
    xp[:, :, 1:1 + h, 1:1 + wd] = np.abs(x)
    d = np.stack([np.stack([xp[:, :, i * m:i * m + a, j * m:j * m + a] for j in range(tw)], 2) for i in range(th)], 2)
    v = np.einsum("ai,nctuij,bj->nctuab", bt, d, bt)
    u = np.einsum("ai,kcij,bj->kcab", g, np.abs(w), g)
    y = np.einsum("ia,nktuab,jb->nktiuj", at, np.einsum("kcab,nctuab->nktuab", u, v), at)
    return y.reshape(n, w.shape[0], th * m, tw * m)[:, :, :h, :wd]


@needs_bf16
@pytest.mark.parametrize("batch,c,hw", [(1, 64, 14), (8, 64, 7), (1, 256, 14)])   # 256: channel chunks
def test_winograd_f2_conv_within_bf16_bound(batch, c, hw, monkeypatch):
    """Small maps in bf16 (a bf16 direct conv at twice the FMA rate) take Winograd F(2x2,3x3) with bf16 operands:
    V = B^T d B and U = G w G^T rounded to bf16 (2^-8 each), products accumulated in float32, so the error is at
    most (2^-7 + K 2^-23) times the same transforms over |x| and |w| (plus the float32 transforms' rounding)."""
    import fxc.driver.build as fb
    monkeypatch.setattr(fb, "bf16_direct_fast", lambda target=None: True)   # a Zen 4's choice, on any AVX-512 BF16 CPU
    torch.manual_seed(batch)
    model = ConvBlock(c, c, 3, 1, 1).eval()
    x = torch.randn(batch, c, hw, hw)
    bf, fp = _compile_both(model, (x,))
    assert any("conv2d_winograd" in k and "pack_bf16_pairs" not in k for k in bf.module.kernels), bf.module.kernels
    got = bf(x).double().detach()
    conv = model.conv
    with torch.no_grad():
        exact = torch.relu(F.conv2d(x.double(), conv.weight.double(), conv.bias.double(), padding=1))
    bound = (2.0 ** -7 + c * 16 * 2.0 ** -23) * _winograd_abs(x.numpy(), conv.weight.detach().numpy(), 2) + 1e-5
    err = (got - exact).abs().numpy()
    assert (err <= bound).all(), f"max err {err.max():.3g}, worst err/bound {(err / bound).max():.3g}"
    assert err.max() > 1e-4 * exact.abs().max().item()         # bf16 rounding shows: not the float32 kernel
    _assert_bf16_ran(bf, fp, (x,), "conv2d_winograd")
