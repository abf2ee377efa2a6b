"""The vector schedules (fxc/lowering/schedules/cpu: gemm.py, vectorize.py, ...) against numpy references on odd
shapes: row/column tails, strides, dilation, padding, depthwise multipliers, batch broadcasting, fused epilogues
(vector and per-element paths), vector exp/erf, vectorized softmax/row reductions. The pack_weights pass and the
cached weight-prepack step: tests/graph/test_prepack.py."""
import dataclasses
import math
import re

import numpy as np
import pytest

from fxc.driver.build import build
from fxc.ops.registry import all_ops, get_op
from fxc.relay_like.graph import Graph
from tests.helpers import assert_close_np, avx512_schedule

all_ops()
RNG = np.random.default_rng(0)


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def run_graph(make, arrays):
    g = Graph()
    ins = [g.input(a.shape, str(a.dtype), f"x{i}") for i, a in enumerate(arrays)]
    g.outputs = [make(g, *ins)]
    m = build(g)
    return m(*arrays), m        # m.kernels: one line per fused kernel (its ops), cached build or not


def conv_ref(x, w, stride, dilation, groups, pad):
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    return get_op("conv2d").reference(xp, w, stride=stride, dilation=dilation, groups=groups)


CONVS = [  # N, C, H, W, O, K, stride, dilation, pad
    (1, 3, 17, 19, 20, 3, 1, 1, 1),      # ow tail (19 = 14 + 5), partial channel block (20 of 32)
    (2, 5, 11, 30, 40, 3, 2, 1, 0),      # stride 2, batch 2
    (1, 4, 13, 13, 33, 3, 1, 2, 2),      # dilation, 33 channels
    (1, 16, 7, 7, 64, 1, 1, 1, 0),       # 7-wide rows: 3 lane vectors
    (1, 8, 9, 23, 16, 5, 1, 1, 2),       # 5x5 kernel, single block
    (1, 3, 15, 15, 8, 7, 2, 1, 3),       # 7x7 stride 2 (ResNet stem-like), fewer channels than lanes
]


@pytest.mark.parametrize("case", CONVS, ids=lambda c: "x".join(map(str, c)))
def test_conv2d_packed_with_epilogue(case):
    n, c, h, w_, o, k, s, d, p = case
    x, w, b = rand(n, c, h, w_), rand(o, c, k, k), rand(o)

    def make(g, xv, wv, bv):
        xv = g.call1("pad", [xv], pad=(p, p, p, p), value=0.0, mode="constant") if p else xv
        y = g.call1("conv2d", [xv, wv], stride=(s, s), dilation=(d, d), groups=1)
        y = g.call1("add", [y, g.call1("reshape", [bv], shape=(-1, 1, 1))])
        return g.call1("relu", [y])
    out, m = run_graph(make, [x, w, b])
    assert any("conv2d_packed" in k for k in m.kernels), m.kernels
    ref = np.maximum(conv_ref(x, w, (s, s), (d, d), 1, p) + b[:, None, None], 0)
    assert_close_np(out, ref)


GROUPED = [  # N, C, H, W, O, KH, KW, groups, stride, pad (W)
    (1, 64, 1, 25, 64, 1, 16, 4, 1, 8),     # wav2vec2's positional conv, reduced: 1-D, 16 channels a group
    (2, 12, 7, 19, 96, 3, 3, 3, 2, 1),      # 2-D, stride 2, 32 channels a group (2 lane vectors), batch 2
    (1, 32, 1, 40, 48, 1, 5, 1, 1, 0),      # groups 1 stays conv2d_packed (control)
    (1, 8, 1, 20, 24, 1, 3, 2, 1, 1),       # 12 channels a group (not whole lane blocks): the generic conv2d
]


@pytest.mark.parametrize("case", GROUPED, ids=lambda c: "x".join(map(str, c)))
def test_grouped_conv_runs_as_a_packed_conv_per_group(case):
    """A grouped conv (not depthwise) whose groups hold whole lane blocks of output channels runs as
    conv2d_grouped_packed (conv2d_packed's register tiles, each tile reading its group's input channels), with a
    bias + GELU epilogue, against numpy."""
    n, c, h, w_, o, kh, kw, groups, s, p = case
    x, w, b = rand(n, c, h, w_), rand(o, c // groups, kh, kw), rand(o)

    def make(g, xv, wv, bv):
        xv = g.call1("pad", [xv], pad=(p, p, 0, 0), value=0.0, mode="constant") if p else xv
        y = g.call1("conv2d", [xv, wv], stride=(s, s), dilation=(1, 1), groups=groups)
        return g.call1("gelu", [g.call1("add", [y, g.call1("reshape", [bv], shape=(-1, 1, 1))])])
    out, m = run_graph(make, [x, w, b])
    whole = groups > 1 and (o // groups) % 16 == 0
    packed = "conv2d_grouped_packed" if whole else "conv2d_packed" if groups == 1 else "conv2d"
    assert any(re.search(rf"\b{packed}\b", k) for k in m.kernels), m.kernels
    xp = np.pad(x, ((0, 0), (0, 0), (0, 0), (p, p)))
    y = get_op("conv2d").reference(xp, w, stride=(s, s), dilation=(1, 1), groups=groups) + b[:, None, None]
    assert_close_np(out, get_op("gelu").reference(y))


@pytest.mark.parametrize("case", [(1, 16, 12, 37, 1, 1, 1), (1, 24, 13, 13, 2, 1, 1), (2, 8, 9, 40, 1, 2, 2),
                                  (1, 4, 11, 11, 1, 1, 2)], ids=str)
def test_depthwise_conv2d(case):
    n, c, h, w_, s, d, mult = case
    x, w = rand(n, c, h, w_), rand(c * mult, 1, 3, 3)

    def make(g, xv, wv):
        xv = g.call1("pad", [xv], pad=(1, 1, 1, 1), value=0.0, mode="constant")
        return g.call1("clamp", [g.call1("conv2d", [xv, wv], stride=(s, s), dilation=(d, d), groups=c)], lo=0.0, hi=6.0)
    out, _ = run_graph(make, [x, w])
    assert_close_np(out, np.clip(conv_ref(x, w, (s, s), (d, d), c, 1), 0, 6))


@pytest.mark.parametrize("case", [  # N, C, H, W, K, stride, pad (left, right, top, bottom)
    (1, 8, 7, 7, 3, 1, (1, 1, 1, 1)),        # 7x7 maps: a 5-column vector interior + 2 border columns
    (1, 6, 20, 41, 5, 2, (2, 2, 2, 2)),      # 5x5 stride 2, interior of 16 + tail
    (1, 5, 9, 30, 3, 2, (0, 1, 0, 1)),       # asymmetric (TF "same") padding
    (2, 4, 4, 3, 3, 1, (2, 2, 1, 3)),        # every column a border column, rows padded past the kernel
    (1, 8, 14, 14, 3, 1, (1, 1, 1, 1)),      # 14x14: the padded window copied into a local plane
    (2, 3, 12, 10, 5, 1, (2, 1, 0, 3)),      # local plane, asymmetric padding, batch 2
    (1, 4, 21, 37, 7, 1, (3, 3, 3, 3)),      # 7x7 (ConvNeXt's): 6 border columns, so a plane; 2 vectors + a tail
    (2, 3, 9, 24, 5, 1, (2, 2, 1, 3)),       # 5x5, 4 border columns: a plane, asymmetric rows
], ids=str)
def test_depthwise_conv2d_reads_through_fused_pad(case):
    n, c, h, w_, k, s, pad = case
    x, w, b = rand(n, c, h, w_), rand(c, 1, k, k), rand(c)

    def make(g, xv, wv, bv):
        xv = g.call1("pad", [xv], pad=pad, value=0.0, mode="constant")
        y = g.call1("conv2d", [xv, wv], stride=(s, s), dilation=(1, 1), groups=c)
        return g.call1("clamp", [g.call1("add", [y, g.call1("reshape", [bv], shape=(-1, 1, 1))])], lo=0.0, hi=6.0)
    out, _ = run_graph(make, [x, w, b])
    xp = np.pad(x, ((0, 0), (0, 0), (pad[2], pad[3]), (pad[0], pad[1])))
    ref = get_op("conv2d").reference(xp, w, stride=(s, s), dilation=(1, 1), groups=c) + b[:, None, None]
    assert_close_np(out, np.clip(ref, 0, 6))


@pytest.mark.parametrize("h", [21, 4], ids=["5-blocks-and-a-row", "one-block"])
def test_depthwise_plane_computes_rows_in_blocks(h, capfd):
    """Over its padded plane a depthwise conv computes ROW_BLOCK output rows together: each plane vector is loaded
    once for every row its kernel reaches (ConvNeXt's 7x7 over 96x56x56 345 -> 188-215 us); the rows past the
    whole blocks take the row-by-row loops."""
    x, w, b = rand(2, 3, h, 37), rand(3, 1, 7, 7), rand(3)

    def make(g, xv, wv, bv):
        xv = g.call1("pad", [xv], pad=(3, 3, 3, 3), value=0.0, mode="constant")
        y = g.call1("conv2d", [xv, wv], stride=(1, 1), dilation=(1, 1), groups=3)
        return g.call1("add", [y, g.call1("reshape", [bv], shape=(-1, 1, 1))])
    g = Graph()
    g.outputs = [make(g, *[g.input(a.shape, "float32", f"x{i}") for i, a in enumerate((x, w, b))])]
    out = build(g, debug=3)(x, w, b)
    xp = np.pad(x, ((0, 0), (0, 0), (3, 3), (3, 3)))
    assert_close_np(out, get_op("conv2d").reference(xp, w, stride=(1, 1), dilation=(1, 1), groups=3)
                    + b[:, None, None])
    assert re.search(rf"for ob\d+ in 0\.\.{h // 4}:", capfd.readouterr().err)


@avx512_schedule
@pytest.mark.parametrize("ow", [14, 9, 5], ids=str)
def test_short_reduce_rows_run_again_and_again_take_one_narrower_vector(ow, capfd):
    """A depthwise weight gradient over a 14 x 14 map sums rows of 14 (the padded input's rows are 16 apart, so
    they do not merge): rows of 8 to 15 that outer reduce loops run 4 times or more go on one narrower vector
    accumulator (MobileNetV2's 576-channel 3x3 weight gradient 422 -> 64 us); rows under 8 stay scalar."""
    x, gy = rand(2, 6, ow + 2, ow + 2), rand(2, 6, ow, ow)
    g = Graph()
    xv, gv = g.input(x.shape, "float32", "x"), g.input(gy.shape, "float32", "gy")
    g.outputs = [g.call1("conv2d_weight_grad", [xv, gv], kernel=(3, 3), groups=6)]
    out = build(g, debug=3)(x, gy)
    assert_close_np(out, get_op("conv2d_weight_grad").reference(x, gy, kernel=(3, 3), groups=6))
    narrow = re.search(rf"racc\d+\[0\] = \(racc\d+\[0 : \+{ow}\] add", capfd.readouterr().err)
    assert bool(narrow) == (ow >= 8)


@pytest.mark.parametrize("row_term", [False, True], ids=["residual", "per-row-term"])
def test_conv1x1_over_all_positions_with_epilogue(row_term):
    """1x1 stride-1 convs run as one GEMM over the flat positions (lanes along oh*OW+ow): a residual of the output
    shape reads flat too; an epilogue term indexed by the row alone must keep the per-row schedule."""
    x, w, r = rand(2, 24, 20, 30), rand(40, 24, 1, 1), rand(2, 40, 20, 30)
    h = rand(1, 1, 20, 1)

    def make(g, xv, wv, rv, hv):
        y = g.call1("conv2d", [xv, wv], stride=(1, 1), dilation=(1, 1), groups=1)
        y = g.call1("add", [y, hv if row_term else rv])
        return g.call1("clamp", [y], lo=0.0, hi=6.0)
    out, _ = run_graph(make, [x, w, r, h])
    ref = conv_ref(x, w, (1, 1), (1, 1), 1, 0) + (h if row_term else r)
    assert_close_np(out, np.clip(ref, 0, 6))



def test_conv1x1_with_a_mask_epilogue_stays_over_positions():
    """A training step's input gradient of a 1x1 conv keeps ReLU6's backward as its epilogue, where((a <= 0) |
    (a >= 6), 0, y): the boolean and / or / xor of compares vectorize (masks of lanes), so it stays one GEMM over the
    positions (it took 3.5x as long through the per-element epilogue). Positions 21 x 23: whole vectors and a tail."""
    x, w, a = rand(2, 24, 21, 23), rand(40, 24, 1, 1), rand(2, 40, 21, 23) * 8

    def make(g, xv, wv, av):
        c = lambda v: Graph.const(np.array(v, np.float32))
        y = g.call1("conv2d", [xv, wv], stride=(1, 1), dilation=(1, 1), groups=1)
        low, high = g.call1("le", [av, c(0.0)]), g.call1("ge", [av, c(6.0)])
        dead = g.call1("bitwise_or", [low, high])
        odd = g.call1("bitwise_xor",
                      [g.call1("bitwise_and", [g.call1("gt", [av, c(1.0)]), g.call1("lt", [av, c(2.0)])]),
                       g.call1("lt", [av, c(-1.0)])])
        return g.call1("where", [dead, c(0.0), g.call1("where", [odd, g.call1("neg", [y]), y])])
    out, _ = run_graph(make, [x, w, a])
    y = conv_ref(x, w, (1, 1), (1, 1), 1, 0)
    odd = ((a > 1) & (a < 2)) ^ (a < -1)
    assert_close_np(out, np.where((a <= 0) | (a >= 6), 0.0, np.where(odd, -y, y)))



@pytest.mark.parametrize("kind", ["conv1x1", "matmul"])
def test_vector_epilogues_read_and_write_masks_as_bytes(kind):
    """A bool tensor is a byte per element: a vector epilogue that makes one (conv + bias > t) stores bytes, not
    LLVM's packed <n x i1> (which wrote half the mask wrong), and one that reads one (dropout's backward,
    y * mask * 2) loads bytes and compares them, then converts the lanes to 0.0 / 1.0."""
    if kind == "conv1x1":
        x, w, b, m = rand(1, 24, 8, 125), rand(40, 24, 1, 1), rand(40, 1, 1), rand(1, 40, 8, 125) > 0.2
        y = conv_ref(x, w, (1, 1), (1, 1), 1, 0) + b
        op, attrs = "conv2d", dict(stride=(1, 1), dilation=(1, 1), groups=1)
    else:
        x, w, b, m = rand(37, 48), rand(48, 128), rand(128), rand(37, 128) > 0.2
        y = x @ w + b
        op, attrs = "matmul", {}
    c = lambda v: Graph.const(np.array(v, np.float32))
    made, _ = run_graph(lambda g, xv, wv, bv: g.call1("gt", [g.call1("add", [g.call1(op, [xv, wv], **attrs), bv]),
                                                             c(0.1)]), [x, w, b])
    assert made.dtype == np.bool_ and np.array_equal(made, y > 0.1)
    read, _ = run_graph(lambda g, xv, wv, bv, mv: g.call1("mul", [
        g.call1("mul", [g.call1("add", [g.call1(op, [xv, wv], **attrs), bv]), g.call1("cast", [mv], dtype="float32")]),
        c(2.0)]), [x, w, b, m])
    assert_close_np(read, y * m * 2.0)


@pytest.mark.parametrize("shape,blocks", [((40, 37), 3), ((64, 50), 4), ((16, 16), 1)], ids=str)
def test_pack_lanes_through_a_permute_transposes_tiles(shape, blocks):
    """A pack whose source is a permute computed in its group (a transposed weight of a training step's backward):
    lanes far apart in x, the axis before them contiguous, so whole blocks go as 16 x 16 tiles transposed in
    registers; the tail of that axis, the padding lanes and an all-padding block element by element."""
    x = rand(*shape)
    out, _ = run_graph(lambda g, xv: g.call1("pack_lanes", [g.call1("permute", [xv], dims=(1, 0))], axis=1, block_pos=0,
                                             blocks=blocks, lanes=16), [x])
    assert_close_np(out, get_op("pack_lanes").reference(np.ascontiguousarray(x.T), axis=1, block_pos=0, blocks=blocks,
                                                        lanes=16))


@avx512_schedule
@pytest.mark.parametrize("shape,dims,dtype", [((2, 37, 50, 20), (0, 3, 1, 2), "float32"),     # u and v tails
                                               ((1, 16, 16, 16), (0, 3, 1, 2), "float32"),     # whole tiles only
                                               ((1, 40, 9, 33), (0, 2, 3, 1), "int32"),        # NCHW -> NHWC
                                               ((3, 70, 18), (0, 2, 1), "float32")], ids=str)
def test_a_permute_across_the_rows_runs_as_transposed_tiles(shape, dims, dtype):
    """An injective kernel whose output row strides through its source (NHWC -> NCHW) while an outer axis reads it
    contiguously goes as 16 x 16 tiles transposed in registers, not a gather per lane; the tails of both axes and a
    broadcast operand (stride 0) are read right (96x56x56 NHWC -> NCHW: 186-225 -> 78-83 us)."""
    x = RNG.integers(-50, 50, shape).astype(dtype) if dtype == "int32" else rand(*shape)
    if dtype == "int32":            # a plain copy (integer arithmetic is not vectorized)
        out, m = run_graph(lambda g, xv: g.call1("permute", [xv], dims=dims), [x])
        np.testing.assert_array_equal(out, x.transpose(dims))
    else:
        s = np.full((1,) * len(shape), 3, dtype)
        out, m = run_graph(lambda g, xv, sv: g.call1("mul", [g.call1("permute", [xv], dims=dims), sv]), [x, s])
        np.testing.assert_array_equal(out, x.transpose(dims) * s)
    assert m.source.count("shufflevector") >= 64


MATMULS = [  # a shape, b shape, trans_a, trans_b
    ((37, 19), (19, 70), False, False),          # row tail, column tail (70 = 64 + 6)
    ((128, 64), (256, 64), False, True),         # linear layer: weight [out, in]
    ((2, 3, 29, 16), (2, 3, 40, 16), False, True),   # batched, attention-like
    ((16, 33), (1, 16, 8), True, False),         # trans_a, broadcast batch, 8 columns
    ((5, 1, 64), (64, 1000), False, False),      # one row (classifier), 1000 columns
    ((128, 1024), (128, 40), True, False),       # a weight gradient dY^T X: A's columns copied into a panel
    ((2, 64, 1024), (2, 64, 33), True, False),   # ... batched, column tail
]


@pytest.mark.parametrize("case", MATMULS, ids=lambda c: f"{c[0]}x{c[1]}")
def test_matmul_packed_with_gelu_epilogue(case):
    sa, sb, ta, tb = case
    a, b = rand(*sa), rand(*sb)
    n = sb[-2] if tb else sb[-1]
    bias = rand(n)

    def make(g, av, bv, cv):
        y = g.call1("matmul", [av, bv], trans_a=ta, trans_b=tb)
        return g.call1("gelu", [g.call1("add", [y, cv])])
    out, m = run_graph(make, [a, b, bias])
    assert any("matmul_packed" in k for k in m.kernels), m.kernels
    a64 = np.swapaxes(a, -1, -2) if ta else a
    b64 = np.swapaxes(b, -1, -2) if tb else b
    y = np.matmul(a64.astype(np.float64), b64.astype(np.float64)) + bias
    ref = 0.5 * y * (1 + np.vectorize(math.erf)(y / math.sqrt(2)))
    assert_close_np(out, ref.astype(np.float32))


@avx512_schedule
def test_matmul_with_a_column_tail_stores_its_whole_tiles_as_vectors(capfd):
    """Columns past a multiple of the tile width (ViT's 197 x 197 attention scores): every tile but the last stores
    its accumulators straight through the epilogue as vectors; only the last one goes element by element (the
    whole matmul did before: 145 -> 92 us for [3, 197, 64] x [3, 64, 197])."""
    a, b = rand(2, 40, 64), rand(2, 64, 50)
    g = Graph()
    av, bv = g.input(a.shape, "float32", "a"), g.input(b.shape, "float32", "b")
    g.outputs = [g.call1("mul", [g.call1("matmul", [av, bv]), g.const(np.float32(0.5))])]
    out = build(g, debug=3)(a, b)
    assert_close_np(out, (a @ b) * 0.5)
    lowered = capfd.readouterr().err
    assert re.search(r"out0\[[^\n]*\] = \(vacc\d+\[\d+ : \+16\] mul", lowered)     # accumulator -> output, one vector
    assert re.search(r"if \(\(\(nbb\d+ mul 32\) add 32\) le 50\)", lowered)


@avx512_schedule
@pytest.mark.parametrize("case", ["nhwc-mean", "blocked-mean", "nhwc-max"])
def test_reduction_strided_along_its_rows_runs_with_lanes_along_the_output(case, capfd):
    """A pool whose reads are contiguous along the output's channels but 16 floats or more apart along its own
    loops (a squeeze-and-excitation pool of an NCHW16c map, a pool of NHWC) keeps 16 channels on one vector
    accumulator; 40 channels: two vectors and a scalar tail (145 -> 14 us for 32 x 112 x 112 NCHW16c)."""
    if case == "blocked-mean":
        x = rand(1, 3, 9, 11, 16)
        def make(g, xv):
            nchw = g.call1("reshape", [g.call1("permute", [xv], dims=(0, 1, 4, 2, 3))], shape=(1, 48, 9, 11))
            return g.call1("mean", [nchw], axes=(2, 3), keepdim=True)
        ref = x.transpose(0, 1, 4, 2, 3).reshape(1, 48, 9, 11).mean((2, 3), keepdims=True)
    else:
        x = rand(2, 9, 11, 40)
        op = "mean" if case == "nhwc-mean" else "amax"
        def make(g, xv):
            return g.call1(op, [xv], axes=(1, 2), keepdim=False)
        ref = x.mean((1, 2)) if op == "mean" else x.max((1, 2))
    g = Graph()
    g.outputs = [make(g, g.input(x.shape, "float32", "x"))]
    out = build(g, debug=3)(x)
    assert_close_np(out, ref)
    assert re.search(r"racc\d+\[0\] = \(?\(?racc\d+\[0 : \+16\] (add|max) in0\[[^\n]*: \+16\]", capfd.readouterr().err)


@avx512_schedule
def test_short_contiguous_reduce_loops_merge_into_one_vector_row(capfd):
    """A global pool of a 7 x 7 NCHW map with a SiLU read through: the two reduce loops walk one contiguous run of
    49, which the vector accumulator takes (each 7 was too short; EfficientNet's head pool 181 -> 23 us). A pad
    inside the reduction breaks the run and keeps the loops apart."""
    x = rand(1, 40, 7, 7)
    g = Graph()
    xv = g.input(x.shape, "float32", "x")
    g.outputs = [g.call1("mean", [g.call1("mul", [xv, g.call1("sigmoid", [xv])])], axes=(2, 3), keepdim=True)]
    out = build(g, debug=3)(x)
    assert_close_np(out, (x / (1 + np.exp(-x))).mean((2, 3), keepdims=True))
    assert re.search(r"for ro\d+ in 0\.\.3:", capfd.readouterr().err)      # 49 = 3 vectors + a tail of 1
    g = Graph()
    xv = g.input(x.shape, "float32", "x")
    g.outputs = [g.call1("mean", [g.call1("pad", [xv], pad=(1, 1, 1, 1), value=0.0, mode="constant")], axes=(2, 3),
                         keepdim=True)]
    out = build(g, debug=3)(x)
    assert_close_np(out, np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1))).mean((2, 3), keepdims=True))
    assert not re.search(r"for ro\d+ in", capfd.readouterr().err)


@pytest.mark.parametrize("shape,trans_a", [((61, 80, 96), False), ((1024, 128, 96), True)], ids=["rows", "panel"])
def test_matmul_with_fewer_column_blocks_than_threads_share_splits_its_rows(shape, trans_a, capfd, monkeypatch):
    """Three column blocks of 32 on two threads: the rows split in two, so six tasks share evenly (one thread sat
    idle a third of the time: ConvNeXt's [3136, 384] x [384, 96] 1380-1490 -> 1050-1130 us); the tail rows go with
    the last part. Also where A's columns are copied into a panel (a weight gradient's dY^T X: 73 row tiles, the
    second part one shorter)."""
    monkeypatch.setenv("FXC_NUM_THREADS", "2")
    M, K, N = shape
    a, b = (rand(K, M) if trans_a else rand(M, K)), rand(K, N)
    g = Graph()
    av, bv = g.input(a.shape, "float32", "a"), g.input(b.shape, "float32", "b")
    g.outputs = [g.call1("matmul", [g.call1("permute", [av], dims=(1, 0)) if trans_a else av, bv])]
    out = build(g, debug=3)(a, b)
    assert_close_np(out, (a.T if trans_a else a) @ b)
    assert re.search(r"for p\d+ in 0\.\.6  # parallel", capfd.readouterr().err)


def test_rows_per_set():
    from fxc.lowering.schedules.cpu.gemm import rows_per_set
    assert rows_per_set(4096, 14) == 14        # rows of 1024 floats: every row in the same L1 set
    assert rows_per_set(1024, 14) == 4         # rows of 256 floats: four sets in turn
    assert rows_per_set(4160, 14) == 1         # padded by one line: a set each


@avx512_schedule
@pytest.mark.parametrize("case", [((2, 37, 1024), (1024, 256)), ((40, 2048), (2048, 48))], ids=str)
def test_matmul_rows_of_4k_stride_read_through_a_padded_panel(case, monkeypatch):
    """A's rows 4 KiB apart would share one L1 set: each row tile copies them into a padded local panel first
    (one copy per several column blocks); row tails, batch and column tails still match numpy."""
    import fxc.lowering.lower as lower
    monkeypatch.setenv("FXC_MODULE_CACHE", "0")
    names = []
    local = lower.Converter.local

    def spy(self, dtype, size=1, name="acc"):
        names.append(name)
        return local(self, dtype, size, name)
    monkeypatch.setattr(lower.Converter, "local", spy)
    sa, sb = case
    a, b, bias = rand(*sa), rand(*sb), rand(sb[1])

    def make(g, av, bv, cv):
        return g.call1("relu", [g.call1("add", [g.call1("matmul", [av, bv], trans_a=False, trans_b=False), cv])])
    out, _ = run_graph(make, [a, b, bias])
    assert "apanel" in names
    ref = np.maximum(np.matmul(a.astype(np.float64), b.astype(np.float64)) + bias, 0)
    assert_close_np(out, ref.astype(np.float32))


@pytest.mark.parametrize("n", [16, 19, 28, 37, 128, 1000])
def test_softmax_and_row_reductions_vectorized(n):
    x = rand(3, n) * 4

    def make(g, xv):
        sm = g.call1("softmax", [xv], dim=-1)
        return g.call1("add", [sm, g.call1("mean", [xv], axes=(-1,), keepdim=True)])
    out, _ = run_graph(make, [x])
    x64 = x.astype(np.float64)
    e = np.exp(x64 - x64.max(-1, keepdims=True))
    assert_close_np(out, (e / e.sum(-1, keepdims=True) + x64.mean(-1, keepdims=True)).astype(np.float32))


@pytest.mark.parametrize("shape,pad,value,dtype", [
    ((1, 64, 56, 56), (1, 1, 1, 1), 0.0, "float32"), ((2, 3, 5, 7), (2, 0, 0, 3), 1.5, "float32"),
    ((3, 17), (5, 20), -2.0, "float32"), ((2, 4, 6), (1, 2, 0, 0, 3, 1), 0.0, "float32"),
    ((2, 3, 9, 9), (1, 1, 1, 1), 7, "int64"), ((2, 5, 8), (-1, 2), 0.0, "float32")])
def test_constant_pad_written_row_by_row(shape, pad, value, dtype):
    x = (RNG.standard_normal(shape) * 5).astype(dtype)
    out, m = run_graph(lambda g, xv: g.call1("pad", [g.call1("abs", [xv])], pad=pad, value=value, mode="constant"), [x])
    np.testing.assert_array_equal(out, get_op("pad").reference(np.abs(x), pad=pad, value=value, mode="constant"))


@pytest.mark.parametrize("op", ["exp", "erf"])
def test_vector_exp_erf_accuracy(op):
    if op == "exp":
        xs = np.concatenate([np.linspace(-110, 90, 4001),
                             [np.nan, np.inf, -np.inf, 0.0, 88.7, 88.722, 88.7228, -87.5, -100.0, -103.9]])
    else:
        xs = np.concatenate([np.linspace(-6, 6, 4001), np.logspace(-30, 0, 50), [np.nan, np.inf, -np.inf, 0.0]])
    xs = xs.astype(np.float32)
    ref = np.exp(xs.astype(np.float64)) if op == "exp" else np.vectorize(math.erf)(xs.astype(np.float64))
    out, _ = run_graph(lambda g, xv: g.call1(op, [xv]), [xs])
    out = out.astype(np.float64)
    assert np.array_equal(np.isnan(out), np.isnan(ref))
    assert np.array_equal(out[np.isinf(ref)], ref[np.isinf(ref)])
    fin = np.isfinite(ref)
    if op == "exp":
        normal = fin & (ref > 1.2e-38) & (ref < 3.4e38)
        assert (np.abs(out[normal] - ref[normal]) / ref[normal]).max() < 5e-7
        assert np.abs(out[fin & (ref <= 1.2e-38)] - ref[fin & (ref <= 1.2e-38)]).max() < 1e-44
    else:
        assert np.abs(out[fin] - ref[fin]).max() < 5e-7


def _math_samples():
    """float32 arguments over every magnitude, denormals and both signs, infinities and nan."""
    rng = np.random.default_rng(5)
    mag = 10.0 ** rng.uniform(-45, 38.5, 20000)
    xs = np.concatenate([mag * rng.choice([-1.0, 1.0], mag.size), rng.uniform(-10, 10, 20000),
                         1 + rng.uniform(-1e-3, 1e-3, 2000), -1 + rng.uniform(-1e-3, 1e-3, 2000),
                         rng.uniform(-70000, 70000, 2000), rng.uniform(-95, -80, 2000),
                         [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 1.1754943e-38, 0.5, -0.5, 0.625,
                          -0.625, 0.70710677, 1.4142135, 88.7, 89.0, -104.0, 65536.0, 65537.0, 3.4e38, -3.4e38]])
    return xs.astype(np.float32)


def test_vector_sigmoid_accuracy():
    """sigmoid's float32 vector form (one reduction of -x clamped to +-87.6, llvm/mathlib.VectorMath.sigmoid) and its
    scalar form within 3 ulp of the float64 result wherever that is a normal float; below 1.2e-38 within 1.2e-38
    (PyTorch's own gives 0 there); 1 at +inf and beyond 17, nan for nan."""
    from fxc.lowering.loop_ir import Buffer
    from fxc.lowering.vectorize import vectorize_expr
    from fxc.symbolic.expr import Load, Var, unary
    i = Var("i")
    assert vectorize_expr(unary("sigmoid", Load(Buffer("x", "float32", 64), i)), i, 16) is not None
    xs = _math_samples()
    with np.errstate(all="ignore"):
        ref = 1.0 / (1.0 + np.exp(-xs.astype(np.float64)))
    for x, r in ((xs, ref), (xs[:7], ref[:7])):         # 7: a scalar loop
        out = run_graph(lambda g, xv: g.call1("sigmoid", [xv]), [x])[0].astype(np.float64)
        assert np.array_equal(np.isnan(out), np.isnan(x))
        ok = ~np.isnan(x)
        normal = ok & (r >= 1.1754943508222875e-38)
        ulp = np.spacing(r[normal].astype(np.float32)).astype(np.float64)
        assert (np.abs(out[normal] - r[normal]) / ulp).max() <= 3.0
        assert np.abs(out[ok & ~normal] - r[ok & ~normal]).max(initial=0) <= 1.2e-38
        assert np.all(out[ok & (x > 17)] == 1.0)


@pytest.mark.parametrize("op", ["exp", "sigmoid"])
def test_vector_exp_and_sigmoid_scale_by_vscalef_without_selects(op, monkeypatch):
    """On AVX-512, 16-lane exp and sigmoid apply 2^k with one vscalefps and let a nan through their clamp (maxps /
    minps keep it) instead of selecting overflow, underflow and nan lanes afterwards: a third fewer instructions
    (exp over 1.2M floats 220 -> 150 us). The results are the same bits (the accuracy tests above cover them)."""
    from fxc.backends.llvm.compile import target_machine
    if "+avx512f" not in target_machine()[3].split(","):
        pytest.skip("the host has no AVX-512F: exp and sigmoid build 2^k from integer bits")
    monkeypatch.setenv("FXC_MODULE_CACHE", "0")
    x = np.concatenate([np.linspace(-120, 120, 4096), [np.nan, np.inf, -np.inf] * 5 + [0.0]]).astype(np.float32)
    out, m = run_graph(lambda g, xv: g.call1(op, [xv]), [x])
    ref = np.exp(x.astype(np.float64)) if op == "exp" else 1 / (1 + np.exp(-x.astype(np.float64)))
    with np.errstate(invalid="ignore"):
        assert np.array_equal(np.isnan(out), np.isnan(x)) and np.array_equal(out[np.isinf(ref)], ref[np.isinf(ref)])
    body = m.source[m.source.index("define"):]
    assert "@llvm.x86.avx512.mask.scalef.ps.512(" in body
    assert "fcmp uno" not in body and "fptosi" not in body


def test_vector_sigmoid_without_vscalef_selects_its_nan_lanes(monkeypatch):
    """Where 2^k is built from integer bits (no AVX-512F), a nan argument would reach fptosi, whose result is then
    poison: sigmoid selects its nan lanes back from the argument, and its other lanes agree with the vscalefps form
    bit for bit."""
    from fxc.backends.llvm.module import ModuleWriter
    monkeypatch.setenv("FXC_MODULE_CACHE", "0")
    x = np.concatenate([np.linspace(-120, 120, 4096), [np.nan, np.inf, -np.inf] * 5 + [0.0]]).astype(np.float32)
    with_scalef, _ = run_graph(lambda g, xv: g.call1("sigmoid", [xv]), [x])
    real = ModuleWriter.__init__
    monkeypatch.setattr(ModuleWriter, "__init__", lambda self, triple, layout, caps: real(
        self, triple, layout, dataclasses.replace(caps, scalef=False)))         # no vscalefps (Caps.scalef)
    out, m = run_graph(lambda g, xv: g.call1("sigmoid", [xv]), [x])
    body = m.source[m.source.index("define"):]
    assert "fcmp uno" in body and "fptosi" in body and "scalef" not in body
    assert np.array_equal(np.isnan(out), np.isnan(x))
    ok = ~np.isnan(x)
    assert np.array_equal(out[ok].view(np.int32), with_scalef[ok].view(np.int32))


VECTOR_MATH_REFS = {"log": np.log, "log2": np.log2, "log10": np.log10, "log1p": np.log1p, "expm1": np.expm1,
                    "tanh": np.vectorize(math.tanh), "sin": np.sin, "cos": np.cos}   # libm's tanh: numpy's
# float64 tanh is wrong under QEMU's AVX2 emulation (scripts/test_emulated_cpu.sh: tanh(3.0) = -1058)


@pytest.mark.parametrize("op", sorted(VECTOR_MATH_REFS))
def test_vector_math_accuracy(op):
    """The float32 vector forms (llvm/mathlib.VectorMath) within 3 ulp of the float64 result over every magnitude,
    denormals and both signs, with libm's infinities and nans; sin and cos also for vectors holding a lane beyond
    their reduction's range (libm's path)."""
    from fxc.lowering.loop_ir import Buffer
    from fxc.lowering.vectorize import vectorize_expr
    from fxc.symbolic.expr import Load, Var, unary
    i = Var("i")
    assert vectorize_expr(unary(op, Load(Buffer("x", "float32", 64), i)), i, 16) is not None   # no libm loop
    xs = _math_samples()
    with np.errstate(all="ignore"):
        ref = VECTOR_MATH_REFS[op](xs.astype(np.float64))
        out, _ = run_graph(lambda g, xv: g.call1(op, [xv]), [xs])
        out = out.astype(np.float64)
        fin = np.isfinite(ref.astype(np.float32))
        assert np.array_equal(np.isnan(out[~fin]), np.isnan(ref[~fin]))
        assert np.array_equal(out[~fin & ~np.isnan(ref)], ref[~fin & ~np.isnan(ref)].astype(np.float32))
        ulp = np.spacing(np.maximum(np.abs(ref[fin]), 1.1754943508222875e-38).astype(np.float32)).astype(np.float64)
        err = np.abs(out[fin] - ref[fin]) / ulp
    assert err.max() <= 3.0, (op, xs[fin][err.argmax()], err.max())


def test_groups_of_the_same_shape_share_one_kernel():
    """Two 1x1 conv+bias+relu layers of equal shapes but different weights compile to one kernel called twice
    (constants are read through pointers, so each call still uses its own weights)."""
    x, w1, w2, b1, b2 = rand(1, 8, 9, 9), rand(8, 8, 1, 1), rand(8, 8, 1, 1), rand(8), rand(8)
    g = Graph()
    v = g.input(x.shape, "float32", "x")
    for w, b in ((w1, b1), (w2, b2)):
        y = g.call1("conv2d", [v, g.const(w)], stride=(1, 1), dilation=(1, 1), groups=1)
        v = g.call1("relu", [g.call1("add", [y, g.const(b.reshape(1, 8, 1, 1))])])
    g.outputs = [v]
    m = build(g)
    names = [k.split(":")[0] for k in m.kernels]
    assert len(names) == 2 and names[0] == names[1], m.kernels
    h = np.maximum(conv_ref(x, w1, (1, 1), (1, 1), 1, 0) + b1[:, None, None], 0)
    ref = np.maximum(conv_ref(h, w2, (1, 1), (1, 1), 1, 0) + b2[:, None, None], 0)
    assert_close_np(m(x), ref.reshape(m.outputs[0].shape))


def test_aligned_stride_through_idiv_and_imod():
    """Within a vector loop's aligned chunk, an unravelled index (a reshape's) keeps a constant stride."""
    from fxc.lowering.vectorize import aligned_stride
    from fxc.symbolic.expr import Var, as_expr, binary
    v, i = Var("v"), Var("i")
    merge = binary("idiv", v, as_expr(64)) * 8192 + i * 64 + binary("imod", v, as_expr(64))
    assert aligned_stride(merge, v, 16) == 1
    split = binary("imod", i * 256 + v, as_expr(32)) * 16        # i * 256 is a multiple of 16: stride 16
    assert aligned_stride(split, v, 16) == 16
    assert aligned_stride(binary("idiv", v, as_expr(24)), v, 16) is None        # 24: a chunk may cross a quotient
    assert aligned_stride(binary("imod", v + i, as_expr(64)), v, 16) is None    # i unknown mod 16
    assert aligned_stride(binary("imod", v + 3, as_expr(64)), v, 16) is None    # the chunk starts off a multiple


def test_reshape_index_reads_unchanged_dims_directly():
    """A reshape that merges dims 1-2 reads dims 3-4 through their own index (the NCHW16c -> NCHW copy: 940 -> 115 us
    for [1, 6, 56, 56, 16], a division per element before)."""
    import numpy as np

    from fxc.driver.build import build
    from fxc.ops.movement import reshape_groups
    from fxc.relay_like.graph import Graph
    assert reshape_groups((1, 96, 56, 56), (1, 6, 16, 56, 56)) == [([0], [0]), ([1], [1, 2]), ([2], [3]), ([3], [4])]
    assert reshape_groups((2, 3, 4), (6, 4)) == [([0, 1], [0]), ([2], [1])]
    assert reshape_groups((1, 1, 6), (6,)) == [([0, 1, 2], [0])]
    g = Graph()
    x = g.input((1, 2, 5, 21, 16), "float32", "x")
    g.outputs = [g.call1("reshape", [g.call1("permute", [x], dims=(0, 1, 4, 2, 3))], shape=(1, 32, 5, 21))]
    m = build(g)
    a = np.random.default_rng(0).standard_normal((1, 2, 5, 21, 16), dtype=np.float32)
    np.testing.assert_array_equal(m(a), a.transpose(0, 1, 4, 2, 3).reshape(1, 32, 5, 21))
