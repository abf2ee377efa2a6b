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
from ..lowering.expr import as_expr, binary, compare, select, unary
from ..lowering.loop_ir import Allocate, Buffer, Store, seq
from ..relay_like.graph import TensorType
from .linalg_factor import (F64, FLT, Mat, batched, both, copy, f64, let, loop, matrix_dims, scratch, scratch_check,
                            spd, when)
from .registry import Kind, OpDef, register, register_aten

SWEEPS = 15          # Jacobi sweeps: convergence is quadratic, 15 reach float64 precision far beyond torch's sizes


def _rotation(zeta):
    """(c, s) of the Jacobi rotation for zeta = (a_qq - a_pp) / (2 a_pq): t = sign(zeta) / (|zeta| + sqrt(zeta^2 + 1))."""
    sgn = select(compare("lt", zeta, f64(0)), f64(-1), f64(1))
    t = sgn / (unary("abs", zeta) + unary("sqrt", zeta * zeta + f64(1)))
    c = f64(1) / unary("sqrt", t * t + f64(1))
    return c, t * c


def bubble_sort(d: Buffer, n: int, descending: bool):
    def step(j):
        out_of_order = compare("lt" if descending else "gt", d[j], d[j + 1])
        return when(out_of_order, let("t", d[j], lambda t: seq(Store(d, j, d[j + 1]), Store(d, j + 1, t))))
    return loop(n, lambda _: loop(n - 1, step, name="j"), name="pass") if n > 1 else None


# -- eigvalsh ----------------------------------------------------------------------------------------------------------
def _eigvalsh_infer(types, upper=False):
    bs, n, _ = matrix_dims(types[0], "eigvalsh")
    return [TensorType(bs + (n,), types[0].dtype)]


def _eigvalsh(a, upper=False):
    bs, n, _ = matrix_dims(a, "eigvalsh")
    batch = math.prod(bs)

    def lower(outs, ins):
        W = scratch("w", n, n)
        d = Buffer("d", F64, n, "local")

        def item(b):
            A = Mat(ins[0], b * (n * n), n, upper)        # read the lower triangle (of A^T when upper)
            fill = loop(n, lambda i: loop(n, lambda j: W.set(i, j, select(compare("ge", i, j), A(i, j), A(j, i))), name="j"))

            def pair(p, q):
                def rotate(apq):
                    c_s = _rotation((W(q, q) - W(p, p)) / (f64(2) * apq))
                    return let("c", c_s[0], lambda c: let("s", c_s[1], lambda s: seq(
                        loop(n, lambda k: let("x", W(k, p), lambda x: let("y", W(k, q), lambda y: seq(
                            W.set(k, p, c * x - s * y), W.set(k, q, s * x + c * y)))), name="k"),
                        loop(n, lambda k: let("x", W(p, k), lambda x: let("y", W(q, k), lambda y: seq(
                            W.set(p, k, c * x - s * y), W.set(q, k, s * x + c * y)))), name="k"))))
                return when(compare("gt", q, p), let("apq", W(p, q), lambda apq: when(
                    compare("gt", unary("abs", apq), f64(1e-300)), rotate(apq))))
            sweeps = loop(SWEEPS, lambda _: loop(n, lambda p: loop(n, lambda q: pair(p, q), name="q"), name="p"), name="sweep")
            out = Mat(outs[0], b * n, 1)
            return Allocate(W.buf, Allocate(d, seq(fill, sweeps, loop(n, lambda i: Store(d, i, W(i, i))),
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
    z = as_expr(0)

    def lower(outs, ins):
        G = scratch("g", r, k)                            # A, or A^T when wide: k columns to orthogonalise
        d = Buffer("d", F64, k, "local")
        acc = Buffer("acc", F64, 3, "local")

        def item(b):
            A = Mat(ins[0], b * (m * n), n, m < n)

            def pair(p, q):
                one, two = as_expr(1), as_expr(2)
                sums = seq(Store(acc, z, f64(0)), Store(acc, one, f64(0)), Store(acc, two, f64(0)), loop(r, lambda i: seq(
                    Store(acc, z, acc[z] + G(i, p) * G(i, p)), Store(acc, one, acc[one] + G(i, q) * G(i, q)),
                    Store(acc, two, acc[two] + G(i, p) * G(i, q)))))

                def rotate(al, be, ga):
                    c_s = _rotation((be - al) / (f64(2) * ga))
                    return let("c", c_s[0], lambda c: let("s", c_s[1], lambda s: loop(
                        r, lambda i: let("x", G(i, p), lambda x: let("y", G(i, q), lambda y: seq(
                            G.set(i, p, c * x - s * y), G.set(i, q, s * x + c * y)))))))
                big = lambda al, be, ga: both(compare("gt", unary("abs", ga), f64(1e-15) * unary("sqrt", al * be)),
                                              compare("gt", unary("abs", ga), f64(1e-300)))
                return when(compare("gt", q, p), sums, let("al", acc[z], lambda al: let("be", acc[one], lambda be: let(
                    "ga", acc[two], lambda ga: when(big(al, be, ga), rotate(al, be, ga))))))
            sweeps = loop(SWEEPS, lambda _: loop(k, lambda p: loop(k, lambda q: pair(p, q), name="q"), name="p"), name="sweep")
            norms = loop(k, lambda j: seq(Store(acc, z, f64(0)), loop(r, lambda i: Store(acc, z, acc[z] + G(i, j) * G(i, j))),
                                          Store(d, j, unary("sqrt", acc[z]))), name="j")
            out = Mat(outs[0], b * k, 1)
            return Allocate(G.buf, Allocate(d, Allocate(acc, seq(
                copy(G, A, r, k), sweeps, norms, bubble_sort(d, k, True), loop(k, lambda i: out.set(i, 0, d[i]))))))
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


register_aten("aten._linalg_eigh.default", _eigh)
register_aten("aten._linalg_svd.default", _svd)
