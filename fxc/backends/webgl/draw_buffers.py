"""WebGL fragments that write several texels, one a draw buffer (the `webgl` target's matmuls and convolutions).

Takes a one-work-item-per-output Kernel (as fxc.backends.webgl.lanes renders it: a fragment computes four consecutive
outputs, one RGBA texel) and, where it pays, produces a kernel whose fragment computes R texels at once, R the
device's draw buffers (Caps.draw_buffers; WebGL 2 guarantees 4): the output's texels are cut in R parts of
`split` texels, draw buffer r is part r, and the fragment at texel q computes the texels q + r * split. The
R copies of the kernel's body are *jammed*: their loops run as one, so a value the copies share is computed and
fetched once. Each copy's `//` and `%` by a constant are folded by their dividends' intervals (the grid index within
one part, loop variables within their extents) or as (x + k d) // d = x // d + k, so what the copies share is the
same expression. In a matmul C = A @ B of M rows the parts are rows m, m + M/4, ... of the same columns: every weight
texel is shared, a fragment fetches 4 A texels and 4 B texels for 64 multiply-adds (one buffer: 5 for 16) — 2.2-3.4x
faster a draw on SwiftShader (benchmarks/webgl_matmul_micro.py). The parts may also be runs: of every R x block
elements (d = R x block a period of the kernel's index math, e.g. one channel block's pixels of a blocked
convolution) part r holds the r-th run of `block`, so the copies of a channel-blocked 3x3 conv compute four groups of
output pixels of the same channel block and share every weight texel (4 input + 4 weight fetches for 64
multiply-adds; the output's quarters, whole channel blocks sharing the input texel: 17). The cut that reads the
fewest elements (a load that differs by lane counts 4x) is chosen per kernel.

    got = split_draw_buffers(kernel, 4)      # None, or (the jammed kernel, buffers, split, block: texels, outputs)

The runtime (fxc/runtime/browser/webgl/runtime.js) draws such a kernel into R part textures and copies each into its
place
in the output texture (copyTexSubImage2D: at most six rectangles a run). The copies are independent (each its own
private buffers and let-bound values, only global loads, the output written at its own index), so any interleaving
of their statements computes what they compute one after another, each output in the same order of operations: the
results are those of one draw buffer. Used where the kernel's loop nest runs MIN_REDUCTION or more iterations an output,
its float32 output of a constant size cuts into R parts of whole texels, and a load inside the loops is shared.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ...lowering.expr import Bin, Const, Expr, Load, Var, binary, children, rebuild
from ...lowering.int_ranges import Bounds
from ...lowering.loop_ir import Allocate, Buffer, For, IfThen, Kernel, Launch, LetStmt, Seq, Store, seq, walk_stmts
from .lanes import TEXEL_WIDTH, WebGLLanesRenderer

MIN_REDUCTION = 16          # a kernel's loop nest runs at least this many iterations an output (else no sharing pays)
MAX_READS = 0.5             # a cut kept where its copies read at most this part of what they read apart


class _Bounds(Bounds):
    """Bounds with, for x >= 0 and a constant d > 0 (floor and truncating division agree), x // d in
    [lo // d, hi // d] and x % d in [0, min(d - 1, hi)] (the copies' `q // block`, `q % block`)."""

    def _of(self, e, refine: dict) -> tuple:
        if isinstance(e, Bin) and e.args[0] in ("idiv", "imod") and isinstance(e.args[2], Const) \
                and int(e.args[2].value) > 0:
            lo, hi = self.of(e.args[1], refine)
            d = int(e.args[2].value)
            if lo >= 0:
                if e.args[0] == "idiv":
                    return (lo // d, hi // d)
                return (lo % d, hi % d) if lo // d == hi // d else (0, min(d - 1, hi))
        return super()._of(e, refine)


class _NoJam(Exception):
    """The copies cannot be jammed (different loop bounds or conditions, a barrier): one draw buffer."""


def _peel(e):
    """(rest, c): e = rest + c with c a constant (rest None: e is the constant); through +, - and x constant."""
    if isinstance(e, Const) and e.dtype in ("int32", "int64"):
        return None, int(e.value)
    if isinstance(e, Bin) and e.args[0] == "add":
        (ra, ca), (rb, cb) = _peel(e.args[1]), _peel(e.args[2])
        return (ra if rb is None else rb if ra is None else binary("add", ra, rb)), ca + cb
    if isinstance(e, Bin) and e.args[0] == "mul" and isinstance(e.args[2], Const) and int(e.args[2].value) >= 0:
        r, c = _peel(e.args[1])
        return (None if r is None else binary("mul", r, e.args[2])), c * int(e.args[2].value)
    return e, 0


def _terms(e, coef: int, out: list):
    """e as a sum of coefficient x atom (atom None: a constant), through +, - and x constant."""
    if isinstance(e, Const) and e.dtype in ("int32", "int64"):
        out.append((coef * int(e.value), None))
    elif isinstance(e, Bin) and e.args[0] in ("add", "sub"):
        _terms(e.args[1], coef, out)
        _terms(e.args[2], -coef if e.args[0] == "sub" else coef, out)
    elif isinstance(e, Bin) and e.args[0] == "mul" and isinstance(e.args[2], Const):
        _terms(e.args[1], coef * int(e.args[2].value), out)
    elif isinstance(e, Bin) and e.args[0] == "mul" and isinstance(e.args[1], Const):
        _terms(e.args[2], coef * int(e.args[1].value), out)
    else:
        out.append((coef, e))


def _sum(terms: list, dtype: str):
    """The expression sum of coefficient x atom (the inverse of _terms; constants gathered last)."""
    out, c0 = None, 0
    for c, a in terms:
        if a is None:
            c0 += c
        elif c:
            t = a if c == 1 else binary("mul", a, Const(c, dtype))
            out = t if out is None else binary("add", out, t)
    if out is None:
        return Const(c0, dtype)
    return binary("add", out, Const(c0, dtype)) if c0 else out


class _Copy:
    """Copy r of a grid body: the grid variable replaced by `at` (copy r's work-item, _cut), its let-bound variables
    and private buffers its own, its // and % by constants folded (_simplify: so the copies' shared values are the
    same expressions)."""

    def __init__(self, r: int, grid: Var, at, bounds: Bounds, body, zero: dict):
        self.r, self.bounds = r, bounds
        self.vars: dict = {grid: at} if at is not grid else {}
        self.vars.update(zero)
        self.bufs: dict = {}
        self.memo: dict = {}
        if r:
            for st in walk_stmts(body):
                for e in (x for v in vars(st).values() if isinstance(v, Expr) for x in _walk(v)):
                    if isinstance(e, Load) and e.args[0].scope != "global":
                        self.buf(e.args[0])
                if isinstance(st, (Store, Allocate)):
                    self.buf(st.buf)

    def expr(self, e):
        got = self.memo.get(e)
        if got is not None:
            return got
        if e in self.vars:
            got = self.vars[e]
        elif isinstance(e, (Const, Var)):
            got = e
        elif isinstance(e, Load) and e.args[0] in self.bufs:
            got = Load(self.bufs[e.args[0]], self.expr(e.args[1]))
        else:
            args = tuple(self.expr(a) if isinstance(a, Expr) else a for a in e.args)
            got = e if all(n is o for n, o in zip(args, e.args)) else rebuild(e, args)
            got = self._simplify(got)
        self.memo[e] = got
        return got

    def _simplify(self, e):
        """x // d and x % d (d > 0) by x's interval: a constant quotient q gives q and x - q d; else the terms of x
        that are multiples of d leave the % and come out of the // (x and the other terms >= 0, so floor and
        truncating division agree): (k d y + z) // d -> k y + z // d, (k d y + z) % d -> z % d."""
        if not (isinstance(e, Bin) and e.args[0] in ("idiv", "imod") and isinstance(e.args[2], Const)
                and int(e.args[2].value) > 0):
            return e
        op, x, d = e.args[0], e.args[1], int(e.args[2].value)
        lo, hi = self.bounds.of(x, {})
        terms: list = []
        _terms(x, 1, terms)
        if lo >= 0 and lo // d == hi // d:
            q = lo // d
            return Const(q, e.dtype) if op == "idiv" else _sum(terms + [(-q * d, None)], e.dtype) if q else x
        whole = [(c, a) for c, a in terms if c % d == 0]
        if not whole or lo < 0:
            return e
        rest = _sum([(c, a) for c, a in terms if c % d], e.dtype)
        if self.bounds.of(rest, {})[0] < 0:
            return e
        inner = self._simplify(binary(op, rest, e.args[2]))
        if op == "imod":
            return inner
        _terms(inner, 1, out := [])
        return _sum(out + [(c // d, a) for c, a in whole], e.dtype)

    def buf(self, b: Buffer) -> Buffer:
        if b.scope == "global" or self.r == 0:
            return b
        if b not in self.bufs:
            self.bufs[b] = dataclasses.replace(b, name=f"{b.name}_t{self.r}")
        return self.bufs[b]

    def stmt(self, s):
        """s copied (lets renamed, private buffers this copy's, expressions moved)."""
        if isinstance(s, Seq):
            return Seq([self.stmt(x) for x in s.stmts])
        if isinstance(s, For):
            return For(s.var, s.extent, self.stmt(s.body), s.kind, s.start, s.axis)
        if isinstance(s, LetStmt):
            value = self.expr(s.value)
            if not any(isinstance(x, Load) for x in _walk(value)):
                self.vars[s.var] = value        # an index: inlined, so the copies' shared ones are alike
                return self.stmt(s.body)
            v = s.var if self.r == 0 else Var(s.var.args[0], s.var.dtype)
            self.vars[s.var] = v
            return LetStmt(v, value, self.stmt(s.body))
        if isinstance(s, Allocate):
            return Allocate(self.buf(s.buf), self.stmt(s.body))
        if isinstance(s, IfThen):
            return IfThen(self.expr(s.cond), self.stmt(s.then), None if s.orelse is None else self.stmt(s.orelse))
        if isinstance(s, Store):
            return Store(self.buf(s.buf), self.expr(s.index), self.expr(s.value))
        raise _NoJam(type(s).__name__)


def _jam(copies: list):
    """One statement running the copies (structurally alike) together: loops and conditions merged, lets nested."""
    s0 = copies[0]
    if any(type(c) is not type(s0) for c in copies):
        raise _NoJam("unlike statements")
    if isinstance(s0, Seq):
        if any(len(c.stmts) != len(s0.stmts) for c in copies):
            raise _NoJam("unlike sequences")
        return seq(*[_jam([c.stmts[i] for c in copies]) for i in range(len(s0.stmts))])
    if isinstance(s0, For):
        if any((c.var, c.extent, c.kind, c.start) != (s0.var, s0.extent, s0.kind, s0.start) for c in copies):
            raise _NoJam("unlike loops")
        return For(s0.var, s0.extent, _jam([c.body for c in copies]), s0.kind, s0.start, s0.axis)
    if isinstance(s0, LetStmt):
        inner = _jam([c.body for c in copies])
        for c in reversed(copies):
            inner = LetStmt(c.var, c.value, inner)
        return inner
    if isinstance(s0, Allocate):
        inner = _jam([c.body for c in copies])
        for c in reversed(copies):
            inner = Allocate(c.buf, inner)
        return inner
    if isinstance(s0, IfThen):
        if any(c.cond is not s0.cond or (c.orelse is None) != (s0.orelse is None) for c in copies):
            raise _NoJam("unlike conditions")
        return IfThen(s0.cond, _jam([c.then for c in copies]),
                      None if s0.orelse is None else _jam([c.orelse for c in copies]))
    if isinstance(s0, Store):
        return Seq(list(copies))
    raise _NoJam(type(s0).__name__)


def _walk(e):
    yield e
    for c in children(e):
        yield from _walk(c)


def _loop_loads(s) -> set:
    """The global loads inside s's loops (a reduction's: where sharing pays)."""
    out = set()
    for loop in walk_stmts(s):
        if isinstance(loop, For):
            for st in walk_stmts(loop.body):
                for v in vars(st).values():
                    if isinstance(v, Expr):
                        out |= {e for e in _walk(v) if isinstance(e, Load) and e.args[0].scope == "global"}
    return out


def _elements(load, grid: Var, extents: dict, part: int) -> int:
    """The elements a load reads for one fragment: its loops' iterations, x 4 where it differs by lane (a matmul's
    weight column, a conv's output channel; not a conv's input pixel, `g // 4`)."""
    used = {x for x in _walk(load.args[1]) if isinstance(x, Var)}
    n = TEXEL_WIDTH if grid in used and _by_lane(load.args[1], grid, part) else 1
    for v in used:
        n *= extents.get(v, 1)
    return n


def _by_lane(e, grid: Var, part: int) -> bool:
    """Whether the int e differs among a fragment's four work-items (evaluated over the grid, other variables 0;
    True where it cannot be evaluated)."""
    ops = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "idiv": np.floor_divide, "imod": np.mod}
    g = np.arange(part, dtype=np.int64)

    def ev(x):
        if isinstance(x, Const):
            return np.int64(int(x.value)) if x.dtype in ("int32", "int64") else None
        if isinstance(x, Var):
            return g if x is grid or x == grid else np.int64(0)
        if isinstance(x, Bin) and x.args[0] in ops:
            a, b = ev(x.args[1]), ev(x.args[2])
            if a is None or b is None or (x.args[0] in ("idiv", "imod") and np.any(b == 0)):
                return None
            return ops[x.args[0]](a, b)
        return None
    v = ev(e)
    if v is None:
        return True
    rows = np.broadcast_to(v, g.shape).reshape(-1, TEXEL_WIDTH)
    return not bool((rows == rows[:, :1]).all())


def _inline_thread(s, zero: dict):
    """The kernel's body with its thread loop of one work-item gone (its variable 0)."""
    if isinstance(s, For) and s.kind == "thread" and s.extent == 1:
        zero[s.var] = Const(0, s.var.dtype)
        return _inline_thread(s.body, zero)
    return s


def _iterations(s) -> int:
    """The iterations of the deepest nest of constant loops in s (1: no loop)."""
    if isinstance(s, For):
        return s.extent * _iterations(s.body) if isinstance(s.extent, int) else 0
    if isinstance(s, Seq):
        return max([_iterations(x) for x in s.stmts] + [1])
    if isinstance(s, (LetStmt, Allocate)):
        return _iterations(s.body)
    if isinstance(s, IfThen):
        return max(_iterations(s.then), 1 if s.orelse is None else _iterations(s.orelse))
    return 1


def _divisors(s) -> set:
    """The periods of the kernel's index math: the product of a chain of // by constants, times the constant of a %
    taken of it (`i // 4 // 8 % 8`: 4 x 8, 4 x 8 x 8)."""
    def chain(e) -> int:
        if isinstance(e, Bin) and e.args[0] == "idiv" and isinstance(e.args[2], Const) and int(e.args[2].value) > 0:
            return chain(e.args[1]) * int(e.args[2].value)
        return 1
    out = set()
    for st in walk_stmts(s):
        for v in vars(st).values():
            if isinstance(v, Expr):
                for e in _walk(v):
                    if isinstance(e, Bin) and e.args[0] in ("idiv", "imod") and isinstance(e.args[2], Const) \
                            and int(e.args[2].value) > 0:
                        out.add(chain(e) if e.args[0] == "idiv" else chain(e.args[1]) * int(e.args[2].value))
    return out


def _cut(grid: Var, buffers: int, n: int, block: int) -> list:
    """Each copy's work-item for the fragment's work-item q: parts of `block` elements cut from every
    buffers x block (block = n / buffers: the output's quarters; less: e.g. output pixels within one channel block)."""
    if block * buffers == n:
        return [binary("add", grid, Const(r * block, grid.dtype)) for r in range(buffers)]
    hi, lo = binary("idiv", grid, Const(block, grid.dtype)), binary("imod", grid, Const(block, grid.dtype))
    base = binary("add", binary("mul", hi, Const(block * buffers, grid.dtype)), lo)
    return [binary("add", base, Const(r * block, grid.dtype)) for r in range(buffers)]


def split_draw_buffers(kernel: Kernel, buffers: int):
    """(kernel whose fragment computes `buffers` texels, buffers, split: texels a part, block: texels of a part's
    run, outputs: each draw buffer's index of the fragment's work-item) or None (see the module). Of the cuts (the
    output's quarters; runs of d / buffers elements of every d, d a period of the kernel's index math), the one
    whose jammed loops read the fewest elements (_elements); None where no cut reads less than half of what
    the copies read apart (a conv's parts as whole channel blocks share the input: 17 of 20 texels, measured no
    faster than one draw buffer)."""
    if buffers < 2 or kernel.launch is None or len(kernel.launch.grid) != 1 or kernel.launch.block != (1,):
        return None
    body = kernel.body
    if not (isinstance(body, For) and body.kind == "grid" and isinstance(body.extent, int)):
        return None
    outs = {st.buf for st in walk_stmts(body) if isinstance(st, Store) and st.buf.scope == "global"}
    if len(outs) != 1 or next(iter(outs)).dtype != "float32":
        return None
    n = body.extent
    if n % (buffers * TEXEL_WIDTH) or _iterations(body.body) < MIN_REDUCTION:
        return None                 # parts of whole texels only; no reduction: little for the copies to share
    part = n // buffers
    zero: dict = {}
    inner = _inline_thread(body.body, zero)
    loops = [st for st in walk_stmts(inner) if isinstance(st, For) and isinstance(st.extent, int) and st.start >= 0]
    bounds = _Bounds(kernel, strict=False)     # the grid variable within a part, the loops' within their extents
    bounds.vars[body.var] = (0, part - 1)
    bounds.vars.update({st.var: (st.start, st.start + st.extent - 1) for st in loops})
    extents = {st.var: st.extent for st in loops}
    blocks = [part] + sorted({d // buffers for d in _divisors(inner) if d < n and n % d == 0
                              and d % (buffers * TEXEL_WIDTH) == 0}, reverse=True)
    best = None
    for block in blocks:
        at = _cut(body.var, buffers, n, block)
        try:
            copies = [_Copy(r, body.var, at[r], bounds, inner, zero).stmt(inner) for r in range(buffers)]
            jammed = _jam(copies)
        except _NoJam:
            continue
        loads = [_loop_loads(c) for c in copies]
        if not loads[0] & loads[1]:
            continue                # nothing shared: R fragments of one draw buffer cost the same
        cost = sum(_elements(x, body.var, extents, part) for x in set().union(*loads))
        alone = sum(_elements(x, body.var, extents, part) for x in loads[0])
        if cost > MAX_READS * buffers * alone:
            continue                # less than half the reads shared (a conv's channel blocks: 17 of 20): no gain
        if best is None or cost < best[0]:
            best = (cost, block, jammed, at)
    if best is None:
        return None
    _, block, jammed, at = best
    k = dataclasses.replace(kernel, body=For(body.var, part, jammed, "grid", 0, 0), launch=Launch((part,), (1,)))
    return k, buffers, part // TEXEL_WIDTH, block // TEXEL_WIDTH, at


class DrawBuffersRenderer(WebGLLanesRenderer):
    """The lanes renderer of a jammed kernel (split_draw_buffers): the store at the fragment's index + r x part writes
    draw buffer r (`fxc_out<r>`)."""

    def __init__(self, kernel, width: int, buffers: int, outputs=()):
        self.buffers, self.part = buffers, kernel.launch.grid[0]
        self.buffer_of = {e: r for r, e in enumerate(outputs)}
        super().__init__(kernel, width)

    def output_of(self, index):
        r = self.buffer_of.get(self._expand(index))
        if r is not None:
            return f"fxc_out{r}"
        rest, c = _peel(self._expand(index))
        if rest is None or rest not in self.frag or c % self.part or not 0 <= c // self.part < self.buffers:
            return None
        return f"fxc_out{c // self.part}"

    def output_decls(self, vec: str) -> list:
        return [f"layout(location = {r}) out highp {vec} fxc_out{r};" for r in range(self.buffers)]
