"""Householder QR in LAPACK's conventions: `geqrf` (R above the diagonal, reflector vectors below it with an
implicit leading 1, their scalars tau; each reflector chosen as dlarfg does, beta = -sign(alpha) * norm, so
R's signs and tau match LAPACK), `householder_product` (orgqr: the first columns of Q = H_0 ... H_{k-1}),
`ormqr` (apply Q or Q^T from either side) and `qr` (Q and R in one kernel). float64 scratch, batch in
parallel; ATen: geqrf, linalg_qr, linalg_householder_product, ormqr.
The kernels' loop IR is fxc/lowering/extern/linalg_qr.py.
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import ShapeError, UnsupportedOpError
from ..lowering import te
from ..lowering.extern.linalg_qr import geqrf_loops, householder_product_loops, ormqr_loops, qr_loops
from ..types import TensorType
from .common import broadcast_shapes
from .linalg_factor import FLT, expand_batch, matrix_dims, scratch_check
from .registry import Kind, OpDef, register, register_aten


# -- geqrf -------------------------------------------------------------------------------------------------------------
def _geqrf_infer(types):
    bs, m, n = matrix_dims(types[0], "geqrf")
    return [types[0], TensorType(bs + (min(m, n),), types[0].dtype)]


def _geqrf(a):
    bs, m, n = matrix_dims(a, "geqrf")
    k, batch = min(m, n), math.prod(bs)
    lower = geqrf_loops(batch, k, m, n)
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
    lower = householder_product_loops(batch, cols, k, m, n)
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
    lower = ormqr_loops(batch, cc, cols, descending, k, left, ma, na, rc, rows)
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
    lower = qr_loops(batch, k, m, n, qc)
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
