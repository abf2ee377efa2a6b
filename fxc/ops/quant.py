"""Quantised ops (docs/int8.md): quantize / dequantize between float32 and int8, uint8 or int32, and the integer
convolution and matrix product with int32 accumulation and a fused requantisation epilogue.

    quantize(x, scale, zero_point)   -> clamp(round_half_even(x / scale) + zp, qmin, qmax) as `dtype`
    dequantize(q, scale, zero_point) -> float32(int32(q) - zp) * scale
    qconv2d(x_q, w_q, bias, x_scale, x_zp, w_scale, w_zp, y_scale, y_zp)
    qmatmul(a_q, b_q, bias, a_scale, a_zp, b_scale, b_zp, y_scale, y_zp)

Scales are float32, zero points int32, each 0-d (per tensor) or 1-d along the quantised `axis` (per channel). The
integer ops accumulate acc = sum((x - x_zp) * (w - w_zp)) in int32 (padding taps contribute 0, i.e. x is padded
with x_zp) and end in one of four epilogues, by `out_dtype` and `requant`:

    out_dtype "int32":                    acc (+ an int32 bias): ONNX ConvInteger / MatMulInteger
    out_dtype "float32":                  f = float32(acc + int32 bias) * (x_scale * w_scale[o]) (+ float32 bias),
                                          max(f, 0) with relu
    uint8 / int8, requant="float":        clamp(round_half_even(f / y_scale) + y_zp, qmin, qmax) (f * (1 / y_scale)
                                          with inverse=True, PyTorch's quantize): the dequantize -> conv -> (relu) ->
                                          quantize chain of ONNX QDQ and PyTorch PT2E graphs
    uint8 / int8, requant="onnxruntime":  clamp(round_half_even(float32(acc + bias) * m[o]) + y_zp, qmin, qmax),
                                          m[o] = x_scale * w_scale[o] / y_scale in float32: ONNX Runtime's
                                          QLinearConv / QLinearMatMul (MlasRequantizeOutput), bit for bit

Every float32 operation above rounds as written, as the frameworks define it: the epilogue's and quantize /
dequantize's float ops are `exact` (symbolic/expr.py), never fused into a multiply-add or reassociated by a backend.

Every input is always present (fixed arity): an absent bias is a zero int32 vector, the y_scale / y_zp of a float32
or int32 output are 1.0 / 0 and unread. The computes are generic int32 loop IR that every target lowers; the fast
CPU forms are other ops that a CPU pass rewrites these into.
"""
from __future__ import annotations

import numpy as np

from ..errors import ShapeError
from ..lowering import te
from ..symbolic.expr import as_expr, binary, cast, compare, exact, maximum, minimum, select, unary
from ..types import TensorType
from .common import broadcast_shapes, rand
from .registry import Kind, OpDef, register

QDTYPES = ("uint8", "int8", "int16", "int32")
RANGE = {"uint8": (0, 255), "int8": (-128, 127), "int16": (-32768, 32767), "int32": (-2 ** 31, 2 ** 31 - 1)}
OUT_DTYPES = ("uint8", "int8", "int32", "float32")
REQUANT = ("float", "onnxruntime")
_F32_BELOW_2_31 = 2147483520      # the largest float32 below 2^31: an int32 clamp bound a float32 can hold


def qrange(dtype: str, qmin=None, qmax=None) -> tuple:
    """(qmin, qmax): the given reduced range, else the dtype's whole range."""
    lo, hi = RANGE[dtype]
    return (lo if qmin is None else int(qmin)), (hi if qmax is None else int(qmax))


# -- per-tensor / per-axis parameters ---------------------------------------------------------------------------------
def _check_param(t, what: str, op: str, size, dtype: str):
    """A scale or zero point: 0-d, or 1-d of 1 or `size` values along the quantised axis, of `dtype`."""
    if t.dtype != dtype:
        raise ShapeError(f"{op}: {what} must be {dtype}, got {t.dtype}")
    if t.ndim > 1 or t.ndim == 1 and t.shape[0] not in (1, size):
        raise ShapeError(f"{op}: {what} of shape {list(t.shape)}: give a 0-d tensor (per tensor) or a 1-d one of "
                         f"{size} values (per channel)")


def _param(t, i):
    """The value of a 0-d / 1-d parameter tensor at channel index i."""
    if t.ndim == 0:
        return t[()]
    return t[(as_expr(0) if t.shape[0] == 1 else i,)]


def _param_ref(v, axis, ndim: int):
    """A numpy parameter shaped to broadcast along `axis` of an ndim-d array (axis None: per tensor)."""
    v = np.asarray(v)
    return v.reshape(()) if axis is None or v.size == 1 else v.reshape([-1 if d == axis else 1 for d in range(ndim)])


def _axis(axis: int, x, *params):
    """The quantised axis of x, or None when every parameter is per tensor (then `axis` is not read)."""
    if all(p.ndim == 0 or p.shape[0] == 1 for p in params):
        return None
    if not -x.ndim <= axis < x.ndim:
        raise ShapeError(f"quantisation axis {axis} is out of range for a tensor of rank {x.ndim}")
    return axis % x.ndim


def _round_clamp_cast(v, zp, qmin: int, qmax: int, dtype: str):
    """float32 v -> dtype: clamp(round_half_even(v) + zp, qmin, qmax) computed in float32 as ONNX Runtime does."""
    hi = min(qmax, _F32_BELOW_2_31)
    q = exact("add", unary("round", v), cast("float32", zp))
    q = minimum(_at_least(q, as_expr(float(qmin), "float32")), as_expr(float(hi), "float32"))
    return cast(dtype, q)


def _at_least(v, lo):
    """max(v, lo) of a float32 v on its way to an integer: lo where lo > v, else v (a NaN v stays NaN), one x86
    `maxps`. `maximum` (llvm.maximum) also orders -0 below +0, three instructions on x86; the -0 this keeps where
    lo is +0 converts to the same integer, so the integer results are maximum's."""
    return select(compare("gt", lo, v), lo, v)


def _round_clamp_ref(v, zp, qmin: int, qmax: int, dtype: str):
    q = np.round(v.astype(np.float32)) + np.asarray(zp).astype(np.float32)
    return np.clip(q, np.float32(qmin), np.float32(min(qmax, _F32_BELOW_2_31))).astype(dtype)


def _divide(v, scale, inverse: bool):
    return exact("mul", v, exact("div", as_expr(1.0, "float32"), scale)) if inverse else exact("div", v, scale)


def _divide_ref(v, scale, inverse: bool):
    scale = np.asarray(scale, np.float32)
    return v * (np.float32(1) / scale) if inverse else v / scale


# -- quantize / dequantize -------------------------------------------------------------------------------------------
def _quantize_infer(types, dtype="uint8", axis=1, qmin=None, qmax=None, inverse=False):
    x, scale, zp = types
    if dtype not in QDTYPES:
        raise ShapeError(f"quantize: dtype {dtype!r} is none of {', '.join(QDTYPES)}")
    if x.dtype != "float32":
        raise ShapeError(f"quantize: x must be float32, got {x.dtype}")
    a = _axis(axis, x, scale, zp)
    size = 1 if a is None else x.shape[a]
    _check_param(scale, "scale", "quantize", size, "float32")
    _check_param(zp, "zero_point", "quantize", size, "int32")
    lo, hi = qrange(dtype, qmin, qmax)
    if not RANGE[dtype][0] <= lo <= hi <= RANGE[dtype][1]:
        raise ShapeError(f"quantize: range [{lo}, {hi}] does not fit {dtype}")
    return [TensorType(x.shape, dtype)]


def _quantize(x, scale, zp, dtype="uint8", axis=1, qmin=None, qmax=None, inverse=False):
    a = _axis(axis, x, scale, zp)
    lo, hi = qrange(dtype, qmin, qmax)

    def body(*i):
        c = None if a is None else i[a]
        return _round_clamp_cast(_divide(x[i], _param(scale, c), inverse), _param(zp, c), lo, hi, dtype)
    return te.compute(x.shape, body, "quantize")


def _quantize_ref(x, scale, zp, dtype="uint8", axis=1, qmin=None, qmax=None, inverse=False):
    a = _axis(axis, x, scale, zp)
    lo, hi = qrange(dtype, qmin, qmax)
    v = _divide_ref(x.astype(np.float32), _param_ref(scale, a, x.ndim), inverse)
    return _round_clamp_ref(v, _param_ref(zp, a, x.ndim), lo, hi, dtype)


def _dequantize_infer(types, axis=1):
    q, scale, zp = types
    if q.dtype not in QDTYPES:
        raise ShapeError(f"dequantize: q must be one of {', '.join(QDTYPES)}, got {q.dtype}")
    a = _axis(axis, q, scale, zp)
    size = 1 if a is None else q.shape[a]
    _check_param(scale, "scale", "dequantize", size, "float32")
    _check_param(zp, "zero_point", "dequantize", size, "int32")
    return [TensorType(q.shape, "float32")]


def _dequantize(q, scale, zp, axis=1):
    a = _axis(axis, q, scale, zp)

    def body(*i):
        c = None if a is None else i[a]
        return exact("mul", cast("float32", cast("int32", q[i]) - _param(zp, c)), _param(scale, c))
    return te.compute(q.shape, body, "dequantize")


def _dequantize_ref(q, scale, zp, axis=1):
    a = _axis(axis, q, scale, zp)
    d = q.astype(np.int32) - _param_ref(zp, a, q.ndim).astype(np.int32)
    return d.astype(np.float32) * _param_ref(scale, a, q.ndim).astype(np.float32)


def _f32(v):
    return np.asarray(v, np.float32)


def _i32(v):
    return np.asarray(v, np.int32)


def _quant_samples(rng):
    x = rand(rng, (2, 3, 5), low=-3.0, high=3.0)
    edges = np.array([-1e9, -128.6, -0.5, 0.5, 1.5, 2.5, 127.5, 254.5, 255.5, 1e9], np.float32)
    return [([x, _f32(0.02), _i32(128)], {"dtype": "uint8"}),
            ([x, _f32([0.1, 0.03, 2.0 ** -20]), _i32([0, -128, 127])], {"dtype": "int8", "axis": 1}),
            ([edges, _f32(1.0), _i32(0)], {"dtype": "uint8"}),                 # ties to even, saturation at 0 / 255
            ([edges, _f32(1.0), _i32(-128)], {"dtype": "int8"}),               # zero point at the range's end
            ([edges * 16, _f32(16.0), _i32(255)], {"dtype": "uint8"}),         # scale 2^4, zero point 255
            ([x, _f32(0.011), _i32(0)], {"dtype": "uint8", "qmin": 0, "qmax": 127, "inverse": True}),
            ([x * 1e6, _f32(0.5), _i32(7)], {"dtype": "int32"})]


def _dequant_samples(rng):
    q8 = rng.integers(-128, 128, size=(2, 4, 3)).astype(np.int8)
    qu = np.array([0, 1, 127, 128, 254, 255], np.uint8)
    return [([q8, _f32(0.05), _i32(-3)], {}),
            ([q8, _f32([0.1, 2.0 ** -20, 16.0, 1.0]), _i32([0, 127, -128, 5])], {"axis": 1}),
            ([qu, _f32(2.0 ** 4), _i32(255)], {"axis": 0}),
            ([rng.integers(-2 ** 30, 2 ** 30, size=(5,)).astype(np.int32), _f32(1e-4), _i32(0)], {"axis": 0})]


register(OpDef("quantize", Kind.BROADCAST, _quantize_infer, _quantize_ref, _quantize, {}, None, _quant_samples,
               ("float32", "int32"),
               doc="float32 -> uint8/int8/int32: clamp(round_half_even(x / scale) + zero_point, qmin, qmax) "
                   "(x * (1 / scale) with inverse=True); scale/zero_point per tensor or along `axis`."))
register(OpDef("dequantize", Kind.BROADCAST, _dequantize_infer, _dequantize_ref, _dequantize, {}, None,
               _dequant_samples, ("uint8", "int8", "int16", "int32", "float32"),
               doc="uint8/int8/int32 -> float32: float32(int32(q) - zero_point) * scale, per tensor or along `axis`."))


# -- the requantisation epilogue (shared by qconv2d and qmatmul) ----------------------------------------------------
def _check_epilogue(op, out_dtype, requant, relu, bias, scales, zps, y_scale, y_zp, channels, qmin, qmax):
    x_scale, w_scale = scales
    x_zp, w_zp = zps
    if out_dtype not in OUT_DTYPES:
        raise ShapeError(f"{op}: out_dtype {out_dtype!r} is none of {', '.join(OUT_DTYPES)}")
    if requant not in REQUANT:
        raise ShapeError(f"{op}: requant {requant!r} is none of {', '.join(REQUANT)}")
    if bias.dtype not in ("int32", "float32") or bias.ndim > 1 or bias.ndim == 1 and bias.shape[0] not in (1, channels):
        raise ShapeError(f"{op}: bias must be an int32 or float32 vector of {channels} values, got "
                         f"{bias.dtype} {list(bias.shape)}")
    if bias.dtype == "float32" and (out_dtype == "int32" or requant == "onnxruntime"):
        raise ShapeError(f"{op}: a float32 bias needs a float requantisation (out_dtype {out_dtype!r}, "
                         f"requant {requant!r}): give an int32 bias at scale x_scale * w_scale")
    if relu and out_dtype == "int32":
        raise ShapeError(f"{op}: relu of an int32 accumulator is not defined (out_dtype 'int32')")
    _check_param(x_scale, "the input scale", op, 1, "float32")
    _check_param(x_zp, "the input zero point", op, 1, "int32")
    _check_param(w_scale, "the weight scale", op, channels, "float32")
    _check_param(w_zp, "the weight zero point", op, channels, "int32")
    _check_param(y_scale, "the output scale", op, 1, "float32")
    _check_param(y_zp, "the output zero point", op, 1, "int32")
    if out_dtype in ("uint8", "int8"):
        lo, hi = qrange(out_dtype, qmin, qmax)
        if not RANGE[out_dtype][0] <= lo <= hi <= RANGE[out_dtype][1]:
            raise ShapeError(f"{op}: range [{lo}, {hi}] does not fit {out_dtype}")


def _epilogue(acc, o, bias, x_scale, w_scale, y_scale, y_zp, out_dtype, requant, relu, qmin, qmax, inverse):
    """int32 acc at output channel o -> the output element (module docstring)."""
    if bias.dtype == "int32":
        acc = acc + _param(bias, o)
    if out_dtype == "int32":
        return acc
    sx, sw, sy, zy = _param(x_scale, None), _param(w_scale, o), _param(y_scale, None), _param(y_zp, None)
    lo, hi = qrange(out_dtype, qmin, qmax) if out_dtype != "float32" else (None, None)
    if requant == "onnxruntime" and out_dtype != "float32":
        v = exact("mul", cast("float32", acc), exact("div", exact("mul", sx, sw), sy))
        return _relu_onnxruntime(v, zy, lo, hi, out_dtype) if relu else _round_clamp_cast(v, zy, lo, hi, out_dtype)
    f = exact("mul", cast("float32", acc), exact("mul", sx, sw))
    if bias.dtype == "float32":
        f = exact("add", f, _param(bias, o))
    if relu:
        f = maximum(f, as_expr(0.0, "float32")) if out_dtype == "float32" else _at_least(f, as_expr(0.0, "float32"))
    if out_dtype == "float32":
        return f
    return _round_clamp_cast(_divide(f, sy, inverse), zy, lo, hi, out_dtype)


def _relu_onnxruntime(v, zy, lo, hi, out_dtype):
    """relu after ONNX Runtime's requantisation: the result at least the zero point."""
    q = _round_clamp_cast(v, zy, lo, hi, "int32")
    return cast(out_dtype, maximum(q, zy))


def _epilogue_ref(acc, axis, bias, x_scale, w_scale, y_scale, y_zp, out_dtype, requant, relu, qmin, qmax, inverse):
    nd = acc.ndim
    acc = acc.astype(np.int64)
    if bias.dtype == np.int32:
        acc = acc + _param_ref(bias, axis, nd)
    acc = acc.astype(np.int32)
    if out_dtype == "int32":
        return acc
    sx, sw = _f32(x_scale), _param_ref(_f32(w_scale), axis, nd)
    sy, zy = _f32(y_scale), _i32(y_zp)
    if requant == "onnxruntime" and out_dtype != "float32":
        lo, hi = qrange(out_dtype, qmin, qmax)
        q = _round_clamp_ref(acc.astype(np.float32) * ((sx * sw) / sy), zy, lo, hi, "int32")
        return (np.maximum(q, zy) if relu else q).astype(out_dtype)
    f = acc.astype(np.float32) * (sx * sw)
    if bias.dtype == np.float32:
        f = f + _param_ref(bias, axis, nd)
    if relu:
        f = np.maximum(f, np.float32(0))
    if out_dtype == "float32":
        return f.astype(np.float32)
    lo, hi = qrange(out_dtype, qmin, qmax)
    return _round_clamp_ref(_divide_ref(f, sy, inverse), zy, lo, hi, out_dtype)


def _widen(v, zp):
    """an 8-bit operand minus its zero point, in int32."""
    return cast("int32", v) - zp


# -- qconv2d -----------------------------------------------------------------------------------------------------------
def _pads(padding) -> tuple:
    """(top, left, bottom, right) from a pair (the same on both sides) or a 4-tuple."""
    p = tuple(int(v) for v in padding)
    if len(p) == 2:
        return p + p
    if len(p) != 4 or min(p) < 0:
        raise ShapeError(f"qconv2d: padding {list(p)}: give (h, w) or (top, left, bottom, right), each >= 0")
    return p


def _conv_out(n, k, s, d, p0, p1):
    span = n + p0 + p1 - d * (k - 1) - 1
    if span < 0:
        raise ShapeError(f"qconv2d: kernel {k} (dilation {d}) does not fit an input of {n} with padding {p0}+{p1}")
    return span // s + 1


def _qconv2d_infer(types, stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1, out_dtype="uint8",
                   relu=False, qmin=None, qmax=None, requant="float", inverse=False):
    x, w, bias, x_scale, x_zp, w_scale, w_zp, y_scale, y_zp = types
    if x.ndim != 4 or w.ndim != 4:
        raise ShapeError(f"qconv2d expects 4-d input and weight, got {list(x.shape)} and {list(w.shape)}")
    if x.dtype not in ("uint8", "int8") or w.dtype not in ("uint8", "int8"):
        raise ShapeError(f"qconv2d: input and weight must be uint8 or int8, got {x.dtype} and {w.dtype}")
    if x.shape[1] != w.shape[1] * groups or w.shape[0] % groups:
        raise ShapeError(f"qconv2d: input channels {x.shape[1]} != weight {w.shape[1]} x groups {groups}")
    _check_epilogue("qconv2d", out_dtype, requant, relu, bias, (x_scale, w_scale), (x_zp, w_zp), y_scale, y_zp,
                    w.shape[0], qmin, qmax)
    pt, pl, pb, pr = _pads(padding)
    oh = _conv_out(x.shape[2], w.shape[2], stride[0], dilation[0], pt, pb)
    ow = _conv_out(x.shape[3], w.shape[3], stride[1], dilation[1], pl, pr)
    return [TensorType((x.shape[0], w.shape[0], oh, ow), out_dtype)]


def _qconv2d(x, w, bias, x_scale, x_zp, w_scale, w_zp, y_scale, y_zp, stride=(1, 1), padding=(0, 0),
             dilation=(1, 1), groups=1, out_dtype="uint8", relu=False, qmin=None, qmax=None, requant="float",
             inverse=False):
    shape = _qconv2d_infer([x, w, bias, x_scale, x_zp, w_scale, w_zp, y_scale, y_zp], stride, padding, dilation,
                           groups, out_dtype, relu, qmin, qmax, requant, inverse)[0].shape
    pt, pl, _, _ = _pads(padding)
    o_, cg, kh, kw = w.shape
    og = o_ // groups
    rc, rh, rw = te.reduce_axis(cg, "rc"), te.reduce_axis(kh, "rh"), te.reduce_axis(kw, "rw")
    zx = _param(x_zp, None)

    def tap(n, c, ih, iw):
        if not any(_pads(padding)):
            return _widen(x[n, c, ih, iw], zx)
        inside = None
        for j, size in ((ih, x.shape[2]), (iw, x.shape[3])):
            ok = binary("and", compare("ge", j, as_expr(0)), compare("lt", j, as_expr(size)))
            inside = ok if inside is None else binary("and", inside, ok)
        clamp = [minimum(maximum(j, as_expr(0)), as_expr(size - 1)) for j, size in ((ih, x.shape[2]), (iw, x.shape[3]))]
        return select(inside, _widen(x[n, c, clamp[0], clamp[1]], zx), as_expr(0, "int32"))

    def body(n, o, h, wi):
        c = rc[0] if groups == 1 else binary("idiv", o, as_expr(og)) * cg + rc[0]
        xv = tap(n, c, h * stride[0] + rh[0] * dilation[0] - pt, wi * stride[1] + rw[0] * dilation[1] - pl)
        return te.sum_(xv * _widen(w[o, rc[0], rh[0], rw[0]], _param(w_zp, o)), [rc, rh, rw])
    acc = te.compute(shape, body, "qconv2d_acc")
    return te.compute(shape, lambda *i: _epilogue(acc[i], i[1], bias, x_scale, w_scale, y_scale, y_zp, out_dtype,
                                                  requant, relu, qmin, qmax, inverse), "qconv2d")


def _qconv2d_ref(x, w, bias, x_scale, x_zp, w_scale, w_zp, y_scale, y_zp, stride=(1, 1), padding=(0, 0),
                 dilation=(1, 1), groups=1, out_dtype="uint8", relu=False, qmin=None, qmax=None, requant="float",
                 inverse=False):
    pt, pl, pb, pr = _pads(padding)
    xi = np.pad(x.astype(np.int64) - int(x_zp), ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    wi = w.astype(np.int64) - _param_ref(w_zp, 0, 4)
    n = x.shape[0]
    o_, cg, kh, kw = w.shape
    oh = (xi.shape[2] - dilation[0] * (kh - 1) - 1) // stride[0] + 1
    ow = (xi.shape[3] - dilation[1] * (kw - 1) - 1) // stride[1] + 1
    acc = np.zeros((n, o_, oh, ow), np.int64)
    og = o_ // groups
    for g in range(groups):
        xs, ws = xi[:, g * cg:(g + 1) * cg], wi[g * og:(g + 1) * og]
        for i in range(kh):
            for j in range(kw):
                patch = xs[:, :, i * dilation[0]: i * dilation[0] + stride[0] * (oh - 1) + 1: stride[0],
                           j * dilation[1]: j * dilation[1] + stride[1] * (ow - 1) + 1: stride[1]]
                acc[:, g * og:(g + 1) * og] += np.einsum("nchw,oc->nohw", patch, ws[:, :, i, j])
    return _epilogue_ref(acc.astype(np.int32), 1, bias, x_scale, w_scale, y_scale, y_zp, out_dtype, requant, relu,
                         qmin, qmax, inverse)


def _qconv2d_samples(rng):
    x = rng.integers(0, 256, size=(1, 4, 7, 6)).astype(np.uint8)
    xs = rng.integers(-128, 128, size=(2, 4, 5, 5)).astype(np.int8)
    w = rng.integers(-127, 128, size=(6, 4, 3, 3)).astype(np.int8)
    wd = rng.integers(-127, 128, size=(4, 1, 3, 3)).astype(np.int8)
    bias = rng.integers(-2000, 2000, size=(6,)).astype(np.int32)
    ws = _f32(rng.uniform(0.001, 0.01, size=6))
    one, zero = _f32(1.0), _i32(0)
    sat_x, sat_w = np.full((1, 4, 5, 5), 255, np.uint8), np.full((6, 4, 3, 3), -128, np.int8)
    return [([x, w, bias, _f32(0.02), _i32(128), ws, np.zeros(6, np.int32), _f32(0.05), _i32(120)],
             {"padding": (1, 1), "requant": "onnxruntime"}),
            ([x, w, _f32(rng.uniform(-1, 1, size=6)), _f32(0.02), _i32(3), _f32(0.004), zero, _f32(0.07), _i32(0)],
             {"stride": (2, 2), "relu": True, "inverse": True, "qmin": 0, "qmax": 127}),
            ([xs, w, bias, _f32(0.1), _i32(-128), ws, zero, one, zero],
             {"out_dtype": "float32", "padding": (0, 1, 2, 0)}),
            ([xs, wd, np.zeros(4, np.int32), one, _i32(5), one, zero, one, zero],
             {"groups": 4, "dilation": (2, 1), "out_dtype": "int32"}),
            ([sat_x, sat_w, np.zeros(6, np.int32), _f32(2.0 ** 4), _i32(0), _f32(2.0 ** -20), zero, _f32(1e-3),
              _i32(127)], {"out_dtype": "int8"}),                                 # saturation at -128
            ([xs, w, bias, _f32(0.1), _i32(0), ws, zero, _f32(0.01), _i32(-128)],
             {"out_dtype": "int8", "relu": True, "requant": "onnxruntime", "padding": (1, 1)})]


register(OpDef("qconv2d", Kind.OUT_FUSABLE, _qconv2d_infer, _qconv2d_ref, _qconv2d, {}, None, _qconv2d_samples,
               ("uint8", "int8", "int32", "float32"),
               doc="integer conv2d (NCHW, OIHW) with int32 accumulation and the requantisation epilogue "
                   "(fxc/ops/quant.py); padding pads x with its zero point."))


# -- qmatmul -----------------------------------------------------------------------------------------------------------
def _qmatmul_dims(a, b, trans_b):
    if a.ndim < 2 or b.ndim < 2:
        raise ShapeError("qmatmul operands must have at least 2 dims")
    m, k = a.shape[-2], a.shape[-1]
    k2, n = (b.shape[-1], b.shape[-2]) if trans_b else (b.shape[-2], b.shape[-1])
    if k != k2:
        raise ShapeError(f"qmatmul: inner sizes differ ({list(a.shape)} x {list(b.shape)}, trans_b={trans_b})")
    return m, k, n


def _qmatmul_infer(types, trans_b=False, out_dtype="uint8", relu=False, qmin=None, qmax=None, requant="float",
                   inverse=False):
    a, b, bias, a_scale, a_zp, b_scale, b_zp, y_scale, y_zp = types
    if a.dtype not in ("uint8", "int8") or b.dtype not in ("uint8", "int8"):
        raise ShapeError(f"qmatmul: operands must be uint8 or int8, got {a.dtype} and {b.dtype}")
    m, _, n = _qmatmul_dims(a, b, trans_b)
    _check_epilogue("qmatmul", out_dtype, requant, relu, bias, (a_scale, b_scale), (a_zp, b_zp), y_scale, y_zp, n,
                    qmin, qmax)
    return [TensorType(broadcast_shapes(a.shape[:-2], b.shape[:-2]) + (m, n), out_dtype)]


def _qmatmul(a, b, bias, a_scale, a_zp, b_scale, b_zp, y_scale, y_zp, trans_b=False, out_dtype="uint8", relu=False,
             qmin=None, qmax=None, requant="float", inverse=False):
    m, k, n = _qmatmul_dims(a, b, trans_b)
    batch = broadcast_shapes(a.shape[:-2], b.shape[:-2])
    r = te.reduce_axis(k, "k")
    za = _param(a_zp, None)

    def bidx(t, i):
        off = len(batch) - (t.ndim - 2)
        return tuple(as_expr(0) if t.shape[d] == 1 else i[d + off] for d in range(t.ndim - 2))

    def body(*i):
        bi, ii, jj = i[:-2], i[-2], i[-1]
        av = _widen(a[bidx(a, bi) + (ii, r[0])], za)
        bv = _widen(b[bidx(b, bi) + ((jj, r[0]) if trans_b else (r[0], jj))], _param(b_zp, jj))
        return te.sum_(av * bv, [r])
    acc = te.compute(batch + (m, n), body, "qmatmul_acc")
    return te.compute(batch + (m, n), lambda *i: _epilogue(acc[i], i[-1], bias, a_scale, b_scale, y_scale, y_zp,
                                                           out_dtype, requant, relu, qmin, qmax, inverse), "qmatmul")


def _qmatmul_ref(a, b, bias, a_scale, a_zp, b_scale, b_zp, y_scale, y_zp, trans_b=False, out_dtype="uint8",
                 relu=False, qmin=None, qmax=None, requant="float", inverse=False):
    ai = a.astype(np.int64) - int(a_zp)
    bi = b.astype(np.int64)
    if trans_b:
        bi = np.swapaxes(bi, -1, -2)
    bi = bi - _param_ref(b_zp, 1, 2)
    acc = np.matmul(ai, bi)
    return _epilogue_ref(acc.astype(np.int32), acc.ndim - 1, bias, a_scale, b_scale, y_scale, y_zp, out_dtype,
                         requant, relu, qmin, qmax, inverse)


def _qmatmul_samples(rng):
    a = rng.integers(0, 256, size=(5, 33)).astype(np.uint8)
    b = rng.integers(-127, 128, size=(33, 7)).astype(np.int8)
    bt = rng.integers(-127, 128, size=(7, 33)).astype(np.int8)
    bias = rng.integers(-3000, 3000, size=(7,)).astype(np.int32)
    one, zero = _f32(1.0), _i32(0)
    return [([a, b, bias, _f32(0.03), _i32(130), _f32(0.005), zero, _f32(0.1), _i32(128)], {"requant": "onnxruntime"}),
            ([a, bt, _f32(rng.uniform(-1, 1, 7)), _f32(0.03), _i32(0), _f32(rng.uniform(0.001, 0.01, 7)),
              np.zeros(7, np.int32), _f32(0.2), _i32(-128)], {"trans_b": True, "out_dtype": "int8", "relu": True}),
            ([rng.integers(-128, 128, size=(2, 3, 33)).astype(np.int8), b, np.zeros(7, np.int32), _f32(0.5),
              _i32(-128), _f32(0.25), zero, one, zero], {"out_dtype": "float32"}),
            ([a, rng.integers(0, 256, size=(33, 7)).astype(np.uint8), np.zeros(7, np.int32), one, _i32(255), one,
              _i32(rng.integers(0, 256, size=7)), one, zero], {"out_dtype": "int32"}),
            ([np.full((2, 33), 255, np.uint8), np.full((33, 7), 127, np.int8), zero.reshape(1), _f32(2.0 ** 4), zero,
              _f32(2.0 ** -20), zero, _f32(1e-4), _i32(255)], {"out_dtype": "uint8", "requant": "onnxruntime"})]


register(OpDef("qmatmul", Kind.OUT_FUSABLE, _qmatmul_infer, _qmatmul_ref, _qmatmul, {}, None, _qmatmul_samples,
               ("uint8", "int8", "int32", "float32"),
               doc="integer matmul a [..., M, K] x b [..., K, N] (b [..., N, K] with trans_b) with int32 accumulation "
                   "and the requantisation epilogue (fxc/ops/quant.py); per-column b_scale / b_zp along N."))
