"""The loop IR of the symmetric eigenvalue and singular value ops (fxc/ops/linalg_eigen.py): cyclic Jacobi
rotations (sym_jacobi on a symmetric matrix, col_jacobi: one-sided on columns, SWEEPS sweeps), column norms, a
bubble sort of the results, and the kernels of eigvalsh, svdvals and pinv over float64 scratch."""
from __future__ import annotations

from ...symbolic.expr import as_expr, compare, maximum, select, unary
from ..loop_ir import Allocate, Buffer, Store, seq
from .linalg_factor import F64, Mat, batched, both, copy, f64, let, loop, scratch, when

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


def eigvalsh_loops(batch, n, upper):
    """lower(outs, ins) of the eigvalsh kernel, `batch` matrices."""
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
    return lower


def svdvals_loops(batch, k, m, n, r):
    """lower(outs, ins) of the svdvals kernel, `batch` matrices."""
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
    return lower


def pinv_loops(batch, hermitian, k, m, n, r):
    """lower(outs, ins) of the pinv kernel, `batch` matrices."""
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
    return lower
