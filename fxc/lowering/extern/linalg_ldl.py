"""The loop IR of the LDL^T ops (fxc/ops/linalg_ldl.py): sytf2 (Bunch-Kaufman pivoting, ALPHA = (1 + sqrt 17) / 8)
and sytrs (the solve with its 1x1 / 2x2 blocks), and the kernels of ldl_factor and ldl_solve over float64 scratch."""
from __future__ import annotations

import math

from ...symbolic.expr import as_expr, binary, cast, compare, select, unary
from ..loop_ir import Allocate, Buffer, Store, seq
from .linalg_factor import F64, Mat, batched, both, copy, f64, let, loop, scratch, when

ALPHA = (1 + math.sqrt(17)) / 8
I64 = "int64"


def _cmp(op):
    return lambda a, b: compare(op, a, b)


gt, lt, ge, eq, ne = (_cmp(op) for op in ("gt", "lt", "ge", "eq", "ne"))


def _first_max(buf_val, buf_at, n, cand, value):
    """buf_val[0] / buf_at[0] <- largest value(i) over i with cand(i) (the first on ties; preset by the caller)."""
    z = as_expr(0)
    return loop(n, lambda i: when(both(cand(i), compare("gt", value(i), buf_val[z])),
                                  Store(buf_val, z, value(i)), Store(buf_at, z, i)), name="s")


def sytf2(W: Mat, n: int, set_piv, info: Buffer):
    """Bunch-Kaufman LDL^T of the lower triangle of the n x n scratch W in place (LAPACK sytf2, UPLO=L).
    set_piv(k, v) stores pivot entry k (1-based, negative for a 2x2 block); info[0] (preset 0) gets the first
    zero pivot column (1-based)."""
    z = as_expr(0)
    nk, cm, im, rm = (Buffer("nk", I64, 1, "private"), Buffer("cm", F64, 1, "private"), Buffer("im", I64, 1, "private"),
                      Buffer("rm", F64, 1, "private"))
    kpb, ksb = Buffer("kp", I64, 1, "private"), Buffer("ks", I64, 1, "private")
    absw = lambda i, j: unary("abs", W(i, j))

    def swap(i1, j1, i2, j2):
        return let("t", W(i1, j1), lambda t: seq(W.set(i1, j1, W(i2, j2)), W.set(i2, j2, t)))

    def interchange(k, kk, kp, ks):
        return when(ne(kp, kk), seq(
            loop(n, lambda i: when(gt(i, kp), swap(i, kk, i, kp))),
            loop(n, lambda j: when(both(gt(j, kk), lt(j, kp)), swap(j, kk, kp, j)), name="j"),
            swap(kk, kk, kp, kp),
            when(eq(ks, as_expr(2)), swap(k + 1, k, kp, k))))

    def update(k, ks):
        one = let("d11", f64(1) / W(k, k), lambda d11: seq(
            loop(n, lambda j: when(gt(j, k), let("tj", -d11 * W(j, k), lambda tj: loop(
                n, lambda i: when(ge(i, j), W.set(i, j, W(i, j) + W(i, k) * tj))))), name="j"),
            loop(n, lambda i: when(gt(i, k), W.set(i, k, W(i, k) * d11)))))

        def two_block(d21):
            d11, d22 = W(k + 1, k + 1) / d21, W(k, k) / d21
            return let("tt", f64(1) / (d11 * d22 - f64(1)), lambda tt: let("e21", tt / d21, lambda e21: loop(
                n, lambda j: when(gt(j, k + 1), let("wk", e21 * (d11 * W(j, k) - W(j, k + 1)), lambda wk: let(
                    "wkp1", e21 * (d22 * W(j, k + 1) - W(j, k)), lambda wkp1: seq(
                        loop(n, lambda i: when(ge(i, j), W.set(i, j, W(i, j) - (W(i, k) * wk + W(i, k + 1) * wkp1)))),
                        W.set(j, k, wk), W.set(j, k + 1, wkp1))))), name="j")))
        return when(eq(ks, as_expr(1)), when(lt(k, as_expr(n - 1)), one),
                    orelse=when(lt(k, as_expr(n - 2)), let("d21", W(k + 1, k), two_block)))

    def step(k):
        col = seq(Store(cm, z, f64(0)), Store(im, z, k),
                  _first_max(cm, im, n, lambda i: gt(i, k), lambda i: absw(i, k)))

        def decide(absakk, colmax, imax):
            rowmax = seq(Store(rm, z, f64(0)), Store(im, z, k),
                         _first_max(rm, im, n, lambda j: both(ge(j, k), lt(j, imax)), lambda j: absw(imax, j)),
                         _first_max(rm, im, n, lambda i: gt(i, imax), lambda i: absw(i, imax)))
            pick = when(unary("not", ge(absakk, f64(ALPHA) * colmax * (colmax / rm[z]))), when(
                ge(absw(imax, imax), f64(ALPHA) * rm[z]), Store(kpb, z, imax),
                orelse=seq(Store(kpb, z, imax), Store(ksb, z, as_expr(2)))))
            return when(unary("not", ge(absakk, f64(ALPHA) * colmax)), rowmax, pick)

        def factor(absakk, colmax, imax):
            zero = binary("or", eq(select(gt(colmax, absakk), colmax, absakk), f64(0)), unary("isnan", absakk))
            return when(zero, when(eq(info[z], as_expr(0)), Store(info, z, k + 1)), orelse=seq(
                decide(absakk, colmax, imax),
                let("kp", kpb[z], lambda kp: let("ks", ksb[z], lambda ks: seq(
                    interchange(k, k + ks - 1, kp, ks), update(k, ks))))))
        record = let("kp", kpb[z], lambda kp: let("ks", ksb[z], lambda ks: seq(
            when(eq(ks, as_expr(1)), set_piv(k, kp + 1), orelse=seq(set_piv(k, -(kp + 1)), set_piv(k + 1, -(kp + 1)))),
            Store(nk, z, k + ks))))
        return when(eq(k, nk[z]), seq(
            Store(kpb, z, k), Store(ksb, z, as_expr(1)), col,
            let("absakk", absw(k, k), lambda absakk: let("colmax", cm[z], lambda colmax: let(
                "imax", im[z], lambda imax: factor(absakk, colmax, imax)))), record))
    body = seq(Store(nk, z, as_expr(0)), loop(n, step, name="k"))
    for buf in (nk, cm, im, rm, kpb, ksb):
        body = Allocate(buf, body)
    return body


def sytrs(LD: Mat, piv, Y: Mat, n: int, k: int):
    """Solve A X = Y in place from sytf2's lower factors (LAPACK sytrs, UPLO=L); piv(i): pivot i (int64)."""
    z = as_expr(0)
    nk = Buffer("nk", I64, 1, "private")

    def swap_rows(a, b):
        return loop(k, lambda c: let("t", Y(a, c), lambda t: seq(Y.set(a, c, Y(b, c)), Y.set(b, c, t))), name="c")

    def axpy_below(col, src, start):    # Y[i, :] -= LD[i, col] * Y[src, :] for i >= start
        return loop(n, lambda i: when(ge(i, start), let("l", LD(i, col), lambda l: loop(
            k, lambda c: Y.set(i, c, Y(i, c) - l * Y(src, c)), name="c"))))

    def dot_below(dst, col, start):     # Y[dst, :] -= sum_{i >= start} LD[i, col] * Y[i, :]
        return loop(k, lambda c: loop(n, lambda i: when(ge(i, start), Y.set(dst, c, Y(dst, c) - LD(i, col) * Y(i, c)))),
                    name="c")

    def forward(kk):
        one = seq(let("p", piv(kk) - 1, lambda p: swap_rows(kk, p)), axpy_below(kk, kk, kk + 1),
                  let("d", f64(1) / LD(kk, kk), lambda d: loop(k, lambda c: Y.set(kk, c, Y(kk, c) * d), name="c")),
                  Store(nk, z, kk + 1))

        def two(akm1k):
            akm1, ak = LD(kk, kk) / akm1k, LD(kk + 1, kk + 1) / akm1k
            return let("den", akm1 * ak - f64(1), lambda den: loop(k, lambda c: let(
                "bkm1", Y(kk, c) / akm1k, lambda bkm1: let("bk", Y(kk + 1, c) / akm1k, lambda bk: seq(
                    Y.set(kk, c, (ak * bkm1 - bk) / den), Y.set(kk + 1, c, (akm1 * bk - bkm1) / den)))), name="c"))
        pair = seq(let("p", -piv(kk) - 1, lambda p: swap_rows(kk + 1, p)),
                   axpy_below(kk, kk, kk + 2), axpy_below(kk + 1, kk + 1, kk + 2),
                   let("akm1k", LD(kk + 1, kk), two), Store(nk, z, kk + 2))
        return when(eq(kk, nk[z]), when(gt(piv(kk), as_expr(0)), one, orelse=pair))

    def backward(t):
        kk = as_expr(n - 1) - t
        one = seq(dot_below(kk, kk, kk + 1), let("p", piv(kk) - 1, lambda p: swap_rows(kk, p)), Store(nk, z, kk - 1))
        pair = seq(dot_below(kk, kk, kk + 1), dot_below(kk - 1, kk - 1, kk + 1),
                   let("p", -piv(kk) - 1, lambda p: swap_rows(kk, p)), Store(nk, z, kk - 2))
        return when(eq(kk, nk[z]), when(gt(piv(kk), as_expr(0)), one, orelse=pair))
    return Allocate(nk, seq(Store(nk, z, as_expr(0)), loop(n, forward, name="kk"),
                            Store(nk, z, as_expr(n - 1)), loop(n, backward, name="t")))


def ldl_factor_loops(batch, n):
    """lower(outs, ins) of the ldl_factor kernel, `batch` matrices."""
    def lower(outs, ins):
        W, inf = scratch("w", n, n), Buffer("info", I64, 1, "private")
        z = as_expr(0)

        def item(b):
            A = Mat(ins[0], b * (n * n), n)
            fill = loop(n, lambda i: loop(n, lambda j: W.set(i, j, select(compare("ge", i, j), A(i, j), f64(0))),
                                          name="j"))
            return Allocate(W.buf, Allocate(inf, seq(
                fill, Store(inf, z, as_expr(0)),
                sytf2(W, n, lambda k, v: Store(outs[1], b * n + k, cast("int32", v)), inf),
                copy(Mat(outs[0], b * (n * n), n), W, n, n), Store(outs[2], b, cast("int32", inf[z])))))
        return batched(batch, n ** 3 + 1, item)
    return lower


def ldl_solve_loops(batch, k, n):
    """lower(outs, ins) of the ldl_solve kernel, `batch` matrices."""
    def lower(outs, ins):
        Y = scratch("y", n, k)

        def item(b):
            LD = Mat(ins[0], b * (n * n), n)
            return Allocate(Y.buf, seq(copy(Y, Mat(ins[2], b * (n * k), k), n, k),
                                       sytrs(LD, lambda i: cast(I64, ins[1][b * n + i]), Y, n, k),
                                       copy(Mat(outs[0], b * (n * k), k), Y, n, k)))
        return batched(batch, 2 * n * n * k + 1, item)
    return lower
