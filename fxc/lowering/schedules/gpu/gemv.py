"""Matrix-vector products on the GPU: a root whose value is an epilogue of one matrix product with few rows
(out[..., i, j] = f(sum_k a(..., i, k) * b(..., k, j)) with batch x rows <= `gemv_max_rows`: a classifier's linear
layer at batch 1), in one of two forms by the layout of the column factor b:

Along k (b reads k contiguously: a linear layer's weight, [n, k]). A work-group is `gemv_threads` work-items along k
(launch axis 0) x `gemv_outputs` outputs (axis 1). Each work-item folds a strided share of the k range,
`vector_width` elements at a time (one vector load of a's row and one of b's column, a lane-wise multiply-add into a
private vector accumulator), the remainder (k % width) in scalars, then adds its lanes. With more than one work-item
along k the group sums their partial results in shared memory in a tree
(a barrier after each step; every work-item reaches every barrier) and work-item 0 stores f(sum). Grid: groups of
output columns x rows (batch included). Loads of columns past n read the last column (in bounds; not stored).

Along j (b reads j contiguously: x @ w with w [k, n]). Each work-item owns `vector_width` consecutive columns and
runs the whole k loop: a broadcast of a(k) times one vector load of b's row, into a private vector accumulator
(consecutive work-items read consecutive vectors); the last columns (n % width) are one scalar loop each.

Knobs (`Knobs.gemv_*`, `Knobs.vector_width`) default from the device's Caps (see Knobs.for_caps).
"""
from __future__ import annotations

import math

from ....symbolic.expr import Const, LaneReduce, Var, VecLoad, as_expr, binary, compare, substitute, vec
from ...loop_ir import Barrier, Buffer, For, IfThen, LetStmt, Store, seq
from ...vectorize import vectorize_expr
from ..cpu.default import load_strides
from .one_per_output import one_per_output, unflatten
from .tiled_gemm import matrix_product


def _contiguous_in(conv, e, at: dict, k: Var) -> bool:
    """Whether e at `at`, as a function of k, reads every global buffer at consecutive addresses along k."""
    pre: list = []
    v = conv.convert(substitute(e, {**at}), pre)
    strides = load_strides(v, k)
    return not pre and bool(strides) and all(s == 1 for s in strides)


def _match(conv, t, knobs):
    """(hole, reduce tensor, value, form "k" or "j") when t is such a matrix-vector product's epilogue; else
    None."""
    if knobs.gemv_max_rows < 1 or not all(isinstance(d, int) for d in t.shape):      # static shapes only
        return None
    found = matrix_product(conv, t)
    if found is None:
        return None
    hole, red_t, _, b, value = found
    *batch, m, n = t.shape
    if not isinstance(red_t.body.axes[0][1], int):
        return None
    if math.prod(batch) * m > knobs.gemv_max_rows or n < 2:
        return None
    (kv, _), = red_t.body.axes
    k, j = Var("k"), Var("j")
    at = {**{x: as_expr(0) for x in red_t.axes[:-1]}, red_t.axes[-1]: j, kv: k}
    if _contiguous_in(conv, b, at, k):
        return hole, red_t, value, "k"
    if knobs.vector_width > 1 and n >= knobs.vector_width and _contiguous_in(conv, b, at, j):
        return hole, red_t, value, "j"
    return None


class _Gemv:
    def applies(self, conv, t, knobs) -> bool:
        return _match(conv, t, knobs) is not None

    def __call__(self, conv, t, out, knobs) -> list:
        hole, red_t, value, form = _match(conv, t, knobs)
        if form == "j":
            return _along_j(conv, t, out, knobs, hole, red_t, value)
        red = red_t.body
        (kv, K), = red.axes
        *lead, n = t.shape
        R, O = knobs.gemv_threads, max(1, min(knobs.gemv_outputs, n))
        th, tj, gj, gi, k, s, r = (Var(x) for x in ("th", "tj", "gj", "gi", "k", "s", "r"))
        col = gj * O + tj
        at = dict(zip(red_t.axes[:-1], unflatten(gi, lead)))
        at[red_t.axes[-1]] = binary("min", col, as_expr(n - 1))
        pre: list = []
        val = conv.convert(substitute(red.body, {**at, kv: k}), pre)
        V = knobs.vector_width
        vv = vectorize_expr(val, k, V) if V > 1 and K >= V and not pre else None
        zero = as_expr(0)
        acc = conv.local("float32", 1, "vtail")
        stmts = [Store(acc, zero, Const(0.0, "float32"))]
        kvec = 0
        if vv is not None:      # whole vectors: k = (s * R + th) * V
            kvec = K // V * V
            vacc = conv.local("float32", V, "vacc")
            steps = math.ceil(K // V / R)
            upd = Store(vacc, zero, VecLoad(vacc, zero, V) + substitute(vv, {k: (s * R + th) * V}))
            if steps * R * V != kvec:
                upd = IfThen(compare("lt", (s * R + th) * V, as_expr(kvec)), upd)
            stmts += [Store(vacc, zero, Const(0.0, vec("float32", V))), For(s, steps, upd)]
        if kvec < K:            # the rest in scalars: k = kvec + r * R + th
            rest = K - kvec
            upd = Store(acc, zero, acc[zero] + val)
            if math.ceil(rest / R) * R != rest:
                upd = IfThen(compare("lt", k, as_expr(K)), upd)
            stmts.append(For(r, math.ceil(rest / R), LetStmt(k, r * R + th + kvec, seq(*pre, upd))))
        total = acc[zero] + LaneReduce("add", VecLoad(vacc, zero, V)) if vv is not None else acc[zero]
        inside = compare("lt", col, as_expr(n))
        if R > 1:               # the work-group's tree over its work-items' partial sums
            part = Buffer(f"vpart{len(conv.locals)}", "float32", R * O, "shared")
            slot = tj * R + th
            stmts += [Store(part, slot, total), Barrier()]
            step = R // 2
            while step >= 1:
                stmts += [IfThen(compare("lt", th, as_expr(step)),
                                 Store(part, slot, part[slot] + part[slot + step])), Barrier()]
                step //= 2
            total, inside = part[tj * R], binary("and", inside, compare("eq", th, zero))
        epi: list = []
        outv = conv.convert(substitute(value, {**dict(zip(t.axes, [at[x] for x in red_t.axes[:-1]] + [col])),
                                              hole.var: total}), epi)
        stmts.append(IfThen(inside, seq(*epi, Store(out, gi * n + col, outv))))
        loops = For(th, R, For(tj, O, seq(*stmts), "thread", axis=1), "thread", axis=0)
        loops = For(gj, math.ceil(n / O), loops, "grid", axis=0)
        return [For(gi, math.prod(lead), loops, "grid", axis=1)]


def _along_j(conv, t, out, knobs, hole, red_t, value) -> list:
    """The form for a column factor contiguous along j (see the module's docstring)."""
    red = red_t.body
    (kv, K), = red.axes
    *lead, n = t.shape
    V = knobs.vector_width
    O = max(1, min(knobs.gemv_outputs, math.ceil(n / V)))
    tj, gj, gi, k, j = (Var(x) for x in ("tj", "gj", "gi", "k", "j"))
    j0 = (gj * O + tj) * V
    at = dict(zip(red_t.axes[:-1], unflatten(gi, lead)))
    zero = as_expr(0)

    def product(col):
        pre: list = []
        v = conv.convert(substitute(red.body, {**at, red_t.axes[-1]: col, kv: k}), pre)
        return pre, v

    def store(col, result):
        epi: list = []
        v = conv.convert(substitute(value, {**dict(zip(t.axes, [at[x] for x in red_t.axes[:-1]] + [col])),
                                            hole.var: result}), epi)
        return seq(*epi, Store(out, gi * n + col, v))

    pre, val = product(j)
    vv = vectorize_expr(val, j, V) if not pre else None
    vacc = conv.local("float32", V, "vacc")
    acc = conv.local("float32", 1, "vtail")
    if vv is None:              # a product the vectorizer does not take: one work-item per output
        return one_per_output(conv, t, out, knobs)
    whole = seq(Store(vacc, zero, Const(0.0, vec("float32", V))),
                For(k, K, Store(vacc, zero, VecLoad(vacc, zero, V) + substitute(vv, {j: j0}))),
                *(store(j0 + e, vacc[as_expr(e)]) for e in range(V)))
    tail = []
    for e in range(V):                  # the columns of a last, partial vector, one by one
        col = j0 + e
        p, v = product(col)
        tail.append(IfThen(compare("lt", col, as_expr(n)), seq(
            Store(acc, zero, Const(0.0, "float32")), For(k, K, seq(*p, Store(acc, zero, acc[zero] + v))),
            store(col, acc[zero]))))
    body = IfThen(compare("le", j0 + V, as_expr(n)), whole, seq(*tail) if n % V else None)
    loops = For(gj, math.ceil(n / (V * O)), For(tj, O, body, "thread", axis=0), "grid", axis=0)
    return [For(gi, math.prod(lead), loops, "grid", axis=1)]


gemv = _Gemv()
