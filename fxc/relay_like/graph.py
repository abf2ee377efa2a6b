"""The graph IR: a typed SSA dataflow graph of registry ops.

`Value`s carry a `TensorType`; a `Node` applies a registry op to input Values with hashable attrs and
produces output Values. Constants are Values with `.data` (a numpy array); graph inputs have neither
producer nor data. `Graph.nodes` is always in topological order.
"""
from __future__ import annotations

import itertools
from typing import Optional

import numpy as np

from ..errors import ShapeError
from ..ops.registry import get_op
from ..symbolic.expr import DTYPES
from ..symbolic.sym import canonical
from ..types import TensorType  # noqa: F401  (re-exported: the graph IR's type)

_ids = itertools.count()


class Value:
    __slots__ = ("type", "node", "index", "name", "data", "id")

    def __init__(self, type: TensorType, node=None, index=0, name=None, data=None):
        self.type, self.node, self.index, self.data = type, node, index, data
        self.id = next(_ids)
        self.name = name or f"v{self.id}"

    @property
    def is_const(self) -> bool:
        return self.data is not None

    @property
    def shape(self) -> tuple:
        return self.type.shape

    @property
    def dtype(self) -> str:
        return self.type.dtype

    def __repr__(self):
        return f"%{self.name}"


def _const_text(data: np.ndarray) -> str:
    """A constant's values for a graph dump: all of them when few, else their count and range."""
    a = np.asarray(data)
    if a.size <= 8:
        return np.array2string(a.reshape(-1), precision=6, separator=", ") if a.ndim else repr(a.item())
    if a.dtype.kind in "biuf":
        text = (lambda x: f"{float(x):.6g}") if a.dtype.kind == "f" else (lambda x: str(int(x)))
        return f"<{a.size} values in [{text(a.min())}, {text(a.max())}]>"
    return f"<{a.size} values>"


def freeze_attr(v):
    if isinstance(v, (list, tuple)):
        return tuple(freeze_attr(x) for x in v)
    if isinstance(v, dict):
        return tuple(sorted((k, freeze_attr(x)) for k, x in v.items()))
    if isinstance(v, np.generic):
        return v.item()
    return v


class Node:
    __slots__ = ("op", "inputs", "attrs", "outputs", "name")

    def __init__(self, op: str, inputs: list, attrs: dict, out_types: list, name: Optional[str] = None):
        self.op, self.inputs = op, list(inputs)
        self.attrs = {k: freeze_attr(v) for k, v in attrs.items()}
        self.outputs = [Value(t, self, i) for i, t in enumerate(out_types)]
        self.name = name or f"{op}_{self.outputs[0].id if self.outputs else next(_ids)}"

    def key(self):
        return (self.op, tuple(v.id for v in self.inputs), tuple(sorted(self.attrs.items())))

    def __repr__(self):
        outs = ", ".join(f"{o!r}: {o.type!r}" for o in self.outputs)
        attrs = "".join(f", {k}={v!r}" for k, v in self.attrs.items())
        return f"{outs} = {self.op}({', '.join(map(repr, self.inputs))}{attrs})"


def node_appender(nodes: list):
    """add(op, inputs, attrs): a node of registry op `op` appended to `nodes` (a pass rebuilding a graph's node
    list), its output type from the op's rule; returns its first output."""

    def add(op: str, inputs: list, attrs: dict) -> Value:
        node = Node(op, inputs, attrs, get_op(op).infer([v.type for v in inputs], **attrs))
        nodes.append(node)
        return node.outputs[0]
    return add


def with_inputs(n: Node, inputs: list, attrs: dict | None = None) -> Node:
    """A node of n's op on new inputs (and attrs) that writes n's own output Values (their ids, names and users stay
    valid): for a pass that changes what a node reads, not what it makes."""
    rep = Node(n.op, inputs, n.attrs if attrs is None else attrs, [o.type for o in n.outputs])
    rep.outputs = n.outputs
    for i, o in enumerate(rep.outputs):
        o.node, o.index = rep, i
    return rep


class Graph:
    def __init__(self, inputs=(), outputs=(), nodes=()):
        self.inputs: list = list(inputs)
        self.outputs: list = list(outputs)
        self.nodes: list = list(nodes)
        self.weights: set = set()       # ids of inputs that are weights (change rarely; see passes/hoist.py)
        self.symbols: dict = {}         # size symbol name -> SymInfo (range, divisor) of its symbolic dims

    # -- building ----------------------------------------------------------------------------
    def input(self, shape, dtype: str, name: Optional[str] = None) -> Value:
        v = Value(TensorType(tuple(canonical(s) for s in shape), dtype), name=name)
        self.inputs.append(v)
        return v

    @staticmethod
    def const(array) -> Value:
        a = np.asarray(array)
        a = np.ascontiguousarray(a) if a.ndim else a.copy()   # ascontiguousarray would make 0-d arrays 1-d
        dtype = str(a.dtype)
        if dtype not in DTYPES:
            raise ShapeError(f"constant of dtype {dtype} is not supported; use one of {DTYPES}")
        return Value(TensorType(a.shape, dtype), data=a)

    def call(self, op: str, inputs: list, **attrs) -> list:
        """Append a node of registry op `op`; returns its output Values (types from the op's rule)."""
        opdef = get_op(op)
        attrs = {k: freeze_attr(v) for k, v in attrs.items()}
        types = opdef.infer([v.type for v in inputs], **attrs)
        node = Node(op, inputs, attrs, types)
        self.nodes.append(node)
        return node.outputs

    def call1(self, op: str, inputs: list, **attrs) -> Value:
        return self.call(op, inputs, **attrs)[0]

    # -- queries -------------------------------------------------------------------------------
    def users(self) -> dict:
        """Value id -> list of (node, input position) that read it."""
        out: dict = {}
        for n in self.nodes:
            for i, v in enumerate(n.inputs):
                out.setdefault(v.id, []).append((n, i))
        return out

    def constants(self) -> list:
        seen, out = set(), []
        for n in self.nodes:
            for v in n.inputs:
                if v.is_const and v.id not in seen:
                    seen.add(v.id)
                    out.append(v)
        for v in self.outputs:
            if v.is_const and v.id not in seen:
                seen.add(v.id)
                out.append(v)
        return out

    def copy(self) -> "Graph":
        g = Graph(self.inputs, self.outputs, self.nodes)
        g.weights = set(self.weights)
        g.symbols = dict(self.symbols)
        return g

    def __str__(self):
        lines = [f"graph({', '.join(f'{v!r}: {v.type!r}' for v in self.inputs)}):"]
        lines += [f"  {v!r}: {v.type!r} = const {_const_text(v.data)}" for v in self.constants()]
        for n in self.nodes:
            lines.append("  " + repr(n))
        lines.append(f"  return {', '.join(map(repr, self.outputs))}")
        return "\n".join(lines)
