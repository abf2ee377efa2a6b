"""Graph building for importers: python scalars become constants, inputs are promoted per the op's rule,
and unsupported dtypes/attributes raise UnsupportedOpError (the importer then falls back).

The graph IR has no dtype rules of its own: which dtype mixed operands meet at is a *promotion policy* that each
frontend passes to its Builder (`Builder(promotion=...)`): `torch_promotion` (PyTorch's rules: dimensioned tensors
dominate, 0-d tensors and Python scalars only lift the category), the default, and `stated_promotion` for frameworks
that state every type (ONNX, MXNet): tensor operands must already agree and a Python scalar takes their dtype.
A policy is a function `(operands, to_float) -> dtype`; operands are Values and Python scalars."""
from __future__ import annotations

import numpy as np

from ..errors import ShapeError, UnsupportedOpError
from ..ops.common import np_dtype, result_type
from ..ops.registry import get_op
from .graph import Graph, Value

torch_promotion = result_type       # PyTorch's result dtype (fxc.ops.common.result_type)
HALF_FLOATS = ("float16", "bfloat16")   # stored in 16 bits, computed in float32 inside each op (Builder.widen)


def stated_promotion(operands, to_float: bool = False) -> str:
    """Frameworks that state types (ONNX, MXNet): the tensors' one dtype, which Python scalars take; float32 for
    an integer or bool dtype when the op computes in floating point (`to_float`)."""
    dtypes = {x.dtype for x in operands if isinstance(x, Value)}
    if len(dtypes) > 1:
        raise ShapeError(f"operands of dtypes {sorted(dtypes)} meet in one op; this frontend states every type, "
                         f"so the model must cast them to one dtype first")
    if dtypes:
        out = dtypes.pop()
    else:
        out = result_type(operands)
    if to_float and out not in ("float16", "bfloat16", "float32", "float64"):
        out = "float32"
    return out


class Builder:
    def __init__(self, graph: Graph | None = None, random: bool = False, promotion=torch_promotion):
        self.graph = graph if graph is not None else Graph()
        self.promotion = promotion  # (operands, to_float) -> dtype: the frontend's rule (see the module doc)
        self._scalars: dict = {}
        self.random = random        # the caller feeds a seed input (rng_seed) on every call: random ops convert
        self.seed = None
        self._streams = 0

    def rng_seed(self) -> Value:
        """The graph's int64[1] seed input (fxc/ops/random.py), made at the first random op."""
        if self.seed is None:
            self.seed = self.graph.input((1,), "int64", "fxc_rng_seed")
        return self.seed

    def next_stream(self) -> int:
        """A number of its own for each random op, so two draw different numbers from one seed."""
        self._streams += 1
        return self._streams

    def const(self, array) -> Value:
        return Graph.const(array)

    def scalar(self, value, dtype: str) -> Value:
        key = (repr(value), type(value), dtype)
        v = self._scalars.get(key)
        if v is None:
            v = self._scalars[key] = Graph.const(np.array(value, dtype=np_dtype(dtype)))
        return v

    def result_type(self, operands, to_float: bool = False) -> str:
        return self.promotion(operands, to_float)

    def as_tensor(self, x, dtype: str) -> Value:
        if not isinstance(x, Value):
            if isinstance(x, (list, tuple)):
                return self.const(np.array(x, dtype=np_dtype(dtype)))
            return self.scalar(x, dtype)
        if x.dtype == dtype:
            return x
        if x.is_const and dtype not in HALF_FLOATS:     # graph constants have numpy dtypes: 16-bit floats are casts
            return self.const(x.data.astype(np_dtype(dtype)))
        return self.call("cast", [x], dtype=dtype)

    def half_floats(self, x) -> set:
        """The 16-bit float dtypes in a converter's arguments x (Values and dtype names, in lists, tuples, dicts)."""
        if isinstance(x, Value):
            return {x.dtype} & set(HALF_FLOATS)
        if isinstance(x, str):
            return {x} & set(HALF_FLOATS)
        if isinstance(x, dict):
            x = tuple(x.values())
        if isinstance(x, (list, tuple)):
            return set().union(*(self.half_floats(a) for a in x))
        return set()

    def widen(self, x):
        """x with its 16-bit floats made float32 (Values cast, dtype names replaced): an op over float16 / bfloat16
        tensors computes in float32, as PyTorch's CPU kernels do (a product of two 16-bit floats is exact in float32),
        and `narrow` rounds its results back at the op's boundary. A 16-bit value that is a float32 one rounded
        (autocast's cast, or the previous op's result) widens to that float32 value rounded in place (`round_to`):
        the same numbers, and the producer's kernel need not convert to 16 bits and back."""
        if isinstance(x, Value) and x.dtype in HALF_FLOATS:
            src = x.node.inputs[0] if x.node is not None and x.node.op == "cast" else None
            if src is not None and src.dtype == "float32":      # float32 rounded to 16 bits: stays float32, rounded
                return self.call("round_to", [src], dtype=x.dtype)
            return self.call("cast", [x], dtype="float32")
        if isinstance(x, str):
            return "float32" if x in HALF_FLOATS else x
        if isinstance(x, dict):
            return {k: self.widen(v) for k, v in x.items()}
        if isinstance(x, (list, tuple)):
            return type(x)(self.widen(a) for a in x)
        return x

    def narrow(self, out, dtypes):
        """A widened op's results rounded (to nearest even) to the dtypes the framework gives them; dtypes: one
        per result (a tuple for several, None where a result is no tensor)."""
        if isinstance(out, Value):
            return self.as_tensor(out, dtypes) if dtypes in HALF_FLOATS and out.dtype != dtypes else out
        if isinstance(out, (list, tuple)) and isinstance(dtypes, (list, tuple)):
            return type(out)(self.narrow(o, d) for o, d in zip(out, dtypes))
        return out

    def promote(self, *xs, to_float: bool = False) -> list:
        dt = self.promotion(xs, to_float)
        return [self.as_tensor(x, dt) for x in xs]

    def call(self, op: str, inputs: list, **attrs):
        """Add a node; returns its Value (or a tuple of Values for multi-output ops)."""
        opdef = get_op(op)
        if opdef.promote in ("common", "float"):
            inputs = self.promote(*inputs, to_float=opdef.promote == "float")
        elif any(not isinstance(x, Value) for x in inputs):
            dt = self.promotion([x for x in inputs if isinstance(x, Value)] or inputs)
            inputs = [self.as_tensor(x, dt) for x in inputs]
        for v in inputs:
            if v.dtype not in opdef.dtypes:
                raise UnsupportedOpError(f"{op} does not support dtype {v.dtype}")
        if opdef.check is not None:
            reason = opdef.check([v.type for v in inputs], **attrs)
            if reason:
                raise UnsupportedOpError(f"{op}: {reason}")
        outs = self.graph.call(op, inputs, **attrs)
        return outs[0] if len(outs) == 1 else tuple(outs)
