"""Symmetric indefinite LDL^T with Bunch-Kaufman pivoting, as LAPACK sytf2 (lower) computes and stores it:
`ldl_factor` (LD: L's unit lower triangle with D's 1x1 / 2x2 blocks; 1-based pivots, negative for 2x2
blocks; info), and `ldl_solve` (sytrs). ATen: linalg_ldl_factor_ex, linalg_ldl_solve (real matrices, so
`hermitian` changes nothing). The pivot search and the block choice follow sytf2 test by test
(alpha = (1 + sqrt 17) / 8); arithmetic in float64 scratch, batch in parallel.
The kernels' loop IR is fxc/lowering/extern/linalg_ldl.py.
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import ShapeError
from ..lowering import te
from ..lowering.extern.linalg_ldl import (
    ALPHA,
    ldl_factor_loops,
    ldl_solve_loops,
)
from ..types import TensorType
from .common import broadcast_shapes
from .linalg_factor import FLT, expand_batch, matrix_dims, scratch_check, square_dims
from .registry import Kind, OpDef, register, register_aten


# -- ops ---------------------------------------------------------------------------------------------------------------
def _ldl_infer(types):
    bs, n, _ = square_dims(types[0], "ldl_factor")
    return [types[0], TensorType(bs + (n,), "int32"), TensorType(bs, "int32")]


def _ldl_factor(a):
    bs, n, _ = matrix_dims(a, "ldl_factor")
    batch = math.prod(bs)
    lower = ldl_factor_loops(batch, n)
    return te.extern([(t.shape, t.dtype) for t in _ldl_infer([a])], [a], lower, "ldl_factor")


def ldl_factor_ref(a):
    """sytf2 (lower) in numpy."""
    n = a.shape[-1]
    w = np.tril(a.astype(np.float64))
    piv, info = np.zeros(a.shape[:-2] + (n,), np.int32), np.zeros(a.shape[:-2], np.int32)
    for idx in np.ndindex(*a.shape[:-2]):
        x, k = w[idx], 0
        while k < n:
            ks, kp, absakk = 1, k, abs(x[k, k])
            imax = k + 1 + int(np.argmax(np.abs(x[k + 1:, k]))) if k < n - 1 else k
            colmax = abs(x[imax, k]) if k < n - 1 else 0.0
            if max(absakk, colmax) == 0 or absakk != absakk:
                info[idx] = info[idx] or k + 1
            else:
                if not absakk >= ALPHA * colmax:
                    rowmax = max([abs(x[imax, j]) for j in range(k, imax)]
                                 + [abs(x[i, imax]) for i in range(imax + 1, n)])
                    if absakk >= ALPHA * colmax * (colmax / rowmax):
                        pass
                    elif abs(x[imax, imax]) >= ALPHA * rowmax:
                        kp = imax
                    else:
                        kp, ks = imax, 2
                kk = k + ks - 1
                if kp != kk:
                    x[kp + 1:, [kk, kp]] = x[kp + 1:, [kp, kk]]
                    for j in range(kk + 1, kp):
                        x[j, kk], x[kp, j] = x[kp, j], x[j, kk]
                    x[kk, kk], x[kp, kp] = x[kp, kp], x[kk, kk]
                    if ks == 2:
                        x[k + 1, k], x[kp, k] = x[kp, k], x[k + 1, k]
                if ks == 1 and k < n - 1:
                    d11 = 1 / x[k, k]
                    col = x[k + 1:, k].copy()
                    x[k + 1:, k + 1:] -= np.tril(d11 * np.outer(col, col))
                    x[k + 1:, k] *= d11
                elif ks == 2 and k < n - 2:
                    d21 = x[k + 1, k]
                    d11, d22 = x[k + 1, k + 1] / d21, x[k, k] / d21
                    e21 = 1 / (d11 * d22 - 1) / d21
                    for j in range(k + 2, n):
                        wk, wkp1 = e21 * (d11 * x[j, k] - x[j, k + 1]), e21 * (d22 * x[j, k + 1] - x[j, k])
                        x[j:, j] -= x[j:, k] * wk + x[j:, k + 1] * wkp1
                        x[j, k], x[j, k + 1] = wk, wkp1
            if ks == 1:
                piv[idx + (k,)] = kp + 1
            else:
                piv[idx + (k,)] = piv[idx + (k + 1,)] = -(kp + 1)
            k += ks
    return w.astype(a.dtype), piv, info


def _sym(rng, shape, dt="float32"):
    x = rng.uniform(-2, 2, shape)
    return (x + np.swapaxes(x, -1, -2)).astype(dt)


register(OpDef("ldl_factor", Kind.OPAQUE, _ldl_infer, ldl_factor_ref, _ldl_factor, {}, None,
               lambda rng: [([_sym(rng, (5, 5))], {}), ([_sym(rng, (3, 6, 6), "float64")], {}),
                            ([np.array([[0, 1, 2], [1, 0, 3], [2, 3, 0]], "float32")], {}),
                            ([np.zeros((2, 2), "float32")], {})],
               FLT, lambda types: scratch_check(types[0].shape[-1] ** 2),
               doc="Bunch-Kaufman LDL^T as LAPACK sytrf (lower) stores it: LD, pivots, info."))


def _ldl_solve(ld, piv, rhs):
    bs, n, _ = matrix_dims(ld, "ldl_solve")
    k, batch = rhs.shape[-1], math.prod(bs)
    lower = ldl_solve_loops(batch, k, n)
    return te.extern([(rhs.shape, rhs.dtype)], [ld, piv, rhs], lower, "ldl_solve")[0]


def _ldl_solve_ref(ld, piv, rhs):
    n = ld.shape[-1]
    out = np.zeros(rhs.shape)
    for idx in np.ndindex(*ld.shape[:-2]):
        x, p = ld[idx].astype(np.float64), piv[idx]
        D, k = np.zeros((n, n)), 0
        ops = []
        while k < n:        # A = P_0 L_0 ... : rebuild A from the factorization's steps
            ks = 1 if p[k] > 0 else 2
            kp = abs(int(p[k])) - 1
            ops.append((k, ks, kp))
            k += ks
        # A = (prod_k P_k L_k) D (prod_k P_k L_k)^T with L_k holding the block's column(s) below it
        M = np.eye(n)
        for k, ks, kp in ops:
            P = np.eye(n)
            P[[k + ks - 1, kp]] = P[[kp, k + ks - 1]]
            Lk = np.eye(n)
            Lk[k + ks:, k:k + ks] = x[k + ks:, k:k + ks]
            M = M @ P @ Lk
            D[k:k + ks, k:k + ks] = x[k:k + ks, k:k + ks]
            if ks == 2:
                D[k, k + 1] = D[k + 1, k]
        out[idx] = np.linalg.solve(M @ D @ M.T, rhs[idx])
    return out.astype(rhs.dtype)


def _ldl_solve_samples(rng):
    out = []
    for shape, k, dt in (((5, 5), 2, "float32"), ((2, 6, 6), 3, "float64"), ((3, 3), 1, "float32")):
        ld, piv, _ = ldl_factor_ref(_sym(rng, shape, dt))
        out.append(([ld, piv, rng.uniform(-1, 1, shape[:-1] + (k,)).astype(dt)], {}))
    return out


register(OpDef("ldl_solve", Kind.OPAQUE, lambda types: [types[2]], _ldl_solve_ref, _ldl_solve, {}, None,
               _ldl_solve_samples,
               ("float32", "float64", "int32"), lambda types: scratch_check(types[2].shape[-2] * types[2].shape[-1]),
               doc="Solve A X = B from ldl_factor's LD and pivots (LAPACK sytrs, lower); batches equal."))


def _ldl_factor_aten(b, a, hermitian=False, check_errors=False):
    bs, n, m = matrix_dims(a, "linalg.ldl_factor")
    if n != m:
        raise ShapeError(f"ldl_factor of non-square {list(a.shape)}")
    return b.call("ldl_factor", [a])


def _ldl_solve_aten(b, ld, piv, rhs, hermitian=False):
    bs = broadcast_shapes(tuple(ld.shape[:-2]), tuple(rhs.shape[:-2]))
    ld, rhs = b.promote(ld, rhs)
    return b.call("ldl_solve", [expand_batch(b, ld, bs, 2), expand_batch(b, b.as_tensor(piv, "int32"), bs, 1),
                                expand_batch(b, rhs, bs, 2)])


register_aten("aten.linalg_ldl_factor_ex.default", _ldl_factor_aten)
register_aten("aten.linalg_ldl_solve.default", _ldl_solve_aten)
