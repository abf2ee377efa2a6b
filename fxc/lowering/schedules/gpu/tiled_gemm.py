"""Local-memory tiled GEMM: a root whose value is an epilogue of one matrix-product reduction
(out[..., i, j] = f(sum_k a(..., i, k) * b(..., k, j)), a not reading j and b not reading i: matmul, linear,
batched attention products).

A work-group of tile x tile work-items computes a tile x tile block of outputs (one each); the reduction runs over
k in steps of `tile`: the group stages the a-block and the b-block of the step in shared memory (each work-item
loads one element of each, zero outside the matrices), waits at a barrier, accumulates its dot product from
shared memory, and waits again before the next step overwrites the blocks. Grid: (column tiles, row tiles,
batch). Knob: `knobs.gemm_tile` (Knobs.for_caps: the largest of 16 / 8 whose two blocks fit the device's local
memory and whose work-group fits its limit)."""
from __future__ import annotations

import itertools
import math

from ....errors import LoweringError
from ....symbolic.expr import Bin, Broadcast, Const, Var, VecLoad, as_expr, binary, compare, substitute, vec, walk
from ... import te
from ...loop_ir import Barrier, Buffer, For, IfThen, Load, Store, seq
from ...lower import Hole
from ...vectorize import vectorize_expr
from .one_per_output import unflatten

FLOAT = ("float32",)
# an int32 accumulator (qconv2d / qmatmul: int8 products summed in int32) and the dtypes of its epilogue's result
FLOAT_OR_INT32, INT32_EPILOGUES = ("float32", "int32"), ("float32", "int32", "int8", "uint8")


def reduction_epilogue(conv, t, accumulators=FLOAT):
    """(hole, reduce tensor, value with the hole) when t is an epilogue, at its own indices, of one reduction whose
    dtype is one of `accumulators` (a root that is the reduction itself included); else None. A float32 reduction's
    epilogue is float32; an int32 one's (FLOAT_OR_INT32: the schedules that accumulate in the reduction's own dtype)
    float32, int32 or 8-bit."""
    if t.dtype not in (INT32_EPILOGUES if "int32" in accumulators else FLOAT):
        return None
    if isinstance(t.body, te.Reduce):
        h = Hole(Var("red", t.dtype), t, tuple(t.axes))
        holes, value = [h], h.var
    else:
        holes = []
        try:
            value = conv.convert(t.body, None, holes)
        except LoweringError:   # reductions at other indices: not this schedule's shape
            return None
    if len(holes) != 1 or holes[0].tensor.dtype not in accumulators or \
            holes[0].tensor.dtype == "float32" and t.dtype != "float32":
        return None
    if not all(i is v or (n == 1 and isinstance(i, Const) and i.value == 0)
               for i, v, n in zip(holes[0].indices, t.axes, t.shape)):
        return None
    return holes[0], holes[0].tensor, value


def _sum_of_products(conv, t, accumulators=FLOAT):
    """(hole, reduce tensor, value with the hole) when t is an epilogue, at its own indices, of one sum of products
    of t's shape in one of `accumulators` (reduction_epilogue); else None."""
    found = reduction_epilogue(conv, t, accumulators) if len(t.shape) >= 2 else None
    if found is None:
        return None
    red_t = found[1]
    red = red_t.body
    if red.op != "sum" or not isinstance(red.body, Bin) or red.body.args[0] != "mul" \
            or tuple(red_t.shape) != tuple(t.shape):
        return None
    return found


def matrix_product(conv, t):
    """(hole, reduce tensor, a, b, value with the hole) when t is a matrix-product epilogue, else None."""
    found = _sum_of_products(conv, t)
    if found is None or len(found[1].body.axes) != 1:
        return None
    hole, red_t, value = found
    red = red_t.body
    _, a, b = red.body.args
    i_ax, j_ax = red_t.axes[-2], red_t.axes[-1]
    uses = lambda e, v: any(x is v for x in walk(e))        # noqa: E731
    if uses(a, j_ax) or uses(b, i_ax):
        return None
    return hole, red_t, a, b, value


class _TiledGemm:
    def applies(self, conv, t, knobs) -> bool:
        if knobs.gemm_tile <= 1:
            return False
        if knobs.gemm_shared and matrix_product(conv, t) is not None:
            return True
        return _product_axes(conv, t) is not None

    def __call__(self, conv, t, out, knobs) -> list:
        if not knobs.gemm_shared or matrix_product(conv, t) is None:
            return register_tiles(conv, t, out, knobs)
        hole, red_t, a, b, value = matrix_product(conv, t)
        red = red_t.body
        (kv, kdim), = red.axes
        T = knobs.gemm_tile
        *batch, m, n = t.shape
        nb = math.prod(batch)
        gj, gi, gb, tj, ti, ks, kk = (Var(s) for s in ("gj", "gi", "gb", "tj", "ti", "ks", "kk"))
        As = Buffer(f"ga{len(conv.locals)}", "float32", T * T, "shared")
        Bs = Buffer(f"gb{len(conv.locals)}", "float32", T * T, "shared")
        acc = conv.local("float32", 1, "gacc")
        zero, fzero = Const(0, "int64"), Const(0.0, "float32")
        bidx = unflatten(gb, batch) if batch else []
        row, col = gi * T + ti, gj * T + tj
        base = dict(zip(red_t.axes[:-2], bidx))

        def operand(e, sub):
            pre: list = []
            v = conv.convert(substitute(e, {**base, **sub}), pre)
            return pre, v

        ka, kb = ks * T + tj, ks * T + ti
        pa, va = operand(a, {red_t.axes[-2]: row, kv: ka})
        pb, vb = operand(b, {red_t.axes[-1]: col, kv: kb})
        inside = lambda x, lim: compare("lt", x, as_expr(lim))      # noqa: E731
        load_a = IfThen(binary("and", inside(row, m), inside(ka, kdim)), seq(*pa, Store(As, ti * T + tj, va)),
                        Store(As, ti * T + tj, fzero))
        load_b = IfThen(binary("and", inside(kb, kdim), inside(col, n)), seq(*pb, Store(Bs, ti * T + tj, vb)),
                        Store(Bs, ti * T + tj, fzero))
        dot = For(kk, T, Store(acc, zero, Load(acc, zero) + Load(As, ti * T + kk) * Load(Bs, kk * T + tj)), "unroll")
        steps = For(ks, math.ceil(kdim / T), seq(load_a, load_b, Barrier(), dot, Barrier()))
        idx = list(bidx) + [row, col]
        pre: list = []
        outv = conv.convert(substitute(value, {**dict(zip(t.axes, idx)), hole.var: Load(acc, zero)}), pre)
        flat = (gb * (m * n) if batch else zero) + row * n + col
        write = IfThen(binary("and", inside(row, m), inside(col, n)), seq(*pre, Store(out, flat, outv)))
        body = seq(Store(acc, zero, fzero), steps, write)
        loops = For(tj, T, body, "thread", axis=0)
        loops = For(ti, T, loops, "thread", axis=1)
        loops = For(gj, math.ceil(n / T), loops, "grid", axis=0)
        loops = For(gi, math.ceil(m / T), loops, "grid", axis=1)
        return [For(gb, nb, loops, "grid", axis=2) if batch else loops]


def _product_axes(conv, t):
    """(hole, reduce tensor, row factor, col factor, value, row axis, column axes) when t is an epilogue of a sum of
    products whose one factor reads the last output axes (the columns: the longest such suffix of axes the other
    factor does not read) and the other reads an output axis alone (the rows): matmul (rows i, columns j) and
    convolution (rows: output channels, columns: the output's pixels, height x width), in float32 or int32 (the
    register tiles accumulate in the reduction's dtype); None otherwise."""
    found = _sum_of_products(conv, t, FLOAT_OR_INT32)
    if found is None:
        return None
    hole, red_t, value = found
    red = red_t.body
    axes = red_t.axes
    uses = lambda e, v: any(x is v for x in walk(e))        # noqa: E731
    for colf, rowf in (red.body.args[2], red.body.args[1]), (red.body.args[1], red.body.args[2]):
        if not uses(colf, axes[-1]) or uses(rowf, axes[-1]):
            continue
        first = len(axes) - 1
        while first > 0 and uses(colf, axes[first - 1]) and not uses(rowf, axes[first - 1]):
            first -= 1
        rows = [d for d in range(first) if uses(rowf, axes[d]) and not uses(colf, axes[d])]
        if rows:
            return hole, red_t, rowf, colf, value, rows[-1], list(range(first, len(axes)))
    return None


def register_tiles(conv, t, out, knobs) -> list:
    """The GEMM for devices whose local memory is ordinary memory (CPU devices such as PoCL's), and convolutions on
    every device: no staging; each work-item accumulates gemm_rows x gemm_cols outputs in registers, its rows and
    columns interleaved with its work-group's (row r of work-item ti is ti + r * tile_rows, column c of tj is
    tj + c * tile), so the work-items of a row read consecutive columns (the device vectorises across them) and every
    loaded element feeds several multiply-adds. The other output axes (batch; a convolution's image rows) are the
    third grid axis. Loads past the edges read the last row / column instead (in bounds; their results are not
    stored). The work-group is gemm_tile work-items along the columns x gemm_tile_rows along the rows (0: gemm_tile).
    With gemm_lockstep > 0 the work-group steps through the reduction together (`lockstep`)."""
    hole, red_t, rowf, colf, value, ra, cas = _product_axes(conv, t)
    red = red_t.body
    T, R, C = knobs.gemm_tile, knobs.gemm_rows, knobs.gemm_cols
    TR = knobs.gemm_tile_rows or T
    shape, axes = t.shape, red_t.axes
    m, n = shape[ra], math.prod(shape[d] for d in cas)
    rest = [d for d in range(len(shape)) if d != ra and d not in cas]
    gj, gi, gb, tj, ti = (Var(s) for s in ("gj", "gi", "gb", "tj", "ti"))
    rvars = [Var("k") for _ in red.axes]
    at = dict(zip([axes[d] for d in rest], unflatten(gb, [shape[d] for d in rest]) if rest else []))
    rows = [gi * (TR * R) + ti + r * TR for r in range(R)]
    cols = [gj * (T * C) + tj + c * T for c in range(C)]
    clamp = lambda x, lim: binary("min", x, as_expr(lim - 1))      # noqa: E731
    inside = lambda x, lim: compare("lt", x, as_expr(lim))       # noqa: E731

    def operand(e, sub):
        pre: list = []
        v = conv.convert(substitute(e, {**at, **sub}), pre)
        if pre:
            raise LoweringError("a GEMM operand with its own reduction")
        return v
    col_at = lambda cl: dict(zip([axes[d] for d in cas], unflatten(cl, [shape[d] for d in cas])))  # noqa: E731

    vform = _vector_columns(colf, lambda v: operand(colf, col_at(v)), n, knobs.gemm_vector) if \
        knobs.gemm_vector > 1 else None
    if vform is not None:
        return _vector_tiles(conv, t, out, knobs, (hole, red_t, rowf, value, ra, cas), (gj, gi, gb, tj, ti), at,
                             operand, col_at, vform)
    acc = conv.local(red_t.dtype, R * C, "gacc")

    def step(k: dict):
        """One step of the reduction (each reduce axis -> its value): R x C multiply-adds of R + C loads."""
        av = [operand(rowf, {axes[ra]: clamp(rw, m), **k}) for rw in rows]
        bv = [operand(colf, {**col_at(clamp(cl, n)), **k}) for cl in cols]
        return seq(*(Store(acc, as_expr(r * C + c), Load(acc, as_expr(r * C + c)) + av[r] * bv[c])
                     for r in range(R) for c in range(C)))
    zero = Const(0.0 if red_t.dtype == "float32" else 0, red_t.dtype)
    init = [Store(acc, as_expr(q), zero) for q in range(R * C)]
    update = _reduction(step, red.axes, rvars, knobs)
    writes = []
    for r in range(R):
        for c in range(C):
            idx = {**{axes[d]: at[axes[d]] for d in rest}, axes[ra]: rows[r], **col_at(cols[c])}
            pre: list = []
            v = conv.convert(substitute(value, {**{t.axes[d]: idx[axes[d]] for d in range(len(shape))},
                                                hole.var: Load(acc, as_expr(r * C + c))}), pre)
            flat = as_expr(0)
            for d, st in zip(range(len(shape)), _strides(shape)):
                flat = flat + idx[axes[d]] * st
            writes.append(IfThen(binary("and", inside(rows[r], m), inside(cols[c], n)), seq(*pre, Store(out, flat, v))))
    body = seq(*init, update, *writes)
    loops = For(tj, T, body, "thread", axis=0)
    loops = For(ti, TR, loops, "thread", axis=1)
    loops = For(gj, math.ceil(n / (T * C)), loops, "grid", axis=0)
    loops = For(gi, math.ceil(m / (TR * R)), loops, "grid", axis=1)
    return [For(gb, math.prod(shape[d] for d in rest), loops, "grid", axis=2) if rest else loops]


def _reduction(step, axes: list, rvars: list, knobs):
    """The reduction's loops around step(k) (k: each reduce axis -> its value): nested loops over the reduce axes, or
    with gemm_lockstep the work-group's lockstep form."""
    if knobs.gemm_lockstep:
        return lockstep(step, axes, knobs.gemm_lockstep)
    update = step({v: nv for (v, _), nv in zip(axes, rvars)})
    for v, (_, extent) in reversed(list(zip(rvars, axes))):
        update = For(v, extent, update)
    return update


def _vector_columns(colf, operand_at, n: int, V: int):
    """(v, the column factor's value at V consecutive columns from v as one vector expression over v) when every
    block of V columns that starts at a multiple of V reads it with a vector form (contiguous loads where its index
    advances by 1 along the columns, e.g. a stride-1 convolution's input along an image row whose width V divides);
    None otherwise (n not a multiple of V, or no vector form)."""
    if n % V:
        return None
    v = Var("cv")
    e = vectorize_expr(operand_at(v), v, V, aligned=True)
    return None if e is None else (v, e)


def _vector_tiles(conv, t, out, knobs, parts, loop_vars, at: dict, operand, col_at, vform) -> list:
    """register_tiles with float vectors along the columns (gemm_vector = V lanes, the device language's vector
    type: OpenCL's floatV): each work-item's column c is a block of V consecutive columns, block tj + c * tile of its
    work-group's, so its loads of the column factor are vector loads and each row's element is broadcast to V
    multiply-adds; a device that does not vectorise across work-items (PoCL's CPU device runs each work-item's
    loops in scalar code) gets SIMD code this way. Blocks past the last read the last block (in bounds; not stored);
    the epilogue runs lane by lane."""
    hole, red_t, rowf, value, ra, cas = parts
    red = red_t.body
    T, R, C, V = knobs.gemm_tile, knobs.gemm_rows, knobs.gemm_cols, knobs.gemm_vector
    TR = knobs.gemm_tile_rows or T
    shape, axes = t.shape, red_t.axes
    m, n = shape[ra], math.prod(shape[d] for d in cas)
    blocks = n // V
    rest = [d for d in range(len(shape)) if d != ra and d not in cas]
    gj, gi, gb, tj, ti = loop_vars         # (the operands' `at` reads gb)
    rvars = [Var("k") for _ in red.axes]
    acc = conv.local("float32", R * C * V, "gvacc")
    rows = [gi * (TR * R) + ti + r * TR for r in range(R)]
    blks = [gj * (T * C) + tj + c * T for c in range(C)]
    clamp = lambda x, lim: binary("min", x, as_expr(lim - 1))      # noqa: E731
    v, vexpr = vform

    def step(k: dict):
        av = [Broadcast(operand(rowf, {axes[ra]: clamp(rw, m), **k}), V) for rw in rows]
        bv = [substitute(vexpr, {**k, v: clamp(b, blocks) * V}) for b in blks]
        return seq(*(Store(acc, as_expr((r * C + c) * V), VecLoad(acc, as_expr((r * C + c) * V), V) + av[r] * bv[c])
                     for r in range(R) for c in range(C)))
    init = [Store(acc, as_expr(q * V), Const(0.0, vec("float32", V))) for q in range(R * C)]
    update = _reduction(step, red.axes, rvars, knobs)
    writes = []
    for r in range(R):
        for c in range(C):
            lanes = []
            for e in range(V):
                idx = {**{axes[d]: at[axes[d]] for d in rest}, axes[ra]: rows[r], **col_at(blks[c] * V + e)}
                pre: list = []
                val = conv.convert(substitute(value, {**{t.axes[d]: idx[axes[d]] for d in range(len(shape))},
                                                      hole.var: Load(acc, as_expr((r * C + c) * V + e))}), pre)
                flat = as_expr(0)
                for d, st in zip(range(len(shape)), _strides(shape)):
                    flat = flat + idx[axes[d]] * st
                lanes.append(seq(*pre, Store(out, flat, val)))
            inside = binary("and", compare("lt", rows[r], as_expr(m)), compare("lt", blks[c], as_expr(blocks)))
            writes.append(IfThen(inside, seq(*lanes)))
    body = seq(*init, update, *writes)
    loops = For(tj, T, body, "thread", axis=0)
    loops = For(ti, TR, loops, "thread", axis=1)
    loops = For(gj, math.ceil(blocks / (T * C)), loops, "grid", axis=0)
    loops = For(gi, math.ceil(m / (TR * R)), loops, "grid", axis=1)
    return [For(gb, math.prod(shape[d] for d in rest), loops, "grid", axis=2) if rest else loops]


LOCKSTEP_STEPS = 64         # the most reduction steps unrolled between two barriers


def lockstep(step, axes: list, n: int):
    """The reduction loops of a register-tiled product with its work-group in lockstep: each iteration of a loop over
    the outermost reduce axis begins with a barrier, and its body is u iterations of that axis (u: the largest divisor
    of its extent up to n, fewer where the unrolled steps would pass LOCKSTEP_STEPS) with the inner reduce axes
    unrolled: straight-line code between barriers. A CPU device that runs a work-group's work-items as a loop (PoCL)
    then runs that loop inside each iteration, vectorised across the work-items (contiguous along the columns),
    the accumulators kept per work-item between barriers; without barriers each work-item runs its whole reduction
    alone, in scalar code. Every work-item reaches every barrier (no test guards the reduction). step(k): the
    statements of one step at reduce values k (axis -> value)."""
    (v0, e0), inner = axes[0], axes[1:]
    per = math.prod(e for _, e in inner)
    cap = max(1, min(n, LOCKSTEP_STEPS // max(per, 1)))
    u = max(d for d in range(1, min(cap, e0) + 1) if e0 % d == 0)
    ko = Var("ko")
    base = ko if u == 1 else ko * u
    steps = [step({v0: base + j if j else base, **{v: as_expr(x) for (v, _), x in zip(inner, xs)}})
             for j in range(u) for xs in itertools.product(*(range(e) for _, e in inner))]
    return For(ko, e0 // u, seq(Barrier(), *steps))


def _strides(shape) -> list:
    out, acc = [], 1
    for s in reversed(shape):
        out.append(acc)
        acc *= s
    return list(reversed(out))


tiled_gemm = _TiledGemm()
