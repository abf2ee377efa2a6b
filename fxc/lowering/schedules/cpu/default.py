"""Default schedules: how a group's root is turned into loops. Every knob is a named parameter.

- injective: loops over the output; leading loops fused into one parallel loop when the work is large
  enough; the innermost loop is left for the backend's vectorizer.
- reduction with epilogue: either the reduce loop innermost ("inner": contiguous reductions such as a
  softmax row) or a register tile of `tile` outputs along the last axis kept in a local accumulator
  while the reduce loops run outside it ("tile": conv, matmul — vector FMAs over the output row).
"""
from __future__ import annotations

import math

from ....symbolic.expr import (
    Const,
    Expr,
    Lane,
    Load,
    PackBf16,
    Shuffle,
    Var,
    VecLoad,
    as_expr,
    binary,
    compare,
    const,
    select,
    substitute,
    vec,
    walk,
)
from ... import te
from ...loop_ir import Allocate, Buffer, For, IfThen, LetStmt, Store, seq, used_vars
from ...lower import COMBINE, Converter, Hole, flat_index
from ...vectorize import aligned_stride, linear_stride, vectorize_expr
from .. import lookup

PARALLEL_MIN_WORK = 1 << 15      # elements x reduce size below which a kernel stays single-threaded
TILE = 32                        # accumulator tile along the output's last axis


def load_strides(e: Expr, v: Var) -> list:
    return [linear_stride(x.args[1], v) for x in walk(e) if isinstance(x, Load) and x.args[0].scope == "global"]


def _fused_parallel(axes: list, shape: list, body):
    """One parallel loop over the product of the extents `shape`, each of `axes` (Vars) bound to its part of the
    loop's index by idiv / imod."""
    p = Var("p")
    for i in reversed(range(len(axes))):
        st = math.prod(shape[i + 1:])
        e = p if st == 1 else binary("idiv", p, st)
        body = LetStmt(axes[i], e if i == 0 else binary("imod", e, shape[i]), body)
    return For(p, math.prod(shape), body, "parallel")


def _outer_loops(axes, shape, body, work: int, num_threads: int):
    """Wrap body in loops over axes; fuse them into one parallel loop when the work is worth threads."""
    if not axes:
        return body
    if num_threads > 1 and work >= PARALLEL_MIN_WORK and math.prod(shape) > 1:
        return _fused_parallel(axes, shape, body)
    for a, s in reversed(list(zip(axes, shape))):
        body = For(a, s, body)
    return body


def parallel_over(axes: list, body, work: int, num_threads: int):
    """Loops over (Var, extent) axes fused into one parallel loop (serial when small); an axis of extent 1 is bound
    to 0 (the packed-operand schedules: gemm.py, depthwise.py, winograd.py, grouped_conv.py)."""
    axes = [(a, n) for a, n in axes if n > 1] + [(a, n) for a, n in axes if n == 1]
    for a, n in axes:
        if n == 1:
            body = LetStmt(a, as_expr(0), body)
    axes = [(a, n) for a, n in axes if n > 1]
    if not axes:
        return body
    if num_threads <= 1 or work < PARALLEL_MIN_WORK:
        for a, n in reversed(axes):
            body = For(a, n, body)
        return body
    return _fused_parallel([a for a, _ in axes], [n for _, n in axes], body)


def _strides(shape):
    st, acc = [], 1
    for s in reversed(shape):
        st.append(acc)
        acc *= s
    return list(reversed(st))


def schedule_root(conv: Converter, t: te.Tensor, out: Buffer, num_threads: int):
    """The CPU family's default schedule: (loop IR storing root t into out, flops). Injective roots and reductions
    computed in place run here; a reduction root goes to _reduction, which hands it to the schedule of its compute's
    kind (conv2d_packed, ...) where one applies."""
    holes: list = []
    value = conv.convert(t.body, None, holes) if not isinstance(t.body, te.Reduce) else None
    axes, shape = list(t.axes), list(t.shape)
    if value is None:                      # the root itself is a reduction: hole at identity
        h = Hole(Var("red", t.dtype), t, tuple(t.axes))
        holes, value = [h], h.var
    red = holes[0] if len(holes) == 1 and _is_identity(holes[0].indices, axes, shape) else None
    if red is None and holes:              # reductions at other indices: compute them in place
        pre: list = []
        value = conv.convert(t.body, pre)
        index = flat_index(axes, shape)
        if axes and not any(axes[-1] in used_vars(p) for p in pre):
            # row reductions (softmax, norms): computed once per row, then the row is written
            row = _vector_row(out, index, value, axes[-1], shape[-1], conv.caps.lanes) \
                or For(axes[-1], shape[-1], Store(out, index, value), "vectorize")
            return _outer_loops(axes[:-1], shape[:-1], seq(*pre, row), math.prod(shape) * 16, num_threads), 0
        body = seq(*pre, Store(out, index, value))
        return _outer_loops(axes, shape, body, math.prod(shape) * 16, num_threads), 0
    if red is None:                        # injective
        packed = _transposed_pack(conv, t, out, num_threads) \
            or _transposed_tiles(conv, t, out, axes, shape, value, num_threads) \
            or _whole_blocks_first(conv, t, out, axes, shape, value, num_threads) \
            or _transposing_tiles(out, axes, shape, value, num_threads, conv.caps.lanes)
        if packed is not None:
            return packed, 0
        body = Store(out, flat_index(axes, shape), value)
        row = _padded_row(conv, t, out, axes, shape)
        if row is not None:
            return _outer_loops(axes[:-1], shape[:-1], row, math.prod(shape), num_threads), 0
        if axes:
            body = _vector_row(out, flat_index(axes, shape), value, axes[-1], shape[-1], conv.caps.lanes,
                               bool(t.attrs.get("int8_words"))) \
                or For(axes[-1], shape[-1], body, "vectorize")
            return _outer_loops(axes[:-1], shape[:-1], body, math.prod(shape), num_threads), 0
        return body, 0
    return _reduction(conv, t, out, red, value, axes, shape, num_threads)


def _vector_row(out, index, value, v, n, lanes: int, int8_words: bool = False):
    """out[index(v)] = value(v) for v in 0..n as explicit vectors of `lanes` (the target's Caps.lanes; and one
    narrower tail vector), when the row is contiguous in the output and value vectorizes; else None. Rows of float32,
    of int8 / uint8 (quantised tensors), of bf16x2 words and of int8 words (int8_words: ops/int8.py's packs)."""
    words = out.dtype == "int32" and (isinstance(value, PackBf16) or int8_words)
    if (out.dtype not in ("float32", "uint8", "int8") and not words) or n < 4 or linear_stride(index, v) != 1:
        return None
    full, tail = n // lanes, n % lanes
    stmts = []
    for start, count, width in ((0, full, lanes), (full * lanes, 1 if tail else 0, tail)):
        if not count:
            continue
        vs = vectorize_expr(value, v, width) if width > 1 else value
        if vs is None:
            return None
        vo = Var("vo")
        base = as_expr(start) + vo * width
        st = Store(out, substitute(index, {v: base}), substitute(vs, {v: base}))
        stmts.append(For(vo, count, st) if count > 1 else LetStmt(vo, as_expr(0), st))
    return seq(*stmts)


def transpose16(rows: list) -> list:
    """The 16 columns of 16 vectors of 16 lanes, by 64 two-vector shuffles: stage d swaps bit d of every element's
    row and column (rows i and i + d trade their lanes j with bit d set / clear), and the four stages together
    move element (i, j) to (j, i)."""
    n = len(rows)
    rows = list(rows)
    d = n // 2
    while d:
        for i in range(n):
            if i & d:
                continue
            a, b = rows[i], rows[i + d]
            rows[i] = Shuffle(a, b, [j if not j & d else n + j - d for j in range(n)])
            rows[i + d] = Shuffle(a, b, [j + d if not j & d else n + j for j in range(n)])
        d //= 2
    return rows


def _transposed_pack(conv, t, out, num_threads):
    """pack_lanes of a matrix x[N, M...] along its first axis into [blocks, M..., 16] (a weight's lanes along its
    output channels, every step of a training run): lane l of row m is x[16 b + l, m], 16 rows of x apart. Each 16 x 16
    tile is read as 16 row vectors and transposed in registers (transpose16) instead of gathered element by element;
    the m tail and the blocks past N's last whole block (zeros past N) are scalar. None for other packs, and when the
    source is computed in the group (the generic path reads through it)."""
    lanes = conv.caps.lanes
    attrs = t.attrs or {}
    x = attrs.get("pack_of")
    if x is None or attrs.get("pack_axis") != 0 or attrs.get("pack_block_pos") != 0 or t.shape[-1] != lanes \
            or x.dtype not in ("float32", "int32") or x not in conv.bufs:
        return None
    xb, N, M, B = conv.bufs[x], x.shape[0], math.prod(x.shape[1:]), t.shape[0]
    full_b, full_m = N // lanes, M // lanes
    if not full_b or not full_m:
        return None
    p, b, mb = Var("p"), Var("pb"), Var("pm")
    rows = [VecLoad(xb, (b * lanes + r) * M + mb * lanes, lanes) for r in range(lanes)]
    cols = transpose16(rows)
    tile = seq(*[Store(out, ((b * M) + mb * lanes + j) * lanes, cols[j]) for j in range(lanes)])
    body = LetStmt(b, binary("idiv", p, full_m), LetStmt(mb, binary("imod", p, full_m), tile))
    work = full_b * full_m
    stmts = [For(p, work, body, "parallel" if num_threads > 1 and work * 256 >= PARALLEL_MIN_WORK else "serial")]
    # the rest, element by element: m past the whole tiles in whole blocks, then every m of the other blocks
    m, r, bb = Var("tm"), Var("tr"), Var("tb")

    def cell(blk, col):
        row = blk * lanes + r
        src = select(compare("lt", row, as_expr(N)), Load(xb, binary("min", row, as_expr(N - 1)) * M + col),
                     Const(0, x.dtype))
        return For(r, lanes, Store(out, ((blk * M) + col) * lanes + r, src))
    if M > full_m * lanes:
        stmts.append(For(bb, full_b, For(m, M - full_m * lanes, cell(bb, m + full_m * lanes))))
    if B > full_b:
        stmts.append(For(bb, B - full_b, For(m, M, cell(bb + full_b, m))))
    return seq(*stmts)


def _transposed_tiles(conv, t, out, axes, shape, value, num_threads):
    """A pack_lanes computed in its group (a transposed weight read through a permute) whose lanes are far apart in
    the source while the axis before them (m) is contiguous there: out[..., m, l] = src(..., 16 b + l, m). Its whole
    blocks run as 16 x 16 tiles, 16 vectors along m transposed in registers (transpose16); the rest of m and the
    blocks past the packed axis's whole blocks element by element. None for any other tensor."""
    lanes = conv.caps.lanes
    attrs = t.attrs or {}
    whole, exact = attrs.get("pack_whole"), attrs.get("pack_exact")
    if exact is None or len(axes) < 3 or shape[-1] != lanes or shape[-2] < lanes or not whole \
            or out.dtype not in ("float32", "int32"):
        return None
    bp = attrs["pack_block_pos"]
    m, l = axes[-2], axes[-1]
    if bp == len(axes) - 2:
        return None
    fast = conv.convert(exact(*axes), None)
    along_m, along_l = load_strides(fast, m), load_strides(fast, l)
    if not along_m or any(st != 1 for st in along_m) or all(st == 1 for st in along_l):
        return None
    rows = [vectorize_expr(substitute(fast, {l: as_expr(r)}), m, lanes) for r in range(lanes)]
    if any(r is None for r in rows):
        return None
    index = flat_index(axes, shape)
    mt = Var("mt")
    base = {m: mt * lanes}
    cols = transpose16([substitute(r, base) for r in rows])
    tile = seq(*[Store(out, substitute(index, {m: mt * lanes + j, l: as_expr(0)}), cols[j]) for j in range(lanes)])
    head = list(shape[:-2])
    head[bp] = whole
    full_m = shape[-2] // lanes
    stmts = [_outer_loops(axes[:-2] + [mt], head + [full_m], tile, math.prod(head) * full_m * 256, num_threads)]
    generic = For(l, lanes, Store(out, index, value))
    if shape[-2] > full_m * lanes:              # m past the whole tiles, in the whole blocks
        m2 = Var("mrest")
        stmts.append(_outer_loops(axes[:-2] + [m2], head + [shape[-2] - full_m * lanes],
                                  substitute_stmt(generic, {m: m2 + full_m * lanes}), 0, 1))
    if shape[bp] > whole:                       # the blocks past the whole ones: zeros past the packed axis
        b2 = Var("brest")
        rest = list(shape[:-1])
        rest[bp] -= whole
        tail_axes = list(axes[:-1])
        tail_axes[bp] = b2
        stmts.append(_outer_loops(tail_axes, rest, substitute_stmt(generic, {axes[bp]: b2 + whole}), 0, 1))
    return seq(*stmts)


def _transposing_tiles(out, axes, shape, value, num_threads, lanes: int):
    """An injective root that reads across its output rows: the output's last axis v strides through the source
    (a gather per lane on the generic path) while an outer axis u reads it contiguously, e.g. a permute from NHWC
    to NCHW. Each 16 x 16 tile of (u, v) is 16 vectors along u transposed in registers (transpose16) and stored as
    16 rows along v; the v tail of the whole u tiles and the u tail run as written. None for other roots."""
    if out.dtype not in ("float32", "int32") or len(axes) < 2 or shape[-1] < lanes:
        return None
    v, index = axes[-1], flat_index(axes, shape)
    along_v = load_strides(value, v)
    if linear_stride(index, v) != 1 or all(st in (0, 1) for st in along_v):
        return None
    k = next((k for k in reversed(range(len(axes) - 1)) if shape[k] >= lanes
              and 1 in load_strides(value, axes[k]) and set(load_strides(value, axes[k])) <= {0, 1}), None)
    if k is None:
        return None
    u = axes[k]
    along_u = vectorize_expr(value, u, lanes)
    if along_u is None:
        return None
    ut, vt = Var("ut"), Var("vt")
    rows = [substitute(along_u, {u: ut * lanes, v: vt * lanes + r}) for r in range(lanes)]
    cols = transpose16(rows)
    tile = seq(*[Store(out, substitute(index, {u: ut * lanes + j, v: vt * lanes}), cols[j]) for j in range(lanes)])
    full_u, full_v = shape[k] // lanes, shape[-1] // lanes
    outer = [a for i, a in enumerate(axes[:-1]) if i != k]
    outer_shape = [n for i, n in enumerate(shape[:-1]) if i != k]
    stmts = [_outer_loops(outer + [ut, vt], outer_shape + [full_u, full_v], tile,
                          math.prod(outer_shape) * full_u * full_v * lanes * lanes, num_threads)]
    if shape[-1] > full_v * lanes:              # the v tail of the whole u tiles
        u2, v2 = Var("utail"), Var("vtail")
        at = {u: u2, v: v2 + full_v * lanes}
        stmts.append(_outer_loops(outer + [u2, v2], outer_shape + [full_u * lanes, shape[-1] - full_v * lanes],
                                  Store(out, substitute(index, at), substitute(value, at)), 0, 1))
    if shape[k] > full_u * lanes:               # the u tail, every v
        u3 = Var("urest")
        at = {u: u3 + full_u * lanes}
        stmts.append(_outer_loops(outer + [u3, v], outer_shape + [shape[k] - full_u * lanes, shape[-1]],
                                  Store(out, substitute(index, at), substitute(value, at)), 0, 1))
    return seq(*stmts)


def substitute_stmt(st, mapping):
    """A For over one Store with the mapping applied to its index and value (the loops here are that simple)."""
    if isinstance(st, For):
        return For(st.var, st.extent, substitute_stmt(st.body, mapping), st.kind)
    return Store(st.buf, substitute(st.index, mapping), substitute(st.value, mapping))


def _whole_blocks_first(conv, t, out, axes, shape, value, num_threads):
    """A pack_lanes with padding lanes (its last block runs past the packed axis) whose lanes read contiguously:
    the blocks before that one read with no bounds check (the pack's exact form, vector rows), the rest as
    written (clamped reads, zeros past the end). None for any other tensor."""
    attrs = t.attrs or {}
    whole, exact = attrs.get("pack_whole"), attrs.get("pack_exact")
    if exact is None or not axes or whole is None:
        return None
    bp = attrs["pack_block_pos"]
    if not 0 < whole < shape[bp]:
        return None
    index = flat_index(axes, shape)
    fast = _vector_row(out, index, conv.convert(exact(*axes), None), axes[-1], shape[-1], conv.caps.lanes)
    if fast is None:
        return None
    head = list(shape[:-1])
    head[bp] = whole
    rest = list(shape[:-1])
    rest[bp] -= whole
    b, b2 = axes[bp], Var("tail_b")
    tail_sub = {b: b2 + whole}
    tail = For(axes[-1], shape[-1], Store(out, substitute(index, tail_sub), substitute(value, tail_sub)), "vectorize")
    tail_axes = list(axes[:-1])
    tail_axes[bp] = b2
    return seq(_outer_loops(axes[:-1], head, fast, math.prod(head) * shape[-1], num_threads),
               _outer_loops(tail_axes, rest, tail, math.prod(rest) * shape[-1], num_threads))


def _padded_row(conv, t, out, axes, shape):
    """A constant pad (its compute's attrs say so) written row by row: a row outside the input is the fill value,
    any other is the fill, a straight copy of one input row (vector loads, no bounds checks), the fill; None for
    other tensors or negative pads (crops)."""
    attrs = t.attrs or {}
    x, widths = attrs.get("pad_of"), attrs.get("pad_widths")
    if x is None or not axes or min(min(w) for w in widths) < 0:
        return None
    (left, _), W, v = widths[-1], x.shape[-1], axes[-1]
    index = flat_index(axes, shape)
    inside = None
    for d, (a, (lo, _), n) in enumerate(zip(axes[:-1], widths[:-1], x.shape[:-1])):
        if lo or n != shape[d]:
            ok = binary("and", compare("ge", a, as_expr(lo)), compare("lt", a, as_expr(lo + n)))
            inside = ok if inside is None else binary("and", inside, ok)
    src = conv.convert(x[tuple(a - lo for a, (lo, _) in zip(axes[:-1], widths[:-1])) + (v - left,)], None)
    fill = const(attrs["pad_value"], out.dtype)

    def segment(start, count, value):
        if count <= 0:
            return None
        j = Var("j")
        sub = {v: as_expr(start) + j}
        return _vector_row(out, substitute(index, sub), substitute(value, sub), j, count, conv.caps.lanes) \
            or For(j, count, Store(out, substitute(index, sub), substitute(value, sub)), "vectorize")

    row = seq(*[s for s in (segment(0, left, fill), segment(left, W, src),
                            segment(left + W, shape[-1] - left - W, fill))
                if s is not None])
    return row if inside is None else IfThen(inside, row, segment(0, shape[-1], fill))


def _is_identity(indices, axes, shape) -> bool:
    """indices address the output element itself (a size-1 dim may be indexed by the constant 0)."""
    return len(indices) == len(axes) and all(
        i is a or (n == 1 and isinstance(i, Const) and i.value == 0) for i, a, n in zip(indices, axes, shape))


def _reduction(conv, t, out, red, value, axes, shape, num_threads):
    rt: te.Tensor = red.tensor
    rsize = math.prod(e for _, e in rt.body.axes)
    flops = 2 * math.prod(shape) * rsize * (2 if rt.attrs.get("bf16") else 1)    # a bf16x2 word step: 2 multiply-adds
    work = math.prod(shape) * max(rsize, 1)
    special = _special(conv, rt, out, red, value, axes, shape, num_threads)
    if special is not None:
        return special, rt.attrs.get("flops", flops)
    probe = Converter(conv.bufs, conv.caps)         # (whether the lanes schedule applies: no locals made in conv)
    lanes = _lanes_along_output(probe, rt, out, red, value, axes, shape, work, num_threads) is not None
    mode = conv.knob("reduce.schedule", "lanes" if lanes else _choose_mode(conv, rt, axes, shape),
                     ("lanes",) * lanes + ("inner",) + ("tile",) * bool(axes),
                     "lanes: vector accumulators along an output axis; inner: the reduce loop innermost; tile: a "
                     "register tile along the output's last axis")
    if mode == "lanes":
        return _lanes_along_output(conv, rt, out, red, value, axes, shape, work, num_threads), flops
    if mode == "tile" and axes:
        return _tiled(conv, rt, out, red, value, axes, shape, work, num_threads), flops
    acc = conv.local(rt.dtype)
    zero = Const(0, "int64")
    body = seq(conv.reduction(rt, tuple(axes), acc, zero),
               Store(out, flat_index(axes, shape), substitute(value, {red.var: Load(acc, zero)})))
    return Allocate(acc, _outer_loops(axes, shape, body, work, num_threads)), flops


def _special(conv, rt, out, red, value, axes, shape, num_threads):
    """The CPU family's schedule of the kind the reduction's compute names in its attrs (the registry,
    fxc/lowering/schedules); None when it names none, has none, or that schedule does not apply."""
    kind = rt.attrs.get("schedule")
    if kind is None or rt.dtype != ("int32" if rt.attrs.get("int8") else "float32") or 0 in tuple(shape):
        return None     # (an empty output: the plain loops, no tiles; int8 words: ops/int8.py)
    fn = lookup("cpu", kind, default=False)
    return fn(conv, rt, out, red, value, axes, shape, num_threads) if fn else None


def _lanes_along_output(conv, rt, out, red, value, axes, shape, work, num_threads):
    """A float32 sum / max / min whose reads are contiguous along an output axis j but strided along its own
    innermost axis, e.g. a global average pool of an NCHW16c map (squeeze-and-excitation: a channel's pixels are 16
    floats apart, 16 channels side by side): 16 outputs along j at a time on one vector accumulator, then the
    epilogue as a vector (lane by lane where the output is not contiguous along j); j past its whole chunks as
    scalar loops. The scalar loops alone read one float per 64-byte line: 145 us for a 32 x 112 x 112 pool.
    None for other reductions (contiguous rows take the row schedules)."""
    lanes = conv.caps.lanes
    rb: te.Reduce = rt.body
    if rt.dtype != "float32" or rb.op not in ("sum", "max", "min") or not rb.axes or not axes:
        return None
    rvars = [Var("r") for _ in rb.axes]
    sub = dict(zip(rt.axes, axes))
    sub.update({v: n for (v, _), n in zip(rb.axes, rvars)})
    pre: list = []
    val = Converter(conv.bufs, conv.caps).convert(substitute(rb.body, sub), pre)     # a probe: no locals made in conv
    loads = [x.args[1] for x in walk(val) if isinstance(x, Load) and x.args[0].scope == "global"]
    along_red = [linear_stride(i, rvars[-1]) for i in loads]
    if pre or not loads or (1 in along_red and set(along_red) <= {0, 1}):
        return None
    val = conv.convert(substitute(rb.body, sub), pre)

    def contiguous(j):
        st = [aligned_stride(i, j, lanes) for i in loads]
        return 1 in st and set(st) <= {0, 1}
    k = next((k for k in reversed(range(len(axes))) if shape[k] >= lanes and contiguous(axes[k])), None)
    vs = None if k is None else vectorize_expr(val, axes[k], lanes, aligned=True)
    if vs is None:
        return None
    j, full = axes[k], shape[k] // lanes
    comb, zero, jo = COMBINE[rb.op], Const(0, "int64"), Var("jo")
    vacc = conv.local("float32", lanes, "racc")
    acc = VecLoad(vacc, zero, lanes)
    base = {j: jo * lanes}
    update = Store(vacc, zero, binary(comb, acc, substitute(vs, base)))
    for v, (_, extent) in reversed(list(zip(rvars, rb.axes))):
        update = For(v, extent, update)
    index = flat_index(axes, shape)
    ev = vectorize_expr(value, j, lanes, {red.var: acc}, aligned=True) if linear_stride(index, j) == 1 else None
    if ev is not None:
        store = Store(out, substitute(index, base), substitute(ev, base))
    else:
        store = seq(*[Store(out, substitute(index, at), substitute(value, {red.var: Lane(acc, lane), **at}))
                      for lane in range(lanes) for at in [{j: jo * lanes + lane}]])
    chunk = Allocate(vacc, seq(Store(vacc, zero, Const(rb.init.value, vec("float32", lanes))), update, store))
    outer = [a for a in axes if a is not j] + [jo]
    outer_shape = [n for a, n in zip(axes, shape) if a is not j] + [full]
    stmts = [_outer_loops(outer, outer_shape, chunk, work, num_threads)]
    if shape[k] > full * lanes:                 # j past the whole chunks: the scalar loops
        jt, sacc = Var("jt"), conv.local(rt.dtype)
        at = {j: jt + full * lanes}
        idx = tuple(at.get(a, a) for a in axes)
        body = seq(conv.reduction(rt, idx, sacc, zero),
                   Store(out, substitute(index, at), substitute(value, {red.var: Load(sacc, zero), **at})))
        rest = [a for a in axes if a is not j] + [jt]
        rest_shape = [n for a, n in zip(axes, shape) if a is not j] + [shape[k] - full * lanes]
        stmts.append(Allocate(sacc, _outer_loops(rest, rest_shape, body, 0, 1)))
    return seq(*stmts)


def _choose_mode(conv, rt, axes, shape) -> str:
    if not axes or shape[-1] < 4:
        return "inner"
    red: te.Reduce = rt.body
    probe = Converter(conv.bufs, conv.caps)
    sub = dict(zip(rt.axes, axes))
    rv = [Var("r") for _ in red.axes]
    sub.update({v: n for (v, _), n in zip(red.axes, rv)})
    body = probe.convert(substitute(red.body, sub), [])
    along_out = load_strides(body, axes[-1])
    along_red = load_strides(body, rv[-1]) if rv else [0]
    out_ok = all(s in (0, 1) for s in along_out) and 1 in along_out
    red_ok = all(s in (0, 1) for s in along_red) and 1 in along_red
    r_ext = red.axes[-1][1] if red.axes else 1
    if red_ok and r_ext >= 16 and not out_ok:
        return "inner"          # long contiguous reductions (softmax rows, dot products)
    if shape[-1] >= 4 and (out_ok or r_ext < 16 or not red_ok):
        return "tile"           # conv/matmul: independent outputs along a row, short or strided reductions
    return "inner"


def _tiled(conv, rt, out, red, value, axes, shape, work, num_threads):
    """for outer: for jo: acc[0:T] = init; for r: for jj: acc[jj] (+)= body(j=jo*T+jj); store epilogue."""
    tile = conv.knob("reduce.tile", TILE, (4, 8, 16, 64), "outputs along the last axis per accumulator tile (unrolled)")
    j, n = axes[-1], shape[-1]
    parts = []
    main = (n // tile) * tile
    for start, count, width in ((0, main // tile, tile), (main, 1 if n - main else 0, n - main)):
        if count == 0 or width == 0:
            continue
        acc = conv.local(rt.dtype, width)
        jo, jj = Var("jo"), Var("jj")
        jval = as_expr(start) + jo * width + jj
        idx = tuple(axes[:-1]) + (jval,)
        inner = lambda s, jj=jj, width=width: For(jj, width, s, "unroll")
        red_stmt = conv.reduction(rt, idx, acc, jj, inner)
        store_idx = flat_index(idx, shape)
        epi = substitute(value, {red.var: Load(acc, jj), j: jval})
        body = seq(red_stmt, For(jj, width, Store(out, store_idx, epi), "unroll"))
        parts.append(Allocate(acc, For(jo, count, body)))
    body = seq(*parts)
    return _outer_loops(axes[:-1], shape[:-1], body, work, num_threads)
