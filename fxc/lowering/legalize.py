"""Capability-driven rewrites of loop IR before a renderer sees it.

`scalarize(stmt)` takes loop IR with vector expressions (VecLoad, Broadcast, Shuffle, Lane, LaneReduce,
bf16x2 words, vector lets and stores: what the CPU schedules produce) and returns the same computation in
scalar expressions only; a vector store becomes one store per lane, a lane reduction a chain of its lanes'
scalar ops, a 4-way byte dot (DotI8) int32 arithmetic. A device renderer whose vector types do not cover every
width the CPU schedules use (OpenCL C has 2, 3, 4, 8 and 16 lanes; GLSL 2 to 4) renders the result instead;
devices vectorise across work-items.
`scalarize(stmt, keep)` leaves alone the float32 vectors of widths in `keep` (a device's Caps.vector_widths) built
only from what a device language has natively: contiguous vector loads, broadcasts, constants, lane-wise
arithmetic and fma, and at their edge a lane pick or a lane reduction (the GPU schedules' vector loads); every
other vector is taken apart.
"""
from __future__ import annotations

from ..errors import LoweringError
from ..symbolic.expr import (
    Bf16Half,
    Bin,
    Broadcast,
    Cast,
    Const,
    DotBf16,
    DotI8,
    Expr,
    Fma,
    Lane,
    LaneReduce,
    Load,
    PackBf16,
    Select,
    Shuffle,
    Un,
    Var,
    VecLoad,
    as_expr,
    binary,
    cast,
    compare,
    dot_i8_generic,
    lanes_of,
    rebuild,
    scalar_of,
    select,
)
from .loop_ir import Allocate, For, IfThen, LetStmt, Seq, Stmt, Store, map_body, seq

_FOLD = {"add": "add", "max": "max", "min": "min", "mul": "mul"}


_NATIVE_BIN = ("add", "sub", "mul", "div", "max", "min")


class _Scalarizer:
    def __init__(self, keep=frozenset()):
        self.memo: dict = {}
        self.lanes: dict = {}       # vector Var -> its lanes' scalar Vars
        self.keep = frozenset(keep)
        self._native: dict = {}

    def native(self, e: Expr) -> bool:
        """Whether vector e stays a vector: float32 of a kept width, made of native parts only."""
        r = self._native.get(e)
        if r is None:
            r = e.dtype.startswith("float32x") and lanes_of(e.dtype) in self.keep and (
                isinstance(e, (Const, Broadcast)) or isinstance(e, VecLoad) and e.args[3] == 1
                and e.args[0].dtype == "float32"
                or isinstance(e, Bin) and e.args[0] in _NATIVE_BIN and all(self.native(a) for a in e.args[1:])
                or isinstance(e, Fma) and all(self.native(a) for a in e.args))
            self._native[e] = r
        return r

    def vector(self, e: Expr) -> Expr:
        """A native vector e with its scalar parts (indices, broadcast values) scalarized."""
        if isinstance(e, Const):
            return e
        return rebuild(e, tuple(self.vector(a) if isinstance(a, Expr) and lanes_of(a.dtype) > 1
                                else self.scal(a) if isinstance(a, Expr) else a for a in e.args))

    def scal(self, e: Expr) -> Expr:
        """A scalar-typed expression with every vector inside it taken apart."""
        key = (e, None)
        r = self.memo.get(key)
        if r is not None:
            return r
        if lanes_of(e.dtype) > 1:
            raise LoweringError(f"vector expression {e!r} where a scalar is needed")
        if isinstance(e, (Const, Var)):
            r = e
        elif isinstance(e, Lane) and isinstance(e.args[1], Const) and self.native(e.args[0]):
            r = Lane(self.vector(e.args[0]), e.args[1])     # a native vector's lane: v.sk
        elif isinstance(e, LaneReduce) and e.args[0] in _FOLD and self.native(e.args[1]):
            r = LaneReduce(e.args[0], self.vector(e.args[1]))
        elif isinstance(e, Lane):
            v, k = e.args
            if isinstance(k, Const):
                r = self.lane(v, k.value)
            else:                   # a lane picked by a variable: the lanes in a select chain
                k = self.scal(k)
                n = lanes_of(v.dtype)
                r = self.lane(v, n - 1)
                for j in reversed(range(n - 1)):
                    r = select(compare("eq", k, as_expr(j, k.dtype)), self.lane(v, j), r)
        elif isinstance(e, DotI8):
            r = self.scal(dot_i8_generic(*e.args))
        elif isinstance(e, LaneReduce):
            op, v = e.args
            parts = [self.lane(v, k) for k in range(lanes_of(v.dtype))]
            while len(parts) > 1:   # a tree, as the vector reduction adds
                parts = [binary(_FOLD[op], parts[k], parts[k + 1]) if k + 1 < len(parts) else parts[k]
                         for k in range(0, len(parts), 2)]
            r = parts[0]
        else:
            r = rebuild(e, tuple(self.scal(a) if isinstance(a, Expr) else a for a in e.args))
        self.memo[key] = r
        return r

    def lane(self, e: Expr, k: int) -> Expr:
        """Lane k of expression e (a scalar e is the same in every lane)."""
        if lanes_of(e.dtype) == 1:
            return self.scal(e)
        key = (e, k)
        r = self.memo.get(key)
        if r is not None:
            return r
        sdt = scalar_of(e.dtype)
        if isinstance(e, Const):
            r = Const(e.value, sdt)
        elif isinstance(e, Var):
            if e not in self.lanes:
                raise LoweringError(f"vector variable {e} used outside its let")
            r = self.lanes[e][k]
        elif isinstance(e, VecLoad):
            buf, idx, _, stride = e.args
            r = Load(buf, self.scal(idx) + k * stride)
        elif isinstance(e, Broadcast):
            r = self.scal(e.args[0])
        elif isinstance(e, Shuffle):
            a, b, mask = e.args
            m, n = mask[k], lanes_of(a.dtype)
            r = self.lane(a, m) if m < n else self.lane(b, m - n)
        elif isinstance(e, Bin):
            op, a, b = e.args
            r = rebuild(e, (op, self.lane(a, k), self.lane(b, k)))
        elif isinstance(e, Cast):
            r = cast(sdt, self.lane(e.args[1], k))
        elif isinstance(e, Select):
            c, t, f = e.args
            r = select(self.lane(c, k), self.lane(t, k), self.lane(f, k))
        elif isinstance(e, Fma):
            r = Fma(*(self.lane(a, k) for a in e.args))
        elif isinstance(e, PackBf16):
            r = PackBf16(self.lane(e.args[0], k), self.lane(e.args[1], k))
        elif isinstance(e, Bf16Half):
            r = Bf16Half(self.lane(e.args[0], k), e.args[1])
        elif isinstance(e, DotBf16):
            acc, a, b = (self.lane(x, k) for x in e.args)
            r = Fma(Bf16Half(a, 1), Bf16Half(b, 1), Fma(Bf16Half(a, 0), Bf16Half(b, 0), acc))
        elif isinstance(e, DotI8):
            r = dot_i8_generic(*(self.lane(x, k) for x in e.args[:3]), e.args[3])
        elif isinstance(e, Un):
            r = rebuild(e, (e.args[0], self.lane(e.args[1], k)))
        else:
            raise LoweringError(f"cannot take lane {k} of {e!r}")
        self.memo[key] = r
        return r

    def stmt(self, s: Stmt) -> Stmt:
        if isinstance(s, Store):
            n = lanes_of(s.value.dtype)
            idx = self.scal(s.index)
            if n == 1:
                return Store(s.buf, idx, self.scal(s.value))
            if s.buf.dtype == "float32" and self.native(s.value):
                return Store(s.buf, idx, self.vector(s.value))
            return seq(*(Store(s.buf, idx + k, self.lane(s.value, k)) for k in range(n)))
        if isinstance(s, LetStmt):
            n = lanes_of(s.var.dtype)
            if n == 1:
                return LetStmt(s.var, self.scal(s.value), self.stmt(s.body))
            vs = [Var(f"{s.var.args[0]}_l", scalar_of(s.var.dtype)) for _ in range(n)]
            self.lanes[s.var] = vs
            out = self.stmt(s.body)
            for k in reversed(range(n)):
                out = LetStmt(vs[k], self.lane(s.value, k), out)
            return out
        if isinstance(s, IfThen):
            return IfThen(self.scal(s.cond), self.stmt(s.then), None if s.orelse is None else self.stmt(s.orelse))
        if isinstance(s, For):
            ext = self.scal(s.extent) if isinstance(s.extent, Expr) else s.extent
            return For(s.var, ext, self.stmt(s.body), s.kind, s.start, s.axis)
        if isinstance(s, (Seq, Allocate)):
            return map_body(s, self.stmt)
        return s


def scalarize(s: Stmt, keep=frozenset()) -> Stmt:
    """s with every vector expression taken apart into its lanes, but native float32 vectors of the widths in
    `keep` (see the module's docstring)."""
    return _Scalarizer(keep).stmt(s)
