"""use_int8_blocks: the activations between packed int8 convs in channel blocks (NCHWc bytes, c = the target's
lanes). test_int8_chain's ResNet blocks (PT2E's and ONNX QDQ's forms) built with the blocks and without
(blocked_layout=False: NCHW): the convs bit for bit against qconv2d's integer reference on fxc's own inputs, the
residual adds within one step, the blocked and the NCHW build's outputs the same; the convs read and write blocks
(no word packs, whole-vector epilogues), the layout converted only at the graph's outputs. int8 activations (the x86
shift of -128 through the bytes; unshifted signed bytes on aarch64) through a region's entry (a max pool's output
converted to blocks) and exits (a stride-2 conv of 20 channels, a mean)."""
import re

import numpy as np
import pytest

from fxc.driver.build import build
from fxc.ops.registry import all_ops
from fxc.relay_like.builder import Builder
from fxc.runtime.artifact.read import read_artifact
from tests.backends.llvm.arm import export_for, require_cross, run_emulated
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


def _entry_and_exit(rng):
    """(graph, input, checks) with int8 activations: a padded conv of the input, a max pool of it (made in NCHW, its
    output converted to blocks: the region's entry) read by a conv and a residual add with that conv's output, then
    a padded stride-2 conv of 20 channels (not whole blocks: its output NCHW) and the mean of the add (an NCHW
    reader: the exit). checks: (output index, exact, reference from the outputs fxc made)."""
    g = Builder().graph
    x = rng.integers(-128, 128, (1, 16, 10, 10)).astype(np.int8)
    x.flat[::5] = -128
    x.flat[1::7] = 127
    outs, checks = [g.input(x.shape, "int8")], []

    def output(v, exact, ref):
        outs.append(v)
        checks.append((len(outs) - 1, exact, ref))
        return len(outs) - 1

    def qconv(src, o, k, pad, zx, zy, stride=1):
        c = outs[src].shape[1]
        ins = [rng.integers(-128, 128, (o, c, k, k)).astype(np.int8), rng.integers(-3000, 3000, o).astype(i32),
               f32(0.03), i32(zx), rng.uniform(2 ** -9, 2 ** -6, o).astype(f32), np.zeros(o, i32), f32(0.07), i32(zy)]
        attrs = dict(out_dtype="int8", padding=(pad, pad), stride=(stride, stride))
        return output(g.call1("qconv2d", [outs[src]] + [g.const(t) for t in ins], **attrs),
                      True, lambda got: _ref("qconv2d", got[src], *ins, **attrs))

    a = qconv(0, 32, 3, 1, -5, 3)
    pool = dict(kernel=(3, 3), stride=(1, 1), padding=(1, 1))
    p = output(g.call1("max_pool2d", [outs[a]], **pool), True, lambda got: _ref("max_pool2d", got[a], **pool))
    b = qconv(p, 32, 3, 1, 3, -128)
    sb, sp, sz = (f32(0.07), i32(-128)), (f32(0.07), i32(3)), (f32(0.1), i32(-2))
    add = g.call1("add", [g.call1("dequantize", [outs[b]] + [g.const(t) for t in sb]),
                          g.call1("dequantize", [outs[p]] + [g.const(t) for t in sp])])
    z = output(g.call1("quantize", [add] + [g.const(t) for t in sz], dtype="int8"), False,
               lambda got: _ref("quantize", _ref("dequantize", got[b], *sb) + _ref("dequantize", got[p], *sp), *sz,
                                dtype="int8"))
    qconv(z, 20, 3, 1, -2, 7, stride=2)
    output(g.call1("mean", [g.call1("dequantize", [outs[z]] + [g.const(t) for t in sz])], axes=(2, 3),
                   keepdim=False), False, lambda got: _ref("dequantize", got[z], *sz).mean((2, 3)))
    g.outputs = outs[1:]
    return g, x, checks


@pytest.mark.parametrize("target", ["llvm", "llvm -mcpu=haswell"])
def test_int8_activations_entry_and_exit(target):
    """int8 activations (x86: the bytes shifted by -128 as a conv makes its words of them) through blocked convs,
    a max pool's output converted to blocks, a residual add on blocks and NCHW readers after them."""
    require_runtime(target)
    g, x, checks = _entry_and_exit(np.random.default_rng(3))
    module = build(g, target=target)
    ks = "\n".join(module.kernels)
    assert _blocked_convs(module) == 1 and re.search(r"add\+quantize -> int8\[\d+, \d+, \d+, \d+, \d+\]", ks), ks
    _check(module(x), x, checks)


def test_int8_activations_on_aarch64_sdot(tmp_path):
    """The same under qemu with aarch64's sdot: NEON's 4 lanes a block, one word; int8 activations unshifted (signed
    bytes, each masked into its word)."""
    arm = "llvm -mtriple=aarch64-linux-gnu -mcpu=cortex-a76"
    require_cross(arm)
    g, x, checks = _entry_and_exit(np.random.default_rng(4))
    module = build(g, target=arm)
    assert "sdot" in module.source and _blocked_convs(module) == 1, module.kernels
    artifact, folder, exe = export_for(module, arm, tmp_path)
    manifest, _ = read_artifact(artifact)
    _check(run_emulated(folder, exe, arm, [x], manifest["outputs"], tmp_path), x, checks)
