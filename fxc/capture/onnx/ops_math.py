"""ONNX converters: elementwise math, activations, comparisons and reductions (see table.py for the protocol)."""
from __future__ import annotations

import numpy as np

from .table import converter

FLOATS = ("float32", "float64")

# -- one registry op each --------------------------------------------------------------------------------------
_UNARY = {"Abs": "abs", "Neg": "neg", "Exp": "exp", "Log": "log", "Sqrt": "sqrt", "Reciprocal": "reciprocal",
          "Floor": "floor", "Ceil": "ceil", "Sin": "sin", "Cos": "cos", "Tan": "tan", "Asin": "asin", "Acos": "acos",
          "Atan": "atan", "Sinh": "sinh", "Cosh": "cosh", "Asinh": "asinh", "Acosh": "acosh", "Atanh": "atanh",
          "Tanh": "tanh", "Sigmoid": "sigmoid", "Erf": "erf", "Relu": "relu", "Sign": "sign", "Round": "round",
          "Not": "logical_not", "IsNaN": "isnan", "Softplus": "softplus", "Mish": "mish", "BitwiseNot": "bitwise_not"}
_BINARY = {"Add": "add", "Sub": "sub", "Mul": "mul", "Equal": "eq", "Less": "lt", "Greater": "gt",
           "LessOrEqual": "le", "GreaterOrEqual": "ge", "And": "logical_and", "Or": "logical_or", "Xor": "logical_xor",
           "BitwiseAnd": "bitwise_and", "BitwiseOr": "bitwise_or", "BitwiseXor": "bitwise_xor"}
_VARIADIC = {"Max": "maximum", "Min": "minimum", "Sum": "add"}


def _unary(op):
    return lambda cx, ins, at: cx.op(op, [ins[0]])


def _binary(op):
    return lambda cx, ins, at: cx.op(op, [ins[0], ins[1]])


def _variadic(op):
    def conv(cx, ins, at):
        out = ins[0]
        for x in ins[1:]:
            out = cx.op(op, [out, x])
        return out if len(ins) > 1 else cx.op("copy", [out])
    return conv


for _k, _v in _UNARY.items():
    converter(_k)(_unary(_v))
for _k, _v in _BINARY.items():
    converter(_k)(_binary(_v))
for _k, _v in _VARIADIC.items():
    converter(_k)(_variadic(_v))


@converter("Identity")
def identity(cx, ins, at):
    return ins[0]


@converter("Mean")
def mean(cx, ins, at):
    return cx.op("div", [_variadic("add")(cx, ins, at), float(len(ins))])


@converter("Div")
def div(cx, ins, at):
    a, b = ins
    return cx.op("div" if a.dtype in FLOATS else "truncdiv", [a, b])


@converter("Mod")
def mod(cx, ins, at):
    return cx.op("fmod" if at.get("fmod", 0) else "remainder", [ins[0], ins[1]])


@converter("Pow")
def pow_(cx, ins, at):
    x, y = ins
    if x.dtype not in FLOATS:
        raise cx.unsupported(f"Pow of {x.dtype}")
    return cx.op("pow", [x, y if y.dtype == x.dtype else cx.op("cast", [y], dtype=x.dtype)])


@converter("Where")
def where(cx, ins, at):
    return cx.op("where", list(ins))


@converter("IsInf")
def isinf(cx, ins, at):
    x = ins[0]
    pos, neg = at.get("detect_positive", 1), at.get("detect_negative", 1)
    if pos and neg:
        return cx.op("isinf", [x])
    if not pos and not neg:
        return cx.b.const(np.zeros(x.shape, dtype=bool))
    return cx.op("eq", [x, float("inf") if pos else float("-inf")])


# -- activations -----------------------------------------------------------------------------------------------
@converter("LeakyRelu")
def leaky_relu(cx, ins, at):
    return cx.op("leaky_relu", [ins[0]], slope=float(at.get("alpha", 0.01)))


@converter("Elu")
def elu(cx, ins, at):
    return cx.op("elu", [ins[0]], alpha=float(at.get("alpha", 1.0)))


@converter("Selu")
def selu(cx, ins, at):
    alpha, gamma = at.get("alpha", 1.67326319217681884765625), at.get("gamma", 1.05070102214813232421875)
    return cx.op("elu", [ins[0]], alpha=float(alpha), scale=float(gamma))


@converter("Celu")
def celu(cx, ins, at):
    alpha = float(at.get("alpha", 1.0))
    return cx.op("elu", [ins[0]], alpha=alpha, input_scale=1.0 / alpha)


@converter("ThresholdedRelu")
def thresholded_relu(cx, ins, at):
    x = ins[0]
    return cx.op("where", [cx.op("gt", [x, float(at.get("alpha", 1.0))]), x, cx.scalar(0.0, x.dtype)])


@converter("HardSigmoid")
def hard_sigmoid(cx, ins, at):
    x = ins[0]
    y = cx.op("add", [cx.op("mul", [x, float(at.get("alpha", 0.2))]), float(at.get("beta", 0.5))])
    return cx.op("clamp", [y], lo=0.0, hi=1.0)


@converter("HardSwish")
def hard_swish(cx, ins, at):
    return cx.op("hardswish", [ins[0]])


@converter("Softsign")
def softsign(cx, ins, at):
    x = ins[0]
    return cx.op("div", [x, cx.op("add", [cx.op("abs", [x]), 1.0])])


@converter("Swish")
def swish(cx, ins, at):
    x = ins[0]
    return cx.op("mul", [x, cx.op("sigmoid", [cx.op("mul", [x, float(at.get("alpha", 1.0))])])])


@converter("Gelu")
def gelu(cx, ins, at):
    return cx.op("gelu", [ins[0]], approximate=at.get("approximate", "none"))


@converter("Shrink")
def shrink(cx, ins, at):
    x = ins[0]
    lambd, bias = float(at.get("lambd", 0.5)), float(at.get("bias", 0.0))
    zero = cx.scalar(0, x.dtype)
    lo = cx.op("where", [cx.op("lt", [x, -lambd]), cx.op("add", [x, bias]), zero])
    return cx.op("where", [cx.op("gt", [x, lambd]), cx.op("sub", [x, bias]), lo])


@converter("PRelu")
def prelu(cx, ins, at):
    x, slope = ins
    return cx.op("where", [cx.op("lt", [x, 0.0]), cx.op("mul", [x, slope]), x])


@converter("Clip")
def clip_6(cx, ins, at):
    return cx.op("clamp", [ins[0]], lo=float(at.get("min", -3.4028234663852886e38)),
                 hi=float(at.get("max", 3.4028234663852886e38)))


@converter("Clip", since=11)
def clip(cx, ins, at):
    x = ins[0]
    lo = ins[1] if len(ins) > 1 else None
    hi = ins[2] if len(ins) > 2 else None
    if lo is not None:
        x = cx.op("maximum", [x, lo])
    if hi is not None:
        x = cx.op("minimum", [x, hi])
    return x if x is not ins[0] else cx.op("copy", [x])


# -- reductions ------------------------------------------------------------------------------------------------
def _axes(cx, ins, at, axes_input: bool):
    """(axes or None for all, keepdims, identity?) from the attribute (old opsets) or the second input."""
    axes = cx.ints(ins[1], "axes") if axes_input and len(ins) > 1 else at.get("axes")
    keep = bool(at.get("keepdims", 1))
    if not axes:
        if at.get("noop_with_empty_axes", 0):
            return None, keep, True
        axes = None
    return (tuple(sorted(cx.axes(axes, ins[0].type.ndim))) if axes is not None else None), keep, False


def _sum(cx, x, axes, keep, op="sum"):
    """sum/prod over `axes` (None: all); integers other than int64 go through int64."""
    dt = x.dtype
    if op in ("sum", "prod") and dt not in ("float32", "float64", "int64"):
        x = cx.op("cast", [x], dtype="int64")
    out = cx.op(op, [x], axes=axes if axes is not None else tuple(range(x.type.ndim)), keepdim=keep)
    return out if out.dtype == dt else cx.op("cast", [out], dtype=dt)


def _empty_extreme(cx, x, axes, keep, is_max):
    """Max/min over an empty axis: the identity (-inf / +inf, the dtype's extremes, False / True)."""
    axes = tuple(axes if axes is not None else range(x.type.ndim))
    shape = tuple(1 if d in axes else s for d, s in enumerate(x.shape) if keep or d not in axes)
    dt = np.dtype(bool if x.dtype == "bool" else x.dtype)
    if dt.kind == "b":
        value = not is_max
    elif dt.kind == "f":
        value = -np.inf if is_max else np.inf
    else:
        value = np.iinfo(dt).min if is_max else np.iinfo(dt).max
    return cx.b.const(np.full(shape, value, dtype=dt))


def _reduce(kind):
    def conv(cx, ins, at, axes_input):
        x = ins[0]
        axes, keep, noop = _axes(cx, ins, at, axes_input)
        if noop:
            return cx.op("copy", [x])
        if x.type.ndim == 0:
            axes = ()
        if kind == "ReduceSum":
            return _sum(cx, x, axes, keep)
        if kind == "ReduceProd":
            return _sum(cx, x, axes, keep, "prod")
        if kind in ("ReduceMax", "ReduceMin"):
            if any(x.shape[a] == 0 for a in (axes if axes is not None else range(x.type.ndim))):
                return _empty_extreme(cx, x, axes, keep, kind == "ReduceMax")
            return cx.op("amax" if kind == "ReduceMax" else "amin", [x],
                         axes=axes if axes is not None else tuple(range(x.type.ndim)), keepdim=keep)
        if kind == "ReduceMean":
            return cx.op("mean", [x], axes=axes if axes is not None else tuple(range(x.type.ndim)), keepdim=keep)
        if kind == "ReduceL1":
            return _sum(cx, cx.op("abs", [x]), axes, keep)
        if kind == "ReduceSumSquare":
            return _sum(cx, cx.op("mul", [x, x]), axes, keep)
        if kind == "ReduceL2":
            s = _sum(cx, cx.op("mul", [x, x]), axes, keep)
            return cx.op("sqrt", [s]) if s.dtype in FLOATS else cx.op("cast", [cx.op("sqrt", [
                cx.op("cast", [s], dtype="float64")])], dtype=s.dtype)
        if kind == "ReduceLogSum":
            return cx.op("log", [_sum(cx, x, axes, keep)])
        if kind == "ReduceLogSumExp":
            all_axes = axes if axes is not None else tuple(range(x.type.ndim))
            if 0 in [x.shape[a] for a in all_axes]:
                return cx.op("log", [_sum(cx, cx.op("exp", [x]), axes, keep)])
            m = cx.op("amax", [x], axes=all_axes, keepdim=True)
            m = cx.op("where", [cx.op("isinf", [m]), cx.scalar(0.0, x.dtype), m])
            s = _sum(cx, cx.op("exp", [cx.op("sub", [x, m])]), axes, True)
            out = cx.op("add", [cx.op("log", [s]), m])
            return out if keep else cx.op("reshape", [out], shape=tuple(
                d for i, d in enumerate(out.shape) if i not in all_axes))
        raise AssertionError(kind)
    return conv


for _kind, _since in [("ReduceSum", 13), ("ReduceMean", 18), ("ReduceMax", 18), ("ReduceMin", 18),
                      ("ReduceProd", 18), ("ReduceL1", 18), ("ReduceL2", 18), ("ReduceSumSquare", 18),
                      ("ReduceLogSum", 18), ("ReduceLogSumExp", 18)]:
    _f = _reduce(_kind)
    converter(_kind)(lambda cx, ins, at, f=_f: f(cx, ins, at, False))
    converter(_kind, since=_since)(lambda cx, ins, at, f=_f: f(cx, ins, at, True))


def _arg(op):
    def conv(cx, ins, at):
        x = ins[0]
        axis = cx.axis(at.get("axis", 0), x.type.ndim)
        keep = bool(at.get("keepdims", 1))
        if at.get("select_last_index", 0):
            n = x.shape[axis]
            idx = cx.op(op, [cx.op("flip", [x], dims=(axis,))], axis=axis, keepdim=keep)
            return cx.op("sub", [cx.scalar(n - 1, "int64"), idx])
        return cx.op(op, [x], axis=axis, keepdim=keep)
    return conv


converter("ArgMax")(_arg("argmax"))
converter("ArgMin")(_arg("argmin"))


def _softmax(op, coerce: bool):
    """Softmax/LogSoftmax; before opset 13 over the input flattened to 2-d at `axis` (default 1)."""
    def conv(cx, ins, at):
        x = ins[0]
        nd = x.type.ndim
        if not coerce:
            return cx.op(op, [x], dim=cx.axis(at.get("axis", -1), nd))
        axis = cx.axis(at.get("axis", 1), nd)
        rows = int(np.prod(x.shape[:axis], dtype=np.int64))
        flat = cx.op("reshape", [x], shape=(rows, int(np.prod(x.shape[axis:], dtype=np.int64))))
        return cx.op("reshape", [cx.op(op, [flat], dim=1)], shape=x.shape)
    return conv


for _name, _op in (("Softmax", "softmax"), ("LogSoftmax", "log_softmax")):
    converter(_name)(_softmax(_op, True))
    converter(_name, since=13)(_softmax(_op, False))


def _hardmax(coerce: bool):
    def conv(cx, ins, at):
        x = ins[0]
        nd = x.type.ndim
        axis = cx.axis(at.get("axis", 1 if coerce else -1), nd)
        shape = x.shape
        if coerce:
            rows = int(np.prod(shape[:axis], dtype=np.int64))
            x, axis = cx.op("reshape", [x], shape=(rows, int(np.prod(shape[axis:], dtype=np.int64)))), 1
        idx = cx.op("argmax", [x], axis=axis, keepdim=True)
        iota = np.arange(x.shape[axis], dtype=np.int64).reshape([-1 if d == axis else 1 for d in range(x.type.ndim)])
        out = cx.op("cast", [cx.op("eq", [idx, cx.b.const(iota)])], dtype=x.dtype)
        return cx.op("reshape", [out], shape=shape) if coerce else out
    return conv


converter("Hardmax")(_hardmax(True))
converter("Hardmax", since=13)(_hardmax(False))


@converter("BitShift", since=11)
def bit_shift(cx, ins, at):
    """x << s as x * 2^s (wrapping) and x >> s as floor(x / 2^s) (arithmetic), 2^s from a constant table; a
    shift that is negative or not below the bit width gives the sign fill (0, or -1 right of a negative x)."""
    x, s = ins
    if x.dtype not in ("int8", "int32", "int64", "uint8"):
        raise cx.unsupported(f"BitShift of {x.dtype}")
    bits = np.iinfo(x.dtype).bits
    table = cx.b.const((np.ones(bits, dtype=np.uint64) << np.arange(bits, dtype=np.uint64)).astype(x.dtype))
    zero = cx.scalar(0, x.dtype)
    right = at.get("direction") == "RIGHT"
    top = bits - 1 if right and x.dtype != "uint8" else bits      # 2^(bits-1) is negative in a signed type
    ok = cx.op("logical_and", [cx.op("ge", [s, 0]), cx.op("lt", [s, top])])
    factor = cx.op("index", [table, cx.op("where", [ok, s, zero])], dims=(0,))
    fill = cx.op("where", [cx.op("lt", [x, 0]), cx.scalar(-1, x.dtype), zero]) if right else zero
    shifted = cx.op("floordiv" if right else "mul", [x, factor])
    return cx.op("where", [ok, shifted, fill])


@converter("Pow", since=12)
def pow_12(cx, ins, at):
    """Pow with integer operands computes in float64 and rounds back (exact for the results int64 holds)."""
    x, y = ins
    if x.dtype in FLOATS:
        return cx.op("pow", [x, y if y.dtype == x.dtype else cx.op("cast", [y], dtype=x.dtype)])
    if x.dtype not in ("int32", "int64"):
        raise cx.unsupported(f"Pow of {x.dtype}")
    r = cx.op("pow", [cx.op("cast", [x], dtype="float64"), cx.op("cast", [y], dtype="float64")])
    return cx.op("cast", [cx.op("round", [r])], dtype=x.dtype)


@converter("Einsum", since=12)
def einsum(cx, ins, at):
    """Einsum as a broadcast product and a sum: repeated letters of an operand take its diagonal, every operand
    is laid out over (output letters, summed letters), multiplied, and the summed letters reduced."""
    eq = at["equation"].replace(" ", "")
    lhs, arrow, out = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ins):
        raise cx.unsupported(f"Einsum {eq!r} with {len(ins)} inputs")
    free = [c for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZ" if c not in eq]
    ell = max((x.type.ndim - len(t.replace("...", "")) for t, x in zip(terms, ins) if "..." in t), default=0)
    terms = [t.replace("...", "".join(free[ell - (x.type.ndim - len(t.replace("...", ""))):ell]))
             for t, x in zip(terms, ins)]
    if not arrow:
        letters = "".join(terms)
        out = "".join(free[:ell]) + "".join(sorted(c for c in set(letters) if letters.count(c) == 1 and c.islower()))
    out = out.replace("...", "".join(free[:ell]))
    ops, sizes = [], {}
    for t, x in zip(terms, ins):
        t = list(t)
        while len(set(t)) < len(t):         # a repeated letter: its diagonal, moved last
            c = next(c for c in t if t.count(c) > 1)
            p, q = t.index(c), t.index(c, t.index(c) + 1)
            x = cx.op("diagonal", [x], offset=0, dim1=p, dim2=q)
            t = [a for i, a in enumerate(t) if i not in (p, q)] + [c]
        for c, n in zip(t, x.shape):
            sizes[c] = max(sizes.get(c, 1), n)
        ops.append((t, x))
    order = list(out) + sorted({c for t, _ in ops for c in t} - set(out))
    prod = None
    for t, x in ops:
        present = [c for c in order if c in t]
        if present != t:
            x = cx.op("permute", [x], dims=tuple(t.index(c) for c in present))
        x = cx.op("reshape", [x], shape=tuple(sizes[c] if c in t else 1 for c in order))
        prod = x if prod is None else cx.op("mul", [prod, x])
    if len(order) > len(out):
        prod = cx.op("sum", [prod], axes=tuple(range(len(out), len(order))), keepdim=False)
    return prod if prod.shape == tuple(sizes[c] for c in out) else cx.op(
        "expand", [prod], size=tuple(sizes[c] for c in out))
