"""An input a kernel can go without: one kernel for a fused group with and without a final `add` of that input.

A ResNet block has two convs of one shape, one with the residual add in its epilogue and one without; compiled
apart they are two kernels of about the same code (for Winograd, 0.1-0.2 s of LLVM each). fxc compiles the one
with the add and calls it for both: the other call passes a null address for the residual, and every store
that reads it becomes

    if present(r): out[i] = f(... + r[i])     else: out[i] = f(...)

(fxc/driver/lower_cpu.py pairs the groups by their signatures; the branch is taken the same way for a whole call.)
"""
from __future__ import annotations

from ..symbolic.expr import Bin, Expr, Load, Present, VecLoad, children, rebuild
from .loop_ir import IfThen, Kernel, Stmt, Store, map_body, stmt_exprs, walk_stmts


def _reads(e: Expr, buf, memo: dict) -> bool:
    r = memo.get(e)
    if r is None:
        r = (isinstance(e, (Load, VecLoad)) and e.args[0] is buf) or any(_reads(c, buf, memo) for c in children(e))
        memo[e] = r
    return r


def _without(e: Expr, buf, memo: dict, reads: dict):
    """e with every `x + (load of buf)` turned into x, or None if buf is read any other way."""
    if not _reads(e, buf, reads):
        return e
    if e in memo:
        return memo[e]
    r = None
    if isinstance(e, Bin) and e.args[0] == "add":
        a, b = e.args[1], e.args[2]
        for keep, drop in ((a, b), (b, a)):
            if isinstance(drop, (Load, VecLoad)) and drop.args[0] is buf and not _reads(drop.args[1], buf, reads):
                r = _without(keep, buf, memo, reads)
                break
    if r is None and not isinstance(e, (Load, VecLoad)):
        new = tuple(_without(a, buf, memo, reads) if isinstance(a, Expr) else a for a in e.args)
        if all(n is not None for n in new):
            r = rebuild(e, new)
    memo[e] = r
    return r


def optional_input(kernel: Kernel, buf) -> Kernel | None:
    """`kernel` with `buf` (one of its input parameters) optional, or None where it cannot be: buf must be read
    only in stored values, and there only as a term of an add."""
    memo, reads = {}, {}
    failed = []

    def go(s: Stmt) -> Stmt:
        if isinstance(s, Store):
            if _reads(s.index, buf, reads):
                failed.append(s)
                return s
            if not _reads(s.value, buf, reads):
                return s
            v = _without(s.value, buf, memo, reads)
            if v is None:
                failed.append(s)
                return s
            return IfThen(Present(buf), s, Store(s.buf, s.index, v))
        if any(_reads(e, buf, reads) for e in stmt_exprs(s)):
            failed.append(s)
            return s
        return map_body(s, go)

    body = go(kernel.body)
    if failed or not any(isinstance(s, IfThen) and s.cond is Present(buf) for s in walk_stmts(body)):
        return None
    return Kernel(kernel.name, kernel.params, body, kernel.flops)
