"""The input tile of a sliding-window work-group in shared memory (window.py's staged form).

Takes the window reduction of window.py (one work-group: `cols` consecutive outputs of one image row) and, when
its body reads one tensor P along the row at an affine position core = w * s + kw * d + c (under clamps, as a
pool's window does; a depthwise convolution reads its padded input so), returns the statements that stage the
part of P the work-group reads, every row of the window (the other reduce axes) x L = (cols - 1) * s + (KW - 1) * d
+ 1 positions, into a shared buffer (each work-item a strided share, in chunks of `vector_width`), and the body
with its read of P replaced by a read of that tile. A chunk that lies inside the tensor under P (P itself, or the
input of P when P is a constant pad) is one vector load of it; a chunk at the edge takes its positions one by one,
each P's own value (pad value, clamped read). None when the body does not have that form or the tile exceeds
`knobs.window_local_bytes`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ....symbolic.expr import Bin, Const, Load, Var, VecLoad, as_expr, binary, compare, substitute, walk
from ... import te
from ...loop_ir import Buffer, For, IfThen, LetStmt, Stmt, Store, seq
from ...lower import flat_index
from ...vectorize import linear_stride
from .one_per_output import unflatten


@dataclass
class Tile:
    buf: Buffer
    stage: Stmt             # the work-item's share of the loads (a barrier must follow)
    body: object            # the window body reading the tile


def _uses(e, v) -> bool:
    return any(x is v for x in walk(e))


def _peel(e):
    """e's core under clamps by constants (min / max with a constant)."""
    while isinstance(e, Bin) and e.args[0] in ("min", "max") and isinstance(e.args[2], Const):
        e = e.args[1]
    return e


def _with_core(e, core):
    if isinstance(e, Bin) and e.args[0] in ("min", "max") and isinstance(e.args[2], Const):
        return binary(e.args[0], _with_core(e.args[1], core), e.args[2])
    return core


def _in_range(i, n: int):
    return binary("and", compare("ge", i, as_expr(0)), compare("lt", i, as_expr(n)))


def stage_window(conv, red_t, at: dict, w0, tj: Var, threads: int, cols: int, knobs) -> Tile | None:
    """The tile of the work-group whose first output column is w0 (see the module's docstring); at: the output's
    other axes -> their values in the work-group; tj: its work-item (of `threads`)."""
    red = red_t.body
    w_ax = red_t.axes[-1]
    refs = {x for x in walk(red.body) if isinstance(x, te.TRef) and _uses(x, w_ax)}
    if len(refs) != 1:
        return None
    ref = refs.pop()
    P = ref.tensor
    *others, last = ref.indices
    core = _peel(last)
    kws = [v for v, _ in red.axes if _uses(core, v)]
    if P.dtype != "float32" or len(kws) != 1 or any(_uses(i, w_ax) or _uses(i, kws[0]) for i in others):
        return None
    kw = kws[0]
    s, d = linear_stride(core, w_ax), linear_stride(core, kw)
    if not s or not d or s < 1 or d < 1:
        return None
    KW = dict(red.axes)[kw]
    rows = [(v, n) for v, n in red.axes if v is not kw]
    nrows = math.prod(n for _, n in rows)
    L = (cols - 1) * s + (KW - 1) * d + 1
    if nrows * L * 4 > knobs.window_local_bytes:
        return None
    tile = Buffer(f"wtile{len(conv.locals)}", "float32", nrows * L, "shared")
    row_flat = flat_index([v for v, _ in rows], [n for _, n in rows]) if rows else as_expr(0)
    body = substitute(red.body, {ref: Load(tile, row_flat * L + (w_ax - w0) * s + kw * d)})

    V = max(1, knobs.vector_width)
    chunks = math.ceil(L / V)
    q, i, rr, x = Var("q"), Var("i"), Var("rr"), Var("x")
    where = {**at, **dict(zip([v for v, _ in rows], unflatten(rr, [n for _, n in rows]) if rows else []))}
    core0 = substitute(core, {**where, w_ax: w0, kw: as_expr(0)})
    idx = [substitute(e, where) for e in others]
    n_last = P.shape[-1]

    def value(p):           # P at tile position p of row rr: its own value (clamped into P)
        pos = binary("max", binary("min", _with_core(substitute(last, where), core0 + p), as_expr(n_last - 1)),
                     as_expr(0))
        pre: list = []
        v = conv.convert(te.TRef(P, *idx, pos), pre)
        return pre, v

    scalar = []
    for e in range(V):
        pre, v = value(x + e)
        st = seq(*pre, Store(tile, rr * L + x + e, v))
        scalar.append(st if V == 1 and chunks * V == L else IfThen(compare("lt", x + e, as_expr(L)), st))
    load = seq(*scalar)
    src, offs = (P, [0] * len(P.shape)) if P in conv.bufs else (
        (P.attrs["pad_of"], [a for a, _ in P.attrs["pad_widths"]]) if P.attrs and "pad_of" in P.attrs else (None, None))
    if V > 1 and src is not None and src in conv.bufs and src.dtype == "float32":
        at_src = [_peel(e) - o for e, o in zip(idx, offs)] + [core0 + x - offs[-1]]
        inside = binary("and", compare("le", x + V, as_expr(L)), binary(
            "and", compare("ge", at_src[-1], as_expr(0)), compare("le", at_src[-1] + V, as_expr(src.shape[-1]))))
        for e, o, n in zip(idx, offs, src.shape):
            if o or _peel(e) is not e:      # a padded or clamped axis: in range only where it says so
                inside = binary("and", inside, _in_range(_peel(e) - o, n))
        vector = Store(tile, rr * L + x, VecLoad(conv.bufs[src], flat_index(at_src, src.shape), V))
        load = IfThen(inside, vector, load)
    total = nrows * chunks
    step = LetStmt(i, q * threads + tj, LetStmt(rr, binary("idiv", i, as_expr(chunks)), LetStmt(
        x, binary("imod", i, as_expr(chunks)) * V, load)))
    if math.ceil(total / threads) * threads != total:
        step = IfThen(compare("lt", q * threads + tj, as_expr(total)), step)
    return Tile(tile, For(q, math.ceil(total / threads), step), body)
