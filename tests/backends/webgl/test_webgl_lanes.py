"""The webgl renderer's four outputs a fragment over RGBA textures (fxc/backends/webgl/lanes.py), against eager PyTorch:
every way a lane's index can go — affine across a fragment (an innermost extent that is a multiple of 4), affine only
as a whole (W = 14: h * 14 + w is g % 196), not affine (W = 7: a fragment's lanes straddle rows and channels), strided
— reductions unrolled by 4 (extent a multiple of 4) or not, and outputs whose size is not a multiple of 4 (the last
texel half used). Runs in the headless Chromium page (one per test process), small shapes."""
import json

import numpy as np
import pytest
import torch
from torch import nn

import fxc
from fxc.runtime.browser.webgl import program_of
from tests.helpers import assert_close_np


class _Reduce(nn.Module):
    def forward(self, x):
        return x.mean(-1, keepdim=True) * x - x.amax(-1, keepdim=True)


CASES = {
    "conv3x3_w12": (lambda: nn.Conv2d(5, 8, 3, padding=1), (1, 5, 12, 12)),
    "conv3x3_stride2_w13": (lambda: nn.Conv2d(4, 6, 3, stride=2, padding=1), (1, 4, 13, 13)),
    "conv1x1_w14": (lambda: nn.Sequential(nn.Conv2d(16, 12, 1), nn.ReLU6()), (1, 16, 14, 14)),
    "conv1x1_w7": (lambda: nn.Conv2d(8, 6, 1), (1, 8, 7, 7)),
    "depthwise_w10": (lambda: nn.Conv2d(8, 8, 3, padding=1, groups=8), (2, 8, 10, 10)),
    "linear_k20_n7": (lambda: nn.Linear(20, 7), (3, 20)),
    "linear_k18_n12": (lambda: nn.Linear(18, 12), (5, 18)),
    "conv3x3_w14": (lambda: nn.Sequential(nn.Conv2d(8, 8, 3, padding=1), nn.ReLU()), (1, 8, 14, 14)),
    "conv3x3_w7_no_pad": (lambda: nn.Conv2d(6, 5, 3), (1, 6, 9, 9)),
    "conv7x7_stride2": (lambda: nn.Conv2d(3, 4, 7, stride=2, padding=3), (1, 3, 20, 20)),
    "maxpool3x3_stride2": (lambda: nn.MaxPool2d(3, 2, 1), (1, 4, 15, 15)),
    "conv1x3_w9": (lambda: nn.Conv2d(4, 4, (1, 3), padding=(0, 1)), (1, 4, 5, 9)),
    "reduce_36": (_Reduce, (5, 36)),
    "reduce_37": (_Reduce, (3, 37)),
}


@pytest.mark.parametrize("name", list(CASES))
def test_four_outputs_a_fragment_match_eager(name):
    make, shape = CASES[name]
    torch.manual_seed(0)
    model = make().eval()
    x = torch.randn(shape)
    with torch.no_grad():
        expected = model(x).numpy()
    got = fxc.from_torch(model, (x,), target="webgl")(x.numpy())
    assert got.shape == expected.shape
    assert_close_np(got, expected, rtol=1e-5, atol=1e-5 * max(1.0, float(np.abs(expected).max())))


def test_matmul_reads_four_values_a_fetch():
    """A linear layer's reduction (k = 32) runs four steps at a time, and every texel it reads is fetched once for
    the four steps: the activations' texel shared by the four outputs of a fragment, a weight texel per output."""
    torch.manual_seed(0)        # 3 rows: no exact cut in draw buffers (test_webgl_draw_buffers.py)
    model, x = nn.Linear(32, 16).eval(), torch.randn(3, 32)
    compiled = fxc.from_torch(model, (x,), target="webgl")
    with torch.no_grad():
        assert_close_np(compiled(x.numpy()), model(x).numpy(), rtol=1e-5, atol=1e-5)
    program = program_of(compiled.module.source)
    assert program["lanes"] == 4
    shaders = [k["shader"] for k in program["kernels"].values() if "+= 4" in k["shader"]]
    assert shaders, json.dumps(program)[:2000]
    head, loop = shaders[0].split("+= 4")
    loop = loop.split("\n" + head.rsplit("\n", 1)[1].split("for")[0] + "}")[0]      # up to the loop's closing brace
    assert loop.count("texelFetch") == 5 and "& 3]" not in loop     # 5 fetches for 4 steps x 4 outputs


def test_lane_dependent_control_flow_runs_the_lanes_one_by_one():
    """A kernel whose `if` depends on the work-item (none of the registry's schedules writes one for WebGL today)
    renders its four lanes one after another in the fragment ("loop" mode) and stays correct, the last texel half
    used (10 outputs)."""
    from types import SimpleNamespace

    from fxc.backends.webgl.program import render_webgl
    from fxc.lowering.expr import Const, Load, Var, binary, compare
    from fxc.lowering.loop_ir import Buffer, For, IfThen, Kernel, Launch, Store
    from fxc.runtime.browser.webgl import layout, open_page
    n = 10
    x, y, g = Buffer("x", "float32", n), Buffer("y", "float32", n), Var("g", "int64")
    body = For(g, n, IfThen(compare("lt", g, Const(5, "int64")),
                            Store(y, g, binary("mul", Load(x, g), Const(2.0, "float32"))),
                            Store(y, g, binary("add", Load(x, g), Const(1.0, "float32")))), kind="grid")
    k = Kernel("k_if", [y, x], body, index_bits=32, launch=Launch((n,), (1,)))
    program = json.loads(render_webgl([k], 2048))
    assert "(loop)" in program["kernels"]["k_if"]["shader"]
    spec = lambda name: SimpleNamespace(name=name, shape=(n,), dtype="float32")     # noqa: E731
    step = SimpleNamespace(kernel="k_if", args=[("out", 0), ("in", 0)], rows=(), repeat=())     # one static launch
    desc = layout(program, [step], [spec("x")], [spec("y")], [])
    xs = np.linspace(-2, 3, n).astype(np.float32)
    got = open_page().call("""([desc, xs]) => { const m = new FxcWebGL(window.fxcBase); m.load(desc, []);
        const out = Array.from(m.run([Float32Array.from(xs)], false).outputs[0]); m.dispose(); return out; }""",
                           [desc, xs.tolist()])
    assert_close_np(np.array(got, np.float32), np.where(np.arange(n) < 5, xs * 2, xs + 1), rtol=0, atol=0)


def test_unrolled_copies_keep_their_own_let_values():
    """An unrolled loop's four copies share the values that read no written memory, but not one built on a copy's
    own let-bound value: acc = 2 * acc + x[4g + r] over r < 4 (each copy's `v * 2` is a different value)."""
    from types import SimpleNamespace

    from fxc.backends.webgl.program import render_webgl
    from fxc.lowering.expr import Const, Load, Var, binary
    from fxc.lowering.loop_ir import Allocate, Buffer, For, Kernel, Launch, LetStmt, Store, seq
    from fxc.runtime.browser.webgl import layout, open_page
    n = 8
    x, y, acc = Buffer("x", "float32", 4 * n), Buffer("y", "float32", n), Buffer("acc", "float32", 1, "private")
    g, r, v = Var("g", "int64"), Var("r", "int64"), Var("v", "float32")
    zero = Const(0, "int64")
    xv = Load(x, binary("add", binary("mul", g, Const(4, "int64")), r))
    step = LetStmt(v, Load(acc, zero), Store(acc, zero, binary("add", binary("mul", v, Const(2.0, "float32")), xv)))
    body = For(g, n, Allocate(acc, seq(Store(acc, zero, Const(0.0, "float32")), For(r, 4, step),
                                       Store(y, g, Load(acc, zero)))), kind="grid")
    k = Kernel("k_fold", [y, x], body, index_bits=32, launch=Launch((n,), (1,)))
    program = json.loads(render_webgl([k], 2048))
    assert "(lanes)" in program["kernels"]["k_fold"]["shader"] and "< 4;" not in program["kernels"]["k_fold"]["shader"]
    spec = lambda name, size: SimpleNamespace(name=name, shape=(size,), dtype="float32")     # noqa: E731
    launch = SimpleNamespace(kernel="k_fold", args=[("out", 0), ("in", 0)], rows=(), repeat=())
    desc = layout(program, [launch], [spec("x", 4 * n)], [spec("y", n)], [])
    xs = np.linspace(-2, 3, 4 * n).astype(np.float32)
    got = open_page().call("""([desc, xs]) => { const m = new FxcWebGL(window.fxcBase); m.load(desc, []);
        const out = Array.from(m.run([Float32Array.from(xs)], false).outputs[0]); m.dispose(); return out; }""",
                           [desc, xs.tolist()])
    x4 = xs.reshape(n, 4)
    expected = ((x4[:, 0] * 2 + x4[:, 1]) * 2 + x4[:, 2]) * 2 + x4[:, 3]
    assert_close_np(np.array(got, np.float32), expected, rtol=1e-6, atol=1e-6)


class _BlockedNet(nn.Module):
    """Every conv kind in NCHW4c (use_channel_blocks): a 7x7 stride-2 stem over 3 channels (NCHW in), a 3x3 conv
    with a residual add, a depthwise stride-2 conv, a grouped conv, 1x1 convs to 6 channels (not whole blocks) and
    a pool reading NCHW."""
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 7, stride=2, padding=3)
        self.c3 = nn.Conv2d(8, 8, 3, padding=1)
        self.dw = nn.Conv2d(8, 8, 3, stride=2, padding=1, groups=8)
        self.grouped = nn.Conv2d(8, 8, 3, padding=1, groups=2)
        self.pw = nn.Conv2d(8, 6, 1)
        self.last = nn.Conv2d(6, 5, 3, padding=1)

    def forward(self, x):
        x = torch.relu(self.stem(x))
        x = torch.relu(self.c3(x) + x)
        x = nn.functional.hardtanh(self.dw(x), 0.0, 6.0)
        x = self.pw(self.grouped(x))
        return self.last(x), nn.functional.max_pool2d(x, 2)


def test_channel_blocked_convs_match_eager():
    """Each fragment of a conv computes four output channels of one pixel (NCHW4c); the net's outputs in NCHW."""
    torch.manual_seed(0)
    model, x = _BlockedNet().eval(), torch.randn(1, 3, 22, 22)
    compiled = fxc.from_torch(model, (x,), target="webgl")
    with torch.no_grad():
        expected = model(x)
    for got, e in zip(compiled(x.numpy()), expected):
        assert_close_np(got, e.numpy(), rtol=1e-5, atol=1e-5 * max(1.0, float(e.abs().max())))
    kernels = " ".join(compiled.module.kernels)
    assert "conv2d_packed" in kernels and "depthwise_blocked" in kernels, kernels


class _PoolNet(nn.Module):
    """ResNet's stem and first block, small: conv, relu, a 3x3 stride-2 max pool (padding 1), a 3x3 conv and the
    residual add of the pool's output, and a 2x2 pool with ceil_mode at the end."""
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.c3 = nn.Conv2d(8, 8, 3, padding=1)

    def forward(self, x):
        x = nn.functional.max_pool2d(torch.relu(self.stem(x)), 3, 2, 1)
        x = torch.relu(self.c3(x) + x)
        return nn.functional.max_pool2d(x, 2, ceil_mode=True)


def test_max_pool_keeps_the_channel_blocks():
    """A max pool between blocked convs reads and writes NCHW4c (max_pool2d_blocked), so the conv after it and the
    residual add of its output stay blocked: the only conversions are the image's to NCHW4c (its zero pad, the lane
    past its 3 channels zero: the stem's weight padded to 4 channels) and the graph output's to NCHW (the last pool,
    which writes the output in NCHW: expand_opaque's strided slices, the conversion fused into them)."""
    torch.manual_seed(0)
    model, x = _PoolNet().eval(), torch.randn(1, 3, 21, 21)
    x[0, 1, 4, 5] = float("nan")                # NaN propagates through the pools as eager's
    compiled = fxc.from_torch(model, (x,), target="webgl")
    with torch.no_grad():
        expected = model(x).numpy()
    got = compiled(x.numpy())
    assert np.array_equal(np.isnan(got), np.isnan(expected))
    assert_close_np(got, expected, rtol=1e-5, atol=1e-5)
    kernels = compiled.module.kernels
    assert sum("max_pool2d_blocked" in k for k in kernels) == 1, kernels
    assert [k for k in kernels if "permute" in k] == [kernels[0], kernels[-1]], kernels
    stem = program_of(compiled.module.source)["kernels"][kernels[1].split("[webgl: ")[1].split()[0]]["shader"]
    assert "fxc_pick" not in stem, stem         # the image's 3 channels read as one texel (zero-padded to 4)


def test_blocked_conv_reads_a_weight_texel_for_four_channels():
    """A 3x3 conv over NCHW4c (8 -> 8 channels): the innermost loop (a block's four input channels) is unrolled whole
    into one block: one input texel (its four components constants) and four weight texels (four output channels
    each) for 16 multiply-adds, the weight's index computed once for the four."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(4, 8, 1), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1), nn.ReLU()).eval()
    x = torch.randn(1, 4, 7, 7)
    compiled = fxc.from_torch(model, (x,), target="webgl")
    with torch.no_grad():
        assert_close_np(compiled(x.numpy()), model(x).numpy(), rtol=1e-5, atol=1e-5)
    program = program_of(compiled.module.source)
    shader = next(k["shader"] for k in program["kernels"].values() if "< 3;" in k["shader"])
    body = shader.split("< 3; ++")[-1]      # the innermost loop over the window's columns, then the unrolled block
    body = body[:body.index("}")]
    body = body[body.rindex("{"):]          # the unrolled block alone
    assert "< 4;" not in body and body.count("texelFetch") == 5 and "fxc_pick" not in body, shader
    assert body.count(" * ") == 16 + 1, shader          # 16 multiplies, one int product of the weight's index


def test_padded_depthwise_reads_one_input_texel_a_tap():
    """A depthwise conv over NCHW4c with its zero pad fused: the window's clamped row and column are not affine in the
    lane but are the same in all four (a fragment is four channels of one pixel), so each tap fetches one input texel
    and one weight texel (was four input fetches, a component picked from each)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(4, 8, 1), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1, groups=8), nn.ReLU6()).eval()
    x = torch.randn(1, 4, 9, 9)
    compiled = fxc.from_torch(model, (x,), target="webgl")
    with torch.no_grad():
        assert_close_np(compiled(x.numpy()), model(x).numpy(), rtol=1e-5, atol=1e-5)
    assert any("pad+depthwise_blocked" in k for k in compiled.module.kernels), compiled.module.kernels
    shader = next(k["shader"] for k in program_of(compiled.module.source)["kernels"].values()
                  if k["shader"].count("< 3;") == 2)
    body = shader.split("< 3; ++")[-1]      # the window's column loop
    body = body[:body.index("}")]
    assert body.count("texelFetch") == 2 and "fxc_pick" not in body, shader


@pytest.mark.parametrize("n", [4, 8])
@pytest.mark.parametrize("op", ["amax", "amin"])
def test_unrolled_max_reduction_propagates_nan(op, n):
    """A max / min over 4 or 8 elements, its loop unrolled by four: the NaN-propagating max is a select (mix), not a
    ternary (a chain of ternaries in an unrolled loop never finished compiling on SwiftShader: a lost context)."""
    x = torch.randn(3, n, 5)
    x[1, n - 1, 2] = float("nan")
    model = _MaxMin(op)
    compiled = fxc.from_torch(model, (x,), target="webgl")
    got, expected = compiled(x.numpy()), model(x).numpy()
    assert np.array_equal(np.isnan(got), np.isnan(expected))
    assert_close_np(got, expected, rtol=0, atol=0)


class _MaxMin(nn.Module):
    def __init__(self, op: str):
        super().__init__()
        self.op = op

    def forward(self, x):
        return getattr(torch, self.op)(x, 1)
