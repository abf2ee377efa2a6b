"""The integer depthwise conv (ops/int8_depthwise.py) against qconv2d's numpy integer reference (ops/quant.py, int64
sums of the bytes), bit for bit: saturation edges (bytes 0 / 255 and -128 / 127 against weights -128 / 127, zero points
at the range's ends, scales 2^-20 and 2^4), stride 2, dilation, uneven padding, relu, int32 and float32 biases, a
reduced range, uint8 / int8 / int32 / float32 outputs, ONNX Runtime's requantisation, two outputs per channel, and the
longest kernel whose float32 sum is exact; on the x86 targets this host runs (each schedule path: vector columns with
scalar borders, a channel's local plane with row blocks, narrow maps, serial kernel loops) and on aarch64 under
qemu."""
import re

import numpy as np
import pytest

from fxc.driver.build import build
from fxc.ops.int8_depthwise import exact_taps
from fxc.ops.registry import all_ops
from fxc.relay_like.builder import Builder
from fxc.runtime.artifact.read import read_artifact
from fxc.target import Target
from tests.backends.llvm.arm import export_for, require_cross, run_emulated
from tests.targets import require_runtime

f32, i32 = np.float32, np.int32
RANGE = {"uint8": (0, 255), "int8": (-128, 127)}


def _case(rng, shape, dtype, x_zp, k, mult=1, out_dtype="uint8", bias="int32", extremes=False, x_scale=0.02,
          y_scale=None, y_zp=None, **attrs):
    """(inputs, attrs) of depthwise_conv2d_i8; extremes: bytes and weights only at their range's ends."""
    lo, hi = RANGE[dtype]
    o = shape[1] * mult
    if extremes:
        x = rng.choice(np.array([lo, hi]), shape).astype(dtype)
        w = rng.choice(np.array([-128, 127], np.int8), (o, 1) + k)
    else:
        x = rng.integers(lo, hi + 1, shape).astype(dtype)
        x.flat[::7], x.flat[3::7] = lo, hi
        w = rng.integers(-128, 128, (o, 1) + k).astype(np.int8)
        w.flat[::5] = -128
    b = rng.integers(-3000, 3000, o).astype(i32) if bias == "int32" else rng.uniform(-1, 1, o).astype(f32)
    quantised = out_dtype in ("uint8", "int8")
    ys = f32(rng.uniform(0.05, 0.2) if y_scale is None else y_scale) if quantised else f32(1)
    yzp = i32((rng.integers(-5, 5) + (128 if out_dtype == "uint8" else 0)) if y_zp is None else y_zp) if quantised \
        else i32(0)
    ws = rng.uniform(2 ** -9, 2 ** -6, o).astype(f32)
    return [x, w, b, f32(x_scale), ws, ys, yzp], dict(x_zp=x_zp, out_dtype=out_dtype, **attrs)


def _cases():
    rng = np.random.default_rng(11)
    p1 = dict(padding=(1, 1))
    return [
        # vector columns with scalar border columns (28+ wide), relu, int32 bias
        _case(rng, (1, 6, 9, 37), "uint8", 255, (3, 3), relu=True, **p1),
        # a channel's local plane and its row blocks (14 x 14, stride 1), reduced range, PyTorch's inverse scale
        _case(rng, (2, 4, 14, 14), "uint8", 0, (3, 3), bias="float32", qmin=0, qmax=127, inverse=True, **p1),
        # stride 2 with uneven padding, two outputs per channel, int8 in and out, zero point at the low end
        _case(rng, (1, 4, 11, 20), "int8", -128, (3, 3), 2, "int8", padding=(0, 1, 2, 1), stride=(2, 2)),
        # 5 x 5 with dilation along H, float32 output, zero point at the high end
        _case(rng, (1, 3, 12, 19), "int8", 127, (5, 5), out_dtype="float32", bias="float32", padding=(2, 2),
              dilation=(2, 1)),
        # 7 x 7 maps (narrower than a vector), ONNX Runtime's requantisation with relu
        _case(rng, (1, 5, 7, 7), "uint8", 128, (3, 3), out_dtype="int8", requant="onnxruntime", relu=True, **p1),
        # a kernel row longer than the unrolled ones (serial loops), the int32 accumulator itself
        _case(rng, (1, 2, 6, 21), "uint8", 3, (1, 9), out_dtype="int32", padding=(0, 4)),
        # strides and dilations that differ along H and W, stride 3 (the plane's columns by phase)
        _case(rng, (1, 3, 12, 30), "int8", 5, (3, 3), stride=(1, 2), dilation=(1, 2), padding=(2, 2, 1, 3)),
        _case(rng, (1, 2, 13, 17), "uint8", 200, (3, 3), stride=(2, 1), padding=(1, 1), relu=True),
        _case(rng, (1, 2, 14, 26), "uint8", 9, (5, 5), stride=(3, 3), padding=(2, 2), bias="float32"),
        # saturation: extreme bytes and weights, scales 2^-20 and 2^4
        _case(rng, (1, 8, 16, 33), "uint8", 0, (3, 3), extremes=True, x_scale=2.0 ** 4, y_scale=2.0 ** -20, y_zp=0,
              stride=(2, 2), **p1),
        _case(rng, (1, 8, 16, 33), "uint8", 255, (3, 3), extremes=True, x_scale=2.0 ** -20, y_scale=2.0 ** 4,
              y_zp=255, **p1),
        _case(rng, (1, 8, 10, 18), "int8", 127, (3, 3), out_dtype="int8", extremes=True, y_zp=-128, **p1),
        # planes past PLANE_FLOATS widened in strips of rows (a tail strip, a tail row block), stride 1 and 2
        _case(rng, (1, 2, 75, 64), "uint8", 7, (3, 3), relu=True, **p1),
        _case(rng, (1, 3, 97, 81), "int8", -3, (3, 3), stride=(2, 2), padding=(1, 1, 0, 1)),
        # flattened small maps: a stride-2 7 x 7 output (phase blocks), two outputs a channel, a 5 x 5 kernel
        _case(rng, (1, 3, 14, 14), "uint8", 100, (3, 3), 2, "int8", stride=(2, 2), padding=(0, 0, 1, 1)),
        _case(rng, (2, 4, 6, 5), "uint8", 17, (5, 5), bias="float32", padding=(2, 2), relu=True),
        # the longest kernel whose float32 sum is exact: 514 taps of |(x - x_zp) * w| up to 255 * 128
        _case(rng, (1, 2, 1, 520), "uint8", 0, (1, 514), out_dtype="int32", extremes=True),
    ]


def _graph(cases):
    g = Builder().graph
    for ins, attrs in cases:
        g.outputs.append(g.call1("depthwise_conv2d_i8", [g.input(a.shape, str(a.dtype)) for a in ins], **attrs))
    return g


def _check(got, cases):
    ref = all_ops()["depthwise_conv2d_i8"].reference
    for out, (ins, attrs) in zip(got, cases):
        want = ref(*ins, **attrs)
        assert out.dtype == want.dtype      # float32 outputs too, bit for bit: the epilogue rounds as written
        np.testing.assert_array_equal(out, want)


def test_exact_taps():
    assert exact_taps("uint8", 0, 514) and not exact_taps("uint8", 0, 515)
    assert exact_taps("int8", -128, 514) and not exact_taps("int8", 127, 515)
    assert exact_taps("uint8", 128, 1024) and not exact_taps("uint8", 128, 1025)


@pytest.mark.parametrize("target", ["llvm", "llvm -mcpu=haswell", "llvm -mcpu=x86-64"])
def test_depthwise_i8_exact(target):
    """Every case equals qconv2d's integer reference bit for bit; the kernel reads the input as bytes (vector loads
    of i8 rows), one kernel a conv."""
    require_runtime(target)
    t = Target.parse(target)
    cases = _cases()
    module = build(_graph(cases), target=t)
    assert re.search(r"load <\d+ x i8>", module.source)
    assert len(module.kernels) == len(cases)
    _check(module(*[a for ins, _ in cases for a in ins]), cases)


def test_depthwise_i8_on_aarch64(tmp_path):
    """The same cases on aarch64 (4 float32 lanes), exported and run under qemu."""
    arm = "llvm -mtriple=aarch64-linux-gnu -mcpu=cortex-a76"
    require_cross(arm)
    cases = _cases()
    module = build(_graph(cases), target=arm)
    artifact, folder, exe = export_for(module, arm, tmp_path)
    manifest, _ = read_artifact(artifact)
    _check(run_emulated(folder, exe, arm, [a for ins, _ in cases for a in ins], manifest["outputs"], tmp_path), cases)


def test_refuses_an_inexact_sum():
    """A kernel past exact_taps, or a zero point outside the input's range, is refused with the fix named."""
    from fxc.errors import ShapeError
    g = Builder().graph
    ins, attrs = _case(np.random.default_rng(0), (1, 1, 1, 520), "uint8", 0, (1, 515), out_dtype="int32")
    with pytest.raises(ShapeError, match="exact in float32"):
        g.call1("depthwise_conv2d_i8", [g.const(a) for a in ins], **attrs)
    ins, attrs = _case(np.random.default_rng(0), (1, 1, 5, 5), "uint8", 0, (3, 3))
    with pytest.raises(ShapeError, match="use qconv2d"):
        g.call1("depthwise_conv2d_i8", [g.const(a) for a in ins], **dict(attrs, x_zp=-1))


@pytest.mark.parametrize("target", ["llvm", "llvm -mcpu=haswell"])
def test_depthwise_i8_writes_only_its_output(target):
    """The schedule stores whole vectors whose last lanes spill onto the outputs a later store of the same channel
    writes (rows of 14 or 28 columns, a 7 x 7 map's flattened vectors): the map's last row stores its own lanes
    only, so nothing past the output changes (a guard of bytes after each output buffer)."""
    require_runtime(target)
    rng = np.random.default_rng(5)
    p1 = dict(padding=(1, 1))
    cases = [_case(rng, (1, 3, 14, 14), "uint8", 3, (3, 3), **p1), _case(rng, (1, 2, 28, 28), "uint8", 0, (3, 3), **p1),
             _case(rng, (1, 4, 7, 7), "uint8", 9, (3, 3), **p1),
             _case(rng, (1, 3, 14, 14), "uint8", 1, (3, 3), stride=(2, 2), **p1)]
    module = build(_graph(cases), target=target)
    ins = module.check_inputs([a for c, _ in cases for a in c])
    guard = 64
    outs = [np.full(o.size + guard, 0xA5, np.uint8) for o in (np.empty(s.shape, np.uint8) for s in module.outputs)]
    module.run_pointers([a.ctypes.data for a in ins], [o.ctypes.data for o in outs])
    ref = all_ops()["depthwise_conv2d_i8"].reference
    for out, (c, attrs) in zip(outs, cases):
        want = ref(*c, **attrs)
        np.testing.assert_array_equal(out[:want.size].reshape(want.shape), want)
        assert (out[want.size:] == 0xA5).all(), "a store past the output"
