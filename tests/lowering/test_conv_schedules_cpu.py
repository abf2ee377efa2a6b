"""The CPU conv schedules for shapes outside the CNN mainstream (fxc/lowering/schedules/cpu/): grouped convs whose
groups are not whole lane blocks (grouped_conv.py, lanes along the output row) and long 1-D rows cut into column
strips (column_strips.py), against numpy on odd shapes (row tails, strides, dilation, channel tails, epilogues), and
a wav2vec2-style 1-D model through torch.compile against eager."""
import re

import numpy as np
import pytest
import torch

from fxc.driver.build import build
from fxc.lowering.schedules.cpu.column_strips import column_parts
from fxc.lowering.schedules.cpu.grouped_conv import tile_shape
from fxc.ops.registry import all_ops, get_op
from fxc.relay_like.graph import Graph
from fxc.target import Caps, Target
from tests.helpers import assert_close_np

all_ops()
RNG = np.random.default_rng(0)


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def conv_graph(x, w, b, stride, dilation, groups, pad, act="gelu", debug=0, target="llvm"):
    """pad -> conv2d -> + bias -> act, built and run; (output, module, numpy reference)."""
    g = Graph()
    xv, wv, bv = [g.input(a.shape, "float32", f"x{i}") for i, a in enumerate((x, w, b))]
    if any(pad):
        xv = g.call1("pad", [xv], pad=pad, value=0.0, mode="constant")
    y = g.call1("conv2d", [xv, wv], stride=stride, dilation=dilation, groups=groups)
    g.outputs = [g.call1(act, [g.call1("add", [y, g.call1("reshape", [bv], shape=(-1, 1, 1))])])]
    m = build(g, debug=debug, target=target)
    xp = np.pad(x, ((0, 0), (0, 0), (pad[2], pad[3]), (pad[0], pad[1])))
    ref = get_op("conv2d").reference(xp, w, stride=stride, dilation=dilation, groups=groups) + b[:, None, None]
    return m(x, w, b), m, get_op(act).reference(ref)


GROUPED = [  # N, C, H, W, O, KH, KW, groups, stride, dilation, pad (left, right, top, bottom)
    (1, 128, 9, 37, 128, 3, 3, 32, (1, 1), (1, 1), (1, 1, 1, 1)),     # ResNeXt-like: 4 channels a group, a row tail
    (2, 96, 8, 21, 96, 3, 3, 8, (2, 2), (1, 1), (1, 1, 1, 1)),        # 12 a group, stride 2 (strided vector loads)
    (1, 40, 1, 49, 40, 1, 16, 2, (1, 1), (1, 1), (8, 8, 0, 0)),       # 1-D positional conv, 20 a group (tiles of 20)
    (1, 60, 7, 70, 90, 3, 3, 3, (1, 1), (2, 2), (2, 2, 2, 2)),        # 30 a group (tail tile), dilation 2, 4 vectors
    (1, 12, 5, 5, 24, 3, 3, 4, (1, 1), (1, 1), (1, 1, 1, 1)),         # a row shorter than one vector
]


@pytest.mark.parametrize("case", GROUPED, ids=lambda c: "x".join(map(str, c[:8])))
def test_grouped_conv_with_partial_lane_groups_runs_along_rows(case, capfd):
    """Groups of 4-30 output channels (not whole lane blocks: conv2d_grouped_packed cannot take them) run on the
    row tiles of grouped_conv.py (a `gacc` accumulator in the loop IR), bias + GELU fused, against numpy."""
    n, c, h, w_, o, kh, kw, groups, stride, dilation, pad = case
    x, w, b = rand(n, c, h, w_), rand(o, c // groups, kh, kw), rand(o)
    out, m, ref = conv_graph(x, w, b, stride, dilation, groups, pad, debug=3)
    assert any(re.search(r"\bconv2d\b", k) for k in m.kernels), m.kernels
    assert "gacc" in capfd.readouterr().err
    assert_close_np(out, ref)


@pytest.mark.parametrize("isa", ["llvm -mcpu=haswell", "llvm -mcpu=x86-64-v2"])
def test_grouped_row_tiles_on_a_lower_isa(isa):
    x, w, b = rand(1, 24, 6, 45), rand(36, 8, 3, 3), rand(36)
    out, m, ref = conv_graph(x, w, b, (1, 2), (1, 1), 3, (1, 1, 1, 1), target=isa)
    assert_close_np(out, ref)


def test_grouped_tile_shape_reads_the_target_registers():
    """Rows x vectors of the grouped tile come from the target's vector registers: AVX-512's 28 accumulators hold
    7 rows of 4 vectors; AVX2's 16 registers of 8 lanes leave 12 accumulators."""
    avx512 = Target.parse("llvm -mcpu=skylake-avx512").caps
    avx2 = Target.parse("llvm -mcpu=haswell").caps
    assert tile_shape(4, 56, avx512) == (4, 4)
    assert tile_shape(24, 56, avx512)[0] * tile_shape(24, 56, avx512)[1] <= 28
    mr, nv = tile_shape(24, 56, avx2)
    assert mr * nv <= 12 and nv == 4        # 56 columns: 4 vectors of AVX2's 8 lanes (7 would leave no rows)


def test_column_parts_cut_rows_whose_input_leaves_the_cache():
    caps = Caps(cache_bytes=1 << 20)
    assert column_parts(512 * 3199 * 4, 16, 114, caps) == 13       # wav2vec2's k3 s2 conv: 6.5 MB of input
    assert column_parts(64 * 3 * 56 * 4, 4, 4, caps) == 1           # a CNN row stays cached
    assert column_parts(512 * 3199 * 4, 1, 114, caps) == 1          # one group reads it once anyway
    assert column_parts(512 * 3199 * 4, 16, 4, caps) == 2           # at most one strip per two tiles


def test_long_strided_1d_conv_runs_in_column_strips(capfd):
    """A 1-D conv (kernel 3, stride 2) over a row whose input exceeds half the cache runs in column strips (the
    `rc` strip loop in the loop IR), channel groups innermost, with a GELU epilogue, against numpy."""
    x, w, b = rand(1, 96, 1, 1501), rand(128, 96, 1, 3), rand(128)
    out, m, ref = conv_graph(x, w, b, (1, 2), (1, 1), 1, (0, 0, 0, 0), debug=3)
    assert any("conv2d_packed" in k for k in m.kernels), m.kernels
    assert re.search(r"\brc\d*\b", capfd.readouterr().err)
    assert_close_np(out, ref)


def test_wav2vec2_style_model_through_torch_compile_matches_eager():
    """The zoo's wav2vec2 (reduced) with a positional conv of 24 channels a group, through torch.compile."""
    from fxc.testing.zoo import Wav2Vec2
    torch.manual_seed(0)
    model = Wav2Vec2(c=64, d=96, layers=1, heads=4, pos_kernel=16, pos_groups=4).eval()
    audio = torch.randn(1, 1600)
    with torch.no_grad():
        ref = model(audio)
        out = torch.compile(model, backend="fxc")(audio)
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-4 * float(ref.abs().max()))


@pytest.mark.parametrize("case", [(1, 1, 1, 803, 40, 1, 5, (1, 5)), (2, 2, 1, 40, 20, 1, 3, (1, 2))], ids=str)
def test_conv_with_a_reduction_shorter_than_a_vector_runs_along_rows(case, capfd):
    """A conv over one or two input channels with a small kernel (an audio stem: kernel 5 stride 5), a reduction
    shorter than a vector of 8 or 16 lanes, keeps conv2d (pack_weights.short_reduction) and runs on the row tiles,
    strided vector loads, against numpy."""
    n, c, h, w_, o, kh, kw, stride = case
    x, w, b = rand(n, c, h, w_), rand(o, c, kh, kw), rand(o)
    out, m, ref = conv_graph(x, w, b, stride, (1, 1), 1, (0, 0, 0, 0), debug=3)
    assert not any("conv2d_packed" in k for k in m.kernels), m.kernels
    assert "gacc" in capfd.readouterr().err
    assert_close_np(out, ref)


def test_conv_layers_benchmark_times_fxc_and_eager(tmp_path, capsys, monkeypatch):
    """`python -m benchmarks.conv_layers WORD` times the matching layers (fxc and eager, thread CPU time) and writes
    their rows as JSON."""
    import json

    from benchmarks.conv_layers import main
    out = tmp_path / "layers.json"
    monkeypatch.setenv("FXC_NUM_THREADS", "1")          # main sets both to one thread: restored after the test
    threads = torch.get_num_threads()
    try:
        assert main(["k2 s2", "--runs", "2", "--json", str(out)]) == 0
    finally:
        torch.set_num_threads(threads)
    rows = json.loads(out.read_text())
    assert [r["layer"] for r in rows] == ["k2 s2 512->512 @99"]
    assert rows[0]["max_err_rel"] < 1e-5 and rows[0]["fxc"]["min_ms"] > 0 and rows[0]["eager"]["min_ms"] > 0
    assert "k2 s2 512->512 @99" in capsys.readouterr().out
    assert main(["no such layer"]) == 2


@pytest.mark.parametrize("isa", ["llvm", "llvm -mcpu=x86-64-v2"])
def test_rows_narrower_than_a_vector_store_one_narrow_vector(isa, capfd):
    """A `vectorize` loop of fewer than the target's lanes contiguous float32 stores (a 3x3 stride-2 max pool writing
    rows of 13, SqueezeNet's) becomes one 13-lane vector on a 16-lane target (LLVM's vectorizer left it scalar: 634 ->
    88 us at 1 thread); on a narrower target the row takes whole vectors of its lanes."""
    x = rand(2, 8, 27, 27)
    g = Graph()
    xv = g.input(x.shape, "float32", "x")
    g.outputs = [g.call1("max_pool2d", [xv], kernel=(3, 3), stride=(2, 2), padding=(0, 0), dilation=(1, 1),
                         ceil_mode=True)]
    out = build(g, debug=4, target=isa)(x)
    lanes = Target.parse(isa).caps.lanes
    assert f"<{13 if lanes > 13 else lanes} x float>" in capfd.readouterr().err      # the generated LLVM IR
    ref = torch.nn.functional.max_pool2d(torch.from_numpy(x), 3, 2, ceil_mode=True).numpy()
    np.testing.assert_array_equal(out, ref)
