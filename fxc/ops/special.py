"""Special functions and float-bit elementwise ops: gamma family, error functions, Bessel functions,
and the float-bit ops (signbit, copysign, nextafter, frexp, fmax/fmin, hypot).

Each algorithm is written once against a small math kit (`_Kit`) and runs two ways: on scalar expressions
(the op's TE compute, evaluated in float64 and rounded once to the output dtype) and on float64 numpy arrays
(the op's reference). The algorithms are this file's own: power series, asymptotic expansions, trapezoid
quadrature of integral representations (spectrally accurate for these analytic integrands), Newton
iterations and recurrences; values at poles, zeros, infinities and NaN follow PyTorch eager.
Functions that glibc's libm provides to full double accuracy (erfc, lgamma, j0/j1/y0/y1, hypot, nextafter)
are called there, and through ctypes in the references.

The ops that iterate a data-dependent number of times live beside this file: orthogonal polynomials in
`special_poly.py`, the Hurwitz zeta and incomplete gamma functions in `special_series.py`.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import math

import numpy as np

from ..errors import UnsupportedOpError
from ..lowering import te
from ..symbolic.expr import Const, as_expr, binary, cast, compare, is_float, maximum, select, unary as un
from ..types import TensorType
from .common import bcast, broadcast_shapes, rand
from .registry import Kind, OpDef, register, register_aten

FLT = ("float32", "float64")
NUM = ("float32", "float64", "int32", "int64", "int8", "uint8")
EULER = 0.57721566490153286061
_LIBM = ctypes.CDLL(ctypes.util.find_library("m") or "libm.so.6")


# -- the math kit: one algorithm, two evaluators ----------------------------------------------------------------
class _Kit:
    """Operations on float64 values: expression nodes (`expr=True`) or numpy arrays."""

    def __init__(self, expr: bool, dtype: str = "float64"):
        self.expr, self.dtype = expr, dtype

    def rnd(self, v):
        """v rounded to the op's dtype (for steps PyTorch evaluates in float32 where that changes the result)."""
        if self.dtype != "float32":
            return v
        if isinstance(v, (int, float)):
            return float(np.float32(v))
        if self.expr:
            return cast("float64", cast("float32", v))
        return np.asarray(v, np.float64).astype(np.float32).astype(np.float64)

    def c(self, v):
        return Const(float(v), "float64") if self.expr else np.float64(v)

    def where(self, cond, a, b):
        if self.expr:
            return select(cond, a if not isinstance(a, (int, float)) else self.c(a),
                          b if not isinstance(b, (int, float)) else self.c(b))
        return np.where(cond, a, b)

    def cmp(self, op, a, b):
        if self.expr:
            return compare(op, a, b if not isinstance(b, (int, float)) else self.c(b))
        return {"lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal,
                "eq": np.equal, "ne": np.not_equal}[op](a, b)

    def and_(self, a, b):
        return binary("and", a, b) if self.expr else np.logical_and(a, b)

    def or_(self, a, b):
        return binary("or", a, b) if self.expr else np.logical_or(a, b)

    def not_(self, a):
        return un("not", a) if self.expr else np.logical_not(a)

    def fn(self, name, x):
        if self.expr:
            return un(name, x)
        with np.errstate(all="ignore"):
            return _NP_FN[name](np.asarray(x, np.float64))

    def pow(self, a, b):
        if self.expr:
            return binary("pow", a, b if not isinstance(b, (int, float)) else self.c(b))
        with np.errstate(all="ignore"):
            return np.power(a, b)

    def max(self, a, b):
        return maximum(a, b) if self.expr else np.maximum(a, b)

    def poly(self, x, coefs):
        """coefs[0] + coefs[1] x + ... by Horner."""
        acc = self.c(coefs[-1])
        for c in reversed(coefs[:-1]):
            acc = acc * x + c
        return acc


def _libm_vec(name, nargs=1):
    f = getattr(_LIBM, name)
    f.restype = ctypes.c_double
    f.argtypes = [ctypes.c_double] * nargs
    return np.vectorize(f, otypes=[np.float64])


def _safe_lgamma(v):
    try:
        return math.lgamma(v)
    except ValueError:
        return math.inf


def _libm_vec_f(name):
    f = getattr(_LIBM, name)
    f.restype = ctypes.c_float
    f.argtypes = [ctypes.c_float]
    return np.vectorize(f, otypes=[np.float32])


_LIBM_F = {"cos": _libm_vec("cos"), "sin": _libm_vec("sin"), "acos": _libm_vec("acos"),
           "cosf": _libm_vec_f("cosf"), "sinf": _libm_vec_f("sinf"), "acosf": _libm_vec_f("acosf")}
_NP_FN = {"exp": np.exp, "log": np.log, "sqrt": np.sqrt, "sin": np.sin, "cos": np.cos, "tan": np.tan,
          "abs": np.abs, "floor": np.floor, "trunc": np.trunc, "isnan": np.isnan, "isinf": np.isinf,
          "log1p": np.log1p, "expm1": np.expm1, "log2": np.log2, "exp2": np.exp2, "neg": np.negative,
          "erf": np.vectorize(math.erf, otypes=[np.float64]), "erfc": _libm_vec("erfc"),
          "lgamma": np.vectorize(_safe_lgamma, otypes=[np.float64]),
          "j0": _libm_vec("j0"), "j1": _libm_vec("j1"), "y0": _libm_vec("y0"), "y1": _libm_vec("y1")}

_E64 = _Kit(True)      # float64 expressions


def _run(alg, xs, dtype):
    """alg on float64 numpy arrays, result rounded to dtype."""
    with np.errstate(all="ignore"):
        return np.asarray(alg(_Kit(False, dtype), *[np.asarray(x, np.float64) for x in xs])).astype(dtype)


# -- algorithms (M: the kit; x: float64) --------------------------------------------------------------------------
def _erfinv(M, y):
    """Winitzki's closed-form start, then Newton steps on erf(x) = y (quadratic convergence)."""
    a = 0.147
    ay = M.fn("abs", y)
    ln = M.fn("log1p", -(ay * ay))
    t = 2.0 / (math.pi * a) + ln * 0.5
    x = M.fn("sqrt", M.fn("sqrt", t * t - ln * (1.0 / a)) - t)
    for _ in range(4):
        x = x - (M.fn("erf", x) - ay) / (M.fn("exp", -(x * x)) * (2.0 / math.sqrt(math.pi)))
    x = M.where(M.cmp("eq", ay, 1.0), math.inf, x)
    x = M.where(M.cmp("gt", ay, 1.0), math.nan, x)
    x = M.where(M.cmp("eq", ay, 0.0), 0.0, x)
    return M.where(M.cmp("lt", y, 0.0), -x, M.where(M.fn("isnan", y), y, x))


def _erfcx(M, x):
    """exp(x^2) erfc(x); x < 0: 2 exp(x^2) - erfcx(-x) (x^2 rounded to the dtype first, as PyTorch)."""
    ax = M.fn("abs", x)
    pos = _erfcx_pos(M, ax)
    neg = 2.0 * M.fn("exp", M.rnd(x * x)) - pos
    neg = M.where(M.cmp("lt", x, -26.7), math.inf, neg)
    return M.where(M.cmp("lt", x, 0.0), neg, M.where(M.fn("isnan", x), x, pos))


def _erfcx_pos(M, x):
    """erfcx for x >= 0; for x > 25 the asymptotic series 1/(x sqrt(pi)) * sum (-1)^k (2k-1)!! / (2x^2)^k."""
    big = M.cmp("gt", x, 25.0)
    xs = M.where(big, 25.0, x)
    direct = M.fn("exp", xs * xs) * M.fn("erfc", xs)
    xl = M.where(big, x, 30.0)
    z = 1.0 / (2.0 * xl * xl)
    coefs, c = [1.0], 1.0
    for k in range(1, 9):
        c *= -(2 * k - 1)
        coefs.append(c)
    asym = M.poly(z, coefs) / (xl * math.sqrt(math.pi))
    return M.where(big, asym, direct)


def _log_ndtr(M, x):
    t = x * (1.0 / math.sqrt(2.0))
    lo = M.fn("log", _erfcx(M, -t) * 0.5) - t * t
    hi = M.fn("log1p", -(M.fn("erfc", t) * 0.5))
    return M.where(M.cmp("lt", x, -1.0), lo, hi)


def _ndtri(M, y):
    """Inverse of the normal CDF: rational start (Abramowitz-Stegun 26.2.23), then Newton steps on
    log(ndtr(x)) = log(p) for the lower tail p = min(y, 1 - y)."""
    upper = M.cmp("gt", y, 0.5)
    p = M.where(upper, 1.0 - y, y)
    p = M.where(M.cmp("gt", p, 0.0), p, 0.25)
    u = M.fn("sqrt", -2.0 * M.fn("log", p))
    x = -(u - M.poly(u, [2.515517, 0.802853, 0.010328]) / M.poly(u, [1.0, 1.432788, 0.189269, 0.001308]))
    lp = M.fn("log", p)
    for _ in range(5):
        cdf = M.fn("erfc", -x * (1.0 / math.sqrt(2.0))) * 0.5
        pdf = M.fn("exp", -0.5 * x * x) * (1.0 / math.sqrt(2.0 * math.pi))
        x = x - (M.fn("log", cdf) - lp) * cdf / pdf
    x = M.where(upper, -x, x)
    x = M.where(M.cmp("eq", y, 0.0), -math.inf, M.where(M.cmp("eq", y, 1.0), math.inf, x))
    bad = M.or_(M.cmp("lt", y, 0.0), M.cmp("gt", y, 1.0))
    return M.where(M.or_(bad, M.fn("isnan", y)), math.nan, x)


def _spherical_j0(M, x):
    xs = M.where(M.cmp("eq", x, 0.0), 1.0, x)
    r = M.where(M.cmp("eq", x, 0.0), 1.0, M.fn("sin", xs) / xs)
    return M.where(M.fn("isinf", x), 0.0, r)


def _bessel_jy(name):
    def alg(M, x):
        r = M.fn(name, x)
        if name in ("y0", "y1"):
            r = M.where(M.cmp("lt", x, 0.0), math.nan, r)
        return M.where(M.fn("isinf", x), math.nan, r)
    return alg


# modified Bessel functions of order nu in (0, 1): power series for small |x|, asymptotic for large
def _i_series(M, ax, nu, terms=64):
    """I_nu(|x|) = (x/2)^nu * sum_k (x^2/4)^k / (k! (k+nu)!)."""
    t = ax * ax * 0.25
    coefs = [1.0 / (math.factorial(k) * math.factorial(k + nu)) for k in range(terms)]
    s = M.poly(t, coefs)
    return s if nu == 0 else s * ax * 0.5


def _i_asym(M, ax, nu, terms=24):
    """exp(-x) I_nu(x) ~ 1/sqrt(2 pi x) * sum_k (-1)^k a_k(nu) / x^k, a_k = prod (4nu^2-(2j-1)^2) / (k! 8^k)."""
    coefs, a = [1.0], 1.0
    for k in range(1, terms):
        a *= (4 * nu * nu - (2 * k - 1) ** 2) / (k * 8.0)
        coefs.append(a * (-1) ** k)
    return M.poly(1.0 / ax, coefs) / M.fn("sqrt", 2.0 * math.pi * ax)


_I_SPLIT = 30.0


def _bessel_i(nu, scaled):
    def alg(M, x):
        ax = M.fn("abs", x)
        small = M.cmp("le", ax, _I_SPLIT)
        xs = M.where(small, ax, 1.0)
        xl = M.where(small, 2.0 * _I_SPLIT, ax)
        ser = _i_series(M, xs, nu)
        asy = _i_asym(M, xl, nu)
        if scaled:
            r = M.where(small, ser * M.fn("exp", -xs), asy)
        else:
            r = M.where(small, ser, asy * M.rnd(M.fn("exp", xl)))   # PyTorch: exp(|x|) overflows float32 -> inf
        if nu == 1:
            r = M.where(M.cmp("lt", x, 0.0), -r, r)
        if scaled:
            return M.where(M.fn("isinf", x), 0.0, r)
        return M.where(M.fn("isinf", x), math.nan, r)
    return alg


def _k_small(M, x, nu, terms=30):
    """K_0, K_1 for 0 < x <= 2 from their series with harmonic numbers (Abramowitz-Stegun 9.6.13, 9.6.11)."""
    t = x * x * 0.25
    lg = M.fn("log", x * 0.5)
    if nu == 0:
        h, coefs = 0.0, []
        for k in range(terms):
            h += 1.0 / k if k else 0.0
            coefs.append(h / math.factorial(k) ** 2)
        return -(lg + EULER) * _i_series(M, x, 0) + M.poly(t, coefs)
    psi = lambda m: -EULER + sum(1.0 / j for j in range(1, m))   # digamma at a positive integer
    coefs = [(psi(k + 1) + psi(k + 2)) / (math.factorial(k) * math.factorial(k + 1)) for k in range(terms)]
    return 1.0 / x + lg * _i_series(M, x, 1) - x * 0.25 * M.poly(t, coefs)


def _k_scaled_quad(M, x, nu, h=0.0625, n=72):
    """exp(x) K_nu(x) = int_0^inf exp(-x (cosh t - 1)) cosh(nu t) dt by the trapezoid rule (x >= 2)."""
    s = M.c(0.0)
    for j in range(n):
        tj = j * h
        w = 0.5 if j == 0 else 1.0
        s = s + M.fn("exp", -x * (math.cosh(tj) - 1.0)) * (w * math.cosh(nu * tj))
    return s * h


def _k_asym_scaled(M, x, nu, terms=24):
    """exp(x) K_nu(x) ~ sqrt(pi/(2x)) * sum_k a_k(nu) / x^k (x > 30)."""
    coefs, a = [1.0], 1.0
    for k in range(1, terms):
        a *= (4 * nu * nu - (2 * k - 1) ** 2) / (k * 8.0)
        coefs.append(a)
    return M.poly(1.0 / x, coefs) * M.fn("sqrt", math.pi / (2.0 * x))


def _bessel_k(nu, scaled):
    def alg(M, x):
        small, large = M.cmp("le", x, 2.0), M.cmp("gt", x, 30.0)
        xs = M.where(small, M.where(M.cmp("gt", x, 0.0), x, 1.0), 1.0)
        xl = M.where(small, 4.0, M.where(large, 4.0, x))
        xa = M.where(large, x, 60.0)
        ks = _k_small(M, xs, nu)
        kq = M.where(large, _k_asym_scaled(M, xa, nu), _k_scaled_quad(M, xl, nu))
        xl = M.where(large, xa, xl)
        r = M.where(small, ks * M.fn("exp", xs) if scaled else ks, kq if scaled else kq * M.fn("exp", -xl))
        r = M.where(M.cmp("eq", x, 0.0), math.inf, r)
        r = M.where(M.cmp("lt", x, 0.0), math.nan, r)
        return M.where(M.fn("isinf", x), M.where(M.cmp("gt", x, 0.0), 0.0, math.nan), r)
    return alg


def _airy_ai(M, x):
    """Maclaurin series for -10 <= x <= 2; x > 2: Ai = sqrt(x/3)/pi K_{1/3}(2/3 x^1.5) by quadrature;
    x < -10: the oscillatory asymptotic expansion."""
    c1, c2 = 0.355028053887817239, 0.258819403792806798
    mid = M.and_(M.cmp("ge", x, -10.0), M.cmp("le", x, 2.0))
    xm = M.where(mid, x, 0.0)
    x3 = xm * xm * xm
    f_coefs, g_coefs, f, g = [], [], 1.0, 1.0
    for k in range(40):
        f_coefs.append(f)
        g_coefs.append(g)
        f /= (3 * k + 2) * (3 * k + 3)
        g /= (3 * k + 3) * (3 * k + 4)
    series = c1 * M.poly(x3, f_coefs) - c2 * xm * M.poly(x3, g_coefs)
    xp = M.where(M.cmp("gt", x, 2.0), x, 4.0)
    zeta = (2.0 / 3.0) * xp * M.fn("sqrt", xp)
    k13 = _k_scaled_quad(M, zeta, 1.0 / 3.0, h=0.0625, n=72) * M.fn("exp", -zeta)
    right = M.fn("sqrt", xp / 3.0) / math.pi * k13
    xn = M.where(M.cmp("lt", x, -10.0), -x, 20.0)
    zn = (2.0 / 3.0) * xn * M.fn("sqrt", xn)
    u, uk = [1.0], 1.0
    for k in range(1, 16):
        uk *= (6 * k - 5) * (6 * k - 3) * (6 * k - 1) / ((2 * k - 1) * 216.0 * k)
        u.append(uk)
    iz = 1.0 / zn
    iz2 = iz * iz
    p = M.poly(iz2, [u[2 * k] * (-1) ** k for k in range(8)])
    q = iz * M.poly(iz2, [u[2 * k + 1] * (-1) ** k for k in range(7)])
    ph = M.rnd(M.rnd(M.rnd(M.rnd(-2.0 * -xn) * M.rnd(M.fn("sqrt", xn))) / 3.0) + M.rnd(math.pi / 4)) \
        if M.dtype == "float32" else zn + math.pi / 4     # PyTorch's float32 phase, rounding included
    left = (M.fn("sin", ph) * p - M.fn("cos", ph) * q) / (M.fn("sqrt", M.fn("sqrt", xn)) * math.sqrt(math.pi))
    r = M.where(mid, series, M.where(M.cmp("gt", x, 2.0), right, left))
    r = M.where(M.cmp("gt", x, 103.892), 0.0, r)
    return M.where(M.or_(M.fn("isinf", x), M.fn("isnan", x)), math.nan, r)


# digamma / trigamma / Hurwitz zeta pieces
_PSI_ASYM = [1.0 / 12, -1.0 / 120, 1.0 / 252, -1.0 / 240, 1.0 / 132, -691.0 / 32760, 1.0 / 12]


def _digamma_pos(M, x):
    """psi(x) for x > 0: ten upward shifts, then psi(z) = log z - 1/(2z) - sum B_2k / (2k z^2k)."""
    s = M.c(0.0)
    for k in range(10):
        s = s + 1.0 / (x + float(k))
    z = x + 10.0
    iz2 = 1.0 / (z * z)
    return M.fn("log", z) - 0.5 / z - iz2 * M.poly(iz2, _PSI_ASYM) - s


def _digamma(M, x):
    xr = M.where(M.cmp("lt", x, 0.0), 1.0 - x, x)
    xr = M.where(M.cmp("eq", xr, 0.0), 1.0, xr)
    pos = _digamma_pos(M, xr)
    r = x - M.fn("trunc", x)                      # fractional part: tan(pi r) is exact-er than tan(pi x)
    refl = pos - math.pi / M.fn("tan", math.pi * r)
    out = M.where(M.cmp("lt", x, 0.0), refl, pos)
    out = M.where(M.and_(M.cmp("lt", x, 0.0), M.cmp("eq", x, M.fn("trunc", x))), math.nan, out)
    zero = M.cmp("eq", x, 0.0)
    if M.expr:
        signed_inf = select(un("signbit", x), M.c(math.inf), M.c(-math.inf))
    else:
        signed_inf = np.where(np.signbit(x), math.inf, -math.inf)
    out = M.where(zero, signed_inf, out)
    return M.where(M.cmp("eq", x, math.inf), math.inf, out)


def _trigamma(M, x):
    """psi'(x): reflection below 1/2, six upward shifts, then the asymptotic series (as PyTorch)."""
    refl = M.cmp("lt", x, 0.5)
    pi = M.rnd(math.pi)
    s = M.fn("sin", M.rnd(pi * x))            # PyTorch's float32 sin(pi x): finite at the poles
    pre = M.where(refl, -(M.rnd(pi * pi)) / (s * s), 0.0)
    z = M.where(refl, 1.0 - x, x)
    acc = pre
    for _ in range(6):
        acc = acc + 1.0 / (z * z)
        z = z + 1.0
    izz = 1.0 / (z * z)
    acc = acc + (1.0 + 1.0 / (2.0 * z) + izz * (1.0 / 6 - izz * (1.0 / 30 - izz * (1.0 / 42)))) / z
    return M.where(refl, -acc, acc)


# -- op registration helpers ------------------------------------------------------------------------------------
def _infer(out_dtype=None):
    def infer(types, **attrs):
        shape = broadcast_shapes(*[t.shape for t in types])
        return [TensorType(shape, out_dtype or types[0].dtype)]
    return infer


def _float_map(alg, name):
    """TE compute: alg in float64 at every (broadcast) output index, rounded to the input dtype."""
    def compute(*xs, **attrs):
        shape = broadcast_shapes(*[x.shape for x in xs])
        kit = _Kit(True, xs[0].dtype)
        return te.compute(shape, lambda *i: cast(xs[0].dtype, alg(kit, *[cast("float64", bcast(x, i)) for x in xs],
                                                                  **attrs)), name)
    return compute


def _float_ref(alg):
    return lambda *xs, **attrs: _run(lambda M, *a: alg(M, *a, **attrs), xs, xs[0].dtype)


def _wide(rng, shape=(4, 13)):
    return rng.uniform(-9.0, 9.0, size=shape).astype("float32")


def special_unary(name, alg, aten, samples=None, dtypes=FLT):
    conv = {a: None for a in aten} if not isinstance(aten, dict) else aten
    return register(OpDef(name, Kind.ELEMWISE, _infer(), _float_ref(alg), _float_map(alg, name), conv, "float",
                          samples or (lambda rng: [([_wide(rng)], {}), ([_wide(rng, ()).astype("float64")], {})]),
                          dtypes))


special_unary("erfc", lambda M, x: M.fn("erfc", x), ["aten.erfc.default"])
special_unary("lgamma", lambda M, x: M.fn("lgamma", x), ["aten.lgamma.default"])
special_unary("erfinv", _erfinv, ["aten.erfinv.default"],
              samples=lambda rng: [([rng.uniform(-1, 1, (4, 13)).astype("float32")], {}),
                                   ([np.array([1.0, -1.0, 0.0, 0.999999, -0.5, 1.5], "float32")], {})])
special_unary("erfcx", _erfcx, ["aten.special_erfcx.default"],
              samples=lambda rng: [([_wide(rng)], {}),
                                   ([np.array([-30.0, 30.0, 100.0, 1e4, np.inf, -np.inf], "float32")], {})])
special_unary("log_ndtr", _log_ndtr, ["aten.special_log_ndtr.default"])
special_unary("ndtri", _ndtri, ["aten.special_ndtri.default"],
              samples=lambda rng: [([rng.uniform(0, 1, (4, 13)).astype("float32")], {}),
                                   ([np.array([0.0, 1.0, 1e-30, 1 - 1e-7, 0.5, -1.0], "float32")], {})])
special_unary("spherical_bessel_j0", _spherical_j0, ["aten.special_spherical_bessel_j0.default"])
for _n in ("j0", "j1", "y0", "y1"):
    special_unary(f"bessel_{_n}", _bessel_jy(_n), [f"aten.special_bessel_{_n}.default"])
special_unary("modified_bessel_i0", _bessel_i(0, False), ["aten.special_modified_bessel_i0.default", "aten.i0.default"],
              samples=lambda rng: [([_wide(rng)], {}), ([np.array([0.0, 29.9, 30.1, -50.0, 88.0], "float64")], {})])
special_unary("modified_bessel_i1", _bessel_i(1, False),
              ["aten.special_modified_bessel_i1.default", "aten.special_i1.default"],
              samples=lambda rng: [([_wide(rng)], {}), ([np.array([0.0, 29.9, 30.1, -50.0, 88.0], "float64")], {})])
special_unary("bessel_i0e", _bessel_i(0, True), ["aten.special_i0e.default"])
special_unary("bessel_i1e", _bessel_i(1, True), ["aten.special_i1e.default"])
special_unary("modified_bessel_k0", _bessel_k(0, False), ["aten.special_modified_bessel_k0.default"])
special_unary("modified_bessel_k1", _bessel_k(1, False), ["aten.special_modified_bessel_k1.default"])
special_unary("scaled_modified_bessel_k0", _bessel_k(0, True), ["aten.special_scaled_modified_bessel_k0.default"])
special_unary("scaled_modified_bessel_k1", _bessel_k(1, True), ["aten.special_scaled_modified_bessel_k1.default"])
special_unary("airy_ai", _airy_ai, ["aten.special_airy_ai.default"])
special_unary("digamma", _digamma, ["aten.digamma.default"])
special_unary("trigamma", _trigamma, {})


# -- float-bit and simple binary ops -----------------------------------------------------------------------------
def _same_dtype_map(fn, name):
    def compute(*xs, **attrs):
        shape = broadcast_shapes(*[x.shape for x in xs])
        return te.compute(shape, lambda *i: fn(*[bcast(x, i) for x in xs]), name)
    return compute


def _pair_samples(rng):
    a, b = _wide(rng, (4, 1, 9)), _wide(rng, (5, 1))
    return [([a, b], {}), ([np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0], "float32"),
                            np.array([-0.0, 1.0, np.nan, 2.0, -3.0, np.inf], "float32")], {})]


def _binary(name, ref, fn, aten, dtypes=FLT, promote="float", out_dtype=None, samples=_pair_samples):
    conv = {a: None for a in aten} if not isinstance(aten, dict) else aten
    return register(OpDef(name, Kind.BROADCAST, _infer(out_dtype), ref, _same_dtype_map(fn, name), conv, promote,
                          samples, dtypes))


def _fmaxmin(op):
    def fn(a, b):
        if not is_float(a.dtype):
            return binary(op, a, b)
        m = binary(op, a, b)
        return select(un("isnan", a), b, select(un("isnan", b), a, m))
    return fn


_binary("copysign", np.copysign, lambda a, b: binary("copysign", a, b), ["aten.copysign.Tensor"])
_binary("hypot", np.hypot, lambda a, b: binary("hypot", a, b), ["aten.hypot.default"])
_binary("nextafter", np.nextafter, lambda a, b: binary("nextafter", a, b), ["aten.nextafter.default"], promote="common")
_binary("fmax", np.fmax, _fmaxmin("max"), ["aten.fmax.default"], dtypes=NUM, promote="common")
_binary("fmin", np.fmin, _fmaxmin("min"), ["aten.fmin.default"], dtypes=NUM, promote="common")

register(OpDef("signbit", Kind.ELEMWISE, _infer("bool"), np.signbit,
               _same_dtype_map(lambda x: un("signbit", x) if is_float(x.dtype)
                               else compare("lt", x, as_expr(0, x.dtype)), "signbit"),
               {"aten.signbit.default": None}, None,
               lambda rng: [([np.array([0.0, -0.0, -np.inf, np.nan, -np.nan, 2.5, -1e-40], "float32")], {}),
                            ([rand(rng, (3, 5), "int32")], {})], NUM))


def _angle(x):
    pi = Const(math.pi, x.dtype)
    return select(un("isnan", x), x, select(compare("lt", x, Const(0.0, x.dtype)), pi, Const(0.0, x.dtype)))


register(OpDef("angle", Kind.ELEMWISE, _infer(),
               lambda x: np.where(np.isnan(x), x, np.where(x < 0, np.pi, 0)).astype(x.dtype),
               _same_dtype_map(_angle, "angle"), {"aten.angle.default": None}, "float",
               lambda rng: [([np.array([0.0, -0.0, -np.inf, np.nan, 2.5, -1.5], "float32")], {})], NUM))


# frexp: x = mantissa * 2^exponent with 0.5 <= |mantissa| < 1 (0, inf and NaN: themselves and exponent 0)
def _frexp_parts(x):
    """float64 x (finite, non-zero where it matters) -> (mantissa, exponent as float64)."""
    ax = un("abs", x)
    safe = select(compare("eq", ax, Const(0.0, "float64")), Const(1.0, "float64"), ax)
    e = un("floor", un("log2", safe)) + 1.0
    m = x * un("exp2", -e)
    big = compare("ge", un("abs", m), Const(1.0, "float64"))
    e, m = select(big, e + 1.0, e), select(big, m * 0.5, m)
    small = compare("lt", un("abs", m), Const(0.5, "float64"))
    e, m = select(small, e - 1.0, e), select(small, m * 2.0, m)
    special = binary("or", compare("eq", ax, Const(0.0, "float64")),
                     binary("or", un("isnan", x), un("isinf", x)))
    return select(special, x, m), select(special, Const(0.0, "float64"), e)


def _frexp_compute(x):
    def part(k):
        def body(*i):
            m, e = _frexp_parts(cast("float64", x[i]))
            return cast(x.dtype, m) if k == 0 else cast("int32", e)
        return te.compute(x.shape, body, f"frexp{k}")
    return part(0), part(1)


def _frexp_ref(x):
    m, e = np.frexp(x)
    return m.astype(x.dtype), e.astype("int32")


register(OpDef("frexp", Kind.ELEMWISE, lambda t, **_: [t[0], TensorType(t[0].shape, "int32")], _frexp_ref,
               _frexp_compute, {"aten.frexp.Tensor": lambda b, x: b.call("frexp", [x])}, None,
               lambda rng: [([_wide(rng)], {}),
                            ([np.array([0.0, -0.0, np.inf, np.nan, 1e-40, 3.0, -0.75, 1.0], "float32")], {})],
               ("float32",)))


def _ldexp(b, x, other):
    """x * 2^other, as PyTorch computes it (mul by pow(2, other))."""
    return b.call("mul", [x, b.call("pow", [2.0, other])])


register_aten("aten.ldexp.Tensor", _ldexp)


def _polygamma(b, n, x):
    if not isinstance(n, int) or n < 0:
        raise UnsupportedOpError(f"polygamma of order {n!r}")
    if n == 0:
        return b.call("digamma", [x])
    if n == 1:
        return b.call("trigamma", [x])
    z = broadcast_pair_aten("zeta")(b, float(n + 1), x)      # (-1)^(n+1) n! zeta(n+1, x)
    return b.call("mul", [z, (1.0 if n % 2 else -1.0) * math.factorial(n)])


register_aten("aten.polygamma.default", _polygamma)


def broadcast_pair_aten(name):
    """ATen converter for a two-input op whose kernel wants both inputs at the broadcast shape."""
    def conv(b, x, n):
        x, n = b.promote(x, n, to_float=True)
        shape = broadcast_shapes(x.type.shape, n.type.shape)
        x, n = (v if tuple(v.type.shape) == shape else b.call("expand", [v], size=tuple(shape)) for v in (x, n))
        return b.call(name, [x, n])
    return conv
