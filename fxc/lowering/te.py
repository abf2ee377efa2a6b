"""Tensor expressions: *what* a fused group computes, one `compute` per op output.

A Tensor is a placeholder (a buffer given from outside), a `compute` (a body expression over its axis
variables, possibly a `Reduce`), or an `extern` (a function that writes loop-IR statements for ops
such as sort or cumsum that are not a per-element formula). References `t[i, j]` are `TRef` exprs.
"""
from __future__ import annotations

import itertools
from typing import Callable

from ..errors import INDEX_OPS
from ..symbolic.expr import ITEMSIZE, CheckIndex, Const, Expr, Var, as_expr, is_float
from ..symbolic.sym import canonical

_names = itertools.count()


class Tensor:
    __slots__ = ("name", "shape", "dtype", "axes", "body", "extern", "inputs", "index", "attrs", "__weakref__")

    def __init__(self, name, shape, dtype, axes=(), body=None, extern=None, inputs=(), index=0, attrs=None):
        self.name, self.shape, self.dtype = name, tuple(canonical(s) for s in shape), dtype   # (one form per size)
        self.axes, self.body, self.extern = tuple(axes), body, extern
        self.inputs, self.index = tuple(inputs), index
        self.attrs = attrs or {}     # schedule facts about the op (e.g. which operand is the packed weight)

    @property
    def is_placeholder(self) -> bool:
        return self.body is None and self.extern is None

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __getitem__(self, idx) -> Expr:
        if not isinstance(idx, tuple):
            idx = (idx,)
        assert len(idx) == len(self.shape), (self.name, idx, self.shape)
        return TRef(self, *(as_expr(i) for i in idx))

    def __repr__(self):
        return f"Tensor({self.name}, {self.shape}, {self.dtype})"


class TRef(Expr):
    """Element `tensor[indices]` of a tensor expression."""

    __slots__ = ()

    def _infer_dtype(self):
        return self.args[0].dtype

    @property
    def tensor(self) -> Tensor:
        return self.args[0]

    @property
    def indices(self) -> tuple:
        return self.args[1:]

    def __repr__(self):
        return f"{self.args[0].name}[{', '.join(map(repr, self.args[1:]))}]"


class Reduce(Expr):
    """combiner(init, body over the reduce axes). op in sum, prod, max, min; axes: tuple of (Var, extent)."""

    __slots__ = ()

    def _infer_dtype(self):
        return self.args[1].dtype

    @property
    def op(self): return self.args[0]
    @property
    def body(self): return self.args[1]
    @property
    def axes(self): return self.args[2]
    @property
    def init(self): return self.args[3]


REDUCE_INIT = {"sum": 0, "prod": 1, "max": "-inf", "min": "inf"}


def reduce_init(op: str, dtype: str) -> Const:
    v = REDUCE_INIT[op]
    if isinstance(v, str):
        if is_float(dtype):
            return Const(float(v), dtype)
        if dtype == "bool":
            return Const(op == "min", "bool")
        bits = ITEMSIZE[dtype] * 8
        lo, hi = (0, 255) if dtype == "uint8" else (-(1 << (bits - 1)), (1 << (bits - 1)) - 1)
        return Const(lo if op == "max" else hi, dtype)
    return Const(v, dtype)


def check_index(i, n, op: str, wrap: bool = False):
    """A data-dependent index into a dimension of size n, checked as eager PyTorch checks it (symbolic/expr.py,
    CheckIndex): outside [0, n), or [-n, n) where the op counts negative indices from the end (wrap), the call
    fails with fxc.errors.IndexOutOfRangeError naming `op` and the index, and no buffer is read out of bounds."""
    return CheckIndex(i, n, wrap, INDEX_OPS.index(op))


def placeholder(shape, dtype: str, name: str = "x") -> Tensor:
    return Tensor(f"{name}", shape, dtype)


def compute(shape, fn: Callable[..., Expr], name: str = "t", attrs: dict | None = None) -> Tensor:
    """attrs: facts a specialised schedule may use (its "schedule" key names it); the body stays the truth."""
    axes = tuple(Var(f"i{d}_") for d in range(len(shape)))
    body = fn(*axes)
    if not isinstance(body, Expr):
        raise TypeError(f"compute {name}: body must be an expression, got {body!r}")
    return Tensor(name, shape, body.dtype, axes, body, attrs=attrs)


def extern(outputs, inputs, lower: Callable, name: str = "ext"):
    """An op written directly as loop IR. outputs: [(shape, dtype)]; inputs: Tensors (placeholders);
    lower(out_buffers, in_buffers) -> statement. Returns one Tensor per output."""
    inputs = tuple(inputs)
    return [Tensor(f"{name}{k}", shape, dtype, extern=lower, inputs=inputs, index=k)
            for k, (shape, dtype) in enumerate(outputs)]


def reduce_axis(extent: int, name: str = "r") -> tuple:
    return (Var(name), extent if isinstance(extent, Expr) else int(extent))     # (a symbolic length: sym_loops.py)


def reduce(op: str, body: Expr, axes) -> Expr:
    axes = tuple(axes)
    if not axes:
        return body
    return Reduce(op, body, axes, reduce_init(op, body.dtype))


def sum_(body, axes): return reduce("sum", body, axes)
def max_(body, axes): return reduce("max", body, axes)
def min_(body, axes): return reduce("min", body, axes)
