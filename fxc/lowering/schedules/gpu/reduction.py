"""Work-group tree reduction: one work-group per output of a reduction root with long rows and few outputs.

Each of the group's `knobs.reduce_threads` work-items (a power of two) folds a strided share of the row into a
private accumulator, writes it to shared memory, and the group halves the partial results in a tree, with a
barrier after every step; work-item 0 stores the result. Every barrier is reached by every work-item."""
from __future__ import annotations

import math

from ... import te
from ...expr import Const, Load, Var, as_expr, binary, compare, substitute
from ...loop_ir import Barrier, Buffer, For, IfThen, LetStmt, Store, seq
from ...lower import COMBINE
from .one_per_output import unflatten


class _TreeReduction:
    def applies(self, t, knobs) -> bool:
        """A root that is itself a reduction (sum, max, min, prod) of at least reduce_min_length elements per
        output, with at most reduce_max_outputs outputs."""
        red = t.body
        if not isinstance(red, te.Reduce) or red.op not in COMBINE or t.dtype not in ("float32", "float64", "int32",
                                                                                       "int64"):
            return False
        length = math.prod(e for _, e in red.axes)
        return length >= knobs.reduce_min_length and 0 < math.prod(t.shape) <= knobs.reduce_max_outputs

    def __call__(self, conv, t, out, knobs) -> list:
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
        steps.append(IfThen(compare("eq", th, zero), Store(out, g, Load(part, zero))))
        return [For(g, n_out, For(th, threads, seq(*steps), "thread"), "grid")]


tree_reduction = _TreeReduction()
