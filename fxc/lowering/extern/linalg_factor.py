"""The loop IR of the dense factorizations and solvers (fxc/ops/linalg_factor.py): a small vocabulary of loop-IR
helpers shared by every linalg kernel (`loop`, `rloop`, `when`, `let`, `batched`, `Mat`: a matrix view of a flat
buffer that reads float64 and rounds on write, `scratch`, `copy`), the textbook algorithms over float64 scratch
(getrf: LU with partial pivoting in LAPACK getf2's order, trsm, swap_rows, potrf: Cholesky in potf2's order), and
each op's kernel: for every matrix of the batch (in parallel when the work pays) copy the operands into scratch,
run the algorithm, round the results to the output dtype."""
from __future__ import annotations

from ...symbolic.expr import Const, Var, as_expr, binary, cast, compare, select, unary
from ..loop_ir import Allocate, Buffer, For, IfThen, LetStmt, Store, seq

F64 = "float64"


def f64(v) -> Const:
    return Const(float(v), F64)


def loop(n: int, fn, start: int = 0, name: str = "i"):
    """for v in start..n: fn(v)"""
    v = Var(name)
    return For(v, n, fn(v), "serial", start)


def rloop(n: int, fn, name: str = "r"):
    """for v in n-1 down to 0: fn(v)"""
    v = Var(name)
    return For(v, n, fn(as_expr(n - 1) - v))


def when(c, *stmts, orelse=None):
    return IfThen(c, seq(*stmts), orelse)


def let(name: str, value, fn):
    v = Var(name, value.dtype)
    return LetStmt(v, value, fn(v))


def both(a, b):
    return binary("and", a, b)


def batched(batch: int, cost: int, fn):
    """for every matrix of the batch (in parallel when worth it): fn(b)"""
    b = Var("b")
    kind = "parallel" if batch > 1 and batch * cost >= 1 << 15 else "serial"
    return For(b, batch, fn(b), kind)


class Mat:
    """Matrix view of a flat buffer: row-major with `cols` columns at offset `off`; `trans` reads and writes
    it transposed. Reads give float64; writes round to the buffer's dtype."""

    def __init__(self, buf: Buffer, off, cols: int, trans: bool = False):
        self.buf, self.off, self.cols, self.trans = buf, off, cols, trans

    def idx(self, i, j):
        i, j = (j, i) if self.trans else (i, j)
        return as_expr(self.off) + as_expr(i) * self.cols + j

    def __call__(self, i, j):
        v = self.buf[self.idx(i, j)]
        return v if v.dtype == F64 else cast(F64, v)

    def set(self, i, j, v):
        return Store(self.buf, self.idx(i, j), v if v.dtype == self.buf.dtype else cast(self.buf.dtype, v))

    @property
    def T(self):
        return Mat(self.buf, self.off, self.cols, not self.trans)


def scratch(name: str, rows: int, cols: int) -> Mat:
    return Mat(Buffer(name, F64, rows * cols, "private"), 0, cols)


def copy(dst: Mat, src: Mat, rows: int, cols: int):
    return loop(rows, lambda i: loop(cols, lambda j: dst.set(i, j, src(i, j)), name="j"))


def getrf(W: Mat, m: int, n: int, set_piv, info: Buffer):
    """LU with partial pivoting of the m x n scratch W in place, in LAPACK getf2's order: the pivot of
    column j is the first row i >= j with the largest |W[i, j]|. set_piv(j, p) stores the pivot row p
    (0-based); info[0] (preset to 0) gets the 1-based column of the first exactly-zero pivot."""
    best, at = Buffer("best", F64, 1, "private"), Buffer("at", "int64", 1, "private")
    z = as_expr(0)

    def column(j):
        find = seq(Store(best, z, unary("abs", W(j, j))), Store(at, z, j),
                   loop(m, lambda i: when(both(compare("gt", i, j), compare("gt", unary("abs", W(i, j)), best[z])),
                                          Store(best, z, unary("abs", W(i, j))), Store(at, z, i))))

        def pivot(p):
            swap = loop(n, lambda c: let("t", W(j, c), lambda t: seq(W.set(j, c, W(p, c)), W.set(p, c, t))), name="c")
            scale = loop(m, lambda i: when(compare("gt", i, j), W.set(i, j, W(i, j) / W(j, j))))
            zero = when(compare("eq", info[z], as_expr(0)), Store(info, z, j + 1))
            update = loop(m, lambda i: when(compare("gt", i, j), let("l", W(i, j), lambda l: loop(
                n, lambda c: when(compare("gt", c, j), W.set(i, c, W(i, c) - l * W(j, c))), name="c"))))
            return seq(set_piv(j, p), when(compare("ne", W(p, j), f64(0)), swap, scale, orelse=zero), update)
        return seq(find, let("p", at[z], pivot))
    return Allocate(best, Allocate(at, loop(min(m, n), column, name="j")))


def trsm(T: Mat, Y: Mat, n: int, k: int, upper: bool, unit: bool):
    """Solve T X = Y in place for n x n triangular T (only its triangle is read) and n x k Y."""
    def step(j, below):
        div = None if unit else loop(k, lambda c: Y.set(j, c, Y(j, c) / T(j, j)), name="c")
        elim = loop(n, lambda i: when(compare("gt" if below else "lt", i, j), let("l", T(i, j), lambda l: loop(
            k, lambda c: Y.set(i, c, Y(i, c) - l * Y(j, c)), name="c"))))
        return seq(div, elim)
    return rloop(n, lambda j: step(j, False)) if upper else loop(n, lambda j: step(j, True), name="j")


def swap_rows(Y: Mat, k: int, n_piv: int, piv_at, reverse: bool):
    """Apply row interchanges j <-> piv_at(j) (0-based int64) of Y (k columns), in order or reversed."""
    def one(j):
        return let("p", piv_at(j), lambda p: loop(
            k, lambda c: let("t", Y(j, c), lambda t: seq(Y.set(j, c, Y(p, c)), Y.set(p, c, t))), name="c"))
    return rloop(n_piv, one) if reverse else loop(n_piv, one, name="j")


def potrf(A: Mat, W: Mat, n: int, info: Buffer):
    """Cholesky A = L L^T reading A's lower triangle, L into W's lower triangle (left-looking, LAPACK
    potf2's order); stops at the first pivot that is not positive, leaving it at W[j, j] and setting
    info[0] to its 1-based index (what LAPACK leaves in the matrix then)."""
    z = as_expr(0)
    acc = Buffer("acc", F64, 1, "private")

    def dot(i, j):      # A[i, j] - sum_{c < j} W[i, c] W[j, c], left in acc[0]
        return seq(Store(acc, z, A(i, j)),
                   loop(n, lambda c: when(compare("lt", c, j), Store(acc, z, acc[z] - W(i, c) * W(j, c))), name="c"))

    def column(j):
        def ok(d):
            return seq(W.set(j, j, d), loop(n, lambda i: when(compare("gt", i, j), dot(i, j), W.set(i, j, acc[z] / d))))
        good = compare("gt", acc[z], f64(0))    # false for NaN too
        return when(compare("eq", info[z], as_expr(0)), dot(j, j), when(
            good, let("d", unary("sqrt", acc[z]), ok), orelse=seq(W.set(j, j, acc[z]), Store(info, z, j + 1))))
    # W starts as A's lower triangle: after a failed pivot the columns not reached keep A's values, as in LAPACK
    init = loop(n, lambda i: loop(n, lambda j: W.set(i, j, select(compare("ge", i, j), A(i, j), f64(0))), name="j"))
    return Allocate(acc, seq(init, loop(n, column, name="j")))


def lu_factor_loops(batch, k, m, n):
    """lower(outs, ins) of the lu_factor kernel, `batch` matrices."""
    def lower(outs, ins):
        lu, piv, info = outs
        W = scratch("w", m, n)
        inf = Buffer("info", "int64", 1, "private")
        z = as_expr(0)

        def item(b):
            return Allocate(W.buf, Allocate(inf, seq(
                copy(W, Mat(ins[0], b * (m * n), n), m, n), Store(inf, z, as_expr(0)),
                getrf(W, m, n, lambda j, p: Store(piv, b * k + j, cast("int32", p + 1)), inf),
                copy(Mat(lu, b * (m * n), n), W, m, n), Store(info, b, cast("int32", inf[z])))))
        return batched(batch, m * n * k + 1, item)
    return lower


def lu_solve_loops(adjoint, batch, k, n):
    """lower(outs, ins) of the lu_solve kernel, `batch` matrices."""
    def lower(outs, ins):
        Y = scratch("y", n, k)

        def item(b):
            LU, X = Mat(ins[0], b * (n * n), n), Mat(outs[0], b * (n * k), k)
            at = lambda j: cast("int64", ins[1][b * n + j]) - 1
            if adjoint:        # A^T = U^T L^T P^T
                steps = seq(trsm(LU.T, Y, n, k, False, False), trsm(LU.T, Y, n, k, True, True),
                            swap_rows(Y, k, n, at, True))
            else:              # A = P L U
                steps = seq(swap_rows(Y, k, n, at, False), trsm(LU, Y, n, k, False, True),
                            trsm(LU, Y, n, k, True, False))
            return Allocate(Y.buf, seq(copy(Y, Mat(ins[2], b * (n * k), k), n, k), steps, copy(X, Y, n, k)))
        return batched(batch, n * n * k + 1, item)
    return lower


def trsm_loops(batch, k, n, trans, unit, upper):
    """lower(outs, ins) of the trsm kernel, `batch` matrices."""
    def lower(outs, ins):
        Y = scratch("y", n, k)

        def item(b):
            T = Mat(ins[0], b * (n * n), n, trans)
            return Allocate(Y.buf, seq(copy(Y, Mat(ins[1], b * (n * k), k), n, k),
                                       trsm(T, Y, n, k, upper != trans, unit),
                                       copy(Mat(outs[0], b * (n * k), k), Y, n, k)))
        return batched(batch, n * n * k + 1, item)
    return lower


def cholesky_loops(batch, n, upper):
    """lower(outs, ins) of the cholesky kernel, `batch` matrices."""
    def lower(outs, ins):
        W = scratch("w", n, n)
        inf = Buffer("info", "int64", 1, "private")
        z = as_expr(0)

        def item(b):
            A, L = Mat(ins[0], b * (n * n), n, upper), Mat(outs[0], b * (n * n), n, upper)
            return Allocate(W.buf, Allocate(inf, seq(Store(inf, z, as_expr(0)), potrf(A, W, n, inf),
                                                     copy(L, W, n, n), Store(outs[1], b, cast("int32", inf[z])))))
        return batched(batch, n * n * n + 1, item)
    return lower


def cholesky_solve_loops(batch, k, n, upper):
    """lower(outs, ins) of the cholesky_solve kernel, `batch` matrices."""
    def lower(outs, ins):
        Y = scratch("y", n, k)

        def item(b):
            L = Mat(ins[1], b * (n * n), n, upper)      # the lower factor (U^T when upper)
            return Allocate(Y.buf, seq(copy(Y, Mat(ins[0], b * (n * k), k), n, k),
                                       trsm(L, Y, n, k, False, False), trsm(L.T, Y, n, k, True, False),
                                       copy(Mat(outs[0], b * (n * k), k), Y, n, k)))
        return batched(batch, n * n * k + 1, item)
    return lower


def lu_unpack_loops(batch, k, m, n):
    """lower(outs, ins) of the lu_unpack kernel, `batch` matrices."""
    def lower(outs, ins):
        perm = Buffer("perm", "int64", m, "private")

        def item(b):
            LU = Mat(ins[0], b * (m * n), n)
            P, L, U = Mat(outs[0], b * (m * m), m), Mat(outs[1], b * (m * k), k), Mat(outs[2], b * (k * n), n)
            init = loop(m, lambda i: Store(perm, i, i))
            swaps = loop(k, lambda j: let("p", cast("int64", ins[1][b * k + j]) - 1, lambda p: let(
                "t", perm[j], lambda t: seq(Store(perm, j, perm[p]), Store(perm, p, t)))), name="j")
            pm = loop(m, lambda i: loop(m, lambda j: P.set(i, j, select(compare("eq", perm[j], i), f64(1), f64(0))),
                                        name="j"))
            lo = loop(m, lambda i: loop(k, lambda j: L.set(i, j, select(compare("gt", i, j), LU(i, j), select(
                compare("eq", i, j), f64(1), f64(0)))), name="j"))
            up = loop(k, lambda i: loop(n, lambda j: U.set(i, j, select(compare("ge", j, i), LU(i, j), f64(0))),
                                        name="j"))
            return Allocate(perm, seq(init, swaps, pm, lo, up))
        return batched(batch, m * m + m * n, item)
    return lower
