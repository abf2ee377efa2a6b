"""torch.compile(backend="fxc") as a user uses it: registration, fallback, odd inputs, live parameters."""
import logging
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import fxc
from fxc.capture.torch.recorder import recording
from tests.helpers import check_module, sgd_steps


def test_entry_point_registration_in_fresh_process():
    code = textwrap.dedent("""
        import sys, torch
        import torch._dynamo
        assert "fxc" in torch._dynamo.list_backends(), torch._dynamo.list_backends()
        f = torch.compile(lambda x: torch.relu(x) * 3 + 1, backend="fxc")
        x = torch.randn(8, 5)
        torch.testing.assert_close(f(x), torch.relu(x) * 3 + 1)
        assert "fxc.capture.torch.backend" in sys.modules   # the entry point, not this script, loaded fxc
        print("ok")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "ok" in out.stdout


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(16, 32), nn.Linear(32, 4)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


def test_mlp_and_options(target):
    torch.manual_seed(0)
    check_module(MLP(), torch.randn(3, 16), target=target)


def test_unknown_option_and_target_are_clear_errors():
    m = MLP()
    with pytest.raises(Exception, match="unknown fxc option"):
        torch.compile(m, backend="fxc", options={"bogus": 1})(torch.randn(2, 16))
    torch._dynamo.reset()
    with pytest.raises(Exception, match="unknown target"):
        torch.compile(m, backend="fxc", options={"target": "tpu"})(torch.randn(2, 16))


def test_torch_compile_takes_every_build_option():
    """torch.compile's options are the frontends' build options (driver.options.BUILD_OPTIONS) plus its own: a layout
    choice reaches the build (winograd="off": no Winograd kernel where the default has one) and a bad value of one is
    named."""
    torch.manual_seed(0)
    conv = torch.nn.Sequential(torch.nn.Conv2d(64, 64, 3, padding=1), torch.nn.ReLU()).eval()
    x = torch.randn(1, 64, 28, 28)
    with torch.no_grad():
        expected = conv(x)
        kernels = {}
        for mode in ("auto", "off"):
            torch._dynamo.reset()
            with recording() as rec:
                got = torch.compile(conv, backend="fxc", options={"winograd": mode, "blocked_layout": False})(x)
            torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)
            kernels[mode] = " ".join(rec.kernels)
    assert "winograd" in kernels["auto"] and "winograd" not in kernels["off"], kernels
    torch._dynamo.reset()
    with pytest.raises(Exception, match="unknown winograd='never'"):
        torch.compile(conv, backend="fxc", options={"winograd": "never"})(x)


def test_parameters_stay_live_after_optimizer_step_and_load_state_dict(target):
    torch.manual_seed(0)
    m = MLP().eval()
    c = torch.compile(m, backend="fxc", options={"target": target})
    x = torch.randn(5, 16)
    with torch.no_grad():
        torch.testing.assert_close(c(x), m(x))
    opt = torch.optim.SGD(m.parameters(), lr=0.5)
    loss = m(x).square().sum()
    loss.backward()
    opt.step()
    with torch.no_grad():
        torch.testing.assert_close(c(x), m(x))
        m2 = MLP()
        m.load_state_dict(m2.state_dict())
        torch.testing.assert_close(c(x), m2(x))


def test_training_step_matches_eager(target):
    torch.manual_seed(0)
    m1, m2 = MLP(), MLP()
    m2.load_state_dict(m1.state_dict())
    c = torch.compile(m2, backend="fxc", options={"target": target})
    x, y = torch.randn(6, 16), torch.randn(6, 4)
    sgd_steps((m1, c), x, y)
    for p1, p2 in zip(m1.parameters(), m2.parameters()):
        torch.testing.assert_close(p1, p2, rtol=1e-4, atol=1e-5)


class _Heads(nn.Module):
    """Attention-like reshapes between linear layers: the training forward returns views (of the projections) that
    AOT autograd saves for the backward, and the compiled ops after them read them too."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(16, 32), nn.Linear(32, 16)

    def forward(self, x):
        h = self.a(x).view(2, 4, 32).relu().permute(1, 0, 2).reshape(8, 32)
        return torch.tanh(self.b(h)).view(2, 4, 16).sum(1)


def test_views_saved_for_the_backward_do_not_cut_the_graph(target):
    from fxc.capture.torch.recorder import Explanation, _recorders
    torch.manual_seed(0)
    m1, m2 = _Heads(), _Heads()
    m2.load_state_dict(m1.state_dict())
    x = torch.randn(8, 16)
    rec = Explanation()
    _recorders.append(rec)
    try:
        c = torch.compile(m2, backend="fxc", options={"target": target})
        out = c(x)
        out.square().sum().backward()
    finally:
        _recorders.remove(rec)
    ref = m1(x)
    ref.square().sum().backward()
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    for p1, p2 in zip(m1.parameters(), m2.parameters()):
        torch.testing.assert_close(p2.grad, p1.grad, rtol=1e-4, atol=1e-5)
    assert (rec.graphs, rec.subgraphs) == (2, 2), str(rec)     # the forward and the backward, one partition each


@pytest.mark.parametrize("flag", ["", "0"])
def test_a_training_steps_graphs_run_on_pytorchs_openmp_team(monkeypatch, flag):
    """The forward and backward graphs of a training step follow PyTorch's ops (loss, optimizer), whose OpenMP
    threads spin a few ms afterwards: their modules run on that team; inference graphs pick per call (2: the team
    while it is awake, else fxc's pool, which wakes faster after idle); FXC_OPENMP=0 keeps the pool everywhere."""
    from fxc.capture.torch.partition import FxcSubgraph
    monkeypatch.setenv("FXC_OPENMP", flag)
    modes = []
    real = FxcSubgraph._compile

    def spy(self, args):
        entry = real(self, args)
        modes.append((self.training_step, entry[0]._lib.lib.fxc_uses_openmp()))
        return entry
    monkeypatch.setattr(FxcSubgraph, "_compile", spy)
    torch.manual_seed(0)
    m1, m2 = _Heads(), _Heads()
    m2.load_state_dict(m1.state_dict())
    x = torch.randn(8, 16)
    with torch.no_grad():
        torch.testing.assert_close(torch.compile(m2, backend="fxc")(x), m1(x), rtol=1e-5, atol=1e-5)
    assert modes == [(False, 2 if flag == "" else 0)]
    modes.clear()
    c = torch.compile(m2, backend="fxc")
    c(x).square().sum().backward()
    m1(x).square().sum().backward()
    for p1, p2 in zip(m1.parameters(), m2.parameters()):
        torch.testing.assert_close(p2.grad, p1.grad, rtol=1e-4, atol=1e-5)
    assert modes == [(True, int(flag != "0"))] * 2, modes


def test_freeze_option(target):
    torch.manual_seed(0)
    m = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU()).eval()
    m[1].running_mean.uniform_(-1, 1)
    m[1].running_var.uniform_(0.5, 2)
    check_module(m, torch.randn(1, 3, 10, 10), target=target, freeze=True)


class Unsupported(nn.Module):
    def forward(self, x):
        y = torch.relu(x) + 1
        z = torch.exp(torch.fft.rfft(y)).abs()   # exp of complex values: not compiled by fxc
        return z * 2


def test_unsupported_op_falls_back_correctly_and_says_once(target, caplog):
    from fxc.capture.torch import recorder as cap
    cap._warned.clear()
    x = torch.randn(4, 8)
    with caplog.at_level(logging.WARNING, logger="fxc"):
        check_module(Unsupported(), x, target=target)
        torch._dynamo.reset()
        check_module(Unsupported(), x, target=target)
    msgs = [r.getMessage() for r in caplog.records if "not supported" in r.getMessage()]
    assert msgs and len(msgs) == len(set(msgs)), msgs
    assert any("fft" in m or "complex" in m for m in msgs), msgs
    rep = fxc.explain(Unsupported(), x)
    assert rep.fallback_ops and rep.compiled_ops
    assert "aten.relu.default" in rep.compiled_ops


def test_graph_of_only_unsupported_ops(target):
    check_module(lambda x: torch.fft.fft(x).real, torch.randn(8), target=target)


def test_graph_with_no_outputs(target):
    def f(x):
        x.add(1)
        return None
    assert torch.compile(f, backend="fxc", options={"target": target})(torch.randn(3)) is None


def test_constant_output_and_passthrough(target):
    check_module(lambda x: (x, torch.ones(3), x + 1), torch.randn(3), target=target)


def test_scalar_inputs_dynamic_shapes(target):
    def f(x, n: int, s: float):
        return x.reshape(n, -1) * s + x.shape[0]
    c = torch.compile(f, backend="fxc", dynamic=True, options={"target": target})
    for size in (6, 8, 10):
        x = torch.randn(size)
        torch.testing.assert_close(c(x, 2, 0.5), f(x, 2, 0.5))


def test_non_contiguous_and_channels_last_inputs(target):
    x = torch.randn(6, 4).t()
    check_module(lambda a: a * 2 + 1, x, target=target)
    m = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU()).eval()
    xc = torch.randn(1, 3, 8, 8).to(memory_format=torch.channels_last)
    check_module(m, xc, target=target)


def test_zero_dim_and_int_bool_tensors(target):
    def f(a, i, b):
        return a * 2, i * 3 + 1, torch.where(b, i, -i), (i > 2) & b, a.sum()
    check_module(f, torch.tensor(1.5), torch.arange(6, dtype=torch.int64), torch.tensor([True, False] * 3),
                 target=target)


def test_zero_size_dims(target):
    check_module(lambda x: (x * 2).sum(0), torch.randn(0, 4), target=target)


def test_explain_report():
    rep = fxc.explain(MLP(), torch.randn(2, 16))
    assert rep.compiled_ops["aten.addmm.default"] == 2
    assert not rep.fallback_ops
    assert rep.kernels and all(isinstance(k, str) for k in rep.kernels)
    text = str(rep)
    assert "kernels" in text and "aten.addmm.default" in text


def test_debug_levels_print_ir(capfd):
    from fxc.driver.build import build
    from fxc.relay_like.builder import Builder
    b = Builder()
    x = b.graph.input((4, 4), "float32")
    b.graph.outputs = [b.call("relu", [x])]
    build(b.graph, debug=4)
    err = capfd.readouterr().err
    assert "pass fold_constants" in err           # 1: pass timeline
    assert "graph(" in err                        # 2: graph after each pass
    assert "kernel k0_relu" in err                # 3: loop IR
    assert "define i32 @fxc_run" in err           # 4: LLVM IR


CONV_GRADS = [  # C, O, kernel, stride, padding, dilation, batch, H, W (, groups)
    (8, 16, 3, 1, 1, 1, 1, 12, 13),             # the input gradient is a 3x3 stride-1 conv
    (32, 48, 3, 1, 1, 1, 1, 16, 18),            # ... on Winograd, its weight transform reading the forward's weight
    (8, 16, 3, 2, 1, 1, 2, 13, 14),             # stride 2: the output gradient spread over every other pixel
    (5, 7, 1, 2, 0, 1, 1, 9, 10),               # a 1x1 downsample
    (24, 40, 1, 1, 0, 1, 1, 9, 10),             # a 1x1 conv over every pixel: the weight gradient reads the input as
    (24, 40, 1, 1, 0, 1, 2, 9, 10),             # its own patches (no im2col), batch 2 through a permute
    (3, 16, 7, 2, 3, 1, 1, 20, 21),             # the ResNet stem
    (6, 10, 3, 1, 2, 2, 2, 11, 12),             # dilation
    (4, 6, 3, 2, 0, 1, 1, 10, 11),              # rows and columns the stride leaves out
    (4, 6, (3, 2), (2, 1), (1, 0), 1, 2, 10, 9),
    (16, 16, 3, 1, 1, 1, 1, 12, 12, 16),        # depthwise: the input gradient a depthwise conv
    (16, 16, 3, 2, 1, 1, 2, 13, 12, 16),
    (8, 12, 3, 1, 1, 1, 1, 9, 10, 4),           # groups of 2 inputs and 3 outputs
    (4, 8, 3, 2, 1, 1, 1, 9, 10, 4),            # one input, 2 outputs a group
    (8, 4, 3, 1, 1, 1, 1, 9, 10, 4),            # 2 inputs, one output a group
]


CONV_TRANSPOSES = [  # in, out, kernel, stride, padding, output padding, dilation, groups, H, W
    (16, 8, 2, 2, 0, 0, 1, 1, 6, 7),            # a U-Net's up-conv: every phase one 1x1 tap, a GEMM each
    (8, 6, 3, 2, 1, 1, 1, 1, 6, 5),             # phases of 1x1, 1x2, 2x1 and 2x2 taps
    (8, 6, 4, 2, 1, 0, 1, 2, 4, 4),             # groups
    (6, 6, 3, 3, 2, 2, 1, 3, 5, 4),
    (4, 4, 3, 2, 0, 1, 2, 4, 5, 5),             # dilation 2 with stride 2: one phase of taps, one of none
    (4, 8, 1, 2, 0, 1, 1, 1, 5, 5),             # three of the four phases get no tap: zeros
    (5, 3, (3, 5), (2, 3), (1, 2), (1, 0), (1, 2), 1, 6, 7),
    (5, 3, 5, 4, 3, 3, 1, 1, 3, 2),             # padding past the first taps: each phase's input cropped
    (5, 3, 3, 1, 1, 0, 1, 1, 6, 7),             # stride 1: one conv over the padded input
    (16, 16, 4, 2, 1, 0, 1, 16, 8, 8),          # depthwise
]


@pytest.mark.parametrize("case", CONV_TRANSPOSES, ids=lambda c: "-".join(map(str, c)))
def test_conv_transpose_runs_as_a_conv2d_per_output_phase(case):
    """A transposed conv is a stride-1 conv2d per output phase (the output pixels at one position modulo the
    stride), interleaved: its multiply-adds on fxc's conv schedules, not the conv_transpose2d gather (which ran a
    U-Net's 2x2 up-conv at 5 GFLOP/s); results and gradients match eager's."""
    from fxc.capture.torch.recorder import Explanation, _recorders
    ci, co, k, s, p, op, d, g, h, w = case
    torch.manual_seed(0)
    up = nn.ConvTranspose2d(ci, co, k, stride=s, padding=p, output_padding=op, dilation=d, groups=g)
    x = torch.randn(2, ci, h, w, requires_grad=True)
    rec = Explanation()
    _recorders.append(rec)
    try:
        y = torch.compile(up, backend="fxc")(x)
        y.square().sum().backward()
    finally:
        _recorders.remove(rec)
        torch._dynamo.reset()
    got = (y.detach(), x.grad, up.weight.grad)
    x.grad = up.weight.grad = None
    want = up(x)
    want.square().sum().backward()
    for a, b in zip(got, (want.detach(), x.grad, up.weight.grad)):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)
    assert "conv_transpose2d" not in " ".join(rec.kernels), rec.kernels
    assert any("conv2d" in k for k in rec.kernels), rec.kernels


def test_a_transposed_conv_whose_output_is_smaller_than_its_stride_runs_as_a_gather():
    up = nn.ConvTranspose2d(3, 4, 1, stride=3).eval()
    x = torch.randn(1, 3, 1, 2)
    rep = fxc.explain(up, x)
    assert any("conv_transpose2d" in k for k in rep.kernels), rep.kernels
    with torch.no_grad():
        torch.testing.assert_close(torch.compile(up, backend="fxc")(x), up(x))
    torch._dynamo.reset()


def test_a_bilinear_upsample_is_one_kernel():
    """Its decomposition reads each of its four gathers twice (a lerp): fusion joins a producer whose readers all
    ended in one group, so the gathers, lerps and the epilogue are one pass over memory (four before)."""
    f = lambda t: F.interpolate(t, scale_factor=2, mode="bilinear", align_corners=False) * 2 + 1
    x = torch.randn(2, 5, 9, 12)
    rep = fxc.explain(f, x)
    assert len(rep.kernels) == 1 and "index+index+index+index" in rep.kernels[0], rep.kernels
    torch.testing.assert_close(torch.compile(f, backend="fxc")(x), f(x))
    torch._dynamo.reset()


def test_safe_softmax_is_one_softmax_kernel_with_empty_rows_zero():
    """scaled_dot_product_attention's math path softmaxes through aten._safe_softmax, whose decomposition tested
    each row for -inf only and masked it in two more passes (ViT: 57 us a layer). fxc keeps it whole, as its softmax
    with a row of -inf only giving zeros (not nan), through torch.compile and fxc.from_torch, gradients included."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 3, 9, 8, requires_grad=True) for _ in range(3))
    mask = torch.rand(2, 1, 9, 9) > 0.3
    mask[0, 0, 4] = False                        # a query with nothing to attend to: eager gives zeros
    f = lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    rep = fxc.explain(f, q.detach(), k.detach(), v.detach())
    assert sum("softmax" in kn for kn in rep.kernels) == 1 and not any("amax" in kn or "logical_not" in kn
                                                                        for kn in rep.kernels), rep.kernels
    out, ref = torch.compile(f, backend="fxc")(q, k, v), f(q, k, v)
    torch.testing.assert_close(out, ref)
    assert torch.all(ref[0, :, 4] == 0)
    got = torch.autograd.grad(out.square().sum(), (q, k, v))
    want = torch.autograd.grad(ref.square().sum(), (q, k, v))
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)
    torch._dynamo.reset()

    class Attn(nn.Module):
        def forward(self, q, k, v):
            return f(q, k, v)
    args = (q.detach(), k.detach(), v.detach())
    torch.testing.assert_close(fxc.from_torch(Attn(), args)(*args), f(*args))


@pytest.mark.parametrize("where", ["conv", "depthwise", "linear", "kept"])
def test_a_silu_after_a_conv_is_its_epilogue(where):
    """x * sigmoid(x) reads the conv's output twice: fusion joins the group of its readers to the conv's as its
    epilogue (EfficientNet's 104 kernels -> 74) instead of sending the output through memory to a kernel of its own;
    an output that is also read elsewhere (kept) stays in memory, computed once."""
    torch.manual_seed(0)
    layer = {"conv": nn.Conv2d(8, 24, 1), "depthwise": nn.Conv2d(8, 8, 3, padding=1, groups=8),
             "linear": nn.Linear(12, 20), "kept": nn.Conv2d(8, 24, 1)}[where].eval()
    x = torch.randn(30, 12) if where == "linear" else torch.randn(2, 8, 10, 12)
    if where == "kept":
        f = lambda t: (lambda y: (F.silu(y), y.amax((2, 3))))(layer(t))
    else:
        f = lambda t: F.silu(layer(t)) * 2
    with torch.no_grad():
        rep = fxc.explain(f, x)
        got = torch.compile(f, backend="fxc")(x)
        torch.testing.assert_close(got, f(x))
    torch._dynamo.reset()
    fused = [k for k in rep.kernels if "sigmoid" in k]
    assert len(fused) == 1 and ("conv" in fused[0] or "matmul" in fused[0] or "depthwise" in fused[0]) \
        == (where != "kept"), rep.kernels


@pytest.mark.parametrize("case", CONV_GRADS, ids=lambda c: "-".join(map(str, c)))
def test_conv_gradients_run_as_convs_and_gemms(case):
    """The backward of a conv2d: its input gradient is a stride-1 conv2d (fxc's packed, Winograd and depthwise
    schedules) and, with groups 1, its weight gradient one GEMM over the im2col patches (a 1x1 conv's input is its
    own), not the naive conv_transpose2d and conv2d_weight_grad loops; the gradients match eager's."""
    from fxc.capture.torch.recorder import Explanation, _recorders
    c, o, k, s, p, d, n, h, w, *groups = case
    torch.manual_seed(0)
    conv = nn.Conv2d(c, o, k, stride=s, padding=p, dilation=d, groups=groups[0] if groups else 1)
    x = torch.randn(n, c, h, w, requires_grad=True)
    rec = Explanation()
    _recorders.append(rec)
    try:
        f = torch.compile(lambda t: torch.relu(conv(t)).square().sum(), backend="fxc")
        f(x).backward()
    finally:
        _recorders.remove(rec)
        torch._dynamo.reset()
    gx, gw, gb = x.grad, conv.weight.grad, conv.bias.grad
    x.grad = conv.weight.grad = conv.bias.grad = None
    torch.relu(conv(x)).square().sum().backward()
    for got, want in ((gx, x.grad), (gw, conv.weight.grad), (gb, conv.bias.grad)):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    kernels = " ".join(rec.kernels)
    assert "conv_transpose2d" not in kernels, kernels
    if groups:      # grouped: the weight gradient stays conv2d_weight_grad
        return
    assert ("im2col" in kernels) != (k == 1 and s == 1) and "conv2d_weight_grad" not in kernels, kernels
    if k == 1 and s == 1:       # and the input gradient's pad by nothing is no kernel
        assert " pad " not in kernels and "pad+" not in kernels, kernels
    if c >= 32:
        assert "conv2d_winograd" in kernels and "flip" not in kernels, kernels


def test_training_keeps_winograd_off_small_maps_whose_weight_changes_every_step():
    """A training step's graphs redo every weight transform on every call: there a 3x3 conv on a 7x7 map, which
    inference runs as F(2x2) Winograd over a transform made once, runs as the direct kernel (its repack writes
    less); gradients still match eager's."""
    from fxc.capture.torch.recorder import Explanation, _recorders
    torch.manual_seed(0)
    conv = nn.Conv2d(64, 64, 3, padding=1)
    x = torch.randn(1, 64, 7, 7, requires_grad=True)
    runs = {}
    for mode in ("inference", "training"):
        rec = Explanation()
        _recorders.append(rec)
        try:
            f = torch.compile(lambda t: torch.relu(conv(t)), backend="fxc")
            with torch.set_grad_enabled(mode == "training"):
                y = f(x)
            if mode == "training":
                y.square().sum().backward()
        finally:
            _recorders.remove(rec)
            torch._dynamo.reset()
        runs[mode] = " ".join(rec.kernels)
    assert "conv2d_winograd" in runs["inference"], runs["inference"]
    assert "conv2d_winograd" not in runs["training"] and "winograd_weight" not in runs["training"], runs["training"]
    gx, gw = x.grad, conv.weight.grad
    x.grad = conv.weight.grad = conv.bias.grad = None
    torch.relu(conv(x)).square().sum().backward()
    torch.testing.assert_close(gx, x.grad, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(gw, conv.weight.grad, rtol=1e-4, atol=1e-4)

def test_permuted_inputs_are_read_in_place(monkeypatch):
    """An argument that is a permutation of a dense tensor (a transposed weight saved for the backward, an attention
    head's view) is read in its own memory order, through a permute in the graph, not copied; a later call with the
    same shape in another layout (contiguous, or a different permutation) still gets the right result."""
    from fxc.capture.torch.graph import _dense_order
    copies = []
    real = torch.Tensor.contiguous
    monkeypatch.setattr(torch.Tensor, "contiguous",
                        lambda t, *a, **k: (copies.append(tuple(t.shape)), real(t, *a, **k))[1])
    torch.manual_seed(0)
    w = torch.randn(24, 40)
    f = torch.compile(lambda a, b: torch.relu(a @ b + 1.0), backend="fxc")
    x = torch.randn(8, 24)
    for b in (w, torch.randn(40, 24).t(), torch.randn(24, 40)):                     # built for a contiguous one
        torch.testing.assert_close(f(x, b), torch.relu(x @ b + 1.0))
    bt = torch.randn(40, 24).t()
    torch._dynamo.reset()
    f2 = torch.compile(lambda a, b: torch.relu(a @ b + 1.0), backend="fxc")
    torch.testing.assert_close(f2(x, bt), torch.relu(x @ bt + 1.0))                  # built for the transposed one
    copies.clear()
    torch.testing.assert_close(f2(x, bt), torch.relu(x @ bt + 1.0))
    assert (24, 40) not in copies, copies                                            # read in place
    c = torch.randn(24, 40)
    torch.testing.assert_close(f2(x, c), torch.relu(x @ c + 1.0))                    # another layout: a copy
    assert _dense_order(bt) == (1, 0) and _dense_order(c) is None
    assert _dense_order(torch.randn(4, 6)[:, ::2]) is None                   # gaps: no order


def test_dropout_in_training_compiles_with_its_own_generator():
    """Training-mode dropout compiles (no graph cut): the keep mask comes from fxc's counter-based generator, seeded
    from PyTorch's on every call, so torch.manual_seed repeats a run; each call and each dropout draws anew, about
    1 - p of the elements are kept and scaled by 1 / (1 - p), and the gradient goes through the same mask."""
    import fxc
    from fxc.capture.torch.recorder import Explanation, _recorders
    p = 0.3
    w = torch.randn(300, 200)
    rec = Explanation()
    _recorders.append(rec)
    try:
        f = torch.compile(lambda t: (nn.functional.dropout(t, p, training=True) * w,
                                     nn.functional.dropout(t, p, training=True)), backend="fxc")
        x = (torch.rand(300, 200) + 0.5).requires_grad_()
        torch.manual_seed(7)
        out, other = f(x)
        out.sum().backward()
    finally:
        _recorders.remove(rec)
        torch._dynamo.reset()
    assert not rec.fallback_ops and (rec.graphs, rec.subgraphs) == (2, 2), str(rec)
    kept = out != 0
    assert abs(float(kept.float().mean()) - (1 - p)) < 0.01
    torch.testing.assert_close(out, x.detach() * kept * w / (1 - p))
    torch.testing.assert_close(x.grad, kept * w / (1 - p))
    assert not torch.equal(kept, other != 0)                    # two dropouts in one graph: two masks
    f2 = torch.compile(lambda t: nn.functional.dropout(t, p, training=True), backend="fxc")
    ones = torch.ones(300, 200)
    torch.manual_seed(7)
    a = f2(ones)
    torch.manual_seed(7)
    assert torch.equal(a, f2(ones)) and not torch.equal(a, f2(ones))     # repeated by the seed, new on each call
    assert torch.unique(a).tolist() == [0.0, pytest.approx(1 / (1 - p))]
    torch._dynamo.reset()
    net = nn.Sequential(nn.Linear(8, 8), nn.Dropout(p)).train()
    with pytest.raises(fxc.errors.UnsupportedOpError, match="eval"):
        fxc.from_torch(net, (torch.randn(2, 8),))


def test_an_embeddings_gradient_is_one_fill_and_scatter(monkeypatch):
    """An embedding's backward is index_put(zeros, [ids], grad, accumulate=True): the zeros are not a table-sized
    constant copied on every call but a fill value of the scatter's own output (BERT's 30522 x 256 gradient took
    4.5 ms that way, eager 1.3). Repeated ids accumulate."""
    from fxc.capture.torch.partition import FxcSubgraph
    from fxc.capture.torch.recorder import Explanation, _recorders
    modules = []
    real = FxcSubgraph._compile

    def spy(self, args):
        entry = real(self, args)
        modules.append(entry[0])
        return entry
    monkeypatch.setattr(FxcSubgraph, "_compile", spy)
    m1, m2 = nn.Embedding(1000, 24), nn.Embedding(1000, 24)
    m2.load_state_dict(m1.state_dict())
    ids = torch.randint(0, 1000, (3, 50))
    ids[0, :5] = 7
    g = torch.randn(3, 50, 24)
    rec = Explanation()
    _recorders.append(rec)
    try:
        torch.compile(m2, backend="fxc")(ids).backward(g)
    finally:
        _recorders.remove(rec)
        torch._dynamo.reset()
    m1(ids).backward(g)
    torch.testing.assert_close(m2.weight.grad, m1.weight.grad)
    table = [k for k in rec.kernels if "[1000, 24]" in k]
    assert len(table) == 1 and "index_put" in table[0], rec.kernels
    assert len(modules) == 2 and max(sum(c.nbytes for c in m.consts) for m in modules) < 1000 * 24 * 4

def test_rand_randn_and_bernoulli_compile_with_fxcs_generator():
    """rand, rand_like, randn_like (a VAE's reparameterisation) and bernoulli (core ATen's rand < p) compile on the
    same generator as dropout: uniform draws in [0, 1) with mean 1/2 and variance 1/12, normal draws with mean 0,
    variance 1 and 68.3% within one standard deviation, seeded from PyTorch's generator, new on every call, two ops
    of one graph drawing different numbers; the gradient flows through the draws as through constants."""
    from fxc.capture.torch.recorder import Explanation, _recorders
    n = 300 * 200

    def sample(mu, std):
        eps = torch.randn_like(std)
        return mu + std * eps, torch.rand_like(mu), torch.rand(300, 200, dtype=torch.float64), \
            torch.bernoulli(torch.full_like(mu, 0.3)), torch.randn_like(std, dtype=torch.bfloat16)
    rec = Explanation()
    _recorders.append(rec)
    try:
        f = torch.compile(sample, backend="fxc")
        mu = torch.randn(300, 200, requires_grad=True)
        std = (torch.rand(300, 200) + 0.5).requires_grad_()
        torch.manual_seed(3)
        z, u, u64, coin, zb = f(mu, std)
        z.sum().backward()
        torch.manual_seed(3)
        again = f(mu, std)
        fresh = f(mu, std)
    finally:
        _recorders.remove(rec)
        torch._dynamo.reset()
    assert not rec.fallback_ops and rec.subgraphs == rec.graphs, str(rec)
    eps = ((z - mu) / std).detach()
    for draws, mean, var in ((u, 0.5, 1 / 12), (u64, 0.5, 1 / 12), (eps, 0.0, 1.0), (zb.float(), 0.0, 1.0)):
        assert draws.shape == (300, 200) and abs(float(draws.double().mean()) - mean) < 4 * (var / n) ** 0.5 + 1e-3
        assert abs(float(draws.double().var()) - var) < 0.02 * var
    assert (u.dtype, u64.dtype, zb.dtype) == (torch.float32, torch.float64, torch.bfloat16)
    assert float(u.min()) >= 0 and float(u.max()) < 1 and float(u64.max()) < 1
    assert abs(float((eps.abs() < 1).double().mean()) - 0.6827) < 0.01
    assert set(torch.unique(coin).tolist()) == {0.0, 1.0} and abs(float(coin.mean()) - 0.3) < 0.01
    torch.testing.assert_close(mu.grad, torch.ones_like(mu))
    torch.testing.assert_close(std.grad, eps, rtol=1e-4, atol=1e-4)
    assert all(torch.equal(a, b) for a, b in zip(again, (z, u, u64, coin, zb)))    # torch.manual_seed repeats
    assert not any(torch.equal(a, b) for a, b in zip(fresh, again))                  # each call draws anew
    assert not torch.equal(u, u64.float()) \
        and float(torch.corrcoef(torch.stack([u.flatten(), eps.flatten()]))[0, 1]) < 0.02
