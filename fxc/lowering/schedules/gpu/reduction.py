"""Work-group tree reduction: one work-group per output of a reduction with long rows and few outputs (the root
itself, or an elementwise epilogue of it: a mean, a norm's square root).

Each of the group's `knobs.reduce_threads` work-items (a power of two) folds a strided share of the row into a
private accumulator, writes it to shared memory, and the group halves the partial results in a tree, with a
barrier after every step; work-item 0 stores the result. Every barrier is reached by every work-item."""
from __future__ import annotations

import math

from .... import errors
from ....symbolic.expr import Const, Load, Var, as_expr, binary, compare, substitute
from ... import te
from ...loop_ir import Barrier, Buffer, For, IfThen, LetStmt, Store, seq
from ...lower import COMBINE
from .one_per_output import unflatten

DTYPES = ("float32", "float64", "int32", "int64")


def _reduction_of(conv, t):
    """(reduction tensor, epilogue value or None, its hole) when t is a reduction or an elementwise epilogue of one
    reduction read at t's own indices; None otherwise."""
    if isinstance(t.body, te.Reduce):
        return t, None, None
    holes: list = []
    try:
        value = conv.convert(t.body, None, holes)
    except errors.LoweringError:       # reductions read at other indices
        return None
    if len(holes) != 1 or tuple(holes[0].tensor.shape) != tuple(t.shape) \
            or not all(i is v or (n == 1 and isinstance(i, Const) and i.value == 0)
                       for i, v, n in zip(holes[0].indices, t.axes, t.shape)):
        return None
    return holes[0].tensor, value, holes[0]


class _TreeReduction:
    def applies(self, conv, t, knobs) -> bool:
        """A reduction (sum, max, min, prod; or an epilogue of one) of at least reduce_min_length elements per
        output, with at most reduce_max_outputs outputs."""
        found = _reduction_of(conv, t)
        if found is None:
            return False
        red_t = found[0]
        red = red_t.body
        if red.op not in COMBINE or red_t.dtype not in DTYPES:
            return False
        length = math.prod(e for _, e in red.axes)
        return length >= knobs.reduce_min_length and 0 < math.prod(t.shape) <= knobs.reduce_max_outputs

    def __call__(self, conv, t, out, knobs) -> list:
        red_t, value, hole = _reduction_of(conv, t)
        t_root, t = t, red_t
        red = t.body
        n_out, extents = math.prod(t.shape), [e for _, e in red.axes]
        length, threads = math.prod(extents), knobs.reduce_threads
        comb = COMBINE[red.op]
        g, th, k, r = Var("g"), Var("th"), Var("k"), Var("r")
        acc = conv.local(t.dtype, 1, "tacc")
        part = Buffer(f"part{len(conv.locals)}", t.dtype, threads, "shared")
        zero = Const(0, "int64")
        sub = dict(zip(t.axes, unflatten(g, t.shape) if t.shape else []))
        sub.update({v: x for (v, _), x in zip(red.axes, unflatten(r, extents))})
        pre: list = []
        val = conv.convert(substitute(red.body, sub), pre)
        fold = For(k, math.ceil(length / threads), LetStmt(r, k * threads + th, IfThen(
            compare("lt", r, as_expr(length)), seq(*pre, Store(acc, zero, binary(comb, Load(acc, zero), val))))))
        steps = [Store(acc, zero, red.init), fold, Store(part, th, Load(acc, zero)), Barrier()]
        s = threads // 2
        while s >= 1:
            steps += [IfThen(compare("lt", th, as_expr(s)),
                             Store(part, th, binary(comb, Load(part, th), Load(part, th + s)))), Barrier()]
            s //= 2
        result = Load(part, zero)
        if value is not None:           # the epilogue, at this output's indices
            at = dict(zip(t_root.axes, unflatten(g, t_root.shape) if t_root.shape else []))
            epi: list = []
            result = conv.convert(substitute(value, {**at, hole.var: result}), epi)
            steps.append(IfThen(compare("eq", th, zero), seq(*epi, Store(out, g, result))))
        else:
            steps.append(IfThen(compare("eq", th, zero), Store(out, g, result)))
        return [For(g, n_out, For(th, threads, seq(*steps), "thread"), "grid")]


tree_reduction = _TreeReduction()
