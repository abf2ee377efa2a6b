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
import warnings
from collections.abc import Callable

import numpy as np

from ...errors import QuantizationWarning, ShapeError, UnsupportedOpError
from ...ops.registry import aten_table
from ...relay_like.builder import Builder, stated_promotion
from ...relay_like.graph import Value
from ...relay_like.passes.fold_constants import evaluate, folds
from ...symbolic.expr import Expr
from ...symbolic.sym import canonical
from ...types import TensorType

_TABLE: dict = {}       # op type -> sorted list of (since opset, converter)
NEWEST_OPSET = 28       # the newest default-domain opset the converters follow (onnx 1.23's); a model of a newer
                        # one is converted as at this one, with a warning


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


MAX_ELEMENTS = 1 << 40        # the most elements of any tensor of a converted model (4 TiB of float32)
TABLE_MAX_ELEMENTS = 1 << 28   # the most elements of a table a converter builds from the model's values
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


def _elements(v: Value) -> int | None:
    """The number of elements of a Value of static shape, else None."""
    return int(np.prod(v.shape, dtype=object)) if all(isinstance(d, int) for d in v.shape) else None


class FoldingBuilder(Builder):
    """A Builder with ONNX's promotion policy that evaluates an op over constants at once (its registry
    reference): shape arithmetic, weights made by ConstantOfShape, dequantised weights become constants. An op whose
    outputs would hold more than fold_constants.MAX_FOLD_ELEMENTS and more than its inputs (an Expand or Tile of a
    constant to a huge shape: fold_constants.folds, the one rule) stays in the graph: computed at run time, never a
    huge constant made here."""

    def __init__(self):
        super().__init__(promotion=stated_promotion)
        self.where = lambda: None       # the ONNX node being converted, as errors name it (Context sets it)

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
        sizes = [_elements(o) for o in node.outputs]
        if any(n is not None and n > MAX_ELEMENTS for n in sizes):
            raise ShapeError(f"{op} makes a tensor of shape {list(node.outputs[0].shape)}: more than {MAX_ELEMENTS} "
                             f"elements, which no device holds; check the model's shapes and attributes")
        if not node.inputs or not all(v.is_const for v in node.inputs) or not folds(node) \
                or op == "dequantize" and node.inputs[0].type.numel > 1:
            return out          # (a constant too big to fold is computed at run time: fold_constants.folds; a
                                # dequantised weight stays int8 for the graph pass relay_like/passes/quantize.py)
        self.graph.nodes.pop()
        vals = [self.const(r) for r in evaluate(node, self.where())]
        return vals[0] if len(vals) == 1 else tuple(vals)



def describe(node) -> str:
    """'OpType (node 'name')' of an ONNX node (its first output where it has no name) for messages."""
    return f"{node.op_type} (node {node.name or (node.output[0] if node.output else '')!r})"


class Context:
    """What a converter sees: the builder, the model's opset and the node being converted."""

    def __init__(self, b: FoldingBuilder, opset: int):
        self.b, self.opset, self.node = b, opset, None
        b.where = self.where
        self.narrow: dict = {}      # Value id -> "int4" / "uint4": an initializer of 4-bit values, held in bytes
        self.refused: set = set()   # the quantisation schemes computed in float32 (warn_refused names them once)

    def refuse(self, scheme: str) -> None:
        """A quantisation scheme this converter computes in float32, for the model's one warning."""
        self.refused.add(scheme)

    def warn_refused(self) -> None:
        """One QuantizationWarning naming every scheme the model's converters computed in float32."""
        if self.refused:
            warnings.warn(QuantizationWarning(
                f"fxc: this ONNX model uses {'; '.join(sorted(self.refused))}: fxc has no integer kernels for this "
                f"quantisation scheme, so those nodes compute in float32 as ONNX defines them (docs/int8.md)"),
                stacklevel=3)

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

    def ints(self, v, what: str, vector: bool = False):
        """The integers of a constant input (None for an omitted one; a symbolic shape value's symbolic entries as
        int64 expressions); vector: it must be 1-d (Squeeze's axes, which onnx's reference evaluator refuses 0-d)."""
        d = self.const(v, what)
        if d is not None and vector and np.ndim(d) != 1:
            raise ShapeError(f"{self.where()}: its {what} is a tensor of shape {list(np.shape(d))}; ONNX states a 1-d "
                             f"tensor")
        return None if d is None else [i if isinstance(i, Expr) else int(i) for i in np.asarray(d).reshape(-1)]

    def table(self, elements: int, what: str) -> None:
        """A constant table the converter builds from the model's values (OneHot's depth, Resize's sizes, Range's
        count) holds at most TABLE_MAX_ELEMENTS: past that a ShapeError naming the node, before it is allocated."""
        if elements > TABLE_MAX_ELEMENTS:
            raise ShapeError(f"{self.where()}: its {what} asks fxc for a table of {elements} elements (at most "
                             f"{TABLE_MAX_ELEMENTS}); check the model's values")

    def one_int(self, v, what: str) -> int:
        """The integer of a constant that holds one (0-d, or 1-d of one element: an axis, k, a depth...)."""
        d = np.asarray(self.const(v, what))
        if d.size != 1 or d.ndim > 1:
            raise ShapeError(f"{self.where()}: its {what} is a tensor of shape {list(d.shape)}; it must hold one value")
        return int(d.reshape(-1)[0])

    def axis(self, axis, rank: int, what: str = "axis") -> int:
        """`axis` of a tensor of `rank` (negative counts from the end) in [0, rank): every converter's axis comes
        through here, so one out of ONNX's range [-rank, rank - 1] is a ShapeError naming the node (never wrapped
        modulo the rank, never clamped)."""
        a = int(axis)
        if not -rank <= a < rank:
            raise ShapeError(f"{self.where()}: {what} {a} is out of range for a tensor of rank {rank} (ONNX allows "
                             f"{-rank} to {rank - 1}); fix the model's {what}")
        return a % rank

    def axes(self, axes, rank: int, what: str = "axes") -> list:
        """Each of `axes` through `axis`, in their order; an axis named twice (as i and i - rank too) is a
        ShapeError naming the node."""
        out = [self.axis(a, rank, what) for a in axes]
        if len(set(out)) != len(out):
            raise ShapeError(f"{self.where()}: {what} {list(axes)} name an axis twice (rank {rank}); fix the "
                             f"model's {what}")
        return out

    def scalar(self, value, dtype: str) -> Value:
        return self.b.scalar(value, dtype)

    def where(self) -> str:
        n = self.node
        return describe(n) if n is not None else "the model's inputs"

    def unsupported(self, what: str) -> UnsupportedOpError:
        return UnsupportedOpError(f"{self.where()}: {what} is not supported by fxc")
