"""Intervals of a kernel's integer expressions, and the integer width each may be computed in.

Takes a loop-IR Kernel; bounds every integer expression by interval arithmetic over loop extents, let values
and constants (narrowing an interval across a comparison in a select; int private buffers used as counters by
their stores and increments). Two uses, one analysis:

- `check_int64_narrowable(k)`: languages without 64-bit integers (GLSL, WGSL) compute int64 in 32 bits, so
  every int64 value must provably fit 32 bits; int64 loads and float -> int64 casts are checked on the device
  there, so their values are taken as 32-bit. A LoweringError names the first that may not fit.
- `narrow_indices(k)`: OpenCL has both widths; an address computation (loop variables, index arithmetic) is
  rendered in 32 bits where its interval proves it exact, the rest in 64 (int64 data is never narrowed).
"""
from __future__ import annotations

from ..errors import LoweringError
from ..symbolic.expr import Bin, Cast, CheckIndex, Const, Load, Select, Un, Var, walk
from .loop_ir import BOUND_KINDS, Allocate, For, IfThen, Kernel, LetStmt, Seq, Store, stmt_exprs, walk_stmts

I32_MIN, I32_MAX = -2 ** 31, 2 ** 31 - 1
_I64 = (-2 ** 63, 2 ** 63 - 1)


_FULL32 = (I32_MIN, I32_MAX)
_RANGE = {"bool": (0, 1), "uint8": (0, 255), "int8": (-128, 127), "int16": (-2 ** 15, 2 ** 15 - 1),
          "int32": _FULL32, "int64": _FULL32}


def _join(a, b):
    return (min(a[0], b[0]), max(a[1], b[1]))


class Bounds:
    """Intervals of integer expressions: loop variables from their extents, let variables from their values,
    loads from their dtype. strict (GLSL, WGSL): int64 values are 32-bit (loads and float casts checked on the
    device) and one that may leave 32 bits is a LoweringError; else int64 spans 64 bits and nothing is refused."""

    def __init__(self, kernel: Kernel, strict: bool = True):
        self.kernel = kernel
        self.strict = strict
        self.vars: dict = {}
        self.memo: dict = {}
        self.bufs: dict = {}        # private buffer -> the interval of every value stored in it (counters)

    def of(self, e, refine: dict) -> tuple:
        if e in refine:
            return refine[e]
        if not refine and e in self.memo:
            return self.memo[e]
        r = self._of(e, refine)
        if self.strict and e.dtype == "int64" and not (I32_MIN <= r[0] and r[1] <= I32_MAX):
            raise LoweringError(f"{self.kernel.name}: {e!r} may need 64-bit integer arithmetic (values in "
                                f"[{r[0]}, {r[1]}]); GLSL has 32-bit integers only, so this graph runs elsewhere")
        if not refine:
            self.memo[e] = r
        return r

    def range(self, dt: str) -> tuple:
        """Every value of an integer dtype."""
        return _I64 if dt == "int64" and not self.strict else _RANGE.get(dt, _FULL32)

    def const(self, v: int) -> tuple:
        """A constant stored in a counter (a reduction's identity, INT64_MAX for a min): strict, saturated to 32
        bits, as GLSL renders it."""
        return (max(I32_MIN, min(v, I32_MAX)),) * 2 if self.strict else (v, v)

    def _of(self, e, refine: dict) -> tuple:
        dt = e.dtype
        if dt not in _RANGE:
            for c in getattr(e, "args", ()):
                if hasattr(c, "dtype"):
                    self.of(c, refine)
            return (0, 0)
        if isinstance(e, Const):
            return (int(e.value), int(e.value))
        if isinstance(e, CheckIndex):           # an index checked against its dimension: within [0, size)
            self.of(e.args[0], refine)
            return (0, max(int(e.args[1]) - 1, 0))
        if isinstance(e, Var):
            return self.vars.get(e, self.range(dt))
        if isinstance(e, Load):
            self.of(e.args[1], refine)
            buf = e.args[0]
            return self.bufs.get(buf) or self.range(buf.dtype)
        if isinstance(e, Cast):
            src = e.args[1]
            r = self.of(src, refine) if src.dtype in _RANGE else self.range(dt)
            lo, hi = self.range(dt)
            return r if lo <= r[0] and r[1] <= hi else (lo, hi)
        if isinstance(e, Select):
            c, a, b = e.args
            self.of(c, refine)
            ta, fb = self._refined(c, refine)
            return _join(self.of(a, ta), self.of(b, fb))
        if isinstance(e, Un):
            op, a = e.args
            lo, hi = self.of(a, refine) if a.dtype in _RANGE else (0, 1)
            if op == "neg":
                return (-hi, -lo)
            if op == "abs":
                return (0 if lo <= 0 <= hi else min(abs(lo), abs(hi)), max(abs(lo), abs(hi)))
            if op == "not" and dt != "bool":
                return (-hi - 1, -lo - 1)
            return self.range(dt)
        if isinstance(e, Bin):
            op, a, b = e.args
            if dt == "bool":
                for x in (a, b):
                    if x.dtype in _RANGE:
                        self.of(x, refine)
                return (0, 1)
            x, y = self.of(a, refine), self.of(b, refine)
            if op == "add":
                return (x[0] + y[0], x[1] + y[1])
            if op == "sub":
                return (x[0] - y[1], x[1] - y[0])
            if op == "mul":
                p = [x[i] * y[j] for i in (0, 1) for j in (0, 1)]
                return (min(p), max(p))
            if op == "max":
                return (max(x[0], y[0]), max(x[1], y[1]))
            if op == "min":
                return (min(x[0], y[0]), min(x[1], y[1]))
            m = max(abs(x[0]), abs(x[1]))
            if op in ("idiv", "div", "floordiv", "truncdiv"):
                if y[0] > 0 or y[1] < 0:        # a divisor of one sign: the quotients of the corners (floor, ceil)
                    q = [f(p, d) for p in x for d in y for f in (lambda u, v: u // v, lambda u, v: -(-u // v))]
                    return (min(q), max(q))
                return (-m, m)                  # x / 0 gives x; MIN / -1 gives 2**31: refused
            if op in ("imod", "floormod", "truncmod"):
                n = max(abs(y[0]), abs(y[1]))
                return (-n, n)
            if op == "and" and (x[0] >= 0 or y[0] >= 0):
                return (0, min(v[1] for v in (x, y) if v[0] >= 0))
            if op in ("and", "or", "xor") and all(_FULL32[0] <= v[0] and v[1] <= _FULL32[1] for v in (x, y)):
                return _FULL32                  # of 32-bit values (sign-extended): a 32-bit value
            if op == "shr" and y[0] >= 0:
                return (min(x[0], 0), max(x[1], 0))
            if op == "shl" and y[0] >= 0 and y[1] < 31:
                return (x[0] * 2 ** y[1] if x[0] < 0 else x[0], x[1] * 2 ** y[1] if x[1] > 0 else x[1])
            return _RANGE[dt] if dt != "int64" else _I64
        for c in getattr(e, "args", ()):
            if hasattr(c, "dtype"):
                self.of(c, refine)
        return self.range(dt)

    def _refined(self, c, refine: dict) -> tuple:
        """The refinements that hold where condition c is true, and where it is false: a comparison of an integer
        expression with a constant narrows that expression's interval."""
        if not (isinstance(c, Bin) and c.args[0] in ("lt", "le", "gt", "ge") and isinstance(c.args[2], Const)
                and c.args[1].dtype in _RANGE):
            return refine, refine
        op, x, k = c.args[0], c.args[1], int(c.args[2].value)
        lo, hi = self.of(x, refine)
        below = (lo, min(hi, k - 1 if op in ("lt", "ge") else k))      # x < k (lt) / x <= k (le)
        above = (max(lo, k if op in ("lt", "ge") else k + 1), hi)
        t, f = (below, above) if op in ("lt", "le") else (above, below)
        return ({**refine, x: t} if t[0] <= t[1] else refine,
                {**refine, x: f} if f[0] <= f[1] else refine)


def check_int64_narrowable(k: Kernel) -> None:
    """LoweringError unless every int64 value of k provably fits 32 bits (loads and float casts are checked on
    the device); loop variables range over their extents."""
    b = _bounds(k, strict=True)
    for st in walk_stmts(k.body):
        if isinstance(st, For):
            ext = st.extent if isinstance(st.extent, int) else b.of(st.extent, {})[1]
            b.vars[st.var] = (st.start, max(st.start, ext - 1))
        elif isinstance(st, LetStmt):
            b.vars[st.var] = b.of(st.value, {}) if st.value.dtype in _RANGE else (0, 0)
        exprs = stmt_exprs(st)
        if isinstance(st, Store) and st.buf.scope != "global" and isinstance(st.value, Const):
            exprs = [st.index]      # a reduction's identity (INT64_MAX for a min): saturates to 32 bits
        for e in exprs:
            if any(x.dtype in _RANGE for x in walk(e)):
                b.of(e, {})


def _bounds(k: Kernel, strict: bool) -> Bounds:
    """Bounds of k with its loop and let variables ranged (in program order) and its counters' intervals."""
    b = Bounds(k, strict)
    b.bufs = _counter_ranges(k, strict)
    return b


def _counter_ranges(k: Kernel, strict: bool = True) -> dict:
    """Intervals of int private buffers used as counters (sort's merge positions): stores of values that do not
    read the buffer (their union is the start), and increments `buf + d` (each executed at most the product of the
    serial loop extents around it). A buffer that fits no such pattern is left out (its loads: the dtype's range,
    sound since every value stored is itself checked)."""
    lets, stores = {}, {}

    def visit(s, mult):
        if isinstance(s, Seq):
            for x in s.stmts:
                visit(x, mult)
        elif isinstance(s, For):
            inner = mult if s.kind in BOUND_KINDS or mult is None else (
                mult * s.extent if isinstance(s.extent, int) else None)
            visit(s.body, inner)
        elif isinstance(s, LetStmt):
            lets[s.var] = s.value
            visit(s.body, mult)
        elif isinstance(s, IfThen):
            visit(s.then, mult)
            if s.orelse is not None:
                visit(s.orelse, mult)
        elif isinstance(s, Allocate):
            visit(s.body, mult)
        elif isinstance(s, Store) and s.buf.scope == "private" and s.buf.dtype in _RANGE:
            stores.setdefault(s.buf, []).append((s.value, mult))
    visit(k.body, 1)

    def reads(e, buf) -> bool:
        return any((isinstance(x, Load) and x.args[0] is buf) or (isinstance(x, Var) and x in lets and
                                                                   reads(lets[x], buf)) for x in walk(e))

    def is_load_of(e, buf) -> bool:
        e = lets.get(e, e) if isinstance(e, Var) else e
        return isinstance(e, Load) and e.args[0] is buf

    b, out = Bounds(k, strict), {}
    for st in walk_stmts(k.body):       # loop variables over their extents (let variables stay unknown here)
        if isinstance(st, For) and isinstance(st.extent, int):
            b.vars[st.var] = (st.start, max(st.start, st.extent - 1))
    for buf, sts in stores.items():
        lo = hi = None
        grow = [0, 0]
        try:
            for v, mult in sts:
                step = None
                if isinstance(v, Bin) and v.args[0] == "add":
                    x, y = v.args[1], v.args[2]
                    step = y if is_load_of(x, buf) else x if is_load_of(y, buf) else None
                if step is not None:
                    if mult is None:
                        raise LoweringError("not a counter")
                    r = b.of(step, {})          # over the buffer's whole dtype range: sound for any of its values
                    grow = [grow[0] + mult * min(r[0], 0), grow[1] + mult * max(r[1], 0)]
                    continue
                if reads(v, buf):
                    raise LoweringError("not a counter")
                r = b.const(int(v.value)) if isinstance(v, Const) else b.of(v, {})
                lo, hi = (r if lo is None else (min(lo, r[0]), max(hi, r[1])))
        except LoweringError:
            continue
        if lo is not None and I32_MIN <= lo + grow[0] and hi + grow[1] <= I32_MAX:
            out[buf] = (lo + grow[0], hi + grow[1])
    return out


def narrow_indices(k: Kernel, exprs: set) -> set:
    """The int64 expressions among `exprs` (k's address computations) and the loop and let variables of k whose
    every value provably fits 32 bits (a loop variable's extent too: its last increment must not overflow)."""
    b = _bounds(k, strict=False)
    out = set()

    def fits(e, r=None) -> bool:
        lo, hi = r or b.of(e, {})
        return I32_MIN <= lo and hi <= I32_MAX

    for st in walk_stmts(k.body):
        address = exprs
        if isinstance(st, For):
            ext = st.extent if isinstance(st.extent, int) else b.of(st.extent, {})[1]
            b.vars[st.var] = (st.start, max(st.start, ext - 1))
            if st.var.dtype == "int64" and fits(st.var, (st.start, ext)):
                out.add(st.var)
        elif isinstance(st, LetStmt):
            b.vars[st.var] = b.of(st.value, {}) if st.value.dtype in _RANGE else (0, 0)
            if st.var.dtype == "int64" and fits(st.var):
                out.add(st.var)     # (a flat index unravelled into coordinates): its value is an address too
                address = exprs | {x for x in walk(st.value) if not isinstance(x, Load)}
        for e in stmt_exprs(st):
            for x in walk(e):
                if x.dtype == "int64" and x in address and not isinstance(x, Var) and fits(x):
                    out.add(x)
    return out
