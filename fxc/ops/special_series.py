"""Special functions summed to a data-dependent number of terms: the Hurwitz zeta function (and polygamma of
order >= 2 through it) and the regularized incomplete gamma functions igamma / igammac.

Both are `te.extern` kernels (their loops: fxc/lowering/extern/elementwise.py) over inputs broadcast to one
shape, evaluated in float64 (as PyTorch evaluates zeta; igamma agrees with PyTorch's float64 result to ~1e-9);
the references run the same sums on numpy.
"""
from __future__ import annotations

import math

import numpy as np

from ..lowering import te
from ..lowering.extern.elementwise import series_loops, state_loops
from ..symbolic.expr import Const, as_expr, binary, cast, compare, maximum, select, unary as un
from .registry import Kind, OpDef, register
from .special import _E64, FLT, _Kit, broadcast_pair_aten

# -- Hurwitz zeta (and polygamma of order >= 2 from it), in float64 as PyTorch ----------------------------------------
_ZETA_A = [12.0, -720.0, 30240.0, -1209600.0, 47900160.0, -1.8924375803183791606e9, 7.47242496e10,
           -2.950130727918164224e12, 1.1646782814350067249e14, -4.5979787224074726105e15, 1.8152105401943546773e17,
           -7.1661652561756670113e18]    # (2k)! / B_2k: the Euler-Maclaurin remainder's coefficients


def _zeta_terms(q):
    """How many terms (q + i)^-x, i = 1.., are summed directly: until i >= 9 and q + i > 9."""
    return max(9, math.floor(9 - q) + 1) if q == q else 9


def _zeta_tail(M, x, a, s):
    """s + the Euler-Maclaurin remainder after the direct terms, a = q + (number of terms)."""
    b = M.pow(a, -x)
    s = s + b * a / (x - 1.0) - 0.5 * b
    fac, k, bb = M.c(1.0), 0.0, b
    for c in _ZETA_A:
        fac = fac * (x + k)
        bb = bb / a
        s = s + fac * bb / c
        k += 1.0
        fac = fac * (x + k)
        bb = bb / a
        k += 1.0
    return s


def _zeta_edges(M, x, q, s):
    s = M.where(M.and_(M.cmp("le", q, 0.0), M.cmp("ne", x, M.fn("floor", x))), math.nan, s)
    s = M.where(M.and_(M.cmp("le", q, 0.0), M.cmp("eq", q, M.fn("floor", q))), math.inf, s)
    s = M.where(M.cmp("lt", x, 1.0), math.nan, s)
    return M.where(M.cmp("eq", x, 1.0), math.inf, s)


def _zeta_ref(x, q):
    dt = x.dtype
    x, q = np.broadcast_arrays(np.asarray(x, np.float64), np.asarray(q, np.float64))
    out = np.empty(x.shape, np.float64)
    with np.errstate(all="ignore"):
        for idx in np.ndindex(x.shape):
            xi, qi = x[idx], q[idx]
            m = _zeta_terms(qi) if qi > -1e6 else 9
            s = qi ** -xi + sum((qi + i) ** -xi for i in range(1, m + 1))
            out[idx] = _zeta_edges(_Kit(False), np.float64(xi), np.float64(qi), _zeta_tail(_Kit(False), xi, qi + m, s))
    return out.astype(dt)


def _zeta_compute(x, q):
    size = int(np.prod(x.shape, dtype=np.int64))

    def element(xe, qe):
        xv, qv = cast("float64", xe), cast("float64", qe)
        f = lambda v: Const(float(v), "float64")
        nterm = maximum(as_expr(9), cast("int64", un("floor", f(9) - qv)) + as_expr(1))
        nterm = select(binary("or", un("isnan", qv), compare("le", qv, f(-1e15))), as_expr(9), nterm)
        term = lambda i: binary("pow", qv + cast("float64", i), -xv)
        finish = lambda s: _zeta_edges(_E64, xv, qv, _zeta_tail(_E64, xv, qv + cast("float64", nterm), s))
        return binary("pow", qv, -xv), nterm, term, finish
    return te.extern([(x.shape, x.dtype)], [x, q], series_loops(size, x.dtype, element, 4096), "zeta")[0]


def _zeta_samples(rng):
    x = np.concatenate([rng.uniform(-3, 9, 20), [1.0, 2.0, 3.0, 0.5, 4.0, 2.5]]).astype("float32")
    q = np.concatenate([rng.uniform(-9, 9, 20), [1.0, -2.0, -2.5, 2.0, 0.0, -1.5]]).astype("float32")
    return [([x, q], {}), ([x.astype("float64"), q.astype("float64")], {})]


register(OpDef("zeta", Kind.OPAQUE, lambda t, **_: [t[0]], _zeta_ref, _zeta_compute,
               {f"aten.special_zeta.{ov}": broadcast_pair_aten("zeta")
                for ov in ("default", "self_scalar", "other_scalar")},
               None, _zeta_samples, FLT))


# -- regularized incomplete gamma functions P(a, x) (igamma) and Q(a, x) (igammac), in float64 ------------------------
# For x < a + 1 the power series P = x^a e^-x / Gamma(a + 1) * sum_k x^k / ((a+1)...(a+k)); otherwise Legendre's
# continued fraction for Q (modified Lentz). Both converge within 30 + 12 sqrt(a) steps (the series' terms fall
# like exp(-k^2 / 2a) near x = a), which is the data-dependent trip count; a prefactor that underflows skips the loop.
# From a = 1e5 on, Temme's uniform asymptotic expansion (two leading terms; the next is below 1e-10) instead.
_IG_BIG = 1e5
_TINY = 1e-300
_IGAMMA_STATE = ("ig_t", "ig_s", "ig_b", "ig_c", "ig_d", "ig_h")     # the continued fraction's float64 state


def _igammac_temme(M, a, x):
    """Q(a, x) = erfc(eta sqrt(a/2)) / 2 + exp(-a eta^2 / 2) / sqrt(2 pi a) * C0(eta), for large a."""
    sig = (x - a) / a
    eta2 = 2.0 * (sig - M.fn("log1p", sig))
    eta = M.fn("sqrt", M.max(eta2, M.c(0.0)))
    eta = M.where(M.cmp("lt", sig, 0.0), -eta, eta)
    small = M.cmp("lt", M.fn("abs", eta), 1e-4)
    safe_eta = M.where(small, 1.0, eta)
    safe_sig = M.where(small, 1.0, sig)
    c0 = M.where(small, M.poly(eta, [-1.0 / 3, 1.0 / 12, -2.0 / 135]), 1.0 / safe_sig - 1.0 / safe_eta)
    return (M.fn("erfc", eta * M.fn("sqrt", a * 0.5)) * 0.5
            + M.fn("exp", -0.5 * a * eta * eta) / M.fn("sqrt", 2.0 * math.pi * a) * c0)


def _igamma_edges(M, a, x, r, upper: bool):
    lo, hi = (1.0, 0.0) if upper else (0.0, 1.0)    # values at x == 0 and x == inf
    r = M.where(M.fn("isinf", x), hi, r)
    r = M.where(M.fn("isinf", a), M.where(M.fn("isinf", x), math.nan, lo), r)
    r = M.where(M.cmp("eq", x, 0.0), lo, r)
    r = M.where(M.cmp("eq", a, 0.0), M.where(M.cmp("gt", x, 0.0), hi, math.nan), r)
    return M.where(M.or_(M.cmp("lt", x, 0.0), M.cmp("lt", a, 0.0)), math.nan, r)


def _igamma_prefactor(M, a, x):
    """log(x^a e^-x / Gamma(a)) and the step count."""
    safe_a = M.where(M.cmp("gt", a, 0.0), a, 1.0)
    logpre = a * M.fn("log", x) - x - M.fn("lgamma", safe_a)
    live = M.and_(M.cmp("ge", logpre, -800.0), M.cmp("lt", a, _IG_BIG))   # NaN / inf / large a: no steps
    steps = M.where(live, 30.0 + 12.0 * M.fn("sqrt", M.where(live, M.max(a, M.c(1.0)), 1.0)), 0.0)
    return logpre, steps


def _igamma_finish(M, a, x, logpre, series, frac, upper: bool):
    pre = M.fn("exp", logpre)
    p = pre * series / M.where(M.cmp("gt", a, 0.0), a, 1.0)     # series carries 1 + x/(a+1) + ...: P = pre/a * it
    q = pre * frac
    use_p = M.cmp("lt", x, a + 1.0)
    r = M.where(use_p, 1.0 - p, q) if upper else M.where(use_p, p, 1.0 - q)
    big = M.cmp("ge", a, _IG_BIG)
    tq = _igammac_temme(M, M.where(big, a, 2.0 * _IG_BIG), M.where(big, x, 2.0 * _IG_BIG))
    r = M.where(big, tq if upper else 1.0 - tq, r)
    return _igamma_edges(M, a, x, r, upper)


def _igamma_ref(upper):
    def ref(a, x):
        dt = a.dtype
        M = _Kit(False)
        a, x = (np.asarray(v, np.float64) for v in np.broadcast_arrays(a, x))
        with np.errstate(all="ignore"):
            logpre, steps = _igamma_prefactor(M, a, x)
            term, s = np.ones_like(a), np.ones_like(a)
            b = x + 1.0 - a
            c, d = np.full_like(a, 1 / _TINY), 1.0 / b
            h = d.copy()
            for k in range(1, int(np.max(steps, initial=0)) + 1):
                go = k <= steps
                t2 = term * x / (a + k)
                an, b2 = -k * (k - a), b + 2.0
                d2 = an * d + b2
                d2 = 1.0 / np.where(np.abs(d2) < _TINY, _TINY, d2)
                c2 = b2 + an / c
                c2 = np.where(np.abs(c2) < _TINY, _TINY, c2)
                term, s, b, c, d, h = (np.where(go, u, v) for u, v in
                                       ((t2, term), (s + t2, s), (b2, b), (c2, c), (d2, d), (h * d2 * c2, h)))
            return np.asarray(_igamma_finish(M, a, x, logpre, s, h, upper)).astype(dt)
    return ref


def _igamma_compute(upper):
    def compute(a, x):
        size = int(np.prod(a.shape, dtype=np.int64))

        def element(ae, xe, k, state):
            av, xv = cast("float64", ae), cast("float64", xe)
            f = lambda v: Const(float(v), "float64")
            logpre, steps = _igamma_prefactor(_E64, av, xv)
            T, S, B, C, D, H = (state[n] for n in _IGAMMA_STATE)
            kf = cast("float64", k)
            t2 = T * xv / (av + kf)
            an, b2 = -(kf * (kf - av)), B + f(2)
            d2 = an * D + b2
            d2 = f(1) / select(compare("lt", un("abs", d2), f(_TINY)), f(_TINY), d2)
            c2 = b2 + an / C
            c2 = select(compare("lt", un("abs", c2), f(_TINY)), f(_TINY), c2)
            news = {"ig_t": t2, "ig_s": S + t2, "ig_b": b2, "ig_c": c2, "ig_d": d2, "ig_h": H * d2 * c2}
            b0 = xv + f(1) - av
            init = {"ig_t": f(1), "ig_s": f(1), "ig_b": b0, "ig_c": f(1 / _TINY), "ig_d": f(1) / b0, "ig_h": f(1) / b0}
            finish = lambda st: _igamma_finish(_E64, av, xv, logpre, st["ig_s"], st["ig_h"], upper)
            return init, cast("int64", steps), news, finish
        lower = state_loops(size, a.dtype, _IGAMMA_STATE, element, 1024)
        return te.extern([(a.shape, a.dtype)], [a, x], lower, "igammac" if upper else "igamma")[0]
    return compute


def _igamma_samples(rng):
    a = np.concatenate([rng.uniform(0, 12, 24), [0.0, 0.0, 1.0, np.inf, np.inf, -1.0, 2.0, 2.0, 150.0, 1e-3]])
    x = np.concatenate([rng.uniform(0, 12, 24), [1.0, 0.0, 0.0, 1.0, np.inf, 1.0, np.inf, -1.0, 160.0, 0.9]])
    return [([a.astype("float32"), x.astype("float32")], {}), ([a, x], {})]


for _name, _upper in (("igamma", False), ("igammac", True)):
    register(OpDef(_name, Kind.OPAQUE, lambda t, **_: [t[0]], _igamma_ref(_upper), _igamma_compute(_upper),
                   {f"aten.{_name}.default": broadcast_pair_aten(_name)}, None, _igamma_samples, FLT))
