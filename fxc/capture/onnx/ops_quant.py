"""ONNX converters of the quantisation ops (docs/int8.md, "Graph level and ONNX"): QuantizeLinear /
DequantizeLinear become fxc's quantize / dequantize (a QDQ model's dequantize -> Conv -> quantize chains then become
integer ops in the graph pass relay_like/passes/quantize.py); the operator forms map onto the integer ops directly:

    QLinearConv, QLinearMatMul   -> qconv2d / qmatmul with requant="onnxruntime" (ONNX Runtime's rounding, bit-exact)
    ConvInteger, MatMulInteger   -> qconv2d / qmatmul with out_dtype="int32"
    DynamicQuantizeLinear        -> the scale and zero point as ONNX Runtime computes them (amin / amax, ...) and a
                                    quantize

Scales are float32, zero points become int32 (constants fold). Schemes the quant ops do not take (blocked
quantisation, int4 tensors) compute in float32 with the ops that define them, and the model warns once, naming them
(Context.refuse).
"""
from __future__ import annotations

import numpy as np

from ...errors import ShapeError
from ...ops.quant import RANGE
from .ops_nn import _from_2d, _geometry, _given, _to_2d
from .ops_tensor import fxc_dtype
from .table import converter


def _zp(cx, v):
    """An ONNX zero point (absent: 0) as int32 (constants fold)."""
    if v is None:
        return cx.scalar(0, "int32")
    return cx.op("cast", [v], dtype="int32")


def _per_tensor(cx, v, what: str):
    """A scale or zero point that must hold one value: as it is (0-d or [1])."""
    if v.type.numel != 1:
        raise cx.unsupported(f"a {what} of shape {list(v.shape)} (ONNX Runtime too takes one value here)")
    return v


def _param_axis(cx, v, x, at) -> int:
    """The quantised axis of x for a 1-d scale / zero point v of more than one value (ONNX's `axis`, default 1)."""
    if v.type.numel == 1 and v.type.ndim <= 1:
        return 1
    return cx.axis(at.get("axis", 1), x.type.ndim)


def _float_form(cx, v, x, at):
    """True where the quant ops cannot take this scale / zero point (blocked: ONNX's block_size, or a scale of x's
    rank), so the converter computes in float32 and names the scheme."""
    if int(at.get("block_size", 0)) or v.type.ndim > 1:
        cx.refuse("per-group (blocked) quantisation")
        return True
    return False


# -- QuantizeLinear / DequantizeLinear ---------------------------------------------------------------------------------
@converter("QuantizeLinear", since=10)
def quantize(cx, ins, at):
    x, scale = ins[0], ins[1]
    zp = ins[2] if len(ins) > 2 and ins[2] is not None else None
    out = zp.dtype if zp is not None else (fxc_dtype(cx, at["output_dtype"]) if at.get("output_dtype") else "uint8")
    if out not in RANGE:
        raise cx.unsupported(f"QuantizeLinear to {out}")
    if _float_form(cx, scale, x, at) or x.dtype != "float32":
        return _quantize_float(cx, x, scale, zp, out, at)
    return cx.op("quantize", [x, scale, _zp(cx, zp)], dtype=out, axis=_param_axis(cx, scale, x, at))


@converter("DequantizeLinear", since=10)
def dequantize(cx, ins, at):
    x, scale = ins[0], ins[1]
    zp = ins[2] if len(ins) > 2 and ins[2] is not None else None
    narrow = cx.narrow.get(x.id)
    if narrow:
        cx.refuse(f"{narrow} weights")
    if narrow or _float_form(cx, scale, x, at) or scale.dtype != "float32" or x.dtype not in RANGE:
        return _dequantize_float(cx, x, scale, zp, at)
    return cx.op("dequantize", [x, scale, _zp(cx, zp)], axis=_param_axis(cx, scale, x, at))


def _blocked(cx, v, x, at):
    """A scale or zero point as a tensor broadcasting against x: per tensor as it is, per axis reshaped along the
    axis, blocked (a constant) repeated block_size times along its axis."""
    if v.type.ndim == 0 or v.type.numel == 1:
        return cx.op("reshape", [v], shape=())
    axis = cx.axis(at.get("axis", 1), x.type.ndim)
    if v.type.ndim == 1:
        return cx.op("reshape", [v], shape=tuple(-1 if d == axis else 1 for d in range(x.type.ndim)))
    block = int(at.get("block_size", 0))
    if block <= 0 or v.type.ndim != x.type.ndim:
        raise ShapeError(f"{cx.where()}: a scale of shape {list(v.shape)} for an input of {list(x.shape)} needs "
                         f"a block_size (blocked quantisation) along axis {axis}")
    full = np.repeat(cx.const(v, "blocked scale or zero point"), block, axis=axis)
    return cx.b.const(np.ascontiguousarray(np.take(full, range(x.shape[axis]), axis=axis)))


def _dequantize_float(cx, x, scale, zp, at):
    """(x - zp) * scale in float32, ONNX's definition, for the schemes the dequantize op does not take."""
    s = _blocked(cx, cx.op("cast", [scale], dtype="float32"), x, at)
    xf = cx.op("cast", [x], dtype="float32")
    if zp is not None:
        xf = cx.op("sub", [xf, cx.op("cast", [_blocked(cx, zp, x, at)], dtype="float32")])
    return cx.op("mul", [xf, s])


def _quantize_float(cx, x, scale, zp, out: str, at):
    """clamp(round(x / scale) + zp) in float, ONNX's definition, for the schemes the quantize op does not take."""
    y = cx.op("round", [cx.op("div", [x, _blocked(cx, cx.op("cast", [scale], dtype=x.dtype), x, at)])])
    if zp is not None:
        y = cx.op("add", [y, cx.op("cast", [_blocked(cx, zp, x, at)], dtype=y.dtype)])
    lo, hi = RANGE[out]
    return cx.op("cast", [cx.op("clamp", [y], lo=float(lo), hi=float(hi))], dtype=out)


# -- the operator forms ---------------------------------------------------------------------------------------------
def _conv(cx, x, w, bias, params, out_dtype: str, requant: str, at):
    """qconv2d over ONNX Conv attributes (1-d convs as 2-d ones over a height of 1)."""
    if x.dtype not in ("uint8", "int8") or w.dtype not in ("uint8", "int8"):
        raise cx.unsupported(f"an integer convolution of {x.dtype} by {w.dtype}")
    nd = w.type.ndim - 2
    if nd not in (1, 2):
        raise cx.unsupported(f"a {nd}-d integer convolution")
    kernel = _given(at, "kernel_shape", list(w.shape[2:]))
    if kernel != list(w.shape[2:]):
        raise ShapeError(f"{cx.where()}: kernel_shape {kernel} differs from the weight's {list(w.shape[2:])}")
    strides, dil, pads = _geometry(cx, x, at, kernel)
    if nd == 1:
        x, w = _to_2d(cx, x), _to_2d(cx, w)
        strides, dil, pads = [1] + strides, [1] + dil, [0, pads[0], 0, pads[1]]
    if bias is None:
        bias = cx.b.const(np.zeros(w.shape[0], np.int32))
    y = cx.op("qconv2d", [x, w, bias, *params], stride=tuple(strides), dilation=tuple(dil), padding=tuple(pads),
              groups=int(at.get("group", 1)), out_dtype=out_dtype, requant=requant)
    return _from_2d(cx, y) if nd == 1 else y


def _weight_param(cx, v, channels: int, what: str):
    """A per-tensor or per-output-channel weight scale / zero point: 0-d, or [channels]."""
    if v.type.numel == 1:
        return cx.op("reshape", [v], shape=())
    if v.type.ndim != 1 or v.shape[0] != channels:
        raise ShapeError(f"{cx.where()}: a {what} of shape {list(v.shape)}; give one value or {channels}")
    return v


@converter("QLinearConv", since=10)
def qlinear_conv(cx, ins, at):
    x, sx, zx, w, sw, zw, sy, zy = ins[:8]
    bias = ins[8] if len(ins) > 8 else None
    o = w.shape[0]
    params = [_per_tensor(cx, sx, "x_scale"), _zp(cx, _per_tensor(cx, zx, "x_zero_point")),
              _weight_param(cx, sw, o, "w_scale"), _zp(cx, _weight_param(cx, zw, o, "w_zero_point")),
              _per_tensor(cx, sy, "y_scale"), _zp(cx, _per_tensor(cx, zy, "y_zero_point"))]
    return _conv(cx, x, w, bias, params, zy.dtype, "onnxruntime", at)


@converter("ConvInteger", since=10)
def conv_integer(cx, ins, at):
    x, w = ins[0], ins[1]
    zx = ins[2] if len(ins) > 2 else None
    zw = ins[3] if len(ins) > 3 else None
    params = _integer_params(cx, None if zx is None else _per_tensor(cx, zx, "x_zero_point"),
                             None if zw is None else _weight_param(cx, zw, w.shape[0], "w_zero_point"))
    return _conv(cx, x, w, None, params, "int32", "float", at)


def _integer_params(cx, za, zb) -> list:
    """The scale / zero point inputs of an integer op (ConvInteger, MatMulInteger): scales of one, the zero points
    given (absent: 0), so the op's output is the int32 accumulator itself."""
    one = cx.scalar(1.0, "float32")
    return [one, _zp(cx, za), one, _zp(cx, zb), one, _zp(cx, None)]


def _matmul(cx, a, b, params, out_dtype: str, requant: str):
    """qmatmul with numpy's matmul rules: 1-d operands gain (and lose) a dim; batch dims broadcast."""
    if a.dtype not in ("uint8", "int8") or b.dtype not in ("uint8", "int8"):
        raise cx.unsupported(f"an integer matmul of {a.dtype} by {b.dtype}")
    va, vb = a.type.ndim == 1, b.type.ndim == 1
    if va:
        a = cx.op("reshape", [a], shape=(1, a.shape[0]))
    if vb:
        b = cx.op("reshape", [b], shape=(b.shape[0], 1))
    n = b.shape[-1]
    bias = cx.b.const(np.zeros(n, np.int32))
    y = cx.op("qmatmul", [a, b, bias, *params], out_dtype=out_dtype, requant=requant)
    if va or vb:
        shape = y.shape[:-2] + (() if va else (y.shape[-2],)) + (() if vb else (y.shape[-1],))
        y = cx.op("reshape", [y], shape=shape)
    return y


def _column_param(cx, v, b, what: str):
    """A per-tensor or per-column (along b's last dim) scale / zero point of b."""
    n = b.shape[-1] if b.type.ndim > 1 else 1
    if v.type.numel == 1:
        return cx.op("reshape", [v], shape=())
    if v.type.numel == n and (v.type.ndim == 1 or all(d == 1 for d in v.shape[:-1])):
        return cx.op("reshape", [v], shape=(n,))
    raise cx.unsupported(f"a {what} of shape {list(v.shape)} (one value, or one per column of B)")


@converter("QLinearMatMul", since=10)
def qlinear_matmul(cx, ins, at):
    a, sa, za, b, sb, zb, sy, zy = ins[:8]
    params = [_per_tensor(cx, sa, "a_scale"), _zp(cx, _per_tensor(cx, za, "a_zero_point")),
              _column_param(cx, sb, b, "b_scale"), _zp(cx, _column_param(cx, zb, b, "b_zero_point")),
              _per_tensor(cx, sy, "y_scale"), _zp(cx, _per_tensor(cx, zy, "y_zero_point"))]
    return _matmul(cx, a, b, params, zy.dtype, "onnxruntime")


@converter("MatMulInteger", since=10)
def matmul_integer(cx, ins, at):
    a, b = ins[0], ins[1]
    za = ins[2] if len(ins) > 2 else None
    zb = ins[3] if len(ins) > 3 else None
    params = _integer_params(cx, None if za is None else _per_tensor(cx, za, "a_zero_point (per row)"),
                             None if zb is None else _column_param(cx, zb, b, "b_zero_point"))
    return _matmul(cx, a, b, params, "int32", "float")


@converter("DynamicQuantizeLinear", since=11)
def dynamic_quantize_linear(cx, ins, at):
    """y, y_scale, y_zero_point of x as ONNX Runtime computes them: the range [min(x, 0), max(x, 0)] over 255 steps
    (scale 1 where that range is empty), zero point round_half_even(clamp(-min / scale, 0, 255)), y quantize(x)."""
    x = ins[0]
    if x.dtype != "float32":
        raise cx.unsupported(f"DynamicQuantizeLinear of {x.dtype}")
    axes = tuple(range(x.type.ndim))
    lo = cx.op("clamp", [cx.op("amin", [x], axes=axes, keepdim=False)], hi=0.0)
    hi = cx.op("clamp", [cx.op("amax", [x], axes=axes, keepdim=False)], lo=0.0)
    span = cx.op("sub", [hi, lo])
    scale = cx.op("where", [cx.op("eq", [span, 0.0]), cx.scalar(1.0, "float32"), cx.op("div", [span, 255.0])])
    zpf = cx.op("round", [cx.op("clamp", [cx.op("neg", [cx.op("div", [lo, scale])])], lo=0.0, hi=255.0)])
    zp = cx.op("cast", [zpf], dtype="int32")
    y = cx.op("quantize", [x, scale, zp], dtype="uint8")
    return y, scale, cx.op("cast", [zp], dtype="uint8")
