"""use_int8_blocks: the activations between packed int8 convs in channel blocks (NCHWc bytes, c = the target's
lanes). test_int8_chain's ResNet blocks (PT2E's and ONNX QDQ's forms) built with the blocks and without
(blocked_layout=False: NCHW): the convs bit for bit against qconv2d's integer reference on fxc's own inputs, the
residual adds within one step, the blocked and the NCHW build's outputs the same; the convs read and write blocks
(no word packs, whole-vector epilogues), the layout converted only at the graph's outputs. int8 activations (the x86
shift of -128 through the bytes) and a 1 x 1 conv of an odd channel count (NCHW) beside blocked ones."""
import re

import numpy as np
import pytest

from fxc.driver.build import build
from fxc.ops.registry import all_ops
from fxc.relay_like.builder import Builder
from tests.graph.test_int8_chain import _blocks, _check
from tests.targets import require_runtime

f32, i32 = np.float32, np.int32


def _blocked_convs(module) -> int:
    """Kernels of a packed int8 conv with an output in channel blocks (a 5-d shape)."""
    return sum(bool(re.search(r"conv2d_packed_i8.* -> \w+\[\d+, \d+, \d+, \d+, \d+\]", k)) for k in module.kernels)


@pytest.mark.parametrize("target, size, form", [("llvm", 14, "pt2e"), ("llvm", 28, "qdq"),
                                                ("llvm -mcpu=haswell", 14, "qdq"),
                                                ("llvm -mcpu=haswell", 28, "pt2e")])
def test_blocks_exact_and_as_nchw(target, size, form):
    require_runtime(target)
    g, x, checks = _blocks(np.random.default_rng(size), size, form)
    blocked = build(g, target=target)
    g, x, checks = _blocks(np.random.default_rng(size), size, form)
    nchw = build(g, target=target, blocked_layout=False)
    ks = "\n".join(blocked.kernels)
    assert _blocked_convs(blocked) >= 4 and _blocked_convs(nchw) == 0, ks
    assert ks.count(": pack_i8_words") == 1, ks        # the graph input's words only: the others read from the bytes
    got, want = blocked(x), nchw(x)
    _check(got, x, checks)
    for a, b in zip(got, want):
        diff = np.abs(a.astype(np.float64) - b.astype(np.float64))
        assert diff.max() <= (1e-5 if a.dtype == np.float32 else 1) and (diff == 0).mean() > 0.99


def _ref(op, *args, **attrs):
    return all_ops()[op].reference(*args, **attrs)


@pytest.mark.parametrize("target", ["llvm", "llvm -mcpu=haswell"])
def test_int8_activations_through_blocks(target):
    """int8 activations (x86: bytes shifted by -128 as the words are made) through two blocked convs and a 1 x 1
    conv of 20 channels (not whole blocks: NCHW output), each bit for bit."""
    require_runtime(target)
    rng = np.random.default_rng(3)
    g = Builder().graph
    x = rng.integers(-128, 128, (1, 16, 10, 10)).astype(np.int8)
    x.flat[::5] = -128
    x.flat[1::7] = 127
    xv = g.input(x.shape, "int8")
    stages, refs = [x], []

    def qconv(src, o, k, pad, zx, zy, out="int8"):
        c = stages[src].shape[1] if isinstance(stages[src], np.ndarray) else stages[src]
        w = rng.integers(-128, 128, (o, c, k, k)).astype(np.int8)
        ins = [w, rng.integers(-3000, 3000, o).astype(i32), f32(0.03), i32(zx),
               rng.uniform(2 ** -9, 2 ** -6, o).astype(f32), np.zeros(o, i32), f32(0.07), i32(zy)]
        attrs = dict(out_dtype=out, padding=(pad, pad), relu=False)
        return [w.shape[0], ins, attrs]

    specs = [(0, 32, 3, 1, -5, 3), (1, 32, 3, 1, 3, -128), (2, 20, 1, 0, -128, 7)]
    vals = [xv]
    for src, o, k, pad, zx, zy in specs:
        o_, ins, attrs = qconv(src, o, k, pad, zx, zy)
        vals.append(g.call1("qconv2d", [vals[src]] + [g.const(t) for t in ins], **attrs))
        stages.append(o_)
        refs.append((src, ins, attrs))
    g.outputs = vals[1:]
    module = build(g, target=target)
    assert _blocked_convs(module) == 2, module.kernels
    got = [x] + list(module(x))
    for k, (src, ins, attrs) in enumerate(refs, 1):
        want = _ref("qconv2d", got[src], *ins, **attrs)
        assert len(np.unique(want)) > 20
        np.testing.assert_array_equal(got[k], want)
