"""The integer depthwise conv on CPUs (relay_like/passes/use_int8.py): qconv2d of a depthwise conv, bit for bit.

    depthwise_conv2d_i8(x, w, bias, x_scale, w_scale, y_scale, y_zp; x_zp, stride, padding, dilation, out_dtype, relu,
                        qmin, qmax, requant, inverse)
        x uint8 / int8 [N, C, H, W], w int8 [C * M, 1, KH, KW] (M outputs a channel) -> out_dtype [N, C * M, OH, OW]

computes qconv2d(x, w, bias, x_scale, x_zp, w_scale, 0, y_scale, y_zp; groups C) (ops/quant.py): the sum
acc = sum((x - x_zp) * w) over the taps, the padding holding x_zp (a tap of 0), then quant.py's own epilogue of the
int32 acc. The sum is taken on float32 values that are integers: each product |x - x_zp| * |w| <= 255 * 128 and every
partial sum stays below 2^24 while taps * max|x - x_zp| * 128 <= 2^24 (`exact_taps`: 514 taps at the byte range's
widest, a 3 x 3 kernel uses 9), so every float32 product and addition is exact in any order and acc, read back as
int32, is the integer sum itself. That lets the CPU run float vector schedules on the 8-bit tensors themselves
(lowering/schedules/cpu/depthwise_i8.py, lanes = output columns; depthwise.py's NCHW schedule where that one does not
apply): each channel's padded window is widened once into a local float32 plane, float32(int32(x) - x_zp) (a
strided conv's by phase, so its taps are contiguous too), the int8 weight once a channel; the epilogue
(requantisation to uint8 / int8, or int32 / float32) is fused into the same kernel. The input zero point is a
compile-time attribute (the pad value); the scales, bias and output zero point are tensors, per call or constant, as
qconv2d's.
"""
from __future__ import annotations

import numpy as np

from ..errors import ShapeError
from ..lowering import te
from ..symbolic.expr import Const, as_expr, binary, cast, compare, maximum, minimum, select
from ..types import TensorType
from .quant import RANGE, _check_epilogue, _conv_out, _epilogue, _pads, _qconv2d_ref
from .registry import Kind, OpDef, register

EXACT = 2 ** 24             # float32 holds every integer up to this: the bound of the sum's partial sums
EPILOGUE = dict(out_dtype="uint8", relu=False, qmin=None, qmax=None, requant="float", inverse=False)  # qconv2d's
# epilogue attributes (ops/quant.py) with their defaults: what use_int8.py carries over from a qconv2d


def exact_taps(dtype: str, x_zp: int, taps: int) -> bool:
    """The float32 sum over `taps` products (x - x_zp) * w of a uint8 / int8 x and an int8 w is exact."""
    lo, hi = RANGE[dtype]
    return taps * max(hi - x_zp, x_zp - lo) * 128 <= EXACT


def _epi(attrs: dict) -> dict:
    return {k: attrs.get(k, v) for k, v in EPILOGUE.items()}


def _infer(types, x_zp=0, stride=(1, 1), padding=(0, 0), dilation=(1, 1), **epi):
    if len(types) != 7:
        raise ShapeError(f"depthwise_conv2d_i8 takes x, w, bias, x_scale, w_scale, y_scale, y_zp; got {len(types)} "
                         "inputs")
    x, w, bias, x_scale, w_scale, y_scale, y_zp = types
    if x.ndim != 4 or x.dtype not in ("uint8", "int8") or w.ndim != 4 or w.dtype != "int8" or w.shape[1] != 1 \
            or w.shape[0] % x.shape[1]:
        raise ShapeError(f"depthwise_conv2d_i8 takes a uint8 / int8 x [N, C, H, W] and an int8 w [C * M, 1, KH, KW]; "
                         f"got {x.dtype} {list(x.shape)} and {w.dtype} {list(w.shape)}")
    lo, hi = RANGE[x.dtype]
    if not lo <= x_zp <= hi or not exact_taps(x.dtype, x_zp, w.shape[2] * w.shape[3]):
        raise ShapeError(f"depthwise_conv2d_i8: x_zp {x_zp} with a {w.shape[2]} x {w.shape[3]} kernel: the zero point "
                         f"must be in {x.dtype}'s range and the sum exact in float32 (ops/int8_depthwise.py); use "
                         "qconv2d")
    e = _epi(epi)
    zp = TensorType((), "int32")
    _check_epilogue("depthwise_conv2d_i8", e["out_dtype"], e["requant"], e["relu"], bias, (x_scale, w_scale),
                    (zp, zp), y_scale, y_zp, w.shape[0], e["qmin"], e["qmax"])
    pt, pl, pb, pr = _pads(padding)
    oh = _conv_out(x.shape[2], w.shape[2], stride[0], dilation[0], pt, pb)
    ow = _conv_out(x.shape[3], w.shape[3], stride[1], dilation[1], pl, pr)
    return [TensorType((x.shape[0], w.shape[0], oh, ow), e["out_dtype"])]


def _compute(x, w, bias, x_scale, w_scale, y_scale, y_zp, x_zp=0, stride=(1, 1), padding=(0, 0), dilation=(1, 1),
             **epi):
    shape = _infer([x, w, bias, x_scale, w_scale, y_scale, y_zp], x_zp, stride, padding, dilation, **epi)[0].shape
    pt, pl, pb, pr = _pads(padding)
    n_, c_, h_, w_ = x.shape
    mult = w.shape[0] // c_

    def widened(n, c, h, wi):     # float32(x - x_zp) over the input padded with x_zp (a value of 0)
        inside = None
        for j, size, p in ((h, h_, pt), (wi, w_, pl)):
            ok = binary("and", compare("ge", j - p, as_expr(0)), compare("lt", j - p, as_expr(size)))
            inside = ok if inside is None else binary("and", inside, ok)
        hh = minimum(maximum(h - pt, as_expr(0)), as_expr(h_ - 1))
        ww = minimum(maximum(wi - pl, as_expr(0)), as_expr(w_ - 1))
        v = cast("float32", cast("int32", x[n, c, hh, ww]) - Const(x_zp, "int32"))
        return select(inside, v, Const(0.0, "float32"))
    # the CPU schedule reads x itself through this pad (schedules/cpu/depthwise.py _unpadded) and widens its bytes
    xf = te.compute((n_, c_, h_ + pt + pb, w_ + pl + pr), widened, "depthwise_i8_taps",
                    {"pad_of": x, "pad_widths": ((0, 0), (0, 0), (pt, pb), (pl, pr)), "pad_value": 0.0})
    rh, rw = te.reduce_axis(w.shape[2], "rh"), te.reduce_axis(w.shape[3], "rw")

    def body(n, o, h, wi):
        c = binary("idiv", o, as_expr(mult)) if mult > 1 else o
        tap = xf[n, c, h * stride[0] + rh[0] * dilation[0], wi * stride[1] + rw[0] * dilation[1]]
        return te.sum_(tap * cast("float32", cast("int32", w[o, 0, rh[0], rw[0]])), [rh, rw])
    acc = te.compute(shape, body, "depthwise_conv2d_i8_acc",
                     {"schedule": "depthwise_conv2d_i8", "x": xf, "w": w, "stride": tuple(stride),
                      "dilation": tuple(dilation), "x_zp": x_zp})
    e = _epi(epi)
    # the exact float32 sum is float32(acc) itself: read as int32 only where an int32 bias is added first (or output)
    whole = cast if bias.dtype == "int32" else (lambda dtype, v: v)
    return te.compute(shape, lambda n, o, h, wi: _epilogue(whole("int32", acc[n, o, h, wi]), o, bias, x_scale,
                                                           w_scale, y_scale, y_zp, **e), "depthwise_conv2d_i8")


def _ref(x, w, bias, x_scale, w_scale, y_scale, y_zp, x_zp=0, stride=(1, 1), padding=(0, 0), dilation=(1, 1), **epi):
    return _qconv2d_ref(x, w, bias, x_scale, np.int32(x_zp), w_scale, np.int32(0), y_scale, y_zp, stride=stride,
                        padding=padding, dilation=dilation, groups=x.shape[1], **_epi(epi))


def _sample(rng, shape, dtype, x_zp, k, mult=1, out_dtype="uint8", bias="int32", **attrs):
    lo, hi = RANGE[dtype]
    x = rng.integers(lo, hi + 1, shape).astype(dtype)
    x.flat[::7], x.flat[3::7] = lo, hi                                          # the byte range's ends
    o = shape[1] * mult
    w = rng.integers(-128, 128, (o, 1) + k).astype(np.int8)
    w.flat[::5] = -128
    b = rng.integers(-3000, 3000, o).astype(np.int32) if bias == "int32" else rng.uniform(-1, 1, o).astype(np.float32)
    ys, yzp = np.float32(1), np.int32(0)
    if out_dtype in ("uint8", "int8"):
        ys = np.float32(rng.uniform(0.05, 0.2))
        yzp = np.int32(rng.integers(-5, 5) + (128 if out_dtype == "uint8" else 0))
    return ([x, w, b, np.float32(rng.uniform(0.01, 0.05)), rng.uniform(2 ** -9, 2 ** -6, o).astype(np.float32), ys,
             yzp], dict(x_zp=x_zp, out_dtype=out_dtype, **attrs))


register(OpDef("depthwise_conv2d_i8", Kind.OUT_FUSABLE, _infer, _ref, _compute, {}, None,
               lambda rng: [_sample(rng, (1, 5, 9, 37), "uint8", 255, (3, 3), padding=(1, 1), relu=True),
                            _sample(rng, (2, 3, 14, 14), "uint8", 0, (3, 3), padding=(1, 1), bias="float32",
                                    qmin=0, qmax=127, inverse=True),
                            _sample(rng, (1, 4, 11, 20), "int8", -128, (3, 3), 2, "int8", padding=(0, 1, 2, 1),
                                    stride=(2, 2)),
                            _sample(rng, (1, 3, 12, 19), "int8", 127, (5, 5), out_dtype="float32", bias="float32",
                                    padding=(2, 2), dilation=(2, 1)),
                            _sample(rng, (1, 2, 7, 7), "uint8", 128, (3, 3), out_dtype="int8", padding=(1, 1),
                                    requant="onnxruntime", relu=True),
                            _sample(rng, (1, 2, 6, 9), "uint8", 3, (1, 9), out_dtype="int32", padding=(0, 4))],
               ("uint8", "int8", "int32", "float32"),
               doc="Depthwise qconv2d (ops/int8_depthwise.py): uint8 / int8 x [N, C, H, W], int8 w [C * M, 1, KH, KW], "
                   "then bias, x_scale, w_scale, y_scale, y_zp; x_zp an attribute; the sum exact in float32 and "
                   "qconv2d's requantisation fused."))
