"""Chains of packed int8 convs as a quantised ResNet has them (tests/graph/test_int8.py has the single ops): a
downsampling block (a padded stride-2 conv with relu, a conv whose output meets the residual add of a 1 x 1 stride-2
downsample), an identity block and a conv of 80 output channels after them (lane blocks padded past the last
channel), in PT2E's form (the block's second conv writes float32 for the residual add, which with relu and quantize
is its epilogue) and ONNX QDQ's (it writes uint8, dequantized for the add in a kernel of its own), at batch 2 on
maps of 14 and 7 columns (register tiles of 14 and 7 rows, whose NCHW stores are transposed in registers: gemm.py's
_store_transposed). Each stage is checked on fxc's own inputs to it: the convs bit for bit against qconv2d's integer
reference (ops/quant.py); the residual adds are float32 arithmetic (LLVM may contract a multiply and an add), so
their outputs are within one quantisation step of numpy's, nearly all equal. On the x86 forms this host runs and
under qemu with aarch64's sdot (signed bytes: the activation shift through the whole chain)."""
import numpy as np
import pytest

from fxc.driver.build import build
from fxc.ops.registry import all_ops
from fxc.relay_like.builder import Builder
from fxc.runtime.artifact.read import read_artifact
from tests.backends.llvm.arm import export_for, require_cross, run_emulated
from tests.targets import require_runtime

f32, i32 = np.float32, np.int32


def _ref(op, *args, **attrs):
    return all_ops()[op].reference(*args, **attrs)


def _blocks(rng, size, form):
    """(graph, input x [2, 16, size, size] uint8, checks): a downsampling ResNet block, an identity block and a conv
    of 80 output channels after them, in `form` ("pt2e": the second conv of a block writes float32 for the residual
    add; "qdq": it writes uint8, dequantized for the add). checks: (output index, exact, reference from the outputs
    fxc made), each stage checked on fxc's own inputs to it, so one step taken in a float residual add does not
    spread."""
    g = Builder().graph
    x = rng.integers(0, 256, (2, 16, size, size)).astype(np.uint8)
    x.flat[::7] = 255
    x.flat[3::11] = 0
    outs, checks = [g.input(x.shape, "uint8")], []

    def output(v, exact, ref):
        outs.append(v)
        checks.append((len(outs) - 1, exact, ref))
        return len(outs) - 1

    def conv(src, o, k, zx, attrs, out_dtype, sy=0.05, zy=0):
        """(value, reference from the outputs fxc made) of a qconv2d of output `src` (its index; 0 the input)."""
        c = outs[src].shape[1]
        w = rng.integers(-128, 128, (o, c, k, k)).astype(np.int8)
        w.flat[::13] = -128
        bias = rng.uniform(-1, 1, o).astype(f32) if out_dtype == "float32" else \
            rng.integers(-2000, 2000, o).astype(i32)
        ins = [w, bias, f32(0.02), i32(zx), rng.uniform(2 ** -9, 2 ** -6, o).astype(f32), np.zeros(o, i32),
               f32(sy), i32(zy)]
        attrs = dict(out_dtype=out_dtype, **attrs)
        return (g.call1("qconv2d", [outs[src]] + [g.const(t) for t in ins], **attrs),
                lambda got: _ref("qconv2d", got[src], *ins, **attrs))

    def qconv(*args, **kw):
        """A qconv2d as an output checked bit for bit: its index."""
        v, ref = conv(*args, **kw)
        return output(v, True, ref)

    def residual(conv_src, skip, sk):
        """quantize(relu(y + dequantize(skip))): y the float32 output of a conv of conv_src (pt2e) or its uint8
        output dequantized (qdq); y is read by the add alone (no graph output), so the add can be its epilogue."""
        sy, zy, sz, zz = f32(0.05), i32(120), f32(0.06), i32(4)
        if form == "pt2e":
            yv, yr = conv(conv_src, 32, 3, 2, dict(padding=(1, 1)), "float32")
        else:
            q, qr = conv(conv_src, 32, 3, 2, dict(padding=(1, 1)), "uint8", sy=sy, zy=zy)
            yv, yr = g.call1("dequantize", [q, g.const(sy), g.const(zy)]), \
                lambda got: _ref("dequantize", qr(got), sy, zy)
        d = g.call1("dequantize", [outs[skip], g.const(sk[0]), g.const(sk[1])])
        z = g.call1("quantize", [g.call1("relu", [g.call1("add", [yv, d])]), g.const(sz), g.const(zz)], dtype="uint8")
        return output(z, False, lambda got: _ref("quantize", np.maximum(
            yr(got) + _ref("dequantize", got[skip], *sk), f32(0)), sz, zz, dtype="uint8")), (sz, zz)

    y1 = qconv(0, 32, 3, 9, dict(stride=(2, 2), padding=(1, 1), relu=True), "uint8", zy=2)
    ds = qconv(0, 32, 1, 9, dict(stride=(2, 2)), "uint8", sy=0.04, zy=130)
    z, zq = residual(y1, ds, (f32(0.04), i32(130)))
    y3 = qconv(z, 32, 3, int(zq[1]), dict(padding=(1, 1), relu=True), "uint8", zy=3)
    z2, zq2 = residual(y3, z, zq)
    qconv(z2, 80, 3, int(zq2[1]), dict(padding=(1, 1)), "uint8", sy=0.08, zy=128)
    g.outputs = outs[1:]
    return g, x, checks


def _check(got, x, checks):
    """The convs bit for bit against qconv2d's reference on fxc's own inputs (float32 outputs to float rounding);
    the residual adds (float32 arithmetic, whose multiply and add LLVM may contract) within one quantisation step
    of numpy's, nearly all equal."""
    got = [x] + list(got)
    for k, exact, ref in checks:
        want = ref(got)
        if want.dtype == np.float32:
            np.testing.assert_allclose(got[k], want, rtol=1e-5, atol=1e-5)
            continue
        assert len(np.unique(want)) > 20
        if exact:
            np.testing.assert_array_equal(got[k], want)
        else:
            diff = np.abs(got[k].astype(np.int32) - want.astype(np.int32))
            assert diff.max() <= 1 and (diff == 0).mean() > 0.99


@pytest.mark.parametrize("target, size, form", [("llvm", 28, "pt2e"), ("llvm", 14, "qdq"),
                                                ("llvm -mcpu=haswell", 28, "qdq"), ("llvm -mcpu=haswell", 14, "pt2e")])
def test_block_exact(target, size, form):
    require_runtime(target)
    g, x, checks = _blocks(np.random.default_rng(size), size, form)
    module = build(g, target=target)
    ks = "\n".join(module.kernels)
    assert ks.count("conv2d_packed_i8") >= 7 and "qconv2d" not in ks
    if form == "pt2e":      # the residual add, relu and quantize in the block's second conv's epilogue
        assert any("conv2d_packed_i8" in k and "add" in k and "quantize" in k for k in module.kernels)
    _check(module(x), x, checks)


def test_block_on_aarch64_sdot(tmp_path):
    arm = "llvm -mtriple=aarch64-linux-gnu -mcpu=cortex-a76"
    require_cross(arm)
    g, x, checks = _blocks(np.random.default_rng(5), 14, "qdq")
    module = build(g, target=arm)
    assert "sdot" in module.source
    artifact, folder, exe = export_for(module, arm, tmp_path)
    manifest, _ = read_artifact(artifact)
    _check(run_emulated(folder, exe, arm, [x], manifest["outputs"], tmp_path), x, checks)
