"""The loop IR of matrix_exp (fxc/ops/linalg_exp.py): scaling and squaring, the scaled matrix's exponential by a
Taylor polynomial of DEGREE terms in Horner's form, then up to MAX_SQUARINGS squarings, over float64 scratch."""
from __future__ import annotations

from ...symbolic.expr import as_expr, cast, compare, maximum, minimum, select, unary
from ..loop_ir import Allocate, Buffer, Store, seq
from .linalg_factor import F64, Mat, batched, copy, f64, let, loop, scratch, when

DEGREE = 18
MAX_SQUARINGS = 1100      # enough to bring any finite float64 norm below 1/2


def matrix_exp_loops(batch, n):
    """lower(outs, ins) of the matrix_exp kernel, `batch` matrices."""
    z = as_expr(0)

    def lower(outs, ins):
        X, E, T = scratch("x", n, n), scratch("e", n, n), scratch("t", n, n)
        acc = Buffer("acc", F64, 1, "private")

        def product(P, Q):       # T = P Q
            return loop(n, lambda i: loop(n, lambda j: seq(
                Store(acc, z, f64(0)), loop(n, lambda c: Store(acc, z, acc[z] + P(i, c) * Q(c, j)), name="c"),
                T.set(i, j, acc[z])), name="j"))

        def item(b):
            A = Mat(ins[0], b * (n * n), n)
            eye = lambda i, j: select(compare("eq", i, j), f64(1), f64(0))
            col = T.buf                 # T[0] holds one column's absolute sum
            norm = seq(Store(acc, z, f64(0)), loop(n, lambda j: seq(
                Store(col, z, f64(0)), loop(n, lambda i: Store(col, z, col[z] + unary("abs", A(i, j)))),
                Store(acc, z, maximum(acc[z], col[z]))), name="j"))

            def scaled(s):
                horner = loop(DEGREE, lambda t: seq(product(X, E), let(
                    "inv", f64(1) / cast(F64, as_expr(DEGREE) - t), lambda inv: loop(n, lambda i: loop(
                        n, lambda j: E.set(i, j, eye(i, j) + T(i, j) * inv), name="j")))), name="t")
                square = loop(MAX_SQUARINGS, lambda q: when(compare("lt", q, s), product(E, E), copy(E, T, n, n)),
                              name="q")
                return seq(loop(n, lambda i: loop(n, lambda j: seq(X.set(i, j, A(i, j) * unary("exp2", -cast(F64, s))),
                                                                    E.set(i, j, eye(i, j))), name="j")),
                           horner, square, copy(Mat(outs[0], b * (n * n), n), E, n, n))
            steps = cast("int64", minimum(unary("ceil", unary("log2", acc[z] * f64(2))), f64(MAX_SQUARINGS)))
            return Allocate(X.buf, Allocate(E.buf, Allocate(T.buf, Allocate(acc, seq(
                norm, let("s", select(compare("gt", acc[z], f64(0.5)), steps, as_expr(0)), scaled))))))
        return batched(batch, (DEGREE + 8) * n ** 3 + 1, item)
    return lower
