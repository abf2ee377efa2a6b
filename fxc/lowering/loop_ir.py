"""The loop IR: what every backend renders. Statements over flat buffers with int64 indices.

For kinds: serial, parallel (outermost only; split over threads), vectorize (innermost; backends use
vector instructions), unroll. Expressions are those of `expr.py` (Load reads a Buffer at a flat index).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from .expr import Expr, Load, Var, children, ITEMSIZE


@dataclass(eq=False)
class Buffer:
    name: str
    dtype: str
    size: int                 # elements
    scope: str = "global"     # global (kernel parameter), local (kernel-private) or scratch (a parameter the build
                              # points at a workspace area that lives only during the kernel's call)

    @property
    def nbytes(self) -> int:
        return self.size * ITEMSIZE[self.dtype]

    def __getitem__(self, index) -> Expr:
        from .expr import as_expr
        return Load(self, as_expr(index))

    def __repr__(self):
        return f"{self.name}:{self.dtype}[{self.size}]"


class Stmt:
    pass


@dataclass(eq=False)
class For(Stmt):
    var: Var
    extent: int
    body: Stmt
    kind: str = "serial"      # serial | parallel | vectorize | unroll
    start: int = 0


@dataclass(eq=False)
class Store(Stmt):
    buf: Buffer
    index: Expr
    value: Expr


@dataclass(eq=False)
class Seq(Stmt):
    stmts: list


@dataclass(eq=False)
class Allocate(Stmt):
    buf: Buffer
    body: Stmt


@dataclass(eq=False)
class IfThen(Stmt):
    cond: Expr
    then: Stmt
    orelse: Optional[Stmt] = None


@dataclass(eq=False)
class LetStmt(Stmt):
    var: Var
    value: Expr
    body: Stmt


@dataclass(eq=False)
class Kernel:
    """One generated function: params are global buffers (outputs first), body a statement."""
    name: str
    params: list
    body: Stmt
    flops: int = 0


def seq(*stmts) -> Stmt:
    flat = []
    for s in stmts:
        if s is None:
            continue
        flat.extend(s.stmts if isinstance(s, Seq) else [s])
    return flat[0] if len(flat) == 1 else Seq(flat)


def walk_stmts(s: Stmt):
    """Every statement of s (s included), pre-order."""
    yield s
    if isinstance(s, Seq):
        for x in s.stmts:
            yield from walk_stmts(x)
    elif isinstance(s, (For, Allocate, LetStmt)):
        yield from walk_stmts(s.body)
    elif isinstance(s, IfThen):
        yield from walk_stmts(s.then)
        if s.orelse is not None:
            yield from walk_stmts(s.orelse)


def map_body(s: Stmt, f) -> Stmt:
    """s rebuilt around f of each statement directly inside it (a leaf statement as it is): the step of a
    rewriting walk, f being the walk."""
    if isinstance(s, Seq):
        return Seq([f(x) for x in s.stmts])
    if isinstance(s, For):
        return For(s.var, s.extent, f(s.body), s.kind, s.start)
    if isinstance(s, Allocate):
        return Allocate(s.buf, f(s.body))
    if isinstance(s, LetStmt):
        return LetStmt(s.var, s.value, f(s.body))
    if isinstance(s, IfThen):
        return IfThen(s.cond, f(s.then), None if s.orelse is None else f(s.orelse))
    return s


def stmt_exprs(s: Stmt) -> tuple:
    """The expressions a statement itself holds (not those of its sub-statements)."""
    if isinstance(s, Store):
        return (s.index, s.value)
    if isinstance(s, LetStmt):
        return (s.value,)
    if isinstance(s, IfThen):
        return (s.cond,)
    return ()


def used_vars(s: Stmt) -> set:
    """Every variable the expressions of s mention (each shared sub-expression visited once)."""
    seen, found = set(), set()

    def go(x):
        if x not in seen:
            seen.add(x)
            if isinstance(x, Var):
                found.add(x)
            for c in children(x):
                go(c)
    for st in walk_stmts(s):
        for e in stmt_exprs(st):
            go(e)
    return found


def free_vars(s: Stmt) -> set:
    """Variables s reads but does not bind (by a loop or a let) itself."""
    bound = {st.var for st in walk_stmts(s) if isinstance(st, (For, LetStmt))}
    return used_vars(s) - bound


def format_stmt(s: Stmt, indent: int = 0) -> str:
    """Readable text of a statement (FXC_DEBUG=3)."""
    pad = "  " * indent
    if isinstance(s, Seq):
        return "\n".join(format_stmt(x, indent) for x in s.stmts)
    if isinstance(s, For):
        head = f"{pad}for {s.var} in {s.start}..{s.extent}" + ("" if s.kind == "serial" else f"  # {s.kind}")
        return head + ":\n" + format_stmt(s.body, indent + 1)
    if isinstance(s, Store):
        return f"{pad}{s.buf.name}[{s.index}] = {s.value}"
    if isinstance(s, Allocate):
        return f"{pad}allocate {s.buf!r} (local)\n" + format_stmt(s.body, indent)
    if isinstance(s, IfThen):
        out = f"{pad}if {s.cond}:\n" + format_stmt(s.then, indent + 1)
        if s.orelse is not None:
            out += f"\n{pad}else:\n" + format_stmt(s.orelse, indent + 1)
        return out
    if isinstance(s, LetStmt):
        return f"{pad}let {s.var} = {s.value}\n" + format_stmt(s.body, indent)
    raise TypeError(s)


def format_kernel(k: Kernel) -> str:
    return f"kernel {k.name}({', '.join(map(repr, k.params))}):\n" + format_stmt(k.body, 1)
