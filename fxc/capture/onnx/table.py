"""The ONNX converter table: one converter per ONNX op, versioned by opset, and the context converters run in.

A converter is registered with `@converter("OpType", since=N)`: it converts nodes of models whose default-domain
opset is N or newer, until the next converter of that op (ONNX's own `since_version` where the op's meaning
changed). It takes `(cx, ins, at)`: the conversion context, the node's inputs (Values; None for an omitted
optional input) and its attributes (Python values, tensors as numpy arrays) and returns a Value or a tuple of
Values, one per node output. Converters compose registry ops (`cx.op`) and, where one already exists, an ATen
composition from the op registry (`cx.aten`); they never compute on data, except on constants.
"""
from __future__ import annotations

import bisect
from collections.abc import Callable

import numpy as np

from ...errors import UnsupportedOpError
from ...ops.common import np_dtype
from ...ops.registry import aten_table, get_op
from ...relay_like.builder import Builder, stated_promotion
from ...relay_like.graph import Value
from ...symbolic.expr import Expr
from ...symbolic.sym import canonical
from ...types import TensorType

_TABLE: dict = {}       # op type -> sorted list of (since opset, converter)


def converter(*op_types: str, since: int = 1) -> Callable:
    """Register the decorated function as the converter of `op_types` from opset `since` on."""
    def deco(fn):
        for t in op_types:
            entries = _TABLE.setdefault(t, [])
            if any(s == since for s, _ in entries):
                raise ValueError(f"ONNX op {t} has two converters from opset {since}")
            bisect.insort(entries, (since, fn), key=lambda e: e[0])
        return fn
    return deco


def lookup(op_type: str, opset: int):
    """The converter of `op_type` for a model of `opset`, or None."""
    entries = _TABLE.get(op_type, ())
    fit = [fn for since, fn in entries if since <= opset]
    return fit[-1] if fit else None


def table() -> dict:
    """op type -> list of (since opset, converter): the whole table (for docs and the conformance report)."""
    return {k: list(v) for k, v in sorted(_TABLE.items())}


class NeedsValues(UnsupportedOpError):
    """A shape-like operand (a shape, axes, pads...) computed from graph inputs: their values must be known to
    compile, so the model specialises on them (bound at the call, guarded: other values compile again)."""

    def __init__(self, message: str, names: set):
        super().__init__(message)
        self.names = names


SPECIALIZE_MAX = 4096       # the most elements an input may have for the model to specialise on its value


def _sources(v: Value) -> list:
    """The graph inputs a Value is computed from."""
    seen, stack, out = set(), [v], []
    while stack:
        x = stack.pop()
        if x.id in seen:
            continue
        seen.add(x.id)
        if x.node is None and not x.is_const:
            out.append(x)
        elif x.node is not None:
            stack.extend(x.node.inputs)
    return out


class FoldingBuilder(Builder):
    """A Builder with ONNX's promotion policy that evaluates an op over constants at once (its registry
    reference): shape arithmetic, weights made by ConstantOfShape, dequantised weights become constants."""

    def __init__(self):
        super().__init__(promotion=stated_promotion)

    def const(self, array) -> Value:
        """A constant; an int array holding size symbols (the Shape of a tensor with a named dim: [batch, 8, 2, 2])
        is a symbolic shape value: an int64 constant whose data are ints and int64 expressions, folded like any
        other constant into the shapes it makes (a Reshape's target), never an operand of a kernel."""
        a = np.asarray(array)
        if a.dtype != object:
            return super().const(a)
        a = np.vectorize(canonical, otypes=[object])(a) if a.size else a
        if not any(isinstance(d, Expr) for d in a.reshape(-1)):
            return super().const(a.astype(np.int64))
        return Value(TensorType(a.shape, "int64"), data=a)

    def call(self, op: str, inputs: list, **attrs):
        out = super().call(op, inputs, **attrs)
        node = self.graph.nodes[-1]
        if not node.inputs or not all(v.is_const for v in node.inputs):
            return out
        self.graph.nodes.pop()
        res = get_op(op).reference(*[v.data for v in node.inputs], **node.attrs)
        res = res if isinstance(res, (tuple, list)) else (res,)
        vals = [self.const(_as_dtype(np.asarray(r), o.dtype).reshape(o.shape)) for r, o in zip(res, node.outputs)]
        return vals[0] if len(vals) == 1 else tuple(vals)


def _as_dtype(a: np.ndarray, dtype: str) -> np.ndarray:
    """A folded result in the output's dtype; a symbolic shape value (object data) stays one while it is int64."""
    if a.dtype == object and dtype == "int64":
        return a
    return a.astype(np_dtype(dtype))


class Context:
    """What a converter sees: the builder, the model's opset and the node being converted."""

    def __init__(self, b: FoldingBuilder, opset: int):
        self.b, self.opset, self.node = b, opset, None

    def op(self, name: str, inputs: list, **attrs):
        return self.b.call(name, inputs, **attrs)

    def aten(self, target: str, *args, **kwargs):
        """Build through the op registry's composition for ATen overload `target` (e.g. a convolution)."""
        op, conv = aten_table()[target]
        return self.b.call(op.name, list(args), **kwargs) if conv is None else conv(self.b, *args, **kwargs)

    def const(self, v, what: str) -> np.ndarray:
        """The data of an input that must be a constant (a shape, axes, pads...)."""
        if v is None:
            return None
        if isinstance(v, Value) and not v.is_const:
            src = _sources(v)
            if src and all(x.type.numel <= SPECIALIZE_MAX for x in src):
                raise NeedsValues(f"{self.where()}: its {what} comes from input(s) {[x.name for x in src]}",
                                  {x.name for x in src})
        if not isinstance(v, Value) or not v.is_const:
            raise UnsupportedOpError(f"{self.where()}: its {what} must be a constant (an initializer or computed "
                                     f"from one); fxc compiles static shapes")
        return v.data

    def ints(self, v, what: str):
        """The ints of a constant input; a symbolic shape value's symbolic entries as int64 expressions."""
        d = self.const(v, what)
        return None if d is None else [i if isinstance(i, Expr) else int(i) for i in np.asarray(d).reshape(-1)]

    def scalar(self, value, dtype: str) -> Value:
        return self.b.scalar(value, dtype)

    def where(self) -> str:
        n = self.node
        return f"{n.op_type} (node {n.name or n.output[0]!r})" if n is not None else "the model's inputs"

    def unsupported(self, what: str) -> UnsupportedOpError:
        return UnsupportedOpError(f"{self.where()}: {what} is not supported by fxc")
