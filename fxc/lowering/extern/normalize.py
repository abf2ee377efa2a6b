"""The loop IR of the row normalizations: (log_)softmax (fxc/ops/reduce.py) and layer_norm (fxc/ops/norm.py), one
row per step (in parallel when the work pays), its sums on vector loops."""
from __future__ import annotations

import math

from ...symbolic.expr import Const, Var, as_expr, compare, maximum, select, unary
from ...symbolic.sym import possibly, reciprocal
from ..loop_ir import Allocate, Buffer, For, LetStmt, Store, seq


def softmax_loops(outer, n, inner, dtype: str, log: bool, safe: bool):
    """lower(outs, ins) of (log_)softmax over rows of n elements, x viewed as [outer, n, inner]: per row its max,
    the sum of exps, then the row (log: x - log-sum-exp in one pass); safe: a row of -inf only gives zeros."""
    def lower(outs, ins):
        out, xb = outs[0], ins[0]
        dt = dtype
        m, s = Buffer("rmax", dt, 1, "private"), Buffer("rsum", dt, 1, "private")
        o, j, k = Var("o"), Var("j"), Var("k")
        zero = Const(0, "int64")
        at = lambda kk: (o * (n * inner) + kk * inner + j)
        xv = lambda kk: xb[at(kk)]
        body = seq(
            Store(m, zero, Const(-math.inf, dt)),
            For(k, n, Store(m, zero, maximum(m[zero], xv(k))), "vectorize"),
            Store(s, zero, Const(0.0, dt)),
        )
        if log:     # the sum of exps alone, then x - log-sum-exp: one pass writes the row
            lse = Var("lse", dt)
            body = seq(body, For(k, n, Store(s, zero, s[zero] + unary("exp", xv(k) - m[zero])), "vectorize"),
                       LetStmt(lse, m[zero] + unary("log", s[zero]),
                               For(k, n, Store(out, at(k), xv(k) - lse), "vectorize")))
        else:
            inv = Var("inv", dt)
            scale = 1.0 / s[zero]
            if safe:    # a row of -inf only (m = -inf): zeros, not nan: exp(-inf - 0) = 0, a sum of 0 (any
                # other row sums to 1 or more), then times 0
                empty = compare("eq", m[zero], Const(-math.inf, dt))
                body = seq(body, Store(m, zero, select(empty, Const(0.0, dt), m[zero])))
                scale = select(compare("eq", s[zero], Const(0.0, dt)), Const(0.0, dt), scale)
            body = seq(body, For(k, n, seq(Store(out, at(k), unary("exp", xv(k) - m[zero])),
                                           Store(s, zero, s[zero] + out[at(k)])), "vectorize"),
                       LetStmt(inv, scale, For(k, n, Store(out, at(k), out[at(k)] * inv), "vectorize")))
        body = Allocate(m, Allocate(s, body))
        nest = For(j, inner, body)
        work = outer * n * inner
        kind = "parallel" if possibly(lambda: work >= 1 << 14 and outer > 1) else "serial"
        return For(o, outer, nest, kind)
    return lower


def layer_norm_loops(rows, n, dt: str, eps: float, weight: bool, bias: bool):
    """lower(outs, ins) of layer_norm over `rows` rows of n elements (ins: x, then weight and bias where given;
    outs: out, mean, rstd): per row the corrected two-pass mean, the biased variance of the residuals, then
    (x - mean) * rstd * weight + bias."""
    def lower(outs, ins):
        out, mean_b, rstd_b = outs
        xb = ins[0]
        wb = ins[1] if weight else None
        bb = ins[1 + bool(weight)] if bias else None
        r, k = Var("r"), Var("k")
        s = Buffer("lnsum", dt, 1, "private")
        z = as_expr(0)
        xk = xb[r * n + k]
        m0, mean, rstd = Var("m0", dt), Var("mean", dt), Var("rstd", dt)

        def total(f):
            return seq(Store(s, z, Const(0.0, dt)), For(k, n, Store(s, z, s[z] + f), "vectorize"))

        y = (xk - mean) * rstd
        if wb is not None:
            y = y * wb[k]
        if bb is not None:
            y = y + bb[k]
        inv = reciprocal(n, dt)
        body = seq(
            total(xk),
            LetStmt(m0, s[z] * inv, seq(
                total(xk - m0),
                LetStmt(mean, m0 + s[z] * inv, seq(
                    total((xk - mean) * (xk - mean)),
                    LetStmt(rstd, 1.0 / unary("sqrt", s[z] * inv + float(eps)), seq(
                        Store(mean_b, r, mean), Store(rstd_b, r, rstd),
                        For(k, n, Store(out, r * n + k, y), "vectorize"))))))))
        kind = "parallel" if possibly(lambda: rows > 1 and rows * n >= 1 << 14) else "serial"
        return For(r, rows, Allocate(s, body), kind)
    return lower
