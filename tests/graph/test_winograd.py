"""Winograd F(4x4,3x3) and F(2x2,3x3) convolutions (use_winograd pass, conv2d_winograd schedule) against torch eager."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import fxc
from fxc.driver.build import build
from fxc.driver.check import check_graph
from fxc.lowering.schedules.cpu.winograd import fits
from fxc.relay_like.builder import Builder
from fxc.relay_like.context import PassContext
from fxc.relay_like.passes.use_winograd import f2_pays, use_winograd, winograd_pays, winograd_tile
from tests.helpers import assert_close_np, check_module

# (batch, in channels, out channels, height, width, padding)
SHAPES = [
    (1, 32, 32, 9, 11, 1),       # partial tiles at the right and the bottom
    (8, 32, 48, 13, 10, 1),      # batch 8, a partial tile at the end of every row
    (2, 48, 40, 10, 17, 1),      # output channels not a multiple of 16 (a partial lane block)
    (1, 40, 32, 11, 13, 1),      # input channels not a multiple of 16
    (1, 32, 32, 18, 11, 0),      # no padding
    (1, 32, 32, 58, 62, 1),      # a long tile row: full register tiles plus a tail tile
    (1, 128, 32, 34, 34, 1),     # tile rows split over tasks with a shorter last task
]


def _conv_graph(n, c, k, h, w, pad, bias, residual, relu):
    b = Builder()
    g = b.graph
    x = g.input((n, c, h, w), "float32")
    wt = g.input((k, c, 3, 3), "float32")
    ins = [x, wt]
    xp = g.call1("pad", [x], pad=(pad,) * 4, value=0.0, mode="constant") if pad else x
    y = g.call1("conv2d", [xp, wt])
    if bias:
        bv = g.input((k, 1, 1), "float32")
        ins.append(bv)
        y = g.call1("add", [y, bv])
    if residual:
        r = g.input(tuple(y.shape), "float32")
        ins.append(r)
        y = g.call1("add", [y, r])
    if relu:
        y = g.call1("relu", [y])
    g.outputs = [y]
    return g, ins


def _torch_ref(arrays, pad, bias, residual, relu):
    t = [torch.from_numpy(a) for a in arrays]
    y = F.conv2d(t[0], t[1], padding=pad)
    i = 2
    if bias:
        y = y + t[i]
        i += 1
    if residual:
        y = y + t[i]
    return (torch.relu(y) if relu else y).numpy()


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("epilogue", ["plain", "bias_relu", "bias_residual_relu"])
def test_winograd_conv_matches_torch(shape, epilogue):
    n, c, k, h, w, pad = shape
    bias, residual, relu = "bias" in epilogue, "residual" in epilogue, "relu" in epilogue
    g, ins = _conv_graph(n, c, k, h, w, pad, bias, residual, relu)
    module = build(g)
    assert any("conv2d_winograd" in line for line in module.kernels), module.kernels
    rng = np.random.default_rng(sum(shape))
    arrays = [rng.standard_normal(v.shape).astype(np.float32) for v in ins]
    got = module(*arrays)
    assert_close_np(got, _torch_ref(arrays, pad, bias, residual, relu))


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_winograd_f2_conv_matches_torch(shape, monkeypatch):
    """F(2x2,3x3) (float32) on the same shapes: partial tiles, batches, channel tails, tasks."""
    import sys
    monkeypatch.setattr(sys.modules["fxc.relay_like.passes.use_winograd"], "winograd_tile", lambda *a, **k: (2, False))
    n, c, k, h, w, pad = shape
    g, ins = _conv_graph(n, c, k, h, w, pad, True, True, True)
    module = build(g)
    assert any("conv2d_winograd" in line for line in module.kernels), module.kernels
    rng = np.random.default_rng(sum(shape))
    arrays = [rng.standard_normal(v.shape).astype(np.float32) for v in ins]
    assert_close_np(module(*arrays), _torch_ref(arrays, pad, True, True, True))


def test_winograd_build_option():
    """winograd="off" (a build option, for measuring): direct convs only, where the default picks Winograd; an
    unknown value is an FxcError naming the valid ones."""
    from fxc.errors import FxcError
    g, ins = _conv_graph(1, 32, 32, 9, 11, 1, True, False, True)
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(v.shape).astype(np.float32) for v in ins]
    module = build(g, winograd="off")
    assert not any("winograd" in line for line in module.kernels)
    assert_close_np(module(*arrays), _torch_ref(arrays, 1, True, False, True))
    g, _ = _conv_graph(1, 32, 32, 9, 11, 1, True, False, True)
    assert any("winograd" in line for line in build(g).kernels)
    g, _ = _conv_graph(1, 32, 32, 9, 11, 1, True, False, True)
    with pytest.raises(FxcError, match="'auto', 'off', 'all'"):
        build(g, winograd="no")


def test_pass_keeps_other_convs():
    """Strided, grouped, small-channel and non-3x3 convolutions stay direct."""
    b = Builder()
    g = b.graph
    x = g.input((1, 32, 16, 16), "float32")
    outs = [g.call1("conv2d", [x, g.input((32, 32, 3, 3), "float32")], stride=(2, 2)),
            g.call1("conv2d", [x, g.input((32, 16, 3, 3), "float32")], groups=2),
            g.call1("conv2d", [x, g.input((8, 32, 3, 3), "float32")]),
            g.call1("conv2d", [x, g.input((32, 32, 1, 1), "float32")])]
    g.outputs = outs
    from fxc.relay_like.passes import infer_types
    g = use_winograd(infer_types(g, PassContext()), PassContext())
    assert [n.op for n in g.nodes] == ["conv2d"] * 4
    assert not winograd_pays(24, 64, 1, 56, 56) and winograd_pays(64, 64, 1, 56, 56)
    assert not winograd_pays(512, 512, 1, 7, 7) and not winograd_pays(512, 512, 8, 7, 7)
    assert winograd_pays(256, 256, 1, 14, 14)
    assert fits(512, 56) and not fits(1024, 512)      # the kernel's stack scratch stays a few MB


def test_tile_choice():
    """float32: F(4x4) where it pays with at least 32 4x4 tiles a pass over the weight, else F(2x2) where it pays
    (ResNet-18's 14x14 and 7x7 layers at batch 1); with a bf16 direct conv at twice the float32 rate, F(2x2) in bf16
    on the maps below 28 (and on larger ones with few tiles) where it pays, else the bf16 direct conv."""
    assert winograd_tile(64, 64, 1, 56, 56) == (4, False) and winograd_tile(128, 128, 1, 28, 28) == (4, False)
    assert winograd_tile(256, 256, 1, 14, 14) == (2, False) and winograd_tile(256, 256, 8, 14, 14) == (4, False)
    assert winograd_tile(512, 512, 1, 7, 7) == (2, False) and winograd_tile(512, 512, 8, 7, 7) == (2, False)
    assert winograd_tile(32, 32, 1, 14, 14) == (4, False)                       # too few channels for F(2x2)
    assert winograd_tile(256, 256, 1, 14, 14, bf16_direct=True) == (2, True)
    assert winograd_tile(512, 512, 8, 7, 7, bf16_direct=True) == (2, True)
    assert winograd_tile(512, 512, 1, 7, 7, bf16_direct=True) is None          # 16 tiles: direct bf16
    assert winograd_tile(128, 128, 1, 28, 28, bf16_direct=True) == (2, True)   # few tiles a pass over the weight
    assert winograd_tile(64, 64, 1, 56, 56, bf16_direct=True) == (2, True)
    assert winograd_tile(64, 64, 8, 56, 56, bf16_direct=True) == (4, False)   # many: float32 F(4x4)
    assert winograd_tile(63, 64, 8, 14, 14, bf16_direct=True) is None          # odd channels: no pairs
    assert not f2_pays(32, 64, 8, 14, 14) and f2_pays(64, 64, 1, 14, 14) and not f2_pays(64, 64, 1, 7, 7)


def test_bf16_pass_takes_f2_on_small_maps_over_weights_only():
    """bf16_direct: a conv over a weight at 14x14 becomes F(2x2) over bf16 words of the transformed weight; at
    28x28, batch 8, float32 F(4x4); a conv over an activation (no weight) stays float32 (F(2x2) at 14x14)."""
    b = Builder()
    g = b.graph
    x14, x28 = g.input((1, 64, 16, 16), "float32"), g.input((8, 64, 30, 30), "float32")   # outputs 14x14, 28x28
    w, act = g.input((64, 64, 3, 3), "float32"), g.input((64, 64, 3, 3), "float32")
    g.weights.add(w.id)
    g.outputs = [g.call1("conv2d", [x14, w]), g.call1("conv2d", [x28, w]), g.call1("conv2d", [x14, act])]
    from fxc.relay_like.passes import infer_types
    ctx = PassContext(bf16_direct=True)
    nodes = use_winograd(infer_types(g, ctx), ctx).nodes
    convs = [n for n in nodes if n.op == "conv2d_winograd"]
    assert [(n.attrs["tile"], n.inputs[1].dtype) for n in convs] == [(2, "int32"), (4, "float32"), (2, "float32")]
    packed = convs[0].inputs[1].node
    assert packed.op == "pack_bf16_pairs" and packed.inputs[0].node.op == "winograd_weight"


class Block(torch.nn.Module):
    """conv-bn-relu-conv-bn + residual, relu (a ResNet basic block)."""

    def __init__(self, c):
        super().__init__()
        self.c1, self.b1 = torch.nn.Conv2d(c, c, 3, padding=1, bias=False), torch.nn.BatchNorm2d(c)
        self.c2, self.b2 = torch.nn.Conv2d(c, c, 3, padding=1, bias=False), torch.nn.BatchNorm2d(c)

    def forward(self, x):
        y = torch.relu(self.b1(self.c1(x)))
        return torch.relu(self.b2(self.c2(y)) + x)


@pytest.mark.parametrize("batch", [1, 8])
def test_torch_block_and_weight_update(batch):
    torch.manual_seed(batch)
    m = Block(32).eval()
    for bn in (m.b1, m.b2):
        bn.running_mean.uniform_(-0.5, 0.5)
        bn.running_var.uniform_(0.5, 2.0)
    x = torch.randn(batch, 32, 14, 15)
    check_module(m, x)
    compiled = torch.compile(m, backend="fxc")
    with torch.no_grad():
        compiled(x)
        m.c1.weight.mul_(-0.5)          # the transformed weight is recomputed when the weight changes
        torch.testing.assert_close(compiled(x), m(x), rtol=1e-4, atol=1e-5 * max(m(x).abs().max().item(), 1.0))
        m.b1.weight.mul_(1.5)           # and when the batch-norm scale folded into it does
        m.b2.running_var.mul_(0.5)
        torch.testing.assert_close(compiled(x), m(x), rtol=1e-4, atol=1e-5 * max(m(x).abs().max().item(), 1.0))
    # the folded batch-norm scale is applied by the weight transform: no scaled copy of the weight is made
    kernels = fxc.explain(m, x).kernels
    transforms = [k for k in kernels if "winograd_weight" in k]
    assert len(transforms) == 2 and not any("mul -> float32[32, 32, 3, 3]" in k for k in kernels), kernels


def test_check_mode_and_export(tmp_path):
    """Check mode compares the Winograd kernel with its numpy reference; an exported artifact runs it."""
    g, ins = _conv_graph(1, 32, 32, 9, 11, 1, True, True, True)
    rng = np.random.default_rng(3)
    arrays = [rng.standard_normal(v.shape).astype(np.float32) for v in ins]
    report = check_graph(g, arrays)
    assert report.ok and report.groups_checked >= 2, str(report)
    torch.manual_seed(0)
    m = Block(32).eval()
    x = torch.randn(1, 32, 14, 15)
    compiled = fxc.from_torch(m, [x])
    path = fxc.export(compiled, tmp_path / "block.fxc")
    with torch.no_grad():
        expected = m(x).numpy()
    loaded = fxc.load(path)
    assert sum("conv2d_winograd" in line for line in loaded.kernels) == 2, loaded.kernels
    assert_close_np(loaded(x.numpy()), expected)


@pytest.mark.parametrize("tile", [4, 2])
def test_output_channel_groups_share_one_transformed_input(tile, monkeypatch):
    """With few tile rows (batch 1, a small map) the output channel groups run as separate tasks; they share one
    transformed input V, made first in parallel over channel chunks in the kernel's scratch memory (not once a
    group); with many tasks (batch 8) each task keeps its own V. Both match torch."""
    import sys

    from fxc.lowering.loop_ir import For, walk_stmts
    monkeypatch.setattr(sys.modules["fxc.relay_like.passes.use_winograd"], "winograd_tile",
                        lambda *a, **k: (tile, False))
    monkeypatch.setenv("FXC_NUM_THREADS", "2")
    monkeypatch.setenv("FXC_MODULE_CACHE", "0")
    kernels = []
    real = sys.modules["fxc.driver.build"].group_kernel
    monkeypatch.setattr(sys.modules["fxc.driver.build"], "group_kernel",
                        lambda *a: kernels.append(real(*a)) or kernels[-1])
    for n, shared in ((1, True), (8, False)):
        kernels.clear()
        g, ins = _conv_graph(n, 64, 96, 7, 7, 1, True, True, True)
        module = build(g)
        (name,) = [line.split(":")[0] for line in module.kernels if "conv2d_winograd" in line]
        (k,) = [k for k in kernels if k.name == name]
        scratch = [p for p in k.params if p.scope == "scratch"]
        loops = [s for s in walk_stmts(k.body) if isinstance(s, For) and s.kind == "parallel"]
        assert bool(scratch) == shared and len(loops) == (2 if shared else 1)
        rng = np.random.default_rng(n)
        arrays = [rng.standard_normal(v.shape).astype(np.float32) for v in ins]
        assert_close_np(module(*arrays), _torch_ref(arrays, 1, True, True, True))


@pytest.mark.parametrize("tile", [4, 2])
@pytest.mark.parametrize("shape", [(1, 256, 64, 28, 28, 1), (1, 256, 64, 7, 7, 1), (2, 192, 80, 14, 13, 1)],
                         ids=lambda s: "x".join(map(str, s)))
def test_tile_rows_take_the_weight_block_in_l1_sized_channel_chunks(shape, tile, monkeypatch):
    """A task's tile rows each run the GEMM over the same U[xi] block; it goes in channel chunks of U_CHUNK bytes,
    the rows in turn, the partial sums kept in M between chunks, so a chunk comes from L2 once and from L1 for
    the other rows (a 512-channel 7x7 layer alone: 1.10 -> 0.90 ms; at batch 8 ResNet-18's Winograd layers 5-9%
    faster; at batch 1 in the model its U streams from DRAM either way). With a short last task (28x28, F(4x4):
    7 tile rows in tasks of 4) and partial tiles and lane blocks; matches torch."""
    import sys

    from fxc.lowering.loop_ir import For, walk_stmts
    monkeypatch.setattr(sys.modules["fxc.relay_like.passes.use_winograd"], "winograd_tile",
                        lambda *a, **k: (tile, False))
    monkeypatch.setenv("FXC_MODULE_CACHE", "0")
    kernels = []
    real = sys.modules["fxc.driver.build"].group_kernel
    monkeypatch.setattr(sys.modules["fxc.driver.build"], "group_kernel",
                        lambda *a: kernels.append(real(*a)) or kernels[-1])
    n, c, k, h, w, pad = shape
    g, ins = _conv_graph(n, c, k, h, w, pad, True, True, True)
    module = build(g)
    (name,) = [line.split(":")[0] for line in module.kernels if "conv2d_winograd" in line]
    (kern,) = [kk for kk in kernels if kk.name == name]
    chunks = [s for s in walk_stmts(kern.body) if isinstance(s, For) and s.var.args[0] == "cu"]
    assert chunks and all(s.extent > 1 for s in chunks), "no channel-chunk loop"
    rng = np.random.default_rng(sum(shape))
    arrays = [rng.standard_normal(v.shape).astype(np.float32) for v in ins]
    assert_close_np(module(*arrays), _torch_ref(arrays, pad, True, True, True))
