"""Dense factorizations and solvers: LU with partial pivoting (LAPACK getrf's pivot choice), LU and
triangular solves, determinants, Cholesky; the ATen linalg ops built from them (inv, solve, det,
slogdet, lu, lu_unpack, lu_solve, solve_triangular, triangular_solve, cholesky, cholesky_solve,
cholesky_inverse).

Each kernel is a `te.extern`: for every matrix of the batch (batch items in parallel) it copies its
operands into float64 scratch, runs the sequential textbook algorithm in loop IR and rounds the
results to the output dtype. `_ex` ops return LAPACK's `info` (0, or the 1-based index of the first
zero pivot / non-positive Cholesky pivot). Matrices whose scratch would exceed SCRATCH_LIMIT bytes
per thread fall back to eager.
The kernels' loop IR is fxc/lowering/extern/linalg_factor.py.
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import ShapeError, UnsupportedOpError
from ..lowering import te
from ..lowering.extern.linalg_factor import (
    F64,
    cholesky_loops,
    cholesky_solve_loops,
    f64,
    lu_factor_loops,
    lu_solve_loops,
    lu_unpack_loops,
    trsm_loops,
)
from ..symbolic.expr import as_expr, binary, cast, compare, select, unary
from ..types import TensorType
from .common import broadcast_shapes
from .registry import Kind, OpDef, register, register_aten

FLT = ("float32", "float64")
SCRATCH_LIMIT = 1 << 18       # bytes of float64 scratch per matrix (a thread's stack holds it)


def matrix_dims(t, what: str):
    if len(t.shape) < 2:
        raise ShapeError(f"{what} needs a matrix (rank >= 2), got shape {list(t.shape)}")
    return tuple(t.shape[:-2]), t.shape[-2], t.shape[-1]


def square_dims(t, what: str, rhs=None):
    """matrix_dims of a square matrix (and, given rhs, one whose rows match it); ShapeError otherwise: an operand
    that is not square (a symbolic n x 4) would be read past its end."""
    bs, n, m = matrix_dims(t, what)
    if n != m or (rhs is not None and (len(rhs.shape) < 2 or rhs.shape[-2] != n)):
        raise ShapeError(f"{what} needs a square matrix{' and a right-hand side of as many rows' if rhs else ''}, "
                         f"got {list(t.shape)}" + (f" and {list(rhs.shape)}" if rhs is not None else ""))
    return bs, n, m


def scratch_check(*sizes):
    if 8 * sum(sizes) > SCRATCH_LIMIT:
        return f"matrices this large need more than {SCRATCH_LIMIT} bytes of per-thread scratch"
    return None


# -- lu_factor: (LU, pivots, info) -------------------------------------------------------------------------------------
def _lu_factor_infer(types):
    bs, m, n = matrix_dims(types[0], "lu_factor")
    return [types[0], TensorType(bs + (min(m, n),), "int32"), TensorType(bs, "int32")]


def _lu_factor(a):
    bs, m, n = matrix_dims(a, "lu_factor")
    k, batch = min(m, n), math.prod(bs)
    lower = lu_factor_loops(batch, k, m, n)
    return te.extern([(a.shape, a.dtype), (bs + (k,), "int32"), (bs, "int32")], [a], lower, "lu_factor")


def lu_factor_ref(a):
    bs, (m, n) = a.shape[:-2], a.shape[-2:]
    k = min(m, n)
    lu, piv, info = a.astype(np.float64).copy(), np.zeros(bs + (k,), np.int32), np.zeros(bs, np.int32)
    for idx in np.ndindex(*bs):
        w = lu[idx]
        for j in range(k):
            p = j + int(np.argmax(np.abs(w[j:, j])))
            piv[idx + (j,)] = p + 1
            if w[p, j] != 0:
                w[[j, p]] = w[[p, j]]
                w[j + 1:, j] /= w[j, j]
            elif info[idx] == 0:
                info[idx] = j + 1
            w[j + 1:, j + 1:] -= np.outer(w[j + 1:, j], w[j, j + 1:])
    return lu.astype(a.dtype), piv, info


def _well_conditioned(rng, shape, dtype="float32"):
    n = shape[-1]
    return (rng.uniform(-1, 1, shape)
            + n * np.eye(n)[:shape[-2]] * rng.choice([-1, 1], shape[:-1])[..., None]).astype(dtype)


register(OpDef("lu_factor", Kind.OPAQUE, _lu_factor_infer, lu_factor_ref, _lu_factor, {}, None,
               lambda rng: [([rng.uniform(-2, 2, (5, 5)).astype("float32")], {}),
                            ([rng.uniform(-2, 2, (3, 4, 6)).astype("float64")], {}),
                            ([rng.uniform(-2, 2, (2, 6, 3)).astype("float32")], {}),
                            ([np.array([[0, 1, 2], [0, 3, 4], [0, 5, 7.0]], "float32")], {})],
               FLT, lambda types: scratch_check(types[0].shape[-2] * types[0].shape[-1]),
               doc="LU with partial pivoting (LAPACK getrf): LU, 1-based int32 pivots, int32 info."))


# -- lu_solve: X = A^-1 B (or A^-T B) from A's LU factors --------------------------------------------------------------
def _lu_solve_infer(types, adjoint=False):
    return [TensorType(types[2].shape, types[0].dtype)]


def _lu_solve(lu, piv, rhs, adjoint=False):
    bs, n, _ = square_dims(lu, "lu_solve", rhs)
    k, batch = rhs.shape[-1], math.prod(bs)
    lower = lu_solve_loops(adjoint, batch, k, n)
    return te.extern([(rhs.shape, lu.dtype)], [lu, piv, rhs], lower, "lu_solve")[0]


def unpack_ref(lu, piv):
    """P, L, U with A = P L U from LU factors and 1-based pivots (numpy)."""
    m, n = lu.shape[-2:]
    k = min(m, n)
    L = np.tril(lu, -1)[..., :, :k] + np.eye(m, k, dtype=lu.dtype)
    U = np.triu(lu)[..., :k, :]
    P = np.zeros(lu.shape[:-2] + (m, m), lu.dtype)
    for idx in np.ndindex(*lu.shape[:-2]):
        perm = list(range(m))
        for j in range(k):
            p = int(piv[idx + (j,)]) - 1
            perm[j], perm[p] = perm[p], perm[j]
        P[idx + (perm, list(range(m)))] = 1
    return P, L, U


def _lu_solve_ref(lu, piv, rhs, adjoint=False):
    P, L, U = unpack_ref(lu.astype(np.float64), piv)
    A = P @ L @ U
    return np.linalg.solve(np.swapaxes(A, -1, -2) if adjoint else A, rhs).astype(lu.dtype)


def _lu_solve_samples(rng):
    out = []
    for shape, k, adj, dt in (((4, 4), 3, False, "float32"), ((2, 5, 5), 2, True, "float64"),
                              ((3, 3), 1, True, "float32")):
        lu, piv, _ = lu_factor_ref(_well_conditioned(rng, shape, dt))
        out.append(([lu, piv, rng.uniform(-1, 1, shape[:-1] + (k,)).astype(dt)], {"adjoint": adj}))
    return out


register(OpDef("lu_solve", Kind.OPAQUE, _lu_solve_infer, _lu_solve_ref, _lu_solve, {}, None, _lu_solve_samples,
               ("float32", "float64", "int32"),
               lambda types, adjoint=False: scratch_check(types[2].shape[-2] * types[2].shape[-1]),
               doc="Solve A X = B (adjoint: A^T X = B) from A's LU factors and pivots; batches equal."))


# -- triangular solve -------------------------------------------------------------------------------------------------
def _trsm_infer(types, upper, unit=False, trans=False):
    return [types[1]]


def _trsm_kernel(a, rhs, upper, unit=False, trans=False):
    bs, n, _ = square_dims(a, "triangular_solve", rhs)
    k, batch = rhs.shape[-1], math.prod(bs)
    lower = trsm_loops(batch, k, n, trans, unit, upper)
    return te.extern([(rhs.shape, rhs.dtype)], [a, rhs], lower, "trsm")[0]


def _trsm_ref(a, rhs, upper, unit=False, trans=False):
    t = np.triu(a) if upper else np.tril(a)
    if unit:
        t = t - t * np.eye(a.shape[-1]) + np.eye(a.shape[-1])
    if trans:
        t = np.swapaxes(t, -1, -2)
    return np.linalg.solve(t.astype(np.float64), rhs).astype(rhs.dtype)


register(OpDef("trsm", Kind.OPAQUE, _trsm_infer, _trsm_ref, _trsm_kernel, {}, None,
               lambda rng: [([_well_conditioned(rng, (4, 4)), rng.uniform(-1, 1, (4, 3)).astype("float32")],
                             {"upper": True}),
                            ([_well_conditioned(rng, (2, 5, 5), "float64"), rng.uniform(-1, 1, (2, 5, 2))],
                             {"upper": False, "unit": True}),
                            ([_well_conditioned(rng, (3, 3)), rng.uniform(-1, 1, (3, 4)).astype("float32")],
                             {"upper": True, "trans": True})],
               FLT,
               lambda types, upper, unit=False, trans=False: scratch_check(types[1].shape[-2] * types[1].shape[-1]),
               doc="Solve op(T) X = B for triangular T (only its upper/lower triangle is read); "
                   "op(T) = T^T when trans."))


# -- Cholesky --------------------------------------------------------------------------------------------------------
def _cholesky_infer(types, upper=False):
    bs, n, _ = matrix_dims(types[0], "cholesky")
    if types[0].shape[-1] != types[0].shape[-2]:
        raise ShapeError(f"cholesky: matrix {list(types[0].shape)} is not square")
    return [types[0], TensorType(bs, "int32")]


def _cholesky(a, upper=False):
    bs, n, _ = matrix_dims(a, "cholesky")
    batch = math.prod(bs)
    lower = cholesky_loops(batch, n, upper)
    return te.extern([(a.shape, a.dtype), (bs, "int32")], [a], lower, "cholesky")


def _cholesky_ref(a, upper=False):
    a64 = np.swapaxes(a, -1, -2).astype(np.float64) if upper else a.astype(np.float64)
    w, info = np.tril(a64), np.zeros(a.shape[:-2], np.int32)
    for idx in np.ndindex(*a.shape[:-2]):
        x = w[idx]
        for j in range(x.shape[-1]):
            d = x[j, j] - x[j, :j] @ x[j, :j]
            if not d > 0:
                x[j, j], info[idx] = d, j + 1
                break
            x[j, j] = math.sqrt(d)
            x[j + 1:, j] = (x[j + 1:, j] - x[j + 1:, :j] @ x[j, :j]) / x[j, j]
    return (np.swapaxes(w, -1, -2) if upper else w).astype(a.dtype), info


UNBLOCKED_CHOLESKY = 128   # up to this size LAPACK (MKL) factors unblocked, so a failed factorization leaves
                           # exactly what potf2 leaves; beyond it, its blocked updates leave other partial values


def _cholesky_check(n):
    if n > UNBLOCKED_CHOLESKY:
        return (f"Cholesky of matrices larger than {UNBLOCKED_CHOLESKY} "
                "(LAPACK's blocked partial results on failure differ)")
    return scratch_check(n * n)


def spd(rng, shape, dtype="float32"):
    x = rng.uniform(-1, 1, shape)
    return (x @ np.swapaxes(x, -1, -2) + shape[-1] * np.eye(shape[-1])).astype(dtype)


register(OpDef("cholesky", Kind.OPAQUE, _cholesky_infer, _cholesky_ref, _cholesky, {}, None,
               lambda rng: [([spd(rng, (5, 5))], {}), ([spd(rng, (2, 4, 4), "float64")], {"upper": True}),
                            ([np.tril(spd(rng, (3, 3))) + np.triu(np.full((3, 3), 7, "float32"), 1)], {}),
                            ([np.array([[4, 2, 1], [2, -3, 1], [1, 1, 5]], "float32")], {"upper": True})],
               FLT, lambda types, upper=False: _cholesky_check(types[0].shape[-1]),
               doc="Cholesky factor (lower L, or upper U = L^T reading the upper triangle) and LAPACK's info."))


def _chol_solve_infer(types, upper=False):
    return [types[0]]


def _chol_solve(rhs, l, upper=False):
    bs, n, _ = matrix_dims(l, "cholesky_solve")
    k, batch = rhs.shape[-1], math.prod(bs)
    lower = cholesky_solve_loops(batch, k, n, upper)
    return te.extern([(rhs.shape, rhs.dtype)], [rhs, l], lower, "cholesky_solve")[0]


def _chol_solve_ref(rhs, l, upper=False):
    t = np.triu(l) if upper else np.tril(l)
    a = np.swapaxes(t, -1, -2) @ t if upper else t @ np.swapaxes(t, -1, -2)
    return np.linalg.solve(a.astype(np.float64), rhs).astype(rhs.dtype)


register(OpDef("cholesky_solve", Kind.OPAQUE, _chol_solve_infer, _chol_solve_ref, _chol_solve, {}, None,
               lambda rng: [([rng.uniform(-1, 1, (4, 2)).astype("float32"), _well_conditioned(rng, (4, 4))], {}),
                            ([rng.uniform(-1, 1, (2, 3, 3)), _well_conditioned(rng, (2, 3, 3), "float64")],
                             {"upper": True})],
               FLT, lambda types, upper=False: scratch_check(types[0].shape[-2] * types[0].shape[-1]),
               doc="Solve (L L^T) X = B, or (U^T U) X = B when upper, from the triangular factor."))


# -- determinants from LU factors --------------------------------------------------------------------------------------
def _det_parts(lu, piv):
    """Batch shape, n, and the number of row interchanges the pivots make (its parity is the permutation sign)."""
    bs, n, _ = matrix_dims(lu, "det")
    r = te.reduce_axis(n, "r")
    swaps = te.compute(bs, lambda *i: te.reduce("sum", cast("int64", compare("ne", cast("int64", piv[i + (r[0],)]),
                                                                                  r[0] + 1)), [r]), "det_swaps")
    return bs, n, swaps


def _perm_sign(swaps, i):
    return select(compare("eq", binary("imod", swaps[i], as_expr(2)), as_expr(0)), f64(1), f64(-1))


def _det(lu, piv):
    bs, n, swaps = _det_parts(lu, piv)
    r = te.reduce_axis(n, "r")
    prod = te.compute(bs, lambda *i: te.reduce("prod", cast(F64, lu[i + (r[0], r[0])]), [r]), "det_prod")
    return te.compute(bs, lambda *i: cast(lu.dtype, prod[i] * _perm_sign(swaps, i)), "det")


def _det_ref(lu, piv):
    P, L, U = unpack_ref(lu.astype(np.float64), piv)
    return np.asarray(np.linalg.det(P) * np.prod(np.diagonal(U, axis1=-2, axis2=-1), -1)).astype(lu.dtype)


def _sign(x):
    return select(compare("gt", x, f64(0)), f64(1), select(compare("lt", x, f64(0)), f64(-1), f64(0)))


def _slogdet(lu, piv):
    bs, n, swaps = _det_parts(lu, piv)
    r, r2 = te.reduce_axis(n, "r"), te.reduce_axis(n, "r")
    sgn = te.compute(bs, lambda *i: te.reduce("prod", _sign(cast(F64, lu[i + (r[0], r[0])])), [r]), "det_sign")
    lab = te.compute(bs, lambda *i: te.reduce("sum", unary("log", unary("abs", cast(F64, lu[i + (r2[0], r2[0])]))),
                                              [r2]),
                     "logabsdet")
    return (te.compute(bs, lambda *i: cast(lu.dtype, sgn[i] * _perm_sign(swaps, i)), "sign"),
            te.compute(bs, lambda *i: cast(lu.dtype, lab[i]), "logabsdet_out"))


def _slogdet_ref(lu, piv):
    d = _det_ref(lu, piv).astype(np.float64)
    with np.errstate(divide="ignore"):
        return np.sign(d).astype(lu.dtype), np.log(np.abs(np.prod(
            np.diagonal(lu.astype(np.float64), axis1=-2, axis2=-1), -1))).astype(lu.dtype)


def _det_samples(rng):
    out = []
    for shape, dt in (((4, 4), "float32"), ((2, 3, 3), "float64"), ((0, 0), "float32")):
        lu, piv, _ = lu_factor_ref(rng.uniform(-2, 2, shape).astype(dt))
        out.append(([lu, piv], {}))
    out.append(([np.array([[2, 1], [0, 0]], "float32"), np.array([1, 2], "int32")], {}))
    return out


def _det_infer(types):
    t = types[0]
    if t.ndim < 2 or t.shape[-1] != t.shape[-2] or types[1].shape[-1] != t.shape[-1]:
        raise ShapeError(f"lu_det: LU factors {list(t.shape)} are not square, or pivots {list(types[1].shape)} do not "
                         f"match them")
    return [TensorType(t.shape[:-2], t.dtype)]
register(OpDef("lu_det", Kind.OPAQUE, _det_infer, _det_ref, _det, {}, None, _det_samples,
               ("float32", "float64", "int32"),
               doc="Determinant from LU factors and pivots: prod(diag(U)) times the permutation's sign."))
register(OpDef("lu_slogdet", Kind.OPAQUE, lambda types: _det_infer(types) * 2, _slogdet_ref, _slogdet, {}, None,
               _det_samples, ("float32", "float64", "int32"),
               doc="(sign, log|det|) from LU factors and pivots."))


# -- lu_unpack: P, L, U ------------------------------------------------------------------------------------------------
def _unpack_infer(types):
    bs, m, n = matrix_dims(types[0], "lu_unpack")
    k, dt = min(m, n), types[0].dtype
    return [TensorType(bs + (m, m), dt), TensorType(bs + (m, k), dt), TensorType(bs + (k, n), dt)]


def _unpack(lu, piv):
    bs, m, n = matrix_dims(lu, "lu_unpack")
    k, batch = min(m, n), math.prod(bs)
    lower = lu_unpack_loops(batch, k, m, n)
    return te.extern([(s.shape, s.dtype) for s in _unpack_infer([lu])], [lu, piv], lower, "lu_unpack")


register(OpDef("lu_unpack", Kind.OPAQUE, _unpack_infer, unpack_ref, _unpack, {}, None,
               lambda rng: [([*lu_factor_ref(rng.uniform(-2, 2, shape).astype("float32"))[:2]], {})
                            for shape in ((4, 4), (2, 5, 3), (3, 6))],
               ("float32", "float64", "int32"), doc="P, L, U with A = P L U from LU factors and pivots."))


# -- ATen converters ---------------------------------------------------------------------------------------------------
def _eye_like(b, bs, n, dtype):
    eye = b.const(np.eye(n, dtype=dtype))
    return b.call("expand", [eye], size=tuple(bs) + (n, n)) if bs else eye


def expand_batch(b, x, bs, core):
    """x (its last `core` dims kept) broadcast to batch shape bs."""
    want = tuple(bs) + tuple(x.shape[-core:] if core else ())
    return x if tuple(x.shape) == want else b.call("expand", [x], size=want)


def _lu64(b, a):
    """LU factors of `a` computed and kept in float64 (solves round only once, at the end)."""
    return b.call("lu_factor", [b.as_tensor(a, F64)])


def _lu_factor_ex(b, a, pivot=True, check_errors=False):
    if not pivot:
        raise UnsupportedOpError("LU without pivoting")
    matrix_dims(a, "linalg.lu_factor")
    return b.call("lu_factor", [a])


def _solve_lu(b, lu, piv, rhs, dtype, adjoint=False):
    bs = broadcast_shapes(tuple(lu.shape[:-2]), tuple(rhs.shape[:-2]))
    x = b.call("lu_solve", [expand_batch(b, lu, bs, 2), expand_batch(b, piv, bs, 1),
                            expand_batch(b, b.as_tensor(rhs, F64), bs, 2)], adjoint=adjoint)
    return b.as_tensor(x, dtype)


def _square(a, what):
    bs, m, n = matrix_dims(a, what)
    if m != n:
        raise ShapeError(f"{what} needs square matrices, got {list(a.shape)}")
    return bs, n


def _inv_ex(b, a, check_errors=False):
    bs, n = _square(a, "linalg.inv")
    lu, piv, info = _lu64(b, a)
    return _solve_lu(b, lu, piv, _eye_like(b, bs, n, np.float64), a.dtype), info


def _solve_ex(b, a, rhs, left=True, check_errors=False):
    if not left:
        raise UnsupportedOpError("linalg.solve with left=False")
    bs, n = _square(a, "linalg.solve")
    vector = rhs.type.ndim == 1 or (rhs.type.ndim == a.type.ndim - 1 and tuple(rhs.shape) == tuple(a.shape[:-1]))
    r = b.call("reshape", [rhs], shape=tuple(rhs.shape) + (1,)) if vector else rhs
    lu, piv, info = _lu64(b, a)
    x = _solve_lu(b, lu, piv, r, a.dtype)
    if vector:
        x = b.call("reshape", [x], shape=tuple(x.shape[:-1]))
    return x, b.as_tensor(lu, a.dtype), piv, info


def _det_aten(b, a):
    _square(a, "linalg.det")
    lu, piv, _ = _lu64(b, a)
    return b.as_tensor(b.call("lu_det", [lu, piv]), a.dtype), b.as_tensor(lu, a.dtype), piv


def _slogdet_aten(b, a):
    _square(a, "linalg.slogdet")
    lu, piv, _ = _lu64(b, a)
    sign, lab = b.call("lu_slogdet", [lu, piv])
    return b.as_tensor(sign, a.dtype), b.as_tensor(lab, a.dtype), b.as_tensor(lu, a.dtype), piv


def _lu_unpack_aten(b, lu, piv, unpack_data=True, unpack_pivots=True):
    if not (unpack_data and unpack_pivots):
        raise UnsupportedOpError("lu_unpack without unpack_data/unpack_pivots")
    bs, m, n = matrix_dims(lu, "lu_unpack")
    if tuple(piv.shape) != bs + (min(m, n),):
        raise UnsupportedOpError(f"lu_unpack with pivots of shape {list(piv.shape)}")
    return b.call("lu_unpack", [lu, b.as_tensor(piv, "int32")])


def _linalg_lu(b, a, pivot=True):
    lu, piv, _ = _lu_factor_ex(b, a, pivot)
    return b.call("lu_unpack", [lu, piv])


def _transpose(b, x):
    nd = x.type.ndim
    return b.call("permute", [x], dims=tuple(range(nd - 2)) + (nd - 1, nd - 2))


def _lu_solve_aten(b, lu, piv, rhs, left=True, adjoint=False):
    _square(lu, "linalg.lu_solve")
    if not left:      # X A = B  <=>  A^T X^T = B^T
        return _transpose(b, _solve_lu(b, b.as_tensor(lu, F64), b.as_tensor(piv, "int32"), _transpose(b, rhs),
                                       rhs.dtype, not adjoint))
    return _solve_lu(b, b.as_tensor(lu, F64), b.as_tensor(piv, "int32"), rhs, rhs.dtype, adjoint)


def _tri_solve(b, a, rhs, upper, trans, unit):
    bs = broadcast_shapes(tuple(a.shape[:-2]), tuple(rhs.shape[:-2]))
    a, rhs = b.promote(a, rhs)
    return b.call("trsm", [expand_batch(b, a, bs, 2), expand_batch(b, rhs, bs, 2)], upper=bool(upper),
                  unit=bool(unit), trans=bool(trans))


def _solve_triangular(b, a, rhs, upper, left=True, unitriangular=False):
    _square(a, "linalg.solve_triangular")
    if not left:      # X A = B  <=>  A^T X^T = B^T
        return _transpose(b, _tri_solve(b, a, _transpose(b, rhs), upper, True, unitriangular))
    return _tri_solve(b, a, rhs, upper, False, unitriangular)


def _triangular_solve(b, rhs, a, upper=True, transpose=False, unitriangular=False):
    _square(a, "triangular_solve")
    x = _tri_solve(b, a, rhs, upper, transpose, unitriangular)
    bs = tuple(x.shape[:-2])
    return x, b.call("copy", [expand_batch(b, a, bs, 2)])


def _cholesky_ex(b, a, upper=False, check_errors=False):
    _square(a, "linalg.cholesky")
    return b.call("cholesky", [a], upper=bool(upper))


def _cholesky_solve_aten(b, rhs, l, upper=False):
    _square(l, "cholesky_solve")
    bs = broadcast_shapes(tuple(l.shape[:-2]), tuple(rhs.shape[:-2]))
    rhs, l = b.promote(rhs, l)
    return b.call("cholesky_solve", [expand_batch(b, rhs, bs, 2), expand_batch(b, l, bs, 2)], upper=bool(upper))


def _cholesky_inverse(b, l, upper=False):
    bs, n = _square(l, "cholesky_inverse")
    return b.call("cholesky_solve", [_eye_like(b, bs, n, l.dtype), l], upper=bool(upper))


register_aten("aten.linalg_lu_factor_ex.default", _lu_factor_ex)
register_aten("aten.linalg_inv_ex.default", _inv_ex)
register_aten("aten._linalg_solve_ex.default", _solve_ex)
register_aten("aten._linalg_det.default", _det_aten)
register_aten("aten._linalg_slogdet.default", _slogdet_aten)
register_aten("aten.lu_unpack.default", _lu_unpack_aten)
register_aten("aten.linalg_lu.default", _linalg_lu)
register_aten("aten.linalg_lu_solve.default", _lu_solve_aten)
register_aten("aten.linalg_solve_triangular.default", _solve_triangular)
register_aten("aten.triangular_solve.default", _triangular_solve)
register_aten("aten.linalg_cholesky_ex.default", _cholesky_ex)
register_aten("aten.cholesky.default", lambda b, a, upper=False: _cholesky_ex(b, a, upper)[0])
register_aten("aten.cholesky_solve.default", _cholesky_solve_aten)
register_aten("aten.cholesky_inverse.default", _cholesky_inverse)
