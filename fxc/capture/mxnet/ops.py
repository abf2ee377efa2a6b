"""MXNet's op names and attributes mapped onto fxc's registry ops: one converter per MXNet (legacy NNVM) op.

A converter takes the graph Builder, the node's input Values and a `Node` (its name, its attributes as MXNet's
JSON stores them, strings such as "(3, 3)" or "True", and the output shapes MXNet's own shape inference gives)
and returns the node's output Value (or a tuple of them). It imports no framework: `fxc.capture.mxnet.convert` reads the
symbol JSON and calls these. `CONVERTERS` is the table; an op missing from it is an UnsupportedOpError listing
every such node at once (`unsupported`).
"""
from __future__ import annotations

import ast
from dataclasses import dataclass

import numpy as np

from ...errors import UnsupportedOpError
from ...ops.conv_transpose import transposed_convolution


@dataclass
class Node:
    """One MXNet op node: `name`, `op`, `attrs` (strings) and `shapes` (MXNet's inferred output shapes, or None)."""
    name: str
    op: str
    attrs: dict
    shapes: list | None = None

    def text(self, key: str, default: str | None = None) -> str | None:
        v = self.attrs.get(key)
        return default if v in (None, "None") else v

    def int(self, key: str, default=None):
        v = self.text(key)
        return default if v is None else int(v)

    def float(self, key: str, default=None):
        v = self.text(key)
        return default if v is None else float(v)

    def bool(self, key: str, default: bool = False) -> bool:
        v = self.text(key)
        return default if v is None else v.strip().lower() in ("true", "1")

    def tuple(self, key: str, default=()) -> tuple:
        v = self.text(key)
        if v is None or v.strip() in ("", "()", "[]"):
            return tuple(default)
        t = ast.literal_eval(v.strip())
        return tuple(t) if isinstance(t, (list, tuple)) else (t,)

    def unsupported(self, what: str) -> UnsupportedOpError:
        return UnsupportedOpError(f"MXNet op {self.op} (node {self.name!r}): {what} is not supported by fxc")


def _nchw(n: Node, key: str = "layout") -> None:
    layout = n.text(key)
    if layout not in (None, "NCHW", "NCW"):
        raise n.unsupported(f"layout {layout}")


def _like(b, value: float, x):
    """A scalar constant of x's dtype: MXNet computes `x op scalar` in x's type (no promotion)."""
    return b.scalar(value if x.dtype.startswith("float") else int(value), x.dtype)


def _pair(t: tuple, default: int, nd: int = 2) -> tuple:
    t = tuple(int(v) for v in t) or (default,) * nd
    return t * nd if len(t) == 1 else t


POOL_TYPES, POOL_CONVENTIONS = ("max", "avg", "sum"), ("valid", "full")
ACT_TYPES = ("relu", "sigmoid", "tanh", "softsign", "softrelu")
LEAKY_TYPES = ("leaky", "elu", "selu", "gelu", "prelu")
PAD_MODES = {"constant": "constant", "edge": "replicate", "reflect": "reflect"}


def attribute_problem(n: Node) -> str | None:
    """What in a node's attributes alone fxc does not support (before any shape is known), or None."""
    layout = n.text("layout")
    if layout not in (None, "NCHW", "NCW"):
        return f"layout {layout}"
    if n.op in ("Convolution", "Deconvolution") and len(n.tuple("kernel")) not in (1, 2):
        return f"a {len(n.tuple('kernel'))}-d kernel"
    if n.op == "Deconvolution" and n.tuple("target_shape"):
        return "target_shape"
    if n.op == "Pooling":
        if n.text("pool_type", "max") not in POOL_TYPES:
            return f"pool_type {n.text('pool_type')}"
        if not n.bool("global_pool") and (n.text("pooling_convention", "valid") not in POOL_CONVENTIONS
                                          or len(n.tuple("kernel")) != 2):
            return f"pooling_convention {n.text('pooling_convention')} with kernel {n.tuple('kernel')}"
    if n.op == "Activation" and n.text("act_type") not in ACT_TYPES:
        return f"act_type {n.text('act_type')}"
    if n.op == "LeakyReLU" and n.text("act_type", "leaky") not in LEAKY_TYPES:
        return f"act_type {n.text('act_type')}"
    if n.op in ("Pad", "pad") and n.text("mode", "constant") not in PAD_MODES:
        return f"mode {n.text('mode')}"
    if n.op == "slice" and any(v not in (None, 1) for v in n.tuple("step")):
        return "a step other than 1"
    if n.op in ("softmax", "log_softmax") and n.bool("use_length"):
        return "use_length"
    return None


# -- convolution, dense, normalisation -------------------------------------------------------------------------------
def _spatial(n: Node, x) -> int:
    kernel = n.tuple("kernel")
    if len(kernel) not in (1, 2) or x.type.ndim != len(kernel) + 2:
        raise n.unsupported(f"a {len(kernel)}-d kernel over a {x.type.ndim}-d input")
    return len(kernel)


def _as_2d(b, x, nd: int):
    return x if nd == 2 else b.call("reshape", [x], shape=x.shape[:2] + (1, x.shape[2]))


def _convolution(b, ins, n: Node):
    _nchw(n)
    x, w = ins[0], ins[1]
    nd = _spatial(n, x)
    stride, dilate, pad = (_pair(n.tuple(k), d, nd) for k, d in (("stride", 1), ("dilate", 1), ("pad", 0)))
    if nd == 1:
        x, w = _as_2d(b, x, 1), _as_2d(b, w, 1)
        stride, dilate, pad = (1,) + stride, (1,) + dilate, (0,) + pad
    if any(pad):
        x = b.call("pad", [x], pad=(pad[1], pad[1], pad[0], pad[0]), value=0.0, mode="constant")
    y = b.call("conv2d", [x, w], stride=stride, dilation=dilate, groups=n.int("num_group", 1))
    if not n.bool("no_bias") and len(ins) > 2:
        y = b.call("add", [y, b.call("reshape", [ins[2]], shape=(-1, 1, 1))])
    return y if nd == 2 else b.call("reshape", [y], shape=(y.shape[0], y.shape[1], y.shape[3]))


def _deconvolution(b, ins, n: Node):
    _nchw(n)
    x, w = ins[0], ins[1]
    nd = _spatial(n, x)
    if n.tuple("target_shape"):
        raise n.unsupported("target_shape")
    bias = ins[2] if not n.bool("no_bias", True) and len(ins) > 2 else None
    return transposed_convolution(b, x, w, bias, _pair(n.tuple("stride"), 1, nd), _pair(n.tuple("pad"), 0, nd),
                                  _pair(n.tuple("dilate"), 1, nd), _pair(n.tuple("adj"), 0, nd),
                                  n.int("num_group", 1))


def _fully_connected(b, ins, n: Node):
    x, w = ins[0], ins[1]
    if n.bool("flatten", True):
        x = b.call("reshape", [x], shape=(x.shape[0], -1)) if x.type.ndim != 2 else x
    y = b.call("matmul", [x, w], trans_b=True)
    if not n.bool("no_bias") and len(ins) > 2:
        y = b.call("add", [y, ins[2]])
    return y


def _channel(b, v, ndim: int, axis: int):
    return b.call("reshape", [v], shape=(-1,) + (1,) * (ndim - 1 - axis))


def _batch_norm(b, ins, n: Node):
    """Inference: (x - moving_mean) / sqrt(moving_var + eps) * gamma + beta (gamma taken as 1 with fix_gamma)."""
    x, gamma, beta, mean, var = ins
    axis = n.int("axis", 1) % x.type.ndim
    scale = b.call("rsqrt", [b.call("add", [var, _like(b, n.float("eps", 1e-3), var)])])
    if not n.bool("fix_gamma", True):
        scale = b.call("mul", [scale, gamma])
    shift = b.call("sub", [beta, b.call("mul", [mean, scale])])
    y = b.call("add", [b.call("mul", [x, _channel(b, scale, x.type.ndim, axis)]),
                       _channel(b, shift, x.type.ndim, axis)])
    return (y, mean, var) if n.bool("output_mean_var") else y


def _layer_norm(b, ins, n: Node):
    x, gamma, beta = ins
    axis = n.int("axis", -1) % x.type.ndim
    mean = b.call("mean", [x], axes=(axis,), keepdim=True)
    d = b.call("sub", [x, mean])
    var = b.call("mean", [b.call("mul", [d, d])], axes=(axis,), keepdim=True)
    y = b.call("mul", [d, b.call("rsqrt", [b.call("add", [var, _like(b, n.float("eps", 1e-5), var)])])])
    return b.call("add", [b.call("mul", [y, _channel(b, gamma, x.type.ndim, axis)]),
                          _channel(b, beta, x.type.ndim, axis)])


# -- pooling --------------------------------------------------------------------------------------------------------
def _pooling(b, ins, n: Node):
    _nchw(n)
    x = ins[0]
    kind = n.text("pool_type", "max")
    if kind not in POOL_TYPES:
        raise n.unsupported(f"pool_type {kind}")
    if x.type.ndim != 4:
        raise n.unsupported(f"pooling over a {x.type.ndim}-d input")
    if n.bool("global_pool"):
        op = {"max": "amax", "avg": "mean", "sum": "sum"}[kind]
        return b.call(op, [x], axes=(2, 3), keepdim=True)
    kernel = _pair(n.tuple("kernel"), 1)
    stride, pad = _pair(n.tuple("stride"), 1), _pair(n.tuple("pad"), 0)
    convention = n.text("pooling_convention", "valid")
    if convention not in POOL_CONVENTIONS:
        raise n.unsupported(f"pooling_convention {convention}")
    ceil = convention == "full"
    if kind == "max":
        return b.call("max_pool2d", [x], kernel=kernel, stride=stride, padding=pad, dilation=(1, 1), ceil_mode=ceil)
    if kind == "sum":
        return b.call("avg_pool2d", [x], kernel=kernel, stride=stride, padding=pad, ceil_mode=ceil,
                      count_include_pad=True, divisor_override=1)
    return b.call("avg_pool2d", [x], kernel=kernel, stride=stride, padding=pad, ceil_mode=ceil,
                  count_include_pad=n.bool("count_include_pad", True), divisor_override=None)


# -- activations and elementwise ------------------------------------------------------------------------------------
def _activation(b, ins, n: Node):
    act = n.text("act_type")
    x = ins[0]
    if act == "relu":
        return b.call("relu", [x])
    if act in ACT_TYPES:
        return _UNARY[act](b, [x], n)
    raise n.unsupported(f"act_type {act}")


def _leaky_relu(b, ins, n: Node):
    act, x = n.text("act_type", "leaky"), ins[0]
    slope = n.float("slope", 0.25)
    if act == "leaky":
        return b.call("leaky_relu", [x], slope=slope)
    if act == "elu":
        return b.call("elu", [x], alpha=slope)
    if act == "selu":
        return b.call("elu", [x], alpha=1.6732632423543772, scale=1.0507009873554805)
    if act == "gelu":
        return b.call("gelu", [x])
    if act == "prelu":
        gamma = ins[1]
        g = gamma if x.type.ndim < 2 or gamma.shape == (1,) else _channel(b, gamma, x.type.ndim, 1)
        return b.call("where", [b.call("gt", [x, _like(b, 0.0, x)]), x, b.call("mul", [x, g])])
    raise n.unsupported(f"act_type {act}")


def _unary(op: str):
    return lambda b, ins, n: b.call(op, [ins[0]])


_UNARY = {
    "relu": _unary("relu"), "sigmoid": _unary("sigmoid"), "tanh": _unary("tanh"), "exp": _unary("exp"),
    "log": _unary("log"), "sqrt": _unary("sqrt"), "rsqrt": _unary("rsqrt"), "abs": _unary("abs"),
    "negative": _unary("neg"), "floor": _unary("floor"), "ceil": _unary("ceil"), "erf": _unary("erf"),
    "reciprocal": _unary("reciprocal"), "sin": _unary("sin"), "cos": _unary("cos"), "log1p": _unary("log1p"),
    "expm1": _unary("expm1"), "sign": _unary("sign"),
    "square": lambda b, ins, n: b.call("mul", [ins[0], ins[0]]),
    "softsign": lambda b, ins, n: b.call("div", [ins[0],
                                                 b.call("add", [b.call("abs", [ins[0]]), _like(b, 1.0, ins[0])])]),
    "softrelu": lambda b, ins, n: b.call("softplus", [ins[0]], beta=1.0, threshold=20.0),
    "hard_sigmoid": lambda b, ins, n: b.call("clamp", [b.call("add", [
        b.call("mul", [ins[0], _like(b, n.float("alpha", 0.2), ins[0])]), _like(b, n.float("beta", 0.5), ins[0])])],
        lo=0.0, hi=1.0),
    "clip": lambda b, ins, n: b.call("clamp", [ins[0]], lo=n.float("a_min"), hi=n.float("a_max")),
}
for _name in ("relu", "sigmoid", "tanh"):
    _UNARY[_name.capitalize()] = _UNARY[_name]

_BINARY = {"add": "add", "sub": "sub", "mul": "mul", "div": "div", "maximum": "maximum", "minimum": "minimum",
           "power": "pow"}


def _binary(op: str):
    return lambda b, ins, n: b.call(op, [ins[0], ins[1]])


def _scalar(op: str, reverse: bool = False):
    def convert(b, ins, n: Node):
        x = ins[0]
        s = _like(b, n.float("scalar", 0.0), x)
        return b.call(op, [s, x] if reverse else [x, s])
    return convert


def _add_n(b, ins, n: Node):
    y = ins[0]
    for v in ins[1:]:
        y = b.call("add", [y, v])
    return y


# -- shape and movement ---------------------------------------------------------------------------------------------
def _reshape_to_inferred(b, ins, n: Node):
    """Reshape, Flatten, expand_dims, squeeze: the output shape is MXNet's own (its special codes 0/-1/-2/-3/-4
    resolved by MXNet's shape inference)."""
    if n.shapes is None:
        raise n.unsupported("a reshape whose shape MXNet could not infer")
    return b.call("reshape", [ins[0]], shape=tuple(n.shapes[0]))


def _flatten(b, ins, n: Node):
    x = ins[0]
    return b.call("reshape", [x], shape=(x.shape[0], -1) if x.type.ndim else (1,))


def _transpose(b, ins, n: Node):
    x = ins[0]
    axes = n.tuple("axes") or tuple(reversed(range(x.type.ndim)))
    return b.call("permute", [x], dims=tuple(a % x.type.ndim for a in axes))


def _concat(b, ins, n: Node):
    dim = n.int("dim", 1) % ins[0].type.ndim
    return b.call("cat", list(ins), dim=dim) if len(ins) > 1 else b.call("copy", [ins[0]])


def _slice_axis(b, ins, n: Node):
    x = ins[0]
    axis = n.int("axis") % x.type.ndim
    size = x.shape[axis]
    begin, end = n.int("begin", 0), n.int("end", None)
    begin = begin + size if begin < 0 else begin
    end = size if end is None else (end + size if end < 0 else end)
    return b.call("slice", [x], dim=axis, start=begin, end=min(end, size), step=1)


def _slice(b, ins, n: Node):
    x = ins[0]
    begin, end, step = n.tuple("begin"), n.tuple("end"), n.tuple("step")
    for axis in range(len(begin)):
        size = x.shape[axis]
        s = (step[axis] if axis < len(step) and step[axis] is not None else 1)
        if s != 1:
            raise n.unsupported("a step other than 1")
        lo = 0 if begin[axis] is None else begin[axis] % size if begin[axis] < 0 else min(begin[axis], size)
        hi = size if end[axis] is None else end[axis] + size if end[axis] < 0 else min(end[axis], size)
        if (lo, hi) != (0, size):
            x = b.call("slice", [x], dim=axis, start=lo, end=hi, step=1)
    return x if x is not ins[0] else b.call("copy", [x])


def _pad(b, ins, n: Node):
    x = ins[0]
    width = n.tuple("pad_width")
    mode = PAD_MODES.get(n.text("mode", "constant"))
    if mode is None or len(width) != 2 * x.type.ndim or any(width[:4]):
        raise n.unsupported(f"mode {n.text('mode')} with pad_width {width}")
    pad = tuple(int(v) for pair in reversed([width[i:i + 2] for i in range(4, len(width), 2)]) for v in pair)
    return b.call("pad", [x], pad=pad, value=n.float("constant_value", 0.0), mode=mode)


def _reduce(op: str):
    def convert(b, ins, n: Node):
        x = ins[0]
        axes = tuple(a % x.type.ndim for a in n.tuple("axis")) or tuple(range(x.type.ndim))
        if n.bool("exclude"):
            axes = tuple(a for a in range(x.type.ndim) if a not in axes)
        y = b.call(op, [x], axes=axes, keepdim=n.bool("keepdims"))
        if n.shapes and y.shape == () and tuple(n.shapes[0]) == (1,):     # MXNet's full reduction has shape (1,)
            y = b.call("reshape", [y], shape=(1,))
        return y
    return convert


def _softmax(log: bool):
    def convert(b, ins, n: Node):
        x = ins[0]
        if n.float("temperature") not in (None, 1.0):
            x = b.call("div", [x, _like(b, n.float("temperature"), x)])
        if len(ins) > 1 or n.bool("use_length"):
            raise n.unsupported("use_length")
        return b.call("log_softmax" if log else "softmax", [x], dim=n.int("axis", -1) % x.type.ndim)
    return convert


def _softmax_output(b, ins, n: Node):
    """SoftmaxOutput at inference: the softmax of its data (the label input is unused)."""
    x = ins[0]
    if n.bool("multi_output"):
        return b.call("softmax", [x], dim=1)
    if n.bool("preserve_shape"):
        return b.call("softmax", [x], dim=x.type.ndim - 1)
    flat = b.call("reshape", [x], shape=(x.shape[0], -1))
    return b.call("reshape", [b.call("softmax", [flat], dim=1)], shape=x.shape)


def _softmax_activation(b, ins, n: Node):
    x = ins[0]
    if n.text("mode", "instance") == "channel":
        return b.call("softmax", [x], dim=1)
    return _softmax_output(b, ins, Node(n.name, n.op, {}, n.shapes))


def _cast(b, ins, n: Node):
    dtype = n.text("dtype")
    return b.call("cast", [ins[0]], dtype=dtype) if dtype != ins[0].dtype else b.call("copy", [ins[0]])


def _dot(batched: bool):
    def convert(b, ins, n: Node):
        x, y = ins
        if not batched and (x.type.ndim != 2 or y.type.ndim != 2):
            raise n.unsupported("dot of operands that are not both 2-d")
        return b.call("matmul", [x, y], trans_a=n.bool("transpose_a"), trans_b=n.bool("transpose_b"))
    return convert


def _identity(b, ins, n: Node):
    return b.call("copy", [ins[0]])


WEIGHT_SLOTS = {"Convolution": (1, 2), "Deconvolution": (1, 2), "FullyConnected": (1, 2), "BatchNorm": (1, 2, 3, 4),
                "LayerNorm": (1, 2), "LeakyReLU": (1,)}     # input slots that hold weights (baked by optimize_for)
LABEL_OPS = {"SoftmaxOutput": 1, "LinearRegressionOutput": 1, "LogisticRegressionOutput": 1,
             "MAERegressionOutput": 1}      # loss ops: input slot of their label, which inference does not read

CONVERTERS = {
    "Convolution": _convolution, "Deconvolution": _deconvolution, "FullyConnected": _fully_connected,
    "BatchNorm": _batch_norm, "LayerNorm": _layer_norm, "Pooling": _pooling,
    "Activation": _activation, "LeakyReLU": _leaky_relu,
    "Flatten": _flatten, "flatten": _flatten, "Reshape": _reshape_to_inferred, "reshape": _reshape_to_inferred,
    "expand_dims": _reshape_to_inferred, "squeeze": _reshape_to_inferred, "transpose": _transpose,
    "Concat": _concat, "concat": _concat, "slice_axis": _slice_axis, "slice": _slice, "Pad": _pad, "pad": _pad,
    "sum": _reduce("sum"), "mean": _reduce("mean"), "max": _reduce("amax"), "min": _reduce("amin"),
    "softmax": _softmax(False), "log_softmax": _softmax(True), "SoftmaxOutput": _softmax_output,
    "SoftmaxActivation": _softmax_activation, "Cast": _cast, "cast": _cast,
    "dot": _dot(False), "batch_dot": _dot(True),
    "Dropout": _identity, "_copy": _identity, "identity": _identity, "BlockGrad": _identity,
    "stop_gradient": _identity, "add_n": _add_n, "ElementWiseSum": _add_n,
    **_UNARY,
    **{f"elemwise_{k}": _binary(v) for k, v in _BINARY.items() if k in ("add", "sub", "mul", "div")},
    **{f"broadcast_{k}": _binary(v) for k, v in _BINARY.items()},
    "_plus": _binary("add"), "_minus": _binary("sub"), "_mul": _binary("mul"), "_div": _binary("div"),
    "_Plus": _binary("add"), "_Minus": _binary("sub"), "_Mul": _binary("mul"), "_Div": _binary("div"),
    "_maximum": _binary("maximum"), "_minimum": _binary("minimum"), "_power": _binary("pow"),
    "_plus_scalar": _scalar("add"), "_minus_scalar": _scalar("sub"), "_rminus_scalar": _scalar("sub", True),
    "_mul_scalar": _scalar("mul"), "_div_scalar": _scalar("div"), "_rdiv_scalar": _scalar("div", True),
    "_power_scalar": _scalar("pow"), "_rpower_scalar": _scalar("pow", True),
    "_maximum_scalar": _scalar("maximum"), "_minimum_scalar": _scalar("minimum"),
}


def unsupported(nodes) -> list:
    """'op (node name)' for every op node of `nodes` (dicts of the symbol JSON) that has no converter."""
    return [f"{nd['op']} (node {nd['name']!r})" for nd in nodes if nd["op"] != "null" and nd["op"] not in CONVERTERS]


def output_count(op: str, attrs: dict) -> int | None:
    """Outputs of a node of `op` that later nodes may read (BatchNorm's mean and var with output_mean_var)."""
    if op == "BatchNorm":
        return 3 if str(attrs.get("output_mean_var", "False")).lower() in ("true", "1") else 1
    return None


def parse_dtype(name: str) -> str:
    """A dtype name as the `dtype` argument and MXNet spell it, checked against what fxc computes in."""
    valid = ("float32", "float64", "int32", "int64", "int8", "uint8")
    name = str(np.dtype(name)) if not isinstance(name, str) else name
    if name not in valid:
        raise UnsupportedOpError(f"dtype {name!r} is not supported by fxc's MXNet frontend; use one of {valid}")
    return name

