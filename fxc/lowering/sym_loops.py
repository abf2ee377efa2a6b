"""Symbolic loops: one kernel for a fused group whose symbolic dims are anywhere (not only the leading rows).

Takes the group's tensor expressions built at its symbolic shapes (dims are int64 expressions of `Sym`s: BERT's
attention scores `[1, h, s, s]`, a GEMM whose N or K is the sequence, a transpose `[1, s, h, d] -> [1, h, s, d]`,
several symbols at once) and produces a loop-IR Kernel whose loops have those expressions as extents. The symbols
are bound once at the kernel's top from `syms`, an int64 buffer parameter after the inputs (the workspace's symbol
header; `sym_index` names each symbol's slot), so every extent, stride and offset is a runtime value:

    kernel k(out0, in0, ..., syms):
      let s0 = syms[0]; let s1 = syms[1]
      for i0 in 0 .. d0:                           # parallel: the first non-unit axis that is not the last
        ...
          for jo in 0 .. d_last // L:              # column vectors of the target's lanes L
            acc[0:L] = init;  for r ...: acc[0:L] (+)= body(r, jo*L .. jo*L+L)     # a reduction: vector
            out[..., jo*L : jo*L+L] = epilogue(acc)                                   # accumulators over columns
          for jr in 0 .. d_last % L:               # the remaining columns: one at a time (a static inner
            out[..., j] = expr                     #   reduction still runs on the Converter's vector accumulator)

A reduction whose reads are not contiguous along the columns (a dot product over a transposed operand) keeps the
Converter's own schedule per output (a vector accumulator along its innermost, contiguous reduce axis). Externs
(softmax, layer norm: te.extern loop IR) are written at the symbolic shapes by their op. Anything a schedule cannot
express symbolically raises (LoweringError, TypeError from ordering a size), and the caller builds per size.
"""
from __future__ import annotations

from ..errors import LoweringError
from ..symbolic.expr import Expr, Load, Sym, Var, as_expr, substitute, walk
from ..symbolic.sym import is_static
from . import te
from .loop_ir import Allocate, Buffer, For, Kernel, LetStmt, Seq, Store, seq, walk_stmts
from .lower import Converter, flat_index
from .vectorize import aligned_stride, linear_stride, vectorize_loops

COLUMN_VECTORS = 4      # a static row's accumulators: up to this many vectors of lanes (one broadcast, several FMAs)
ROW_TILE = 4            # rows of a reduction whose column tiles share their reduce loop (4 x 4 vector accumulators)


def lower_symbolic(name: str, roots: list, out_bufs: list, in_bufs: dict, caps, sym_index: dict) -> Kernel:
    """roots[i] is stored into out_bufs[i] (tensors at symbolic shapes); in_bufs: placeholder -> Buffer;
    sym_index: symbol name -> its slot in `syms`."""
    syms = Buffer("syms", "int64", 8)
    conv = Converter(dict(in_bufs), caps)
    stmts, flops, done = [], 0, set()
    for t, ob in zip(roots, out_bufs):
        if t.extern is not None:
            if t.extern not in done:
                done.add(t.extern)
                outs = sorted((r.index, b) for r, b in zip(roots, out_bufs) if r.extern is t.extern)
                stmts.append(t.extern([b for _, b in outs], [conv.bufs[x] for x in t.inputs]))
            continue
        if t.is_placeholder:
            src = t
            t = te.compute(src.shape, lambda *i: src[i], "copy")
        stmts.append(_nest(conv, t, ob))
    body = vectorize_loops(seq(*stmts), conv.caps.lanes)
    used = {x for st in walk_stmts(body) for e in _exprs(st) for x in walk(e) if isinstance(x, Sym)}
    used |= {x for b in conv.locals + conv.scratches for x in walk(as_expr(b.size)) if isinstance(x, Sym)}
    allocated = [st.buf for st in walk_stmts(body) if isinstance(st, Allocate)]
    if any(not is_static(b.size) for b in conv.locals + conv.scratches + allocated):
        raise LoweringError(f"{name}: kernel-private memory of a symbolic size")
    for s in sorted(used, key=repr):
        if s.name not in sym_index:
            raise LoweringError(f"{name}: size {s.name} is not an input's")
        body = LetStmt(s, Load(syms, as_expr(sym_index[s.name])), body)
    params = list(out_bufs) + list(dict.fromkeys(in_bufs.values())) + [syms] + conv.scratches
    return Kernel(name, params, body, flops)


def _exprs(st) -> list:
    if isinstance(st, For):
        return [as_expr(st.extent), as_expr(st.start)]
    if isinstance(st, Store):
        return [st.index, st.value]
    if isinstance(st, LetStmt):
        return [st.value]
    cond = getattr(st, "cond", None)
    return [cond] if isinstance(cond, Expr) else []


def _nest(conv: Converter, t: te.Tensor, ob: Buffer):
    """The loop nest storing t into ob: outer axes (the first non-unit one parallel), the last axis in column
    vectors plus a scalar remainder; a reduction's rows (the last axis but one) in tiles of ROW_TILE rows, whose
    column tiles share one reduce loop (each operand vector loaded once for ROW_TILE rows), then one at a time."""
    shape = list(t.shape)
    if not shape:
        pre: list = []
        val = conv.convert(t[()], pre)
        return seq(*pre, Store(ob, as_expr(0), val))
    axes = [Var(f"i{k}") for k in range(len(shape))]
    lanes = conv.caps.lanes
    n = shape[-1]
    holes: list = []
    conv.convert(t[tuple(axes)], None, holes)
    outer = len(shape) - (2 if holes and len(shape) >= 2 else 1)     # axes of plain loops
    if outer < len(shape) - 1:         # a reduction: rows in tiles
        m, io, ir = shape[-2], Var("io"), Var("ir")
        head = axes[:-2]
        tiles = m // ROW_TILE
        inner = seq(For(io, tiles, _columns(conv, t, ob, [head + [io * ROW_TILE + q] for q in range(ROW_TILE)],
                                            axes[-1], shape, lanes)),
                    For(ir, m - tiles * ROW_TILE, _columns(conv, t, ob, [head + [tiles * ROW_TILE + ir]], axes[-1],
                                                           shape, lanes)))
    else:
        inner = _columns(conv, t, ob, [axes[:-1]], axes[-1], shape, lanes)
    par = next((k for k in range(outer) if shape[k] != 1), None)
    for k in reversed(range(outer)):
        inner = For(axes[k], shape[k], inner, "parallel" if k == par else "serial")
    if par is None and (outer < len(shape) - 1 or not is_static(n)):    # its rows (or a row's columns) in parallel
        inner = _parallel_outer(inner)
    return inner


def _parallel_outer(s):
    if isinstance(s, Seq) and s.stmts and isinstance(s.stmts[0], For):
        first = s.stmts[0]
        return seq(For(first.var, first.extent, first.body, "parallel"), *s.stmts[1:])
    return s


def _columns(conv: Converter, t: te.Tensor, ob: Buffer, heads: list, var: Var, shape: list, lanes: int):
    """The last axis of the rows `heads` (each the index of a row's leading axes): tiles of COLUMN_VECTORS vectors
    of `lanes` (independent accumulators: no chain of dependent FMAs), then of one vector over what they leave (a
    symbolic length), then the remaining columns one at a time."""
    n = shape[-1]
    static = is_static(n)
    widths = [lanes * max(1, min(n // lanes, COLUMN_VECTORS))] if static else [lanes * COLUMN_VECTORS, lanes]
    parts, done = [], as_expr(0) if not static else 0
    for width in widths:
        if static and n - done < lanes:
            break
        jo, jl = Var("jo"), Var("jl")
        count = (n - done) // width
        tiles = [_vector_columns(conv, t, ob, head + [done + jo * width + c + jl], shape, jl, lanes)
                 for head in heads for c in range(0, width, lanes)]     # one accumulator vector each: registers
        if any(x is None for x in tiles):
            break
        parts.append(For(jo, count, _merge_rows(tiles)))
        done = done + count * width
    if not parts:
        return seq(*[_scalar(conv, t, ob, head + [var], shape, var, n) for head in heads])
    if not (static and n == done):
        jr = Var("jr")
        parts += [_scalar(conv, t, ob, head + [done + jr], shape, jr, n - done) for head in heads]
    return seq(*parts)


def _merge_rows(tiles: list):
    """Column tiles of several rows, each [init, reduce loops, store], as the inits, one nest of reduce loops whose
    body is every row's update, and the stores; seq(*tiles) when they are not of that form."""
    if len(tiles) == 1:
        return tiles[0]
    forms = [t.stmts if isinstance(t, Seq) else [] for t in tiles]
    chains = []
    for f in forms:
        if len(f) != 3 or not isinstance(f[1], For):
            return seq(*tiles)
        loops, body = [], f[1]
        while isinstance(body, For) and body.kind != "vectorize":
            loops.append(body)
            body = body.body
        chains.append((loops, body))
    first = chains[0][0]
    if any(len(loops) != len(first) or any(a.extent is not b.extent for a, b in zip(loops, first))
           for loops, _ in chains):
        return seq(*tiles)
    bodies = [chains[0][1]] + [_rename(b, {x.var: y.var for x, y in zip(loops, first)}) for loops, b in chains[1:]]
    nest = seq(*bodies)
    for loop in reversed(first):
        nest = For(loop.var, loop.extent, nest, loop.kind)
    return seq(*[f[0] for f in forms], nest, *[f[2] for f in forms])


def _rename(st, mapping: dict):
    """A vectorize loop of stores with the variables of `mapping` replaced."""
    if isinstance(st, For):
        return For(st.var, st.extent, _rename(st.body, mapping), st.kind, st.start, st.axis)
    if isinstance(st, Seq):
        return seq(*[_rename(x, mapping) for x in st.stmts])
    if isinstance(st, Store):
        return Store(st.buf, substitute(st.index, mapping), substitute(st.value, mapping))
    raise LoweringError(f"cannot rename variables in {type(st).__name__}")


def _scalar(conv: Converter, t, ob, idx: list, shape: list, var: Var, extent):
    pre: list = []
    val = conv.convert(t[tuple(idx)], pre)
    return For(var, extent, seq(*pre, Store(ob, flat_index(idx, shape), val)))


def _vector_columns(conv: Converter, t, ob, idx: list, shape: list, jl: Var, lanes: int):
    """`lanes` columns at once (a multiple of the target's lanes; jl their lane): an injective body as one vectorize
    loop; a reduction (or an epilogue over reductions) as vector accumulators, one slot per column, each update a
    vectorize loop. None when a reduction's reads are not contiguous (or invariant) along the columns."""
    holes: list = []
    val = conv.convert(t[tuple(idx)], None, holes)
    store = Store(ob, flat_index(idx, shape), val)
    if not holes:
        return For(jl, lanes, store, "vectorize")
    stmts, fill = [], {}
    for h in holes:
        if h.tensor.dtype not in ("float32", "float64"):
            return None
        acc = conv.local(h.tensor.dtype, lanes, "cacc")
        red = conv.reduction(h.tensor, h.indices, acc, jl, inner=lambda u: For(jl, lanes, u, "vectorize"))
        for st in walk_stmts(red):
            if isinstance(st, Store) and st.buf is acc:
                for x in walk(st.value):
                    if isinstance(x, Load) and x.args[0] is not acc and linear_stride(x.args[1], jl) not in (0, 1) \
                            and aligned_stride(x.args[1], jl, conv.caps.lanes) not in (0, 1):    # (packed: // %)
                        return None
        stmts.append(red)
        fill[h.var] = Load(acc, jl)
    return seq(*stmts, For(jl, lanes, Store(ob, store.index, substitute(val, fill)), "vectorize"))
