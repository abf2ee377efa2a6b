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
        if x.is_const:
            return self.const(x.data.astype(np_dtype(dtype)))
        return self.call("cast", [x], dtype=dtype)

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
