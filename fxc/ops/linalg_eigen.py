"""Spectra without vectors: eigenvalues of symmetric matrices (`eigvalsh`, cyclic two-sided Jacobi) and
singular values (`svdvals`, one-sided Hestenes Jacobi), in float64 scratch, sorted as torch returns them
(eigenvalues ascending, singular values descending).

Eigenvectors and singular vectors are not offered: their signs (LAPACK's choice) cannot be reproduced, so
`_linalg_eigh` / `_linalg_svd` compile only where the graph reads the values alone (`b.used_outputs`,
set by the PyTorch capture); otherwise they fall back to eager.
The kernels' loop IR is fxc/lowering/extern/linalg_eigen.py.
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import UnsupportedOpError
from ..lowering import te
from ..lowering.extern.linalg_eigen import (
    eigvalsh_loops,
    pinv_loops,
    svdvals_loops,
)
from ..lowering.extern.linalg_factor import F64
from ..types import TensorType
from .linalg_factor import FLT, expand_batch, matrix_dims, scratch_check, spd, square_dims
from .registry import Kind, OpDef, register, register_aten


# -- eigvalsh ----------------------------------------------------------------------------------------------------------
def _eigvalsh_infer(types, upper=False):
    bs, n, _ = square_dims(types[0], "eigvalsh")
    return [TensorType(bs + (n,), types[0].dtype)]


def _eigvalsh(a, upper=False):
    bs, n, _ = matrix_dims(a, "eigvalsh")
    batch = math.prod(bs)
    lower = eigvalsh_loops(batch, n, upper)
    return te.extern([(bs + (n,), a.dtype)], [a], lower, "eigvalsh")[0]


def _eigvalsh_ref(a, upper=False):
    return np.linalg.eigvalsh(a.astype(np.float64), UPLO="U" if upper else "L").astype(a.dtype)


register(OpDef("eigvalsh", Kind.OPAQUE, _eigvalsh_infer, _eigvalsh_ref, _eigvalsh, {}, None,
               lambda rng: [([spd(rng, (5, 5)) - 5], {}), ([rng.uniform(-2, 2, (2, 4, 4))], {"upper": True}),
                            ([np.diag([3.0, -1.0, 2.0]).astype("float32")], {})],
               FLT, lambda types, upper=False: scratch_check(types[0].shape[-1] ** 2 + types[0].shape[-1]),
               doc="Eigenvalues (ascending) of the symmetric matrix given by A's lower (upper) triangle."))


# -- svdvals -----------------------------------------------------------------------------------------------------------
def _svdvals_infer(types):
    bs, m, n = matrix_dims(types[0], "svdvals")
    return [TensorType(bs + (min(m, n),), types[0].dtype)]


def _svdvals(a):
    bs, m, n = matrix_dims(a, "svdvals")
    batch, k, r = math.prod(bs), min(m, n), max(m, n)
    lower = svdvals_loops(batch, k, m, n, r)
    return te.extern([(bs + (k,), a.dtype)], [a], lower, "svdvals")[0]


def _svdvals_ref(a):
    return np.linalg.svd(a.astype(np.float64), compute_uv=False).astype(a.dtype)


register(OpDef("svdvals", Kind.OPAQUE, _svdvals_infer, _svdvals_ref, _svdvals, {}, None,
               lambda rng: [([rng.uniform(-2, 2, (5, 3)).astype("float32")], {}),
                            ([rng.uniform(-2, 2, (2, 3, 6))], {}),
                            ([np.array([[1, 2, 3], [2, 4, 6], [1, 0, 1.0]], "float32")], {})],
               FLT, lambda types: scratch_check(types[0].shape[-1] * types[0].shape[-2] + 3),
               doc="Singular values (descending) of each matrix."))


# -- pinv: sign-free products of singular (eigen) vectors --------------------------------------------------------------
def _pinv_infer(types, hermitian=False):
    bs, m, n = matrix_dims(types[0], "pinv")
    return [TensorType(bs + (n, m), types[0].dtype)]


def _pinv(a, atol, rtol, hermitian=False):
    """Pseudo-inverse: singular values (|eigenvalues| when hermitian) above max(atol, rtol * largest) are
    inverted, the rest dropped. Built from V and G = A V (or V and the eigenvalues): sums over products of
    each vector with itself, so the vectors' signs do not matter."""
    bs, m, n = matrix_dims(a, "pinv")
    batch, k, r = math.prod(bs), min(m, n), max(m, n)
    lower = pinv_loops(batch, hermitian, k, m, n, r)
    return te.extern([(bs + (n, m), a.dtype)], [a, atol, rtol], lower, "pinv")[0]


def _pinv_ref(a, atol, rtol, hermitian=False):
    out = np.zeros(a.shape[:-2] + a.shape[-2:][::-1])
    for idx in np.ndindex(*a.shape[:-2]):
        x = a[idx].astype(np.float64)
        if hermitian:
            w, v = np.linalg.eigh(x)
            tol = max(atol[idx], rtol[idx] * (np.abs(w).max() if w.size else 0))
            inv = np.where(np.abs(w) > tol, 1 / np.where(w == 0, 1, w), 0)
            out[idx] = (v * inv) @ v.T
        else:
            u, sv, vt = np.linalg.svd(x, full_matrices=False)
            tol = max(atol[idx], rtol[idx] * (sv.max() if sv.size else 0))
            inv = np.where(sv > tol, 1 / np.where(sv == 0, 1, sv), 0)
            out[idx] = (vt.T * inv) @ u.T
    return out.astype(a.dtype)


def _pinv_samples(rng):
    tol = lambda bs, v: np.full(bs, v)
    sym = rng.uniform(-2, 2, (2, 4, 4))
    return [([rng.uniform(-2, 2, (5, 3)).astype("float32"), tol((), 0.0), tol((), 1e-6)], {}),
            ([rng.uniform(-2, 2, (2, 3, 6)), tol((2,), 0.0), tol((2,), 1e-12)], {}),
            ([np.array([[1, 2, 3], [2, 4, 6], [1, 0, 1.0]], "float32"), tol((), 0.0), tol((), 1e-5)], {}),
            ([sym + np.swapaxes(sym, -1, -2), tol((2,), 0.1), tol((2,), 0.0)], {"hermitian": True})]


register(OpDef("pinv", Kind.OPAQUE, _pinv_infer, _pinv_ref, _pinv, {}, None, _pinv_samples, FLT,
               lambda types, hermitian=False: scratch_check(2 * types[0].shape[-1] * types[0].shape[-2] + 8),
               doc="Moore-Penrose pseudo-inverse with per-matrix float64 atol/rtol tensors (batch shape)."))


# -- ATen: values-only uses of eigh / svd ------------------------------------------------------------------------------
def _only(b, keep, what):
    used = getattr(b, "used_outputs", None)
    if used is None or not used <= set(keep):
        raise UnsupportedOpError(f"{what}: the graph reads vectors (fxc computes values only; LAPACK's vector signs "
                                 f"cannot be reproduced)")


def _unused(b, shape, dtype):
    """Stand-in for an output the graph never reads (checked by `_only`)."""
    return b.const(np.zeros(shape, dtype))


def _eigh(b, a, UPLO="L", compute_v=True):
    _only(b, {0}, "linalg.eigh")
    bs, n, m = matrix_dims(a, "linalg.eigh")
    if n != m:
        raise UnsupportedOpError(f"eigh of non-square {list(a.shape)}")
    vals = b.call("eigvalsh", [a], upper=UPLO.upper() == "U")
    return vals, _unused(b, tuple(a.shape) if compute_v else (0,), a.dtype)


def _svd(b, a, full_matrices=False, compute_uv=True, driver=None):
    _only(b, {1}, "linalg.svd")
    bs, m, n = matrix_dims(a, "linalg.svd")
    k = min(m, n)
    s = b.call("svdvals", [a])
    if not compute_uv:
        return _unused(b, (0,), a.dtype), s, _unused(b, (0,), a.dtype)
    return (_unused(b, bs + (m, m if full_matrices else k), a.dtype), s,
            _unused(b, bs + (n if full_matrices else k, n), a.dtype))


def _pinv_aten(b, a, atol=None, rtol=None, hermitian=False):
    bs, m, n = matrix_dims(a, "linalg.pinv")
    if hermitian and m != n:
        raise UnsupportedOpError(f"hermitian pinv of non-square {list(a.shape)}")
    default = {"float32": 2.0 ** -23, "float64": 2.0 ** -52}.get(a.dtype, 0.0) * max(m, n)
    if rtol is None:      # torch: the default rtol, or 0 where a positive atol is given
        rtol = b.scalar(default, F64) if atol is None else b.call(
            "where", [b.call("gt", [b.as_tensor(atol, F64), b.scalar(0.0, F64)]),
                      b.scalar(0.0, F64), b.scalar(default, F64)])
    atol = b.scalar(0.0, F64) if atol is None else atol
    tols = [expand_batch(b, b.as_tensor(t, F64), bs, 0) for t in (atol, rtol)]
    return b.call("pinv", [a] + tols, hermitian=bool(hermitian))


register_aten("aten.linalg_pinv.atol_rtol_tensor", _pinv_aten)
register_aten("aten._linalg_eigh.default", _eigh)
register_aten("aten._linalg_svd.default", _svd)
