"""Hand-written loop IR (te.extern ops: index, linalg, scan, special functions...) on a device.

The extern's own statement (what the CPU runs) is split at its top level: each outermost `parallel` loop
becomes a launch with one work-item per iteration (its iterations are independent by the loop IR's contract);
the statements between them run as one work-item. Where private memory carries values from one part to
another, the whole statement runs as one work-item instead: slower, never wrong.
"""
from __future__ import annotations

from ....symbolic.expr import Load, Var, walk
from ...loop_ir import Allocate, For, LetStmt, Seq, Stmt, Store, seq, stmt_exprs, walk_stmts
from .one_per_output import grid_1d


def _top_level(s: Stmt) -> list:
    """s's statements in order, through Seqs and Allocates (private buffers are declared kernel-wide)."""
    if isinstance(s, Seq):
        return [x for st in s.stmts for x in _top_level(st)]
    if isinstance(s, Allocate):
        return _top_level(s.body)
    return [s]


def _privates(s: Stmt) -> set:
    found = set()
    for st in walk_stmts(s):
        if isinstance(st, Store) and st.buf.scope == "private":
            found.add(st.buf)
        for e in stmt_exprs(st):
            found.update(x.args[0] for x in walk(e) if isinstance(x, Load) and x.args[0].scope == "private")
    return found


def single_work_item(body: Stmt) -> Stmt:
    return For(Var("g"), 1, For(Var("th"), 1, body, "thread"), "grid")


def split_launches(body: Stmt, knobs) -> list:
    """A CPU kernel body -> launch bodies (see the module's docstring)."""
    parts, serial = [], []
    for st in _top_level(body):
        if isinstance(st, For) and st.kind == "parallel" and isinstance(st.extent, int):
            if serial:
                parts.append(("serial", seq(*serial)))
                serial = []
            parts.append(("parallel", st))
        else:
            serial.append(st)
    if serial:
        parts.append(("serial", seq(*serial)))
    seen: set = set()
    for _, p in parts:
        mine = _privates(p)
        if mine & seen:         # private values cross parts: one work-item runs it all
            return [single_work_item(body)]
        seen |= mine
    out = []
    for kind, p in parts:
        if kind == "serial":
            out.append(single_work_item(p))
        elif p.extent - p.start > 0:
            out.append(grid_1d(p.extent - p.start, knobs.work_group_size,
                               lambda i, p=p: _bind(p, i)))
    return out


def _bind(loop: For, i) -> Stmt:
    return LetStmt(loop.var, i + loop.start, loop.body)


def extern_launches(conv, t, outs: list, ins: list, caps, knobs) -> list:
    """The launches of one extern's statement over output buffers `outs` and input buffers `ins`."""
    return split_launches(t.extern(outs, ins), knobs)
