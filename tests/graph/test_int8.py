"""use_int8: qconv2d / qmatmul over constant int8 weights become the packed int8 kernels on CPU targets (before/after
structure), with outputs equal bit for bit to the generic ops' numpy references (ops/quant.py) on every x86 form
this host runs and under qemu on aarch64 (sdot); what the pass cannot take keeps the generic compute."""
import numpy as np
import pytest

from fxc.driver.build import build
from fxc.ops.registry import all_ops
from fxc.relay_like.builder import Builder
from fxc.runtime.artifact.read import read_artifact
from tests.backends.llvm.arm import export_for, require_cross, run_emulated
from tests.targets import require_runtime

f32, i32 = np.float32, np.int32


def _net(rng):
    """A small quantised conv net and a linear layer: (graph, inputs, references of its outputs)."""
    b = Builder()
    g = b.graph
    x = rng.integers(0, 256, (1, 16, 12, 11)).astype(np.uint8)
    a = rng.integers(0, 256, (2, 5, 40)).astype(np.uint8)
    xi, ai = g.input(x.shape, "uint8"), g.input(a.shape, "uint8")

    def qconv(v, arr, o, k, attrs, out_dtype, bias, zx, sy=0.05, zy=0):
        c = arr.shape[1]
        w = rng.integers(-128, 128, (o, c, k, k)).astype(np.int8)
        ins = [w, bias, f32(0.02), i32(zx), rng.uniform(2 ** -9, 2 ** -6, o).astype(f32), np.zeros(o, i32),
               f32(sy), i32(zy)]
        attrs = dict(out_dtype=out_dtype, **attrs)
        y = g.call1("qconv2d", [v] + [g.const(t) for t in ins], **attrs)
        return y, all_ops()["qconv2d"].reference(arr, *ins, **attrs)

    y1, r1 = qconv(xi, x, 32, 3, dict(padding=(1, 1), relu=True), "uint8", rng.uniform(-1, 1, 32).astype(f32), 7,
                   zy=3)
    y2, r2 = qconv(y1, r1, 20, 1, dict(stride=(2, 2), requant="onnxruntime"), "int8",
                   rng.integers(-500, 500, 20).astype(i32), 3, sy=0.03, zy=-5)
    y3, r3 = qconv(y2, r2, 24, 3, dict(padding=(0, 1, 2, 1), inverse=True), "uint8", np.zeros(24, i32), -128,
                   sy=2.0 ** -4, zy=255)
    y4, r4 = qconv(y1, r1, 8, 3, dict(padding=(1, 1)), "float32", rng.uniform(-1, 1, 8).astype(f32), 3)
    w = rng.integers(-128, 128, (24, 40)).astype(np.int8)
    lin = [w, np.zeros(24, i32), f32(0.1), i32(9), rng.uniform(2 ** -9, 2 ** -6, 24).astype(f32), np.zeros(24, i32),
           f32(0.2), i32(128)]
    y5 = g.call1("qmatmul", [ai] + [g.const(t) for t in lin], trans_b=True, relu=True)
    r5 = all_ops()["qmatmul"].reference(a, *lin, trans_b=True, relu=True)
    g.outputs = [y3, y4, y5]
    return g, [x, a], [r3, r4, r5]


def _kernels(module):
    return "\n".join(module.kernels)


def _equal(got, want):
    """Bit for bit, float32 outputs too (acc * scale + bias rounds twice, as the reference: quant.py's Exact ops)."""
    np.testing.assert_array_equal(got, want)


ARM = "llvm -mtriple=aarch64-linux-gnu -mcpu=cortex-a76"


def _exact(net, target, kernels):
    """net = (graph, inputs, references) built for a host-runnable target: the kernels named, no general integer
    loop (qconv2d / qmatmul), every output bit for bit (_equal)."""
    require_runtime(target)
    g, inputs, refs = net
    module = build(g, target=target)
    ks = _kernels(module)
    assert all(k in ks for k in kernels) and "qconv2d" not in ks and "qmatmul" not in ks, ks
    for got, want in zip(module(*inputs), refs):
        _equal(got, want)


def _exact_on_aarch64(net, kernel, tmp_path):
    """The same on aarch64 with sdot, run under qemu."""
    require_cross(ARM)
    g, inputs, refs = net
    module = build(g, target=ARM)
    assert "sdot" in module.source and kernel in _kernels(module)
    artifact, folder, exe = export_for(module, ARM, tmp_path)
    manifest, _ = read_artifact(artifact)
    for got, want in zip(run_emulated(folder, exe, ARM, inputs, manifest["outputs"], tmp_path), refs):
        _equal(got, want)


@pytest.mark.parametrize("target", ["llvm", "llvm -mcpu=haswell", "llvm -mcpu=skylake-avx512", "llvm -mcpu=x86-64"])
def test_quantised_net_exact(target):
    _exact(_net(np.random.default_rng(0)), target, ["conv2d_packed_i8", "matmul_packed_i8"])


def test_quantised_net_on_aarch64_sdot(tmp_path):
    """The u8 activations shifted to s8 for sdot, compensated by the weight sums: still bit for bit."""
    _exact_on_aarch64(_net(np.random.default_rng(1)), "conv2d_packed_i8", tmp_path)


def test_what_stays_generic():
    """A uint8 weight with a zero point, a grouped conv with ONNX Runtime's requantisation and a padded conv whose
    input zero point is a runtime value keep qconv2d (the generic int32 compute), still exact; a device target is not
    rewritten."""
    rng = np.random.default_rng(2)
    b = Builder()
    g = b.graph
    x = rng.integers(0, 256, (1, 8, 6, 6)).astype(np.uint8)
    xi, zxi = g.input(x.shape, "uint8"), g.input((), "int32")
    wu = rng.integers(0, 256, (8, 8, 3, 3)).astype(np.uint8)
    wg = rng.integers(-128, 128, (8, 4, 3, 3)).astype(np.int8)
    common = lambda o: [np.zeros(o, i32), f32(0.02)]
    tail = lambda o, zw: [rng.uniform(0.001, 0.01, o).astype(f32), zw, f32(0.1), i32(3)]
    cases = [([wu] + common(8), [i32(4)], tail(8, np.full(8, 128, i32)), {}),
             ([wg] + common(8), [i32(4)], tail(8, np.zeros(8, i32)), {"groups": 2, "requant": "onnxruntime"}),
             ([wg[:, :4].repeat(2, 1)] + common(8), None, tail(8, np.zeros(8, i32)), {"padding": (1, 1)})]
    refs, outs = [], []
    for head, zx, rest, attrs in cases:
        zv = g.const(zx[0]) if zx is not None else zxi
        outs.append(g.call1("qconv2d", [xi, g.const(head[0]), g.const(head[1]), g.const(head[2]), zv]
                            + [g.const(t) for t in rest], **attrs))
        refs.append(all_ops()["qconv2d"].reference(x, *head, zx[0] if zx is not None else i32(6), *rest, **attrs))
    g.outputs = outs
    module = build(g, target="llvm")
    assert "conv2d_packed_i8" not in _kernels(module)
    for got, want in zip(module(x, i32(6)), refs):
        np.testing.assert_array_equal(got, want)


def test_depthwise_as_float_chain():
    """A depthwise / grouped qconv2d with the float requantisation becomes dequantize -> float conv2d -> quantize on
    CPU: its outputs equal the integer definition's (numpy reference) up to float summation order, so at most one
    quantisation step apart and nearly all equal; float32 outputs to float rounding. One int32 bias is an input."""
    rng = np.random.default_rng(3)
    g = Builder().graph
    x = rng.integers(0, 256, (1, 24, 13, 14)).astype(np.uint8)
    xi = g.input(x.shape, "uint8")
    outs, refs = [], []
    for groups, o, attrs, out_dtype, bias in [
            (24, 24, dict(padding=(1, 1), relu=True), "uint8", rng.integers(-3000, 3000, 24).astype(i32)),
            (24, 48, dict(padding=(0, 1, 2, 1), stride=(2, 2), qmin=0, qmax=100), "uint8",
             rng.uniform(-2, 2, 48).astype(f32)),
            (8, 16, dict(dilation=(2, 1), inverse=True), "int8", np.zeros(16, i32)),
            (24, 24, dict(padding=(1, 1)), "float32", rng.uniform(-1, 1, 24).astype(f32))]:
        w = rng.integers(-128, 128, (o, 24 // groups, 3, 3)).astype(np.int8)
        ins = [w, bias, f32(0.02), i32(7), rng.uniform(2 ** -9, 2 ** -6, o).astype(f32), np.zeros(o, i32), f32(0.05),
               i32(3 if out_dtype == "uint8" else -5)]
        attrs = dict(attrs, groups=groups, out_dtype=out_dtype)
        consts = [g.const(t) for t in ins]
        if not outs:            # a bias that is a graph input (from_torch's parameters)
            consts[1] = g.input(bias.shape, "int32")
            bias_in = bias
        outs.append(g.call1("qconv2d", [xi] + consts, **attrs))
        refs.append(all_ops()["qconv2d"].reference(x, *ins, **attrs))
    g.outputs = outs
    module = build(g, target="llvm")
    assert "qconv2d" not in _kernels(module)
    for got, want in zip(module(x, bias_in), refs):
        if want.dtype == np.float32:
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
            continue
        diff = np.abs(got.astype(np.int32) - want.astype(np.int32))
        assert diff.max() <= 1 and (diff == 0).mean() > 0.99 and len(np.unique(want)) > 20


def _few_channel_net(rng):
    """Convs over fewer than four input channels: (graph, inputs, qconv2d's references)."""
    g = Builder().graph
    cases = [((2, 3, 23, 21), "uint8", 7, dict(stride=(2, 2), padding=(3, 3)), 255, "uint8"),
             ((1, 1, 15, 14), "uint8", 3, dict(dilation=(1, 2), padding=(2, 1, 0, 3), relu=True), 0, "int8"),
             ((1, 2, 9, 10), "int8", 5, dict(stride=(1, 2), padding=(2, 2)), -128, "float32")]
    inputs, refs = [], []
    for shape, dtype, k, attrs, zx, out_dtype in cases:
        lo, hi = (0, 256) if dtype == "uint8" else (-128, 128)
        x = rng.integers(lo, hi, shape).astype(dtype)
        x.flat[::5] = lo
        x.flat[1::5] = hi - 1
        w = rng.integers(-128, 128, (40, shape[1], k, k)).astype(np.int8)
        w.flat[::7] = -128
        ins = [w, rng.uniform(-1, 1, 40).astype(f32), f32(0.02), i32(zx), rng.uniform(2 ** -9, 2 ** -6, 40).astype(f32),
               np.zeros(40, i32), f32(0.05), i32(3)]
        attrs = dict(out_dtype=out_dtype, **attrs)
        g.outputs.append(g.call1("qconv2d", [g.input(shape, dtype)] + [g.const(t) for t in ins], **attrs))
        inputs.append(x)
        refs.append(all_ops()["qconv2d"].reference(x, *ins, **attrs))
    return g, inputs, refs


@pytest.mark.parametrize("target", ["llvm", "llvm -mcpu=haswell", "llvm -mcpu=x86-64"])
def test_few_channel_convs_as_patches(target):
    """Convs over fewer than four input channels (an RGB stem) become 1 x 1 convs over their patches, words of four
    (c, kh, kw) taps: bit for bit against qconv2d's reference, with the padding holding x_zp at the ends of the byte
    range, a batch of 2, stride, dilation along W and asymmetric padding, uint8 and int8 inputs."""
    _exact(_few_channel_net(np.random.default_rng(3)), target, ["im2col", "conv2d_packed_i8"])


def test_few_channel_convs_on_aarch64_sdot(tmp_path):
    """The patch words with sdot's signed bytes (the x_zp padding shifted with the rest): still bit for bit."""
    _exact_on_aarch64(_few_channel_net(np.random.default_rng(4)), "im2col", tmp_path)
