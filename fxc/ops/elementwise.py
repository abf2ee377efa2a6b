"""Elementwise and broadcast ops: unary math, activations, binary arithmetic, comparisons, where, casts.

Each op is one `unary(...)`/`binary(...)` line: name, numpy reference, expression builder, ATen names.
Inputs arrive promoted (see OpDef.promote), so expression builders see operands of one dtype.
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import UnsupportedOpError
from ..lowering import te
from ..symbolic.expr import (
    Bf16Half,
    PackBf16,
    as_expr,
    binary as binary_expr,
    cast,
    compare,
    is_float,
    maximum,
    minimum,
    select,
    unary as un,
)
from ..types import TensorType
from .common import bcast, broadcast_shapes, cast_array, positive, rand
from .registry import Kind, OpDef, register, register_aten

ALL = ("float32", "float64", "int32", "int64", "int8", "uint8", "bool")
NUM = ("float32", "float64", "int32", "int64", "int8", "uint8")
FLT = ("float32", "float64")
STORE = ALL + ("int16", "float16", "bfloat16")   # dtypes that are only stored, loaded and converted


def _elementwise_infer(out_dtype=None):
    """out_dtype: None (the inputs' dtype), a dtype, or "attr" (the op's `dtype` attribute)."""
    def infer(types, **attrs):
        shape = broadcast_shapes(*[t.shape for t in types])
        return [TensorType(shape, attrs["dtype"] if out_dtype == "attr" else out_dtype or types[0].dtype)]
    return infer


def _map(fn, name):
    """compute: apply fn(exprs..., **attrs) at every output index, broadcasting inputs."""
    def compute(*xs, **attrs):
        shape = broadcast_shapes(*[x.shape for x in xs])
        return te.compute(shape, lambda *i: fn(*[bcast(x, i) for x in xs], **attrs), name)
    return compute


def unary(name, ref, expr, aten=(), dtypes=FLT, promote="float", samples=None, out_dtype=None, **extra):
    conv = {a: None for a in aten} if not isinstance(aten, dict) else aten
    return register(OpDef(
        name, Kind.ELEMWISE, _elementwise_infer(out_dtype), ref, _map(expr, name), conv, promote,
        samples or (lambda rng: [([rand(rng, (3, 17))], {})]), dtypes, **extra))


def binary(name, ref, expr, aten=(), dtypes=NUM, promote="common", out_dtype=None, samples=None):
    conv = {a: None for a in aten} if not isinstance(aten, dict) else aten
    return register(OpDef(
        name, Kind.BROADCAST, _elementwise_infer(out_dtype), ref, _map(expr, name), conv, promote,
        samples or (lambda rng: [([rand(rng, (4, 1, 9)), rand(rng, (5, 1))], {}),
                                 ([rand(rng, (2, 3)), rand(rng, ())], {})]),
        dtypes))


def _f(x, v):
    """a python float as a constant of x's dtype."""
    return as_expr(float(v), x.dtype) if is_float(x.dtype) else as_expr(v, x.dtype)


def _sigmoid(x):
    """float32: the `sigmoid` unary, which a vector renders in one reduction of -x (llvm/mathlib.VectorMath.sigmoid)."""
    return un("sigmoid", x) if x.dtype == "float32" else 1.0 / (1.0 + un("exp", -x))


def _np_sigmoid(x):
    return (1.0 / (1.0 + np.exp(-x.astype(np.float64)))).astype(x.dtype)


def _erf_np(x):
    return np.vectorize(math.erf, otypes=[x.dtype])(x) if x.size else x.copy()


def _gelu(x, approximate="none"):
    if approximate == "tanh":
        inner = (x + x * x * x * 0.044715) * math.sqrt(2.0 / math.pi)
        return x * 0.5 * (un("tanh", inner) + 1.0)
    return x * 0.5 * (un("erf", x * (1.0 / math.sqrt(2.0))) + 1.0)


def _gelu_np(x, approximate="none"):
    x64 = x.astype(np.float64)
    if approximate == "tanh":
        y = 0.5 * x64 * (1 + np.tanh(math.sqrt(2 / math.pi) * (x64 + 0.044715 * x64 ** 3)))
    else:
        y = 0.5 * x64 * (1 + _erf_np(x64 / math.sqrt(2)))
    return y.astype(x.dtype)


# -- unary math (ints are promoted to float32 like torch) -------------------------------------------
unary("exp", np.exp, lambda x: un("exp", x), ["aten.exp.default"])
unary("exp2", np.exp2, lambda x: un("exp2", x), ["aten.exp2.default"])
unary("expm1", np.expm1, lambda x: un("expm1", x), ["aten.expm1.default"])
unary("log", np.log, lambda x: un("log", x), ["aten.log.default"],
      samples=lambda rng: [([positive(rng, (3, 17))], {})])
unary("log2", np.log2, lambda x: un("log2", x), ["aten.log2.default"],
      samples=lambda rng: [([positive(rng, (3, 17))], {})])
unary("log10", np.log10, lambda x: un("log10", x), ["aten.log10.default"],
      samples=lambda rng: [([positive(rng, (3, 17))], {})])
unary("log1p", np.log1p, lambda x: un("log1p", x), ["aten.log1p.default"],
      samples=lambda rng: [([positive(rng, (3, 17))], {})])
unary("sqrt", np.sqrt, lambda x: un("sqrt", x), ["aten.sqrt.default"],
      samples=lambda rng: [([positive(rng, (3, 17))], {})])
unary("rsqrt", lambda x: (1 / np.sqrt(x)).astype(x.dtype), lambda x: 1.0 / un("sqrt", x), ["aten.rsqrt.default"],
      samples=lambda rng: [([positive(rng, (3, 17))], {})])
unary("reciprocal", lambda x: (1 / x).astype(x.dtype), lambda x: 1.0 / x, ["aten.reciprocal.default"],
      samples=lambda rng: [([positive(rng, (3, 17))], {})])
unary("sin", np.sin, lambda x: un("sin", x), ["aten.sin.default"])
unary("cos", np.cos, lambda x: un("cos", x), ["aten.cos.default"])
unary("tan", np.tan, lambda x: un("tan", x), ["aten.tan.default"])
unary("asin", np.arcsin, lambda x: un("asin", x), ["aten.asin.default"],
      samples=lambda rng: [([rand(rng, (3, 17), low=-0.9, high=0.9)], {})])
unary("acos", np.arccos, lambda x: un("acos", x), ["aten.acos.default"],
      samples=lambda rng: [([rand(rng, (3, 17), low=-0.9, high=0.9)], {})])
unary("atan", np.arctan, lambda x: un("atan", x), ["aten.atan.default"])
unary("sinh", np.sinh, lambda x: un("sinh", x), ["aten.sinh.default"])
unary("cosh", np.cosh, lambda x: un("cosh", x), ["aten.cosh.default"])
unary("tanh", np.tanh, lambda x: un("tanh", x), ["aten.tanh.default"])
unary("asinh", np.arcsinh, lambda x: un("asinh", x), ["aten.asinh.default"])
unary("acosh", np.arccosh, lambda x: un("acosh", x), ["aten.acosh.default"],
      samples=lambda rng: [([positive(rng, (3, 17)) + 1], {})])
unary("atanh", np.arctanh, lambda x: un("atanh", x), ["aten.atanh.default"],
      samples=lambda rng: [([rand(rng, (3, 17), low=-0.9, high=0.9)], {})])
unary("erf", _erf_np, lambda x: un("erf", x), ["aten.erf.default"])
unary("sigmoid", _np_sigmoid, _sigmoid, ["aten.sigmoid.default"])
unary("silu", lambda x: (x * _np_sigmoid(x)).astype(x.dtype), lambda x: x * _sigmoid(x), ["aten.silu.default"])
unary("gelu", _gelu_np, _gelu,
      {"aten.gelu.default": lambda b, x, approximate="none": b.call("gelu", [x], approximate=approximate)})
unary("softplus",
      lambda x, beta=1.0, threshold=20.0:
          np.where(x * beta > threshold, x, np.log1p(np.exp(x * beta)) / beta).astype(x.dtype),
      lambda x, beta=1.0, threshold=20.0: select(compare("gt", x * _f(x, beta), _f(x, threshold)), x,
                                                 un("log1p", un("exp", x * _f(x, beta))) / _f(x, beta)),
      {"aten.softplus.default": lambda b, x, beta=1, threshold=20:
          b.call("softplus", [x], beta=float(beta), threshold=float(threshold))})
unary("mish", lambda x: (x * np.tanh(np.log1p(np.exp(x)))).astype(x.dtype),
      lambda x: x * un("tanh", un("log1p", un("exp", x))), ["aten.mish.default"])
unary("elu",
      lambda x, alpha=1.0, scale=1.0, input_scale=1.0:
          (scale * np.where(x > 0, x, alpha * np.expm1(x * input_scale))).astype(x.dtype),
      lambda x, alpha=1.0, scale=1.0, input_scale=1.0:
          select(compare("gt", x, _f(x, 0)), x, un("expm1", x * _f(x, input_scale)) * _f(x, alpha)) * _f(x, scale),
      {"aten.elu.default": lambda b, x, alpha=1, scale=1, input_scale=1:
          b.call("elu", [x], alpha=float(alpha), scale=float(scale), input_scale=float(input_scale))})

# -- unary ops that keep the dtype ------------------------------------------------------------------
unary("neg", np.negative, lambda x: -x, ["aten.neg.default"], dtypes=NUM, promote=None)
unary("abs", np.abs, lambda x: un("abs", x), ["aten.abs.default"], dtypes=NUM, promote=None)
unary("relu", lambda x: np.maximum(x, 0).astype(x.dtype), lambda x: maximum(x, _f(x, 0)), ["aten.relu.default"],
      dtypes=NUM, promote=None)
unary("floor", np.floor, lambda x: un("floor", x) if is_float(x.dtype) else x, ["aten.floor.default"],
      dtypes=NUM, promote=None)
unary("ceil", np.ceil, lambda x: un("ceil", x) if is_float(x.dtype) else x, ["aten.ceil.default"],
      dtypes=NUM, promote=None)
unary("round", np.round, lambda x: un("round", x) if is_float(x.dtype) else x, ["aten.round.default"],
      dtypes=NUM, promote=None)
unary("trunc", np.trunc, lambda x: un("trunc", x) if is_float(x.dtype) else x, ["aten.trunc.default"],
      dtypes=NUM, promote=None)
unary("sign", lambda x, nan_to_zero=False: np.where(np.isnan(x), 0, np.sign(x)).astype(x.dtype) if nan_to_zero
      else np.sign(x).astype(x.dtype),   # torch: sign(nan) == 0; numpy/ONNX: nan
      lambda x, nan_to_zero=False: select(compare("gt", x, _f(x, 0)), _f(x, 1),
                                          select(compare("lt", x, _f(x, 0)), _f(x, -1),
                                                 _f(x, 0) if nan_to_zero else x * _f(x, 0))) if is_float(x.dtype)
      else cast(x.dtype, compare("gt", x, _f(x, 0))) - cast(x.dtype, compare("lt", x, _f(x, 0))),
      {"aten.sign.default": lambda b, x: b.call("sign", [x], nan_to_zero=True)}, dtypes=NUM, promote=None)
unary("logical_not", np.logical_not, lambda x: un("not", compare("ne", x, _f(x, 0)) if x.dtype != "bool" else x),
      ["aten.logical_not.default"], dtypes=ALL, promote=None, out_dtype="bool")
unary("bitwise_not", np.invert, lambda x: un("not", x), ["aten.bitwise_not.default"],
      dtypes=("int32", "int64", "int8", "uint8", "bool"), promote=None,
      samples=lambda rng: [([rand(rng, (3, 17), "int32")], {})])
unary("isnan", np.isnan, lambda x: un("isnan", x) if is_float(x.dtype) else compare("ne", x, x),
      ["aten.isnan.default"], dtypes=NUM, promote=None, out_dtype="bool")
unary("isinf", np.isinf, lambda x: un("isinf", x) if is_float(x.dtype) else compare("ne", x, x),
      ["aten.isinf.default"], dtypes=NUM, promote=None, out_dtype="bool")
unary("hardtanh", lambda x, lo=-1.0, hi=1.0: np.clip(x, lo, hi).astype(x.dtype),
      lambda x, lo=-1.0, hi=1.0: minimum(maximum(x, _f(x, lo)), _f(x, hi)),
      {"aten.hardtanh.default": lambda b, x, min_val=-1.0, max_val=1.0:
          b.call("hardtanh", [x], lo=min_val, hi=max_val)},
      dtypes=NUM, promote=None)
unary("hardsigmoid", lambda x: (np.clip(x / 6 + 0.5, 0, 1)).astype(x.dtype),
      lambda x: minimum(maximum(x * (1.0 / 6.0) + 0.5, _f(x, 0)), _f(x, 1)), ["aten.hardsigmoid.default"])
unary("hardswish", lambda x: (x * np.clip(x / 6 + 0.5, 0, 1)).astype(x.dtype),
      lambda x: x * minimum(maximum(x * (1.0 / 6.0) + 0.5, _f(x, 0)), _f(x, 1)), ["aten.hardswish.default"])
unary("leaky_relu", lambda x, slope=0.01: np.where(x > 0, x, x * slope).astype(x.dtype),
      lambda x, slope=0.01: select(compare("gt", x, _f(x, 0)), x, x * _f(x, slope)),
      {"aten.leaky_relu.default": lambda b, x, negative_slope=0.01:
          b.call("leaky_relu", [x], slope=float(negative_slope))})
unary("cast", cast_array,
      lambda x, dtype: cast(dtype, compare("ne", x, _f(x, 0))) if dtype == "bool" else cast(dtype, x),
      {}, dtypes=STORE, promote=None, out_dtype="attr",
      samples=lambda rng: [([rand(rng, (3, 17))], {"dtype": "int32"}),
                           ([rand(rng, (3, 5), "int64")], {"dtype": "float32"}),
                           ([rand(rng, (3, 7), "float64")], {"dtype": "float16"}),
                           ([rand(rng, (3, 7))], {"dtype": "bfloat16"}),
                           ([rand(rng, (3, 7))], {"dtype": "int16"})])
def _round_to(x, dtype):
    """bfloat16 through a bf16x2 word (PackBf16), whose vector form the renderers have (vcvtne2ps2bf16 with AVX-512
    BF16, integer rounding elsewhere): a cast pair would keep a conv's epilogue scalar."""
    return Bf16Half(PackBf16(x, x), 0) if dtype == "bfloat16" else cast("float32", cast(dtype, x))


unary("round_to", lambda x, dtype: cast_array(cast_array(x, dtype), "float32"),
      _round_to, {}, dtypes=("float32",), promote=None,
      samples=lambda rng: [([rand(rng, (3, 17), high=1e5)], {"dtype": "bfloat16"}),
                           ([rand(rng, (3, 17), high=7e4)], {"dtype": "float16"})],
      doc="float32 values rounded to the nearest float16/bfloat16 (ties to even), kept in float32: a 16-bit op's "
          "result where its consumer computes in float32 again (relay_like/builder.py, Builder.widen)")
register(OpDef("copy", Kind.ELEMWISE, lambda t, **_: [t[0]], lambda x: x.copy(),
               lambda x: te.compute(x.shape, lambda *i: x[i], "copy"), {}, None,
               lambda rng: [([rand(rng, (3, 4))], {})], STORE))
unary("clamp",
      lambda x, lo=None, hi=None:
          np.clip(x, -np.inf if lo is None else lo, np.inf if hi is None else hi).astype(x.dtype),
      lambda x, lo=None, hi=None: _clamp(x, lo, hi), {}, dtypes=NUM, promote=None,
      samples=lambda rng: [([rand(rng, (3, 17))], {"lo": -0.5, "hi": 0.7}), ([rand(rng, (3, 5))], {"lo": 0.0})])


def _clamp(x, lo, hi):
    if lo is not None:
        x = maximum(x, _f(x, lo))
    if hi is not None:
        x = minimum(x, _f(x, hi))
    return x


# -- binary arithmetic ------------------------------------------------------------------------------
def _np_floordiv(a, b):
    if a.dtype.kind == "f":
        with np.errstate(all="ignore"):
            return np.where(b == 0, a / b, np.floor_divide(a, b)).astype(a.dtype)
    return np.floor_divide(a, np.where(b == 0, 1, b)).astype(a.dtype)


def _np_truncdiv(a, b):
    if a.dtype.kind == "f":
        return np.trunc(a / b).astype(a.dtype)
    return (np.trunc(a / np.where(b == 0, 1, b))).astype(a.dtype)


binary("add", lambda a, b: (a + b).astype(a.dtype), lambda a, b: a + b, {})
binary("sub", lambda a, b: (a - b).astype(a.dtype), lambda a, b: a - b, {})
binary("mul", lambda a, b: (a * b).astype(a.dtype),
       lambda a, b: binary_expr("and", a, b) if a.dtype == "bool" else a * b,
       ["aten.mul.Tensor", "aten.mul.Scalar"], dtypes=ALL)
binary("div", lambda a, b: (a / b).astype(a.dtype), lambda a, b: a / b, {}, dtypes=NUM, promote="float",
       samples=lambda rng: [([rand(rng, (4, 1, 9)), positive(rng, (5, 1))], {})])
def _floordiv(a, b):
    """Python/torch floor division; for floats torch's algorithm (fmod first), exact where floor(a / b) is
    not (1.0 // 0.1 == 9.0); b == 0 gives a / b."""
    if not is_float(a.dtype):
        return binary_expr("floordiv", a, b)
    mod = binary_expr("truncmod", a, b)
    div = (a - mod) / b
    div = select(compare("and", compare("ne", mod, _f(a, 0)), compare("ne", compare("lt", b, _f(a, 0)),
                                                                       compare("lt", mod, _f(a, 0)))),
                 div - _f(a, 1), div)
    fl = un("floor", div)
    fl = select(compare("gt", div - fl, _f(a, 0.5)), fl + _f(a, 1), fl)
    q = a / b
    return select(compare("eq", b, _f(a, 0)), q, select(compare("ne", div, _f(a, 0)), fl, q * _f(a, 0)))


binary("floordiv", _np_floordiv, _floordiv, {}, promote="common",
       samples=lambda rng: [([rand(rng, (4, 9)), positive(rng, (4, 9))], {}),
                            ([rand(rng, (4, 9), "int32"), rand(rng, (4, 9), "int32") + 11], {})])
binary("truncdiv", _np_truncdiv, lambda a, b: binary_expr("truncdiv", a, b), {}, promote="common",
       samples=lambda rng: [([rand(rng, (4, 9)), positive(rng, (4, 9))], {}),
                            ([rand(rng, (4, 9), "int64"), rand(rng, (4, 9), "int64") + 11], {})])
binary("remainder", lambda a, b: np.remainder(a, b).astype(a.dtype), lambda a, b: binary_expr("floormod", a, b),
       ["aten.remainder.Tensor", "aten.remainder.Scalar"],
       samples=lambda rng: [([rand(rng, (4, 9)), positive(rng, (4, 9))], {}),
                            ([rand(rng, (4, 9), "int32"), rand(rng, (4, 9), "int32") + 11], {})])
binary("fmod", lambda a, b: np.fmod(a, b).astype(a.dtype), lambda a, b: binary_expr("truncmod", a, b),
       ["aten.fmod.Tensor", "aten.fmod.Scalar"],
       samples=lambda rng: [([rand(rng, (4, 9)), positive(rng, (4, 9))], {}),
                            ([rand(rng, (4, 9), "int32"), rand(rng, (4, 9), "int32") + 11], {})])
def _pow_scalar(b, x, exponent):
    """x ** c: the exponents torch's CPU kernel computes without pow (2, 3, -2, 0.5, -0.5, -1) the same way
    here, with no libm call per element; any other through pow."""
    if is_float(x.dtype) and isinstance(exponent, (int, float)) and not isinstance(exponent, bool):
        square = lambda: b.call("mul", [x, x])
        special = {2: square, 3: lambda: b.call("mul", [square(), x]),
                   -2: lambda: b.call("reciprocal", [square()]), 0.5: lambda: b.call("sqrt", [x]),
                   -0.5: lambda: b.call("rsqrt", [x]), -1: lambda: b.call("reciprocal", [x])}.get(exponent)
        if special is not None:
            return special()
    return b.call("pow", [x, exponent])


binary("pow", lambda a, b: np.power(a, b).astype(a.dtype), lambda a, b: binary_expr("pow", a, b),
       {"aten.pow.Tensor_Tensor": None, "aten.pow.Tensor_Scalar": _pow_scalar, "aten.pow.Scalar": None}, dtypes=FLT,
       samples=lambda rng: [([positive(rng, (4, 9)), rand(rng, (4, 9))], {})])
binary("atan2", lambda a, b: np.arctan2(a, b).astype(a.dtype), lambda a, b: binary_expr("atan2", a, b),
       ["aten.atan2.default"], dtypes=FLT, promote="float")
binary("maximum", lambda a, b: np.maximum(a, b), maximum, ["aten.maximum.default"])
binary("minimum", lambda a, b: np.minimum(a, b), minimum, ["aten.minimum.default"])
binary("bitwise_and", np.bitwise_and, lambda a, b: binary_expr("and", a, b),
       ["aten.bitwise_and.Tensor", "aten.bitwise_and.Scalar"], dtypes=("int32", "int64", "int8", "uint8", "bool"),
       samples=lambda rng: [([rand(rng, (3, 4), "int32"), rand(rng, (3, 4), "int32")], {})])
binary("bitwise_or", np.bitwise_or, lambda a, b: binary_expr("or", a, b),
       ["aten.bitwise_or.Tensor", "aten.bitwise_or.Scalar"], dtypes=("int32", "int64", "int8", "uint8", "bool"),
       samples=lambda rng: [([rand(rng, (3, 4), "bool"), rand(rng, (3, 4), "bool")], {})])
binary("bitwise_xor", np.bitwise_xor, lambda a, b: binary_expr("xor", a, b),
       ["aten.bitwise_xor.Tensor", "aten.bitwise_xor.Scalar"], dtypes=("int32", "int64", "int8", "uint8", "bool"),
       samples=lambda rng: [([rand(rng, (3, 4), "int64"), rand(rng, (3, 4), "int64")], {})])


def _truthy(x):
    return x if x.dtype == "bool" else compare("ne", x, _f(x, 0))


for _name, _np, _op in (("logical_and", np.logical_and, "and"), ("logical_or", np.logical_or, "or"),
                        ("logical_xor", np.logical_xor, "xor")):
    binary(_name, _np, (lambda op: lambda a, b: binary_expr(op, _truthy(a), _truthy(b)))(_op),
           [f"aten.{_name}.default"], dtypes=ALL, promote="common", out_dtype="bool")

for _name, _np in (("eq", np.equal), ("ne", np.not_equal), ("lt", np.less), ("le", np.less_equal),
                   ("gt", np.greater), ("ge", np.greater_equal)):
    binary(_name, _np, (lambda op: lambda a, b: compare(op, a, b))(_name),
           [f"aten.{_name}.Tensor", f"aten.{_name}.Scalar"], dtypes=ALL, out_dtype="bool")


# -- ternary ------------------------------------------------------------------------------------------
def _where_infer(types, **_):
    return [TensorType(broadcast_shapes(*[t.shape for t in types]), types[1].dtype)]


def _where_aten(b, cond, x, y):
    x, y = b.promote(x, y)
    return b.call("where", [b.as_tensor(cond, "bool"), x, y])


register(OpDef("where", Kind.BROADCAST, _where_infer, lambda c, a, b: np.where(c, a, b),
               _map(lambda c, a, b: select(c, a, b), "where"), {"aten.where.self": _where_aten}, None,
               lambda rng: [([rand(rng, (3, 1), "bool"), rand(rng, (3, 4)), rand(rng, (4,))], {})]))


# -- ATen overloads that need argument handling -------------------------------------------------------
def _add_sub(op):
    def conv(b, x, y, alpha=1):
        return b.call(op, [x, y if alpha == 1 else b.call("mul", [y, alpha])])
    return conv


def _div(b, x, y, rounding_mode=None):
    return b.call({None: "div", "trunc": "truncdiv", "floor": "floordiv"}[rounding_mode], [x, y])


def _clamp_aten(b, x, min=None, max=None):
    if (min is not None and not isinstance(min, (int, float))) \
            or (max is not None and not isinstance(max, (int, float))):
        lo = x if min is None else b.call("maximum", [x, min])
        return lo if max is None else b.call("minimum", [lo, max])
    dtype = b.result_type([x] + [v for v in (min, max) if v is not None])
    return b.call("clamp", [b.as_tensor(x, dtype)], lo=min, hi=max)


def _to_copy(b, x, dtype=None, **_):
    return b.call("cast", [x], dtype=dtype) if dtype is not None and dtype != x.dtype else b.call("copy", [x])


_ATEN_EXTRA = {   # ATen overloads whose arguments need handling, by the op they lower to
    "add": {"aten.add.Tensor": _add_sub("add"), "aten.add.Scalar": _add_sub("add")},
    "sub": {"aten.sub.Tensor": _add_sub("sub"), "aten.sub.Scalar": _add_sub("sub"),
            "aten.rsub.Scalar": lambda b, x, y, alpha=1: _add_sub("sub")(b, y, x, alpha) if alpha == 1 else
            b.call("sub", [y, b.call("mul", [x, alpha])])},
    "div": {"aten.div.Tensor": _div, "aten.div.Scalar": _div,
            "aten.div.Tensor_mode": _div, "aten.div.Scalar_mode": _div},
    "floordiv": {"aten.floor_divide.default": lambda b, x, y: b.call("floordiv", [x, y])},
    "clamp": {"aten.clamp.default": _clamp_aten, "aten.clamp.Tensor": _clamp_aten,
              "aten.clamp_min.default": lambda b, x, m: _clamp_aten(b, x, min=m),
              "aten.clamp_max.default": lambda b, x, m: _clamp_aten(b, x, max=m)},
    "cast": {"aten._to_copy.default": _to_copy},
    "copy": {"aten.clone.default": lambda b, x, **_: b.call("copy", [x]),
             "aten.alias.default": lambda b, x: x, "aten.lift_fresh_copy.default": lambda b, x: b.call("copy", [x])},
}
for _table in _ATEN_EXTRA.values():
    for _target, _conv in _table.items():
        register_aten(_target, _conv)


# -- randomized leaky relu in eval mode: the slope is the middle of its range (training draws random slopes) -----
def _rrelu(b, x, noise, lower=0.125, upper=1.0 / 3.0, training=False, generator=None):
    if training:
        raise UnsupportedOpError("rrelu in training mode (random slopes)")
    return b.call("leaky_relu", [x], slope=(float(lower) + float(upper)) / 2), noise


def _rrelu_backward(b, grad, x, noise, lower, upper, training, self_is_result):
    if training:
        raise UnsupportedOpError("rrelu backward in training mode")
    return b.call("where", [b.call("gt", [x, 0]), grad, b.call("mul", [grad, (float(lower) + float(upper)) / 2])])


register_aten("aten.rrelu_with_noise_functional.default", _rrelu)
register_aten("aten.rrelu_with_noise_backward.default", _rrelu_backward)
