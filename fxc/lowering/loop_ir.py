"""The loop IR: what every backend renders. Statements over flat buffers with int64 indices.

For kinds: serial, parallel (outermost only; split over threads), vectorize (innermost; backends use
vector instructions), unroll; and for devices grid (the loop is the launch grid's work-groups along `axis`:
one work-group per iteration) and thread (the work-items of one work-group along `axis`). Buffer scopes:
global (a kernel parameter), private (one per thread of execution), shared (one per work-group, the OpenCL
`__local` / CUDA `__shared__` memory) and scratch. `Barrier` synchronises a work-group's work-items (and makes
their shared-memory writes visible to each other). A Kernel carries the index width it may use and, for a
device, its launch geometry. Expressions are those of `expr.py` (Load reads a Buffer at a flat index).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ..errors import LoweringError
from ..symbolic.expr import ITEMSIZE, Expr, Load, Var, as_expr, children

SCOPES = ("global", "private", "shared", "scratch")
FOR_KINDS = ("serial", "parallel", "vectorize", "unroll", "grid", "thread")
BOUND_KINDS = ("grid", "thread")      # loops a device launch runs (one iteration per work-group / work-item)


@dataclass(eq=False)
class Buffer:
    name: str
    dtype: str
    size: int                 # elements
    scope: str = "global"     # global (kernel parameter), private (per thread of execution), shared (per
                              # work-group) or scratch (a parameter the build points at a workspace area that
                              # lives only during the kernel's call)

    def __post_init__(self):
        if self.scope not in SCOPES:
            raise LoweringError(f"buffer {self.name}: unknown scope {self.scope!r}; use one of {', '.join(SCOPES)} "
                                f"(kernel-private memory is 'private'; 'shared' is a work-group's)")

    @property
    def nbytes(self) -> int:
        return self.size * ITEMSIZE[self.dtype]

    def __getitem__(self, index) -> Expr:
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
    kind: str = "serial"      # serial | parallel | vectorize | unroll | grid | thread
    start: int = 0
    axis: int = 0             # grid / thread: the launch dimension (0, 1, 2) the loop is bound to


@dataclass(eq=False)
class Barrier(Stmt):
    """Every work-item of the work-group waits here; shared-memory writes before it are seen after it."""


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
    """One generated function: params are global buffers (outputs first), body a statement.
    index_bits: the integer width its indices need (64; 32 where every buffer is small enough, for devices
    whose languages have no 64-bit integers). launch: a device kernel's geometry (None on the CPU)."""
    name: str
    params: list
    body: Stmt
    flops: int = 0
    index_bits: int = 64
    launch: Optional["Launch"] = None


@dataclass(frozen=True)
class Launch:
    """A device launch: work-groups per axis (grid) and work-items per work-group (block), 1 to 3 axes."""
    grid: tuple
    block: tuple

    @property
    def global_size(self) -> tuple:
        return tuple(g * b for g, b in zip(self.grid, self.block))

    def __str__(self):
        return f"grid {'x'.join(map(str, self.grid))} x block {'x'.join(map(str, self.block))}"


def launch_of(body: Stmt) -> Optional[Launch]:
    """The launch geometry the grid/thread loops of a kernel body describe (None without any); a loop bound
    twice to one axis of one kind must have one extent."""
    ext = {"grid": {}, "thread": {}}
    for st in walk_stmts(body):
        if isinstance(st, For) and st.kind in BOUND_KINDS:
            if not isinstance(st.extent, int) or st.start != 0:
                raise LoweringError(f"a {st.kind} loop needs a constant extent from 0, got {st.start}..{st.extent}")
            seen = ext[st.kind].setdefault(st.axis, st.extent)
            if seen != st.extent:
                raise LoweringError(f"{st.kind} axis {st.axis} bound with extents {seen} and {st.extent}")
    if not ext["grid"] and not ext["thread"]:
        return None
    axes = 1 + max([*ext["grid"], *ext["thread"]])
    grid, block = (tuple(ext[kind].get(a, 1) for a in range(axes)) for kind in BOUND_KINDS)
    return Launch(grid, block)


def index_bits_of(params: list) -> int:
    """32 when every buffer's byte size fits a signed 32-bit integer, else 64."""
    return 32 if all(b.size * 8 < 2 ** 31 for b in params) else 64


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
        return For(s.var, s.extent, f(s.body), s.kind, s.start, s.axis)
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
        kind = f"{s.kind} {s.axis}" if s.kind in BOUND_KINDS else s.kind
        head = f"{pad}for {s.var} in {s.start}..{s.extent}" + ("" if s.kind == "serial" else f"  # {kind}")
        return head + ":\n" + format_stmt(s.body, indent + 1)
    if isinstance(s, Store):
        return f"{pad}{s.buf.name}[{s.index}] = {s.value}"
    if isinstance(s, Allocate):
        return f"{pad}allocate {s.buf!r} ({s.buf.scope})\n" + format_stmt(s.body, indent)
    if isinstance(s, IfThen):
        out = f"{pad}if {s.cond}:\n" + format_stmt(s.then, indent + 1)
        if s.orelse is not None:
            out += f"\n{pad}else:\n" + format_stmt(s.orelse, indent + 1)
        return out
    if isinstance(s, LetStmt):
        return f"{pad}let {s.var} = {s.value}\n" + format_stmt(s.body, indent)
    if isinstance(s, Barrier):
        return f"{pad}barrier"
    raise TypeError(s)


def format_kernel(k: Kernel) -> str:
    launch = f"  # {k.launch}" if k.launch is not None else ""
    return f"kernel {k.name}({', '.join(map(repr, k.params))}):{launch}\n" + format_stmt(k.body, 1)
