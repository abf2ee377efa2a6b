"""PyTorch capture, PT2E quantization: the `quantized_decomposed` ops onto fxc's `quantize` / `dequantize`.

PyTorch 2's export quantization (torchao.quantization.pt2e: prepare_pt2e / convert_pt2e, where
torch.ao.quantization.quantize_pt2e moved) writes a quantized model as float ATen ops between
torch.ops.quantized_decomposed.{quantize,dequantize}_per_tensor (.default with Python scalars, .tensor / .tensor2
with 1-element tensors), {quantize,dequantize}_per_channel and, for dynamic quantization, choose_qparams.tensor.
Each converter here builds the graph ops of fxc/ops/quant.py computing what PyTorch's own decomposition
(torch/ao/quantization/fx/_decomposed.py) computes, bit for bit: quantize multiplies by the float32 reciprocal
of the scale (`inverse=True`), rounds half to even, adds the zero point and clamps to quant_min..quant_max;
dequantize is `(float(q) - zp) * scale`; choose_qparams is determine_qparams' affine (or symmetric) rule in
float32 ops. fxc's quantization pass then turns the dequantize -> conv/linear -> quantize chains into integer ops.

Per-group weights (dequantize_per_channel_group, torchao's int4 "8da4w" form) compute in float32 with one
fxc.errors.QuantizationWarning naming them; the quantization pass names the schemes it leaves in float (weight zero
points, int16 values).

Takes the converter arguments of graph.py (`_convert_call`: a Builder, graph Values for tensors, plain Python
for the rest, dtypes as names); produces Values. `QUANT_TABLE` maps each overload name to its converter.
"""
from __future__ import annotations

import warnings

import numpy as np

from ...errors import QuantizationWarning, UnsupportedOpError
from ...relay_like.builder import Builder
from .recorder import first_time

_STORED = ("uint8", "int8", "int16", "int32")        # the dtypes of fxc's quantize and dequantize (ops/quant.py)


def _float_scheme(what: str) -> None:
    """One QuantizationWarning per process naming a scheme this frontend computes in float32."""
    if first_time(f"quant:{what}"):
        warnings.warn(QuantizationWarning(
            f"fxc: {what}: fxc has no integer kernels for this quantisation scheme, so it computes in float32 "
            f"exactly as PyTorch defines it (docs/int8.md)"), stacklevel=2)


def _stored(dtype: str, op: str) -> str:
    if dtype not in _STORED:
        raise UnsupportedOpError(f"{op} to {dtype}: fxc quantizes to {', '.join(_STORED)}")
    return dtype


def _to_float32(b: Builder, x):
    return x if x.dtype == "float32" else b.call("cast", [x], dtype="float32")


def _inverse_scale(scale: float):
    """A float32 scale s whose float32 reciprocal is PyTorch's multiplier float32(1.0 / scale) (its Python double):
    float32(scale) itself whenever scale is a float32 value (every observer's), else maybe a neighbour; None when
    no float32 scale has that reciprocal."""
    want = np.float32(1.0 / scale)
    s = np.float32(scale)
    for c in (s, np.nextafter(s, np.float32(np.inf)), np.nextafter(s, np.float32(0))):
        if np.float32(1) / c == want:
            return np.array(c, np.float32)
    return None


def _shaped(b: Builder, v, shape: tuple, dtype: str):
    """A scale or zero-point tensor reshaped and cast: a constant stays one (the quantization pass reads weight zero
    points and scales as constants), a value computed per call goes through reshape and cast."""
    if v.is_const:
        return b.const(np.asarray(v.data).reshape(shape).astype(dtype))
    return b.as_tensor(b.call("reshape", [v], shape=shape), dtype)


def _scalar_tensor(b: Builder, v, dtype: str):
    """A 1-element scale or zero-point tensor (PyTorch's .tensor overloads take them and call .item()) as a
    0-d Value of `dtype`."""
    if v.type.numel != 1:
        raise UnsupportedOpError(f"a per-tensor scale or zero point of shape {tuple(v.shape)}")
    return _shaped(b, v, (), dtype)


def _quantize(b: Builder, x, scale, zp, qmin: int, qmax: int, dtype: str, op: str, axis: int = 1):
    return b.call("quantize", [_to_float32(b, x), scale, zp], axis=axis, dtype=_stored(dtype, op), qmin=int(qmin),
                  qmax=int(qmax), inverse=True)


def _dequantize(b: Builder, q, scale, zp, dtype: str, out_dtype, op: str, axis: int = 1):
    if q.dtype != _stored(dtype, op):
        raise UnsupportedOpError(f"{op} of a {q.dtype} tensor declared {dtype}")
    y = b.call("dequantize", [q, scale, zp], axis=axis)
    return y if out_dtype in (None, "float32") else b.call("cast", [y], dtype=out_dtype)


# -- per tensor ---------------------------------------------------------------------------------------------------
def quantize_per_tensor(b, x, scale, zero_point, quant_min, quant_max, dtype):
    op = "quantize_per_tensor"
    s = _inverse_scale(scale)
    if s is not None:
        return _quantize(b, x, b.const(s), b.const(np.array(zero_point, np.int32)), quant_min, quant_max, dtype, op)
    # a scale that is no float32 value: PyTorch's steps in float32 ops
    _stored(dtype, op)
    y = b.call("round", [b.call("mul", [_to_float32(b, x), b.scalar(float(np.float32(1.0 / scale)), "float32")])])
    y = b.call("add", [y, b.scalar(float(zero_point), "float32")])
    return b.call("cast", [b.call("clamp", [y], lo=float(quant_min), hi=float(quant_max))], dtype=dtype)


def quantize_per_tensor_tensor(b, x, scale, zero_point, quant_min, quant_max, dtype):
    # scale.item() is a float32 value wherever choose_qparams or an observer made it: float32(1/scale) in double
    # is then the correctly rounded float32 reciprocal, which the quantize op computes
    if not isinstance(quant_min, int) or not isinstance(quant_max, int):     # .tensor2: 1-element tensors
        if not (quant_min.is_const and quant_max.is_const):
            raise UnsupportedOpError("quantize_per_tensor.tensor2 with computed quant_min/quant_max")
        quant_min, quant_max = int(quant_min.data.reshape(())), int(quant_max.data.reshape(()))
    return _quantize(b, x, _scalar_tensor(b, scale, "float32"), _scalar_tensor(b, zero_point, "int32"),
                     quant_min, quant_max, dtype, "quantize_per_tensor")


def dequantize_per_tensor(b, q, scale, zero_point, quant_min, quant_max, dtype, out_dtype=None):
    # PyTorch: (q.to(float32) - zero_point) * scale, the Python scale taken as float32
    return _dequantize(b, q, b.const(np.array(scale, np.float32)), b.const(np.array(zero_point, np.int32)),
                       dtype, out_dtype, "dequantize_per_tensor")


def dequantize_per_tensor_tensor(b, q, scale, zero_point, quant_min, quant_max, dtype, out_dtype=None):
    return _dequantize(b, q, _scalar_tensor(b, scale, "float32"), _scalar_tensor(b, zero_point, "int32"),
                       dtype, out_dtype, "dequantize_per_tensor")


# -- per channel --------------------------------------------------------------------------------------------------
def _channel_params(b: Builder, x, scales, zero_points, axis: int, op: str):
    if scales.dtype != "float32":
        # PyTorch then computes in float64 (float32 x float64 tensors promote), which the quantize op does not
        raise UnsupportedOpError(f"{op} with {scales.dtype} scales (PT2E writes float32 ones)")
    axis = axis % len(x.shape)
    if scales.type.numel != x.shape[axis]:
        raise UnsupportedOpError(f"{op}: {scales.type.numel} scales for {x.shape[axis]} channels")
    scales = _shaped(b, scales, (x.shape[axis],), "float32")
    zero_points = (b.const(np.zeros(x.shape[axis], np.int32)) if zero_points is None
                   else _shaped(b, zero_points, (x.shape[axis],), "int32"))
    return scales, zero_points, axis


def quantize_per_channel(b, x, scales, zero_points, axis, quant_min, quant_max, dtype):
    op = "quantize_per_channel"
    scales, zero_points, axis = _channel_params(b, x, scales, zero_points, axis, op)
    return _quantize(b, x, scales, zero_points, quant_min, quant_max, dtype, op, axis)


def dequantize_per_channel(b, q, scales, zero_points, axis, quant_min, quant_max, dtype, out_dtype=None):
    # PyTorch: (q - zero_points) in int64, times the float32 scales: exact integers, one float32 rounding, as here
    op = "dequantize_per_channel"
    scales, zero_points, axis = _channel_params(b, q, scales, zero_points, axis, op)
    return _dequantize(b, q, scales, zero_points, dtype, out_dtype, op, axis)


# -- per group (torchao's int4 weights): float, one warning -------------------------------------------------------
def _group_size(w, scales, group_size: int) -> int:
    if len(w.shape) != 2 or group_size <= 1:
        raise UnsupportedOpError("per-group quantization of a tensor that is not 2-d")
    if group_size > w.shape[-1] and scales.shape[-1] == 1:      # PyTorch's rule (GPTQ's single column)
        group_size = w.shape[-1]
    if w.shape[-1] % group_size:
        raise UnsupportedOpError(f"per-group quantization: {w.shape[-1]} columns in groups of {group_size}")
    return group_size


def dequantize_per_channel_group(b, w, scales, zero_points, quant_min, quant_max, dtype, group_size=128,
                                 output_dtype="float32"):
    # PyTorch: w.reshape(-1, G).sub(zp).mul(scales): each row of the grouped view is one channel
    g = _group_size(w, scales, group_size)
    _float_scheme(f"per-group weights (groups of {g}, values {quant_min}..{quant_max})")
    if scales.dtype != "float32":
        raise UnsupportedOpError(f"dequantize_per_channel_group with {scales.dtype} scales")
    rows = w.type.numel // g
    grouped = b.call("reshape", [w], shape=(rows, g))
    zp = b.const(np.zeros(rows, np.int32)) if zero_points is None else _shaped(b, zero_points, (rows,), "int32")
    y = b.call("dequantize", [grouped, _shaped(b, scales, (rows,), "float32"), zp], axis=0)
    y = b.call("reshape", [y], shape=tuple(w.shape))
    return y if output_dtype == "float32" else b.call("cast", [y], dtype=output_dtype)


def quantize_per_channel_group(b, x, scales, zero_points, quant_min, quant_max, dtype, group_size=128):
    # PyTorch: x.reshape(-1, G).mul(1.0 / scales).add(zp).round().clamp(quant_min, quant_max): the zero point is
    # added before rounding (unlike quantize), so this is its own float composition
    g = _group_size(x, scales, group_size)
    _float_scheme(f"per-group quantization (groups of {g}, values {quant_min}..{quant_max})")
    rows = x.type.numel // g
    inv = b.call("div", [b.scalar(1.0, "float32"), b.call("reshape", [_to_float32(b, scales)], shape=(rows, 1))])
    y = b.call("mul", [b.call("reshape", [_to_float32(b, x)], shape=(rows, g)), inv])
    y = b.call("add", [y, b.as_tensor(b.call("reshape", [zero_points], shape=(rows, 1)), "float32")])
    y = b.call("clamp", [b.call("round", [y])], lo=float(quant_min), hi=float(quant_max))
    return b.call("reshape", [b.call("cast", [y], dtype=dtype)], shape=tuple(x.shape))


# -- dynamic quantization: the qparams of a runtime tensor --------------------------------------------------------
def _qparams(b: Builder, x, quant_min: int, quant_max: int, eps: float, dtype: str, symmetric: bool):
    """determine_qparams (torch/ao/quantization/utils.py) for the tensor's min and max, in its float32 ops:
    returns (scale float64 [1], zero_point int64 [1]) as PyTorch does."""
    if (quant_min, quant_max) == (0, 0) or quant_min > quant_max:
        raise UnsupportedOpError(f"choose_qparams with quant_min {quant_min} > quant_max {quant_max}")
    x = _to_float32(b, x)
    zero = b.scalar(0.0, "float32")
    lo = b.call("minimum", [b.call("amin", [x], axes=None, keepdim=False), zero])
    hi = b.call("maximum", [b.call("amax", [x], axes=None, keepdim=False), zero])
    if symmetric:
        hi = b.call("maximum", [b.call("neg", [lo]), hi])
        scale = b.call("div", [hi, b.scalar(float(np.float32((quant_max - quant_min) / 2)), "float32")])
    else:
        scale = b.call("div", [b.call("sub", [hi, lo]), b.scalar(float(quant_max - quant_min), "float32")])
    scale = b.call("maximum", [scale, b.scalar(float(np.float32(eps)), "float32")])
    if symmetric:
        zp = b.scalar(128 if dtype == "uint8" else 0, "int32")
    else:
        zp = b.call("cast", [b.call("round", [b.call("div", [lo, scale])])], dtype="int32")
        zp = b.call("clamp", [b.call("sub", [b.scalar(int(quant_min), "int32"), zp])], lo=quant_min, hi=quant_max)
    return (b.call("cast", [b.call("reshape", [scale], shape=(1,))], dtype="float64"),
            b.call("cast", [b.call("reshape", [zp], shape=(1,))], dtype="int64"))


def choose_qparams(b, x, quant_min, quant_max, eps, dtype):
    return _qparams(b, x, quant_min, quant_max, eps, dtype, symmetric=False)


def choose_qparams_symmetric(b, x, quant_min, quant_max, eps, dtype):
    return _qparams(b, x, quant_min, quant_max, eps, dtype, symmetric=True)


_NS = "quantized_decomposed."
QUANT_TABLE = {
    _NS + "quantize_per_tensor.default": quantize_per_tensor,
    _NS + "quantize_per_tensor.tensor": quantize_per_tensor_tensor,
    _NS + "quantize_per_tensor.tensor2": quantize_per_tensor_tensor,
    _NS + "dequantize_per_tensor.default": dequantize_per_tensor,
    _NS + "dequantize_per_tensor.tensor": dequantize_per_tensor_tensor,
    _NS + "dequantize_per_tensor.tensor2": dequantize_per_tensor_tensor,
    _NS + "quantize_per_channel.default": quantize_per_channel,
    _NS + "dequantize_per_channel.default": dequantize_per_channel,
    _NS + "quantize_per_channel_group.default": quantize_per_channel_group,
    _NS + "dequantize_per_channel_group.default": dequantize_per_channel_group,
    _NS + "choose_qparams.tensor": choose_qparams,
    _NS + "choose_qparams_symmetric.tensor": choose_qparams_symmetric,
}
