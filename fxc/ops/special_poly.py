"""Orthogonal polynomials of a per-element degree: Chebyshev T/U/V/W (and shifted), Hermite H/He, Laguerre L,
Legendre P.

Each is a `te.extern` kernel whose recurrence loop runs to that element's degree (a data-dependent trip count)
in the input dtype, with PyTorch's early returns (negative degree, |x| = 1, closed forms cos(n acos x) for
large degree inside (-1, 1)); the reference runs the same recurrence on numpy arrays.
The kernels' loop IR is fxc/lowering/extern/elementwise.py.
"""
from __future__ import annotations

import math

import numpy as np

from ..lowering import te
from ..lowering.extern.elementwise import recurrence_loops
from ..symbolic.expr import Const, as_expr, binary, cast, compare, select, unary as un
from .registry import Kind, OpDef, register
from .special import _LIBM_F, FLT, broadcast_pair_aten


# -- orthogonal polynomials of a per-element degree: recurrences in the input dtype, as PyTorch -----------------------
class _PolyKit:
    """Arithmetic in the op's dtype on expressions or numpy arrays; degrees are int64."""

    def __init__(self, expr: bool, dtype: str):
        self.expr, self.dtype = expr, dtype

    def f(self, v):
        return Const(float(v), self.dtype) if self.expr else np.asarray(v, self.dtype)[()]

    def fi(self, n):
        return cast(self.dtype, n) if self.expr else np.asarray(n).astype(self.dtype)

    def i(self, v):
        return as_expr(int(v), "int64") if self.expr else np.int64(v)

    def where(self, c, a, b):
        return select(c, a, b) if self.expr else np.where(c, a, b).astype(np.result_type(a, b))

    def cmp(self, op, a, b):
        if self.expr:
            return compare(op, a, b)
        return {"lt": np.less, "le": np.less_equal, "gt": np.greater, "eq": np.equal, "ne": np.not_equal}[op](a, b)

    def and_(self, a, b):
        return binary("and", a, b) if self.expr else np.logical_and(a, b)

    def or_(self, a, b):
        return binary("or", a, b) if self.expr else np.logical_or(a, b)

    def even(self, n):
        return compare("eq", binary("and", n, as_expr(1, "int64")), as_expr(0, "int64")) if self.expr else (n & 1) == 0

    def fma(self, a, b, c):
        """a * b + c rounded once to the dtype."""
        if self.expr:
            f = lambda v: cast("float64", v)
            return cast(self.dtype, f(a) * f(b) + f(c))
        f = lambda v: np.asarray(v, np.float64)
        return (f(a) * f(b) + f(c)).astype(self.dtype)

    def fn(self, name, x):
        if self.expr:
            return un(name, x)
        with np.errstate(all="ignore"):
            if name == "abs":
                return np.abs(x)
            return _LIBM_F[name + ("f" if self.dtype == "float32" else "")](x).astype(self.dtype)


def _cases(M, default, *pairs):
    """The first (condition, value) pair that holds, else default (PyTorch's early returns, in order)."""
    out = default
    for cond, val in reversed(pairs):
        out = M.where(cond, val, out)
    return out


def _cheb_family(kind, shifted):
    """Chebyshev T/U/V/W (shifted: of 2x - 1). Returns spec(M, x, n) -> (early?, early value, q1, step, start, end)."""
    def spec(M, x, n):
        one, zero = M.f(1), M.f(0)
        y = x + x - one if shifted else x
        two_y = y + y
        a = M.fn("acos", y)
        nn1, n2 = M.fi(n + 1), M.fi(n + n + 1)
        even = M.even(n)
        small = M.cmp("lt", M.fn("abs", y), one)
        lim = {"t": 6, "u": 6 if shifted else 8, "v": 6 if shifted else 8, "w": 4 if shifted else 8}[kind]
        closed = M.and_(M.cmp("gt", n, M.i(lim)), small)
        if shifted:
            at_one, at_m1 = M.cmp("eq", x, one), M.cmp("eq", x, zero)
        else:
            at_one = M.cmp("eq", x, one)
            at_m1 = M.cmp("eq", x, M.f(-1))
        pm = lambda v: M.where(even, v, -v)
        if kind == "t":
            edge1, edge2, q1 = one, pm(one), y
            cf = M.fn("cos", M.fi(n) * a)
        elif kind == "u":
            edge1, edge2, q1 = nn1, pm(nn1), two_y
            sa = M.fn("sin", a)
            cf = M.where(M.cmp("ne", sa, zero), M.fn("sin", nn1 * a) / sa, nn1 * M.fn("cos", nn1 * a) / y)
        elif kind == "v":
            edge1, edge2, q1 = one, pm(n2), two_y - one
            h = a / M.f(2)
            cf = M.where(M.cmp("ne", M.fn("sin", h), one),
                         M.fn("cos", (M.fi(n) + M.f(0.5)) * a) / M.fn("cos", h), pm(n2))
        else:
            edge1, edge2, q1 = n2, pm(one), two_y + one
            h = a / M.f(2)
            fallback = M.where(M.cmp("gt", x if not shifted else zero, zero), n2, pm(one)) if not shifted else pm(one)
            cf = M.where(M.cmp("ne", M.fn("cos", h), one),
                         M.fn("sin", (M.fi(n) + M.f(0.5)) * a) / M.fn("sin", h), fallback)
        neg = M.cmp("lt", n, M.i(0))
        conds = [(neg, zero), (at_one, edge1), (at_m1, edge2), (closed, cf), (M.cmp("eq", n, M.i(0)), one),
                 (M.cmp("eq", n, M.i(1)), q1)]
        early = neg
        for c, _ in conds[1:]:
            early = M.or_(early, c)
        def step(M, x, q, p, k):
            y = x + x - M.f(1) if shifted else x
            return M.fma(y + y, q, -p)
        return early, _cases(M, zero, *conds), q1, step, 2, n + 1
    return spec


def _hermite(kind):
    def spec(M, x, n):
        one, zero = M.f(1), M.f(0)
        q1 = x + x if kind == "h" else x
        limit = M.i(128 if M.dtype == "float32" else 512)
        conds = [(M.cmp("lt", n, M.i(0)), zero), (M.cmp("eq", n, M.i(0)), one), (M.cmp("eq", n, M.i(1)), q1),
                 (M.cmp("gt", n, limit), M.f(math.nan))]
        early = M.or_(M.or_(conds[0][0], conds[1][0]), M.or_(conds[2][0], conds[3][0]))
        if kind == "h":     # r = 2x q - 2j p for j = 1 .. n-1
            step = lambda M, x, q, p, j: M.fma(x + x, q, -(M.fi(j + j) * p))
        else:               # r = x q - k p for k = 1 .. n-1
            step = lambda M, x, q, p, k: M.fma(x, q, -(M.fi(k) * p))
        return early, _cases(M, zero, *conds), q1, step, 1, n
    return spec


def _laguerre(M, x, n):
    one, zero = M.f(1), M.f(0)
    q1 = one - x
    conds = [(M.cmp("lt", n, M.i(0)), zero), (M.cmp("eq", M.fn("abs", x), zero), one), (M.cmp("eq", n, M.i(0)), one),
             (M.cmp("eq", n, M.i(1)), q1)]
    early = M.or_(M.or_(conds[0][0], conds[1][0]), M.or_(conds[2][0], conds[3][0]))
    step = lambda M, x, q, p, k: M.fma(M.fi(k + k) + (M.f(1) - x), q, -(M.fi(k) * p)) / M.fi(k + 1)
    return early, _cases(M, zero, *conds), q1, step, 1, n


def _legendre(M, x, n):
    one, zero = M.f(1), M.f(0)
    edge = M.where(M.or_(M.cmp("gt", x, zero), M.even(n)), one, -one)
    conds = [(M.cmp("lt", n, M.i(0)), zero), (M.cmp("eq", M.fn("abs", x), one), edge), (M.cmp("eq", n, M.i(0)), one),
             (M.cmp("eq", n, M.i(1)), x)]
    early = M.or_(M.or_(conds[0][0], conds[1][0]), M.or_(conds[2][0], conds[3][0]))
    step = lambda M, x, q, p, k: M.fma(M.fi(k + k + 1) * x, q, -(M.fi(k) * p)) / M.fi(k + 1)
    return early, _cases(M, zero, *conds), x, step, 1, n


_BIG_DEGREE = 9.2e18     # |n| from here on (and NaN) converts to a negative degree, as on PyTorch's CPU


def _degree(nf, expr: bool):
    if expr:
        bad = binary("or", un("isnan", nf), compare("ge", un("abs", nf), Const(_BIG_DEGREE, nf.dtype)))
        return select(bad, as_expr(-1, "int64"), cast("int64", un("trunc", nf)))
    with np.errstate(all="ignore"):
        bad = np.isnan(nf) | (np.abs(nf) >= _BIG_DEGREE)
        return np.where(bad, -1, np.trunc(np.where(bad, 0, nf))).astype(np.int64)


def _poly_compute(spec, name):
    """The recurrence runs in the dtype with each step's a * q - b as one fused multiply-add (as PyTorch's CPU
    kernels are compiled), so rounding, overflow to inf and the NaN after inf - inf happen as in eager; its loop
    is fxc/lowering/extern/elementwise.py's."""
    def compute(x, n):
        size = int(np.prod(x.shape, dtype=np.int64))

        def element(xv, nv):
            M = _PolyKit(True, x.dtype)
            early, early_val, q1, step, start, end = spec(M, xv, _degree(nv, True))
            return early, early_val, q1, lambda q, p, k: step(M, xv, q, p, k), start, end
        return te.extern([(x.shape, x.dtype)], [x, n], recurrence_loops(size, x.dtype, element, 4096), name)[0]
    return compute


def _poly_ref(spec):
    def ref(x, n):
        dt = x.dtype
        M = _PolyKit(False, dt.name)
        x, n = np.broadcast_arrays(x, n)
        ni = _degree(n, False)
        with np.errstate(all="ignore"):
            early, early_val, q1, step, start, end = spec(M, x, ni)
            p, q = np.ones_like(x), np.asarray(q1, dt) * np.ones_like(x)
            stop = np.where(early, start, np.maximum(end, start))
            for k in range(start, int(stop.max(initial=start))):
                go = k < stop
                r = np.asarray(step(M, x, q, p, np.int64(k)), dt)
                p, q = np.where(go, q, p), np.where(go, r, q)
        return np.where(early, early_val, q).astype(dt)
    return ref


def _poly_samples(rng):
    x = np.concatenate([rng.uniform(-2, 2, 30), [1.0, -1.0, 0.0, 0.5, 0.3, 0.9, -0.7, 1.5]]).astype("float32")
    n = np.concatenate([rng.integers(-2, 12, 30).astype("float32") + 0.3,
                        [3, 4, 5, 10, 12, 0, 1, 200]]).astype("float32")
    return [([x, n], {}), ([x.astype("float64"), n.astype("float64")], {})]


_POLYS = {f"chebyshev_polynomial_{k}": _cheb_family(k, False) for k in "tuvw"}
_POLYS.update({f"shifted_chebyshev_polynomial_{k}": _cheb_family(k, True) for k in "tuvw"})
_POLYS.update({"hermite_polynomial_h": _hermite("h"), "hermite_polynomial_he": _hermite("he"),
               "laguerre_polynomial_l": _laguerre, "legendre_polynomial_p": _legendre})
for _name, _spec in _POLYS.items():
    _conv = broadcast_pair_aten(_name)
    register(OpDef(_name, Kind.OPAQUE, lambda t, **_: [t[0]], _poly_ref(_spec), _poly_compute(_spec, _name),
                   {f"aten.special_{_name}.{ov}": _conv for ov in ("default", "x_scalar", "n_scalar")}, None,
                   _poly_samples, FLT))
