"""Graph building for importers: python scalars become constants, inputs are promoted per the op's rule,
and unsupported dtypes/attributes raise UnsupportedOpError (the importer then falls back)."""
from __future__ import annotations

import numpy as np

from ..errors import UnsupportedOpError
from ..ops.common import np_dtype, result_type
from ..ops.registry import get_op
from .graph import Graph, Value


class Builder:
    def __init__(self, graph: Graph | None = None, random: bool = False):
        self.graph = graph if graph is not None else Graph()
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
        return result_type(operands, to_float)

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
        dt = result_type(xs, to_float)
        return [self.as_tensor(x, dt) for x in xs]

    def call(self, op: str, inputs: list, **attrs):
        """Add a node; returns its Value (or a tuple of Values for multi-output ops)."""
        opdef = get_op(op)
        if opdef.promote in ("common", "float"):
            inputs = self.promote(*inputs, to_float=opdef.promote == "float")
        elif any(not isinstance(x, Value) for x in inputs):
            dt = result_type([x for x in inputs if isinstance(x, Value)] or inputs)
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
