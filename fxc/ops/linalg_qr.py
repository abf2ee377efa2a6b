"""Householder QR in LAPACK's conventions: `geqrf` (R above the diagonal, reflector vectors below it with an
implicit leading 1, their scalars tau; each reflector chosen as dlarfg does, beta = -sign(alpha) * norm, so
R's signs and tau match LAPACK), `householder_product` (orgqr: the first columns of Q = H_0 ... H_{k-1}),
`ormqr` (apply Q or Q^T from either side) and `qr` (Q and R in one kernel). float64 scratch, batch in
parallel; ATen: geqrf, linalg_qr, linalg_householder_product, ormqr.
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import ShapeError, UnsupportedOpError
from ..lowering import te
from ..lowering.loop_ir import Allocate, Buffer, Store, seq
from ..symbolic.expr import as_expr, compare, select, unary
from ..types import TensorType
from .common import broadcast_shapes
from .linalg_factor import (
    F64,
    FLT,
    Mat,
    batched,
    copy,
    expand_batch,
    f64,
    let,
    loop,
    matrix_dims,
    rloop,
    scratch,
    scratch_check,
    when,
)
from .registry import Kind, OpDef, register, register_aten


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


# -- geqrf -------------------------------------------------------------------------------------------------------------
def _geqrf_infer(types):
    bs, m, n = matrix_dims(types[0], "geqrf")
    return [types[0], TensorType(bs + (min(m, n),), types[0].dtype)]


def _geqrf(a):
    bs, m, n = matrix_dims(a, "geqrf")
    k, batch = min(m, n), math.prod(bs)

    def lower(outs, ins):
        W, tau, acc = scratch("w", m, n), Buffer("tau", F64, k, "private"), Buffer("acc", F64, 1, "private")

        def item(b):
            return Allocate(W.buf, Allocate(tau, Allocate(acc, seq(
                copy(W, Mat(ins[0], b * (m * n), n), m, n), geqr2(W, m, n, tau, acc),
                copy(Mat(outs[0], b * (m * n), n), W, m, n),
                loop(k, lambda j: Mat(outs[1], b * k, 1).set(j, 0, tau[j]))))))
        return batched(batch, 2 * m * n * k + 1, item)
    return te.extern([(a.shape, a.dtype), (bs + (k,), a.dtype)], [a], lower, "geqrf")


def geqrf_ref(a):
    w = a.astype(np.float64).copy()
    m, n = a.shape[-2:]
    k = min(m, n)
    tau = np.zeros(a.shape[:-2] + (k,))
    for idx in np.ndindex(*a.shape[:-2]):
        x = w[idx]
        for i in range(k):
            al, xn = x[i, i], np.linalg.norm(x[i + 1:, i])
            if xn == 0:
                t = 0.0
            else:
                beta = -math.hypot(al, xn) if al >= 0 else math.hypot(al, xn)
                t = (beta - al) / beta
                x[i + 1:, i] /= al - beta
                x[i, i] = beta
            tau[idx + (i,)] = t
            v = np.concatenate([[1.0], x[i + 1:, i]])
            x[i:, i + 1:] -= t * np.outer(v, v @ x[i:, i + 1:])
    return w.astype(a.dtype), tau.astype(a.dtype)


register(OpDef("geqrf", Kind.OPAQUE, _geqrf_infer, geqrf_ref, _geqrf,
               {"aten.geqrf.default": lambda b, a: b.call("geqrf", [a])},
               None, lambda rng: [([rng.uniform(-2, 2, (5, 3)).astype("float32")], {}),
                                  ([rng.uniform(-2, 2, (2, 3, 4))], {}),
                                  ([np.array([[-1, 2], [0, 1], [0, 3.0]], "float32")], {})],
               FLT, lambda types: scratch_check(types[0].shape[-2] * types[0].shape[-1] + types[0].shape[-1]),
               doc="Householder QR as LAPACK geqrf stores it: (R and the reflectors' vectors, tau)."))


# -- householder_product / ormqr ---------------------------------------------------------------------------------------
def _hh_infer(types, cols):
    bs, m, _ = matrix_dims(types[0], "householder_product")
    return [TensorType(bs + (m, cols), types[0].dtype)]


def _hh(a, tau, cols):
    bs, m, n = matrix_dims(a, "householder_product")
    k, batch = tau.shape[-1], math.prod(bs)

    def lower(outs, ins):
        Q, acc = scratch("q", m, cols), Buffer("acc", F64, 1, "private")

        def item(b):
            V = Mat(ins[0], b * (m * n), n)
            eye = loop(m, lambda i: loop(cols, lambda j: Q.set(i, j, select(compare("eq", i, j), f64(1), f64(0))),
                                         name="j"))
            refl = rloop(k, lambda i: apply_reflector(V, i, Mat(ins[1], b * k, 1)(i, 0), Q, m, cols, acc))
            return Allocate(Q.buf, Allocate(acc, seq(eye, refl, copy(Mat(outs[0], b * (m * cols), cols), Q, m, cols))))
        return batched(batch, 2 * m * cols * k + 1, item)
    return te.extern([(bs + (m, cols), a.dtype)], [a, tau], lower, "householder_product")[0]


def _reflectors(a, tau, idx):
    m = a.shape[-2]
    for i in range(tau.shape[-1]):
        v = np.zeros(m)
        v[i] = 1
        v[i + 1:] = a[idx][i + 1:, i]
        yield np.eye(m) - tau[idx + (i,)] * np.outer(v, v)


def _hh_ref(a, tau, cols):
    m = a.shape[-2]
    out = np.zeros(a.shape[:-2] + (m, cols))
    for idx in np.ndindex(*a.shape[:-2]):
        q = np.eye(m)
        for h in _reflectors(a.astype(np.float64), tau.astype(np.float64), idx):
            q = q @ h
        out[idx] = q[:, :cols]
    return out.astype(a.dtype)


def _qr_inputs(rng, shape, dt="float32"):
    return list(geqrf_ref(rng.uniform(-2, 2, shape).astype(dt)))


register(OpDef("householder_product", Kind.OPAQUE, _hh_infer, _hh_ref, _hh, {}, None,
               lambda rng: [(_qr_inputs(rng, (5, 3)), {"cols": 3}),
                            (_qr_inputs(rng, (2, 4, 4), "float64"), {"cols": 4}),
                            (_qr_inputs(rng, (4, 2)), {"cols": 4})],
               FLT, lambda types, cols: scratch_check(types[0].shape[-2] * cols),
               doc="The first `cols` columns of Q = H_0 ... H_{k-1} (LAPACK orgqr) from geqrf's reflectors."))


def _ormqr_infer(types, left=True, trans=False):
    return [types[2]]


def _ormqr(a, tau, c, left=True, trans=False):
    bs, ma, na = matrix_dims(a, "ormqr")
    _, rc, cc = matrix_dims(c, "ormqr")
    k, batch = tau.shape[-1], math.prod(bs)
    rows, cols = (rc, cc) if left else (cc, rc)
    descending = left != trans

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
    return te.extern([(c.shape, c.dtype)], [a, tau, c], lower, "ormqr")[0]


def _ormqr_ref(a, tau, c, left=True, trans=False):
    out = np.zeros(c.shape)
    for idx in np.ndindex(*a.shape[:-2]):
        q = np.eye(a.shape[-2])
        for h in _reflectors(a.astype(np.float64), tau.astype(np.float64), idx):
            q = q @ h
        q = q.T if trans else q
        out[idx] = q @ c[idx] if left else c[idx] @ q
    return out.astype(c.dtype)


register(OpDef("ormqr", Kind.OPAQUE, _ormqr_infer, _ormqr_ref, _ormqr, {}, None,
               lambda rng: [(_qr_inputs(rng, (4, 3)) + [rng.uniform(-1, 1, (4, 2)).astype("float32")],
                             {"left": True, "trans": True}),
                            (_qr_inputs(rng, (4, 4)) + [rng.uniform(-1, 1, (3, 4)).astype("float32")], {"left": False}),
                            (_qr_inputs(rng, (2, 5, 2), "float64") + [rng.uniform(-1, 1, (2, 3, 5))],
                             {"left": False, "trans": True}),
                            (_qr_inputs(rng, (5, 5)) + [rng.uniform(-1, 1, (5, 5)).astype("float32")], {})],
               FLT, lambda types, left=True, trans=False: scratch_check(types[2].shape[-2] * types[2].shape[-1]),
               doc="Q C, Q^T C, C Q or C Q^T for Q = H_0 ... H_{k-1} from geqrf's reflectors (LAPACK ormqr)."))


# -- qr: Q and R in one kernel -----------------------------------------------------------------------------------------
def _qr_dims(t, complete):
    bs, m, n = matrix_dims(t, "qr")
    k = min(m, n)
    return bs, m, n, k, (m if complete else k)


def _qr_infer(types, complete=False):
    bs, m, n, k, qc = _qr_dims(types[0], complete)
    return [TensorType(bs + (m, qc), types[0].dtype), TensorType(bs + (qc, n), types[0].dtype)]


def _qr(a, complete=False):
    bs, m, n, k, qc = _qr_dims(a, complete)
    batch = math.prod(bs)

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
    return te.extern([(t.shape, t.dtype) for t in _qr_infer([a], complete)], [a], lower, "qr")


def _qr_ref(a, complete=False):
    w, tau = geqrf_ref(a)
    m, n = a.shape[-2:]
    qc = m if complete else min(m, n)
    return _hh_ref(w, tau, qc), np.triu(w)[..., :qc, :]


register(OpDef("qr", Kind.OPAQUE, _qr_infer, _qr_ref, _qr, {}, None,
               lambda rng: [([rng.uniform(-2, 2, (5, 3)).astype("float32")], {}),
                            ([rng.uniform(-2, 2, (2, 3, 4))], {"complete": True}),
                            ([rng.uniform(-2, 2, (5, 2)).astype("float32")], {"complete": True})],
               FLT, lambda types, complete=False: scratch_check(
                   types[0].shape[-2] * (types[0].shape[-1] + types[0].shape[-2])),
               doc="Q and R of the Householder QR (reduced, or complete: Q square), in LAPACK's signs."))


# -- ATen --------------------------------------------------------------------------------------------------------------
def _linalg_qr(b, a, mode="reduced"):
    if mode not in ("reduced", "complete", "r"):
        raise UnsupportedOpError(f"linalg.qr mode {mode!r}")
    q, r = b.call("qr", [a], complete=mode == "complete")
    return (b.const(np.zeros((0,), a.dtype)), r) if mode == "r" else (q, r)


def _householder_product(b, a, tau):
    bs, m, n = matrix_dims(a, "linalg.householder_product")
    if n > m or tau.shape[-1] > n:
        raise ShapeError(f"householder_product of {list(a.shape)} with tau {list(tau.shape)}")
    a, tau = b.promote(a, tau)
    return b.call("householder_product", [a, expand_batch(b, tau, bs, 1)], cols=n)


def _ormqr_aten(b, a, tau, c, left=True, transpose=False):
    bs = broadcast_shapes(tuple(a.shape[:-2]), tuple(tau.shape[:-1]), tuple(c.shape[:-2]))
    a, tau, c = b.promote(a, tau, c)
    ma = a.shape[-2]
    if (c.shape[-2] if left else c.shape[-1]) != ma or tau.shape[-1] > min(ma, a.shape[-1]):
        raise ShapeError(f"ormqr of {list(a.shape)}, tau {list(tau.shape)}, C {list(c.shape)}")
    return b.call("ormqr", [expand_batch(b, a, bs, 2), expand_batch(b, tau, bs, 1), expand_batch(b, c, bs, 2)],
                  left=bool(left), trans=bool(transpose))


register_aten("aten.linalg_qr.default", _linalg_qr)
register_aten("aten.linalg_householder_product.default", _householder_product)
register_aten("aten.ormqr.default", _ormqr_aten)
