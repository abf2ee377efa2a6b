"""Spectra without vectors: eigenvalues of symmetric matrices (`eigvalsh`, cyclic two-sided Jacobi) and
singular values (`svdvals`, one-sided Hestenes Jacobi), in float64 scratch, sorted as torch returns them
(eigenvalues ascending, singular values descending).

Eigenvectors and singular vectors are not offered: their signs (LAPACK's choice) cannot be reproduced, so
`_linalg_eigh` / `_linalg_svd` compile only where the graph reads the values alone (`b.used_outputs`,
set by the PyTorch capture); otherwise they fall back to eager.
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import UnsupportedOpError
from ..lowering import te
from ..lowering.loop_ir import Allocate, Buffer, Store, seq
from ..symbolic.expr import as_expr, compare, maximum, select, unary
from ..types import TensorType
from .linalg_factor import (
    F64,
    FLT,
    Mat,
    batched,
    both,
    copy,
    expand_batch,
    f64,
    let,
    loop,
    matrix_dims,
    scratch,
    scratch_check,
    spd,
    square_dims,
    when,
)
from .registry import Kind, OpDef, register, register_aten

SWEEPS = 15          # Jacobi sweeps: convergence is quadratic, 15 reach float64 precision far beyond torch's sizes


def _rotation(zeta):
    """(c, s) of the Jacobi rotation for zeta = (a_qq - a_pp) / (2 a_pq):
    t = sign(zeta) / (|zeta| + sqrt(zeta^2 + 1))."""
    sgn = select(compare("lt", zeta, f64(0)), f64(-1), f64(1))
    t = sgn / (unary("abs", zeta) + unary("sqrt", zeta * zeta + f64(1)))
    c = f64(1) / unary("sqrt", t * t + f64(1))
    return c, t * c


def bubble_sort(d: Buffer, n: int, descending: bool):
    def step(j):
        out_of_order = compare("lt" if descending else "gt", d[j], d[j + 1])
        return when(out_of_order, let("t", d[j], lambda t: seq(Store(d, j, d[j + 1]), Store(d, j + 1, t))))
    return loop(n, lambda _: loop(n - 1, step, name="j"), name="pass") if n > 1 else None


def _rotate_cols(M: Mat, rows: int, p, q, c, s):
    """M <- M J for the rotation J acting on columns p and q."""
    return loop(rows, lambda k: let("x", M(k, p), lambda x: let("y", M(k, q), lambda y: seq(
        M.set(k, p, c * x - s * y), M.set(k, q, s * x + c * y)))), name="k")


def sym_jacobi(W: Mat, n: int, V: Mat | None = None):
    """Cyclic two-sided Jacobi: W <- J^T W J until W is diagonal (W symmetric n x n scratch); V <- V J."""
    def pair(p, q):
        def rotate(apq):
            c_s = _rotation((W(q, q) - W(p, p)) / (f64(2) * apq))
            return let("c", c_s[0], lambda c: let("s", c_s[1], lambda s: seq(
                _rotate_cols(W, n, p, q, c, s), _rotate_cols(W.T, n, p, q, c, s),
                _rotate_cols(V, n, p, q, c, s) if V is not None else None)))
        return when(compare("gt", q, p), let("apq", W(p, q), lambda apq: when(
            compare("gt", unary("abs", apq), f64(1e-300)), rotate(apq))))
    return loop(SWEEPS, lambda _: loop(n, lambda p: loop(n, lambda q: pair(p, q), name="q"), name="p"), name="sweep")


def col_jacobi(G: Mat, r: int, k: int, acc: Buffer, V: Mat | None = None):
    """One-sided (Hestenes) Jacobi: G <- G J until G's k columns (r rows) are orthogonal; V <- V J.
    acc: float64 scratch of 3."""
    z, one, two = as_expr(0), as_expr(1), as_expr(2)

    def pair(p, q):
        sums = seq(Store(acc, z, f64(0)), Store(acc, one, f64(0)), Store(acc, two, f64(0)), loop(r, lambda i: seq(
            Store(acc, z, acc[z] + G(i, p) * G(i, p)), Store(acc, one, acc[one] + G(i, q) * G(i, q)),
            Store(acc, two, acc[two] + G(i, p) * G(i, q)))))

        def rotate(al, be, ga):
            c_s = _rotation((be - al) / (f64(2) * ga))
            return let("c", c_s[0], lambda c: let("s", c_s[1], lambda s: seq(
                _rotate_cols(G, r, p, q, c, s), _rotate_cols(V, k, p, q, c, s) if V is not None else None)))
        big = lambda al, be, ga: both(compare("gt", unary("abs", ga), f64(1e-15) * unary("sqrt", al * be)),
                                      compare("gt", unary("abs", ga), f64(1e-300)))
        return when(compare("gt", q, p), sums, let("al", acc[z], lambda al: let("be", acc[one], lambda be: let(
            "ga", acc[two], lambda ga: when(big(al, be, ga), rotate(al, be, ga))))))
    return loop(SWEEPS, lambda _: loop(k, lambda p: loop(k, lambda q: pair(p, q), name="q"), name="p"), name="sweep")


def col_norms(G: Mat, r: int, k: int, d: Buffer, acc: Buffer):
    z = as_expr(0)
    return loop(k, lambda j: seq(Store(acc, z, f64(0)), loop(r, lambda i: Store(acc, z, acc[z] + G(i, j) * G(i, j))),
                                 Store(d, j, unary("sqrt", acc[z]))), name="j")


def fill_symmetric(W: Mat, A: Mat, n: int):
    """W = the symmetric matrix given by A's lower triangle."""
    return loop(n, lambda i: loop(n, lambda j: W.set(i, j, select(compare("ge", i, j), A(i, j), A(j, i))), name="j"))


def identity(V: Mat, n: int):
    return loop(n, lambda i: loop(n, lambda j: V.set(i, j, select(compare("eq", i, j), f64(1), f64(0))), name="j"))


# -- eigvalsh ----------------------------------------------------------------------------------------------------------
def _eigvalsh_infer(types, upper=False):
    bs, n, _ = square_dims(types[0], "eigvalsh")
    return [TensorType(bs + (n,), types[0].dtype)]


def _eigvalsh(a, upper=False):
    bs, n, _ = matrix_dims(a, "eigvalsh")
    batch = math.prod(bs)

    def lower(outs, ins):
        W = scratch("w", n, n)
        d = Buffer("d", F64, n, "private")

        def item(b):
            A = Mat(ins[0], b * (n * n), n, upper)        # read the lower triangle (of A^T when upper)
            out = Mat(outs[0], b * n, 1)
            return Allocate(W.buf, Allocate(d, seq(fill_symmetric(W, A, n), sym_jacobi(W, n),
                                                   loop(n, lambda i: Store(d, i, W(i, i))),
                                                   bubble_sort(d, n, False), loop(n, lambda i: out.set(i, 0, d[i])))))
        return batched(batch, SWEEPS * 2 * n ** 3 + 1, item)
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

    def lower(outs, ins):
        G = scratch("g", r, k)                            # A, or A^T when wide: k columns to orthogonalise
        d = Buffer("d", F64, k, "private")
        acc = Buffer("acc", F64, 3, "private")

        def item(b):
            A = Mat(ins[0], b * (m * n), n, m < n)
            out = Mat(outs[0], b * k, 1)
            return Allocate(G.buf, Allocate(d, Allocate(acc, seq(
                copy(G, A, r, k), col_jacobi(G, r, k, acc), col_norms(G, r, k, d, acc), bubble_sort(d, k, True),
                loop(k, lambda i: out.set(i, 0, d[i]))))))
        return batched(batch, SWEEPS * 3 * r * k * k + 1, item)
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
    z = as_expr(0)

    def lower(outs, ins):
        G, V = scratch("g", r, k), scratch("v", k, k)
        d, acc, tol = Buffer("d", F64, k, "private"), Buffer("acc", F64, 3, "private"), Buffer("tol", F64, 1, "private")

        def threshold(b, mag):
            biggest = seq(Store(tol, z, f64(0)), loop(k, lambda j: Store(tol, z, maximum(tol[z], mag(j)))))
            at, rt = Mat(ins[1], b, 1)(0, 0), Mat(ins[2], b, 1)(0, 0)
            return seq(biggest, Store(tol, z, maximum(at, rt * tol[z])))

        def item(b):
            A = Mat(ins[0], b * (m * n), n, m < n and not hermitian)
            if hermitian:       # A = V diag(d) V^T; pinv = sum_j v_j v_j^T / d_j over kept j
                P, Gv = Mat(outs[0], b * (m * n), m), V
                steps = seq(fill_symmetric(G, A, k), identity(V, k), sym_jacobi(G, k, V),
                            loop(k, lambda j: Store(d, j, G(j, j))), threshold(b, lambda j: unary("abs", d[j])),
                            loop(k, lambda j: Store(d, j, select(compare("gt", unary("abs", d[j]), tol[z]),
                                                                 f64(1) / d[j], f64(0)))))
            else:               # B = A (or A^T when wide) = G V^T with G = U S; pinv(B) = V S^-2 G^T over kept j
                P, Gv = Mat(outs[0], b * (m * n), m, m < n), G
                steps = seq(copy(G, A, r, k), identity(V, k), col_jacobi(G, r, k, acc, V), col_norms(G, r, k, d, acc),
                            threshold(b, lambda j: d[j]),
                            loop(k, lambda j: Store(d, j, select(compare("gt", d[j], tol[z]),
                                                                 f64(1) / (d[j] * d[j]), f64(0)))))
            rows = k if hermitian else r
            prod = loop(k, lambda i: loop(rows, lambda l: seq(
                Store(acc, z, f64(0)), loop(k, lambda j: Store(acc, z, acc[z] + V(i, j) * d[j] * Gv(l, j)), name="j"),
                P.set(i, l, acc[z])), name="l"))
            return Allocate(G.buf, Allocate(V.buf, Allocate(d, Allocate(acc, Allocate(tol, seq(steps, prod))))))
        return batched(batch, SWEEPS * 4 * r * k * k + 1, item)
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
