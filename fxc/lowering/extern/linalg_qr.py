"""The loop IR of the Householder QR ops (fxc/ops/linalg_qr.py): a reflector applied to a block (apply_reflector),
geqr2 (LAPACK's unblocked QR), and the kernels of geqrf, householder_product, ormqr and qr over float64 scratch."""
from __future__ import annotations

from ...symbolic.expr import as_expr, compare, select, unary
from ..loop_ir import Allocate, Buffer, Store, seq
from .linalg_factor import F64, Mat, batched, copy, f64, let, loop, rloop, scratch, when


def apply_reflector(V: Mat, i, t, Y: Mat, rows: int, cols: int, acc: Buffer, skip_col=None):
    """Y <- (I - t v v^T) Y for the reflector v = [0 (rows < i), 1, V[i+1:, i]]; Y has `rows` rows, `cols` columns
    (skip_col(c): columns left alone)."""
    z = as_expr(0)

    def column(c):
        dot = seq(Store(acc, z, Y(i, c)), loop(
            rows, lambda r: when(compare("gt", r, i), Store(acc, z, acc[z] + V(r, i) * Y(r, c))), name="r"))
        upd = let("tw", t * acc[z], lambda tw: seq(Y.set(i, c, Y(i, c) - tw), loop(
            rows, lambda r: when(compare("gt", r, i), Y.set(r, c, Y(r, c) - tw * V(r, i))), name="r")))
        body = seq(dot, upd)
        return body if skip_col is None else when(skip_col(c), body)
    return loop(cols, column, name="c")


def geqr2(W: Mat, m: int, n: int, tau: Buffer, acc: Buffer):
    """Householder QR of the m x n scratch W in place (LAPACK geqr2 with dlarfg's reflectors); tau[0..min(m, n))."""
    z = as_expr(0)

    def column(i):
        norm = seq(Store(acc, z, f64(0)), loop(
            m, lambda r: when(compare("gt", r, i), Store(acc, z, acc[z] + W(r, i) * W(r, i))), name="r"))

        def reflect(al, xn):
            h = unary("sqrt", al * al + xn * xn)
            return let("beta", select(compare("ge", al, f64(0)), -h, h), lambda beta: seq(
                Store(tau, i, (beta - al) / beta),
                let("sc", f64(1) / (al - beta), lambda sc: loop(
                    m, lambda r: when(compare("gt", r, i), W.set(r, i, W(r, i) * sc)), name="r")),
                W.set(i, i, beta)))
        gen = let("xn", unary("sqrt", acc[z]), lambda xn: let("al", W(i, i), lambda al: when(
            compare("eq", xn, f64(0)), Store(tau, i, f64(0)), orelse=reflect(al, xn))))
        return seq(norm, gen, apply_reflector(W, i, tau[i], W, m, n, acc, lambda c: compare("gt", c, i)))
    return loop(min(m, n), column, name="i")


def geqrf_loops(batch, k, m, n):
    """lower(outs, ins) of the geqrf kernel, `batch` matrices."""
    def lower(outs, ins):
        W, tau, acc = scratch("w", m, n), Buffer("tau", F64, k, "private"), Buffer("acc", F64, 1, "private")

        def item(b):
            return Allocate(W.buf, Allocate(tau, Allocate(acc, seq(
                copy(W, Mat(ins[0], b * (m * n), n), m, n), geqr2(W, m, n, tau, acc),
                copy(Mat(outs[0], b * (m * n), n), W, m, n),
                loop(k, lambda j: Mat(outs[1], b * k, 1).set(j, 0, tau[j]))))))
        return batched(batch, 2 * m * n * k + 1, item)
    return lower


def householder_product_loops(batch, cols, k, m, n):
    """lower(outs, ins) of the householder_product kernel, `batch` matrices."""
    def lower(outs, ins):
        Q, acc = scratch("q", m, cols), Buffer("acc", F64, 1, "private")

        def item(b):
            V = Mat(ins[0], b * (m * n), n)
            eye = loop(m, lambda i: loop(cols, lambda j: Q.set(i, j, select(compare("eq", i, j), f64(1), f64(0))),
                                         name="j"))
            refl = rloop(k, lambda i: apply_reflector(V, i, Mat(ins[1], b * k, 1)(i, 0), Q, m, cols, acc))
            return Allocate(Q.buf, Allocate(acc, seq(eye, refl, copy(Mat(outs[0], b * (m * cols), cols), Q, m, cols))))
        return batched(batch, 2 * m * cols * k + 1, item)
    return lower


def ormqr_loops(batch, cc, cols, descending, k, left, ma, na, rc, rows):
    """lower(outs, ins) of the ormqr kernel, `batch` matrices."""
    def lower(outs, ins):
        Y, acc = scratch("y", rc, cc), Buffer("acc", F64, 1, "private")

        def item(b):
            V, t = Mat(ins[0], b * (ma * na), na), Mat(ins[1], b * k, 1)
            Yv = Y if left else Y.T
            one = lambda i: apply_reflector(V, i, t(i, 0), Yv, rows, cols, acc)
            refl = rloop(k, one) if descending else loop(k, one)
            return Allocate(Y.buf, Allocate(acc, seq(copy(Y, Mat(ins[2], b * (rc * cc), cc), rc, cc), refl,
                                                      copy(Mat(outs[0], b * (rc * cc), cc), Y, rc, cc))))
        return batched(batch, 2 * rc * cc * k + 1, item)
    return lower


def qr_loops(batch, k, m, n, qc):
    """lower(outs, ins) of the qr kernel, `batch` matrices."""
    def lower(outs, ins):
        W, Q = scratch("w", m, n), scratch("q", m, qc)
        tau, acc = Buffer("tau", F64, k, "private"), Buffer("acc", F64, 1, "private")

        def item(b):
            R = Mat(outs[1], b * (qc * n), n)
            eye = loop(m, lambda i: loop(qc, lambda j: Q.set(i, j, select(compare("eq", i, j), f64(1), f64(0))),
                                         name="j"))
            r_out = loop(qc, lambda i: loop(n, lambda j: R.set(i, j, select(compare("ge", j, i), W(i, j), f64(0))),
                                            name="j"))
            refl = rloop(k, lambda i: apply_reflector(W, i, tau[i], Q, m, qc, acc))
            return Allocate(W.buf, Allocate(Q.buf, Allocate(tau, Allocate(acc, seq(
                copy(W, Mat(ins[0], b * (m * n), n), m, n), geqr2(W, m, n, tau, acc), r_out, eye, refl,
                copy(Mat(outs[0], b * (m * qc), qc), Q, m, qc))))))
        return batched(batch, 2 * m * n * k + 2 * m * qc * k + 1, item)
    return lower
