"""The loop IR of special functions whose per-element value needs a loop (fxc/ops/special_poly.py,
special_series.py): every element of the output (in parallel when there are `parallel_from` or more) runs

- `recurrence_loops`: a three-term recurrence q <- step(q, p, k) for k from `start` to a data-dependent end (the
  element's degree), in the op's dtype, or an early value instead (negative degree, closed forms);
- `series_loops`: a sum of `count` float64 terms after a first one, then a closed-form finish of the sum;
- `state_loops`: a recurrence over named float64 state (a continued fraction), `count` steps, then a finish.

The op files give the per-element mathematics as expression builders (the same code that runs their numpy
references); this module owns only the loops, the private scratch and the stores.
"""
from __future__ import annotations

from ...symbolic.expr import Const, Var, as_expr, cast, maximum, select
from ..loop_ir import Allocate, Buffer, For, LetStmt, Store, seq


def recurrence_loops(size, dtype: str, element, parallel_from: int):
    """lower(outs, ins) of out[e] from x[e] and a degree operand n[e]: element(x, n) -> (early, early_value, q1,
    step, start, end), step(q, p, k) -> the next q; p starts at 1, q at q1, and the loop runs k = start ..
    max(end, start) - 1 (no steps where `early`)."""
    def lower(outs, ins):
        out, xb, nb = outs[0], ins[0], ins[1]
        e, k = Var("e"), Var("k")
        early, early_val, q1, step, start, end = element(xb[e], nb[e])
        P, Q = Buffer("pp", dtype, 1, "private"), Buffer("pq", dtype, 1, "private")
        z = as_expr(0)
        r = Var("r", dtype)
        new = step(Q[z], P[z], k)
        loop = For(k, select(early, as_expr(start), maximum(end, as_expr(start))),
                   LetStmt(r, new, seq(Store(P, z, Q[z]), Store(Q, z, r))), "serial", start)
        body = Allocate(P, Allocate(Q, seq(Store(P, z, Const(1.0, dtype)), Store(Q, z, q1), loop,
                                           Store(out, e, select(early, early_val, Q[z])))))
        return For(e, size, body, "parallel" if size >= parallel_from else "serial")
    return lower


def series_loops(size, dtype: str, element, parallel_from: int):
    """lower(outs, ins) of out[e] from a[e], b[e]: element(a, b) -> (first, count, term, finish); the float64 sum
    first + term(i) for i = 1 .. count, then out = finish(sum) cast to `dtype`."""
    def lower(outs, ins):
        out, ab, bb = outs[0], ins[0], ins[1]
        e, i = Var("e"), Var("i")
        first, count, term, finish = element(ab[e], bb[e])
        S, z = Buffer("zs", "float64", 1, "private"), as_expr(0)
        loop = For(i, count + as_expr(1), Store(S, z, S[z] + term(i)), "serial", 1)
        res = finish(S[z])
        body = Allocate(S, seq(Store(S, z, first), loop, Store(out, e, cast(dtype, res))))
        return For(e, size, body, "parallel" if size >= parallel_from else "serial")
    return lower


def state_loops(size, dtype: str, names, element, parallel_from: int):
    """lower(outs, ins) of out[e] from a[e], b[e] through float64 state variables `names`: element(a, b, k, state)
    -> (init, count, news, finish), where state maps each name to its current value, init and news map each name
    to its first and next value (step k = 1 .. count), and finish(state) gives the result, cast to `dtype`."""
    def lower(outs, ins):
        out, ab, bb = outs[0], ins[0], ins[1]
        e, k = Var("e"), Var("k")
        st = {n: Buffer(n, "float64", 1, "private") for n in names}
        z = as_expr(0)
        init, count, news, finish = element(ab[e], bb[e], k, {n: st[n][z] for n in names})
        lets = [(Var(n, "float64"), v) for n, v in news.items()]
        step = seq(*[Store(st[n], z, v) for (v, _), n in zip(lets, news)])
        for v, val in reversed(lets):
            step = LetStmt(v, val, step)
        loop = For(k, count + as_expr(1), step, "serial", 1)
        body = seq(seq(*[Store(st[n], z, v) for n, v in init.items()]), loop,
                   Store(out, e, cast(dtype, finish({n: st[n][z] for n in names}))))
        for buf in st.values():
            body = Allocate(buf, body)
        return For(e, size, body, "parallel" if size >= parallel_from else "serial")
    return lower
