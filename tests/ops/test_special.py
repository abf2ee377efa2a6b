"""Special functions (fxc/ops/special.py) compiled against torch eager on wide float32 grids with edge values
(zeros of both signs, infinities, NaN, poles, large magnitudes): every op of a family in one compiled graph."""
import numpy as np
import torch

from fxc.driver.build import build
from fxc.relay_like.builder import Builder

EDGES = [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 2.0, -2.0, 0.5, -0.5, 1e-30, -1e-30, 10.0, -10.0, 30.0, -30.0,
         50.0, 88.0, 100.0, -100.0]
UNARY = {"erfc": torch.erfc, "lgamma": torch.lgamma, "erfinv": torch.erfinv, "erfcx": torch.special.erfcx,
         "log_ndtr": torch.special.log_ndtr, "ndtri": torch.special.ndtri,
         "spherical_bessel_j0": torch.special.spherical_bessel_j0, "bessel_j0": torch.special.bessel_j0,
         "bessel_j1": torch.special.bessel_j1, "bessel_y0": torch.special.bessel_y0,
         "bessel_y1": torch.special.bessel_y1,
         "modified_bessel_i0": torch.special.modified_bessel_i0, "modified_bessel_i1": torch.special.modified_bessel_i1,
         "bessel_i0e": torch.special.i0e, "bessel_i1e": torch.special.i1e,
         "modified_bessel_k0": torch.special.modified_bessel_k0, "modified_bessel_k1": torch.special.modified_bessel_k1,
         "scaled_modified_bessel_k0": torch.special.scaled_modified_bessel_k0,
         "scaled_modified_bessel_k1": torch.special.scaled_modified_bessel_k1, "airy_ai": torch.special.airy_ai,
         "digamma": torch.digamma, "trigamma": lambda x: torch.polygamma(1, x), "signbit": torch.signbit,
         "angle": torch.angle}
BINARY = {"copysign": torch.copysign, "hypot": torch.hypot, "nextafter": torch.nextafter, "fmax": torch.fmax,
          "fmin": torch.fmin, "zeta": torch.special.zeta, "igamma": torch.igamma, "igammac": torch.igammac}
POLYS = ["chebyshev_polynomial_t", "chebyshev_polynomial_u", "chebyshev_polynomial_v", "chebyshev_polynomial_w",
         "shifted_chebyshev_polynomial_t", "shifted_chebyshev_polynomial_u", "shifted_chebyshev_polynomial_v",
         "shifted_chebyshev_polynomial_w", "hermite_polynomial_h", "hermite_polynomial_he", "laguerre_polynomial_l",
         "legendre_polynomial_p"]


def _compile(names, arrays):
    b = Builder()
    ins = [b.graph.input(a.shape, str(a.dtype)) for a in arrays]
    b.graph.outputs = [b.graph.call(n, ins)[0] for n in names]
    out = build(b.graph, target="llvm")(*arrays)
    return out if isinstance(out, list) else [out]


def _check(names, got, expected):
    for n, g, e in zip(names, got, expected):
        torch.testing.assert_close(torch.from_numpy(np.asarray(g)), e, equal_nan=True, msg=lambda m: f"{n}: {m}")


def test_unary_special_functions_match_eager():
    rng = np.random.default_rng(0)
    x = np.concatenate([EDGES, rng.uniform(-9, 9, 300), rng.uniform(-100, 100, 100),
                        np.linspace(-12, 12, 241)]).astype("float32")
    names = list(UNARY)
    _check(names, _compile(names, [x]), [UNARY[n](torch.from_numpy(x)) for n in names])


def test_binary_special_functions_match_eager():
    rng = np.random.default_rng(1)
    a = np.concatenate([EDGES, rng.uniform(-9, 9, 200)]).astype("float32")
    b = np.concatenate([EDGES[::-1], rng.uniform(-9, 9, 200)]).astype("float32")
    names = list(BINARY)
    _check(names, _compile(names, [a, b]), [BINARY[n](torch.from_numpy(a), torch.from_numpy(b)) for n in names])


def test_incomplete_gamma_matches_eager_for_large_parameters():
    """Series / continued fraction up to a = 1e5, Temme's uniform expansion beyond; x within a few sqrt(a) of a."""
    rng = np.random.default_rng(3)
    a = np.concatenate([rng.uniform(0, 100, 200), rng.uniform(5e4, 2e5, 200), [3e9, 1e12]]).astype("float32")
    x = np.concatenate([rng.uniform(0, 200, 200), np.abs(a[200:400] + rng.normal(0, 3, 200) * np.sqrt(a[200:400])),
                        [3e9 + 1e5, 1e12]]).astype("float32")
    names = ["igamma", "igammac"]
    _check(names, _compile(names, [a, x]), [torch.igamma(torch.from_numpy(a), torch.from_numpy(x)),
                                           torch.igammac(torch.from_numpy(a), torch.from_numpy(x))])


def test_polynomials_match_eager_to_high_degree():
    """Recurrences to degree 60 (values up to float32 overflow) round as eager's fused multiply-adds do."""
    rng = np.random.default_rng(2)
    x = np.concatenate([rng.uniform(-9, 9, 200), rng.uniform(-1.5, 1.5, 200), [1, -1, 0, 0.5]]).astype("float32")
    n = np.concatenate([rng.uniform(-3, 60, 400), [3, 4, 7, 10]]).astype("float32")
    got = _compile(POLYS, [x, n])
    _check(POLYS, got, [getattr(torch.special, p)(torch.from_numpy(x), torch.from_numpy(n)) for p in POLYS])


def test_frexp_matches_eager():
    x = np.array([0.0, -0.0, np.inf, np.nan, 1e-40, 3.0, -0.75, 1.0, 2.0 ** 127, 1.5e-45, -5.5], "float32")
    b = Builder()
    v = b.graph.input(x.shape, "float32")
    b.graph.outputs = list(b.graph.call("frexp", [v]))
    m, e = build(b.graph, target="llvm")(x)
    em, ee = torch.frexp(torch.from_numpy(x))
    torch.testing.assert_close(torch.from_numpy(m), em, equal_nan=True)
    assert (torch.from_numpy(e) == ee).all()


def test_pow_by_a_constant_matches_eager():
    """x ** c as torch computes it: its own fast forms (2, 3, -2, 0.5, -0.5, -1, rewritten at capture into
    mul / sqrt / rsqrt / reciprocal) and libm's pow for any other exponent, edge values included."""
    import fxc
    x = torch.from_numpy(np.concatenate([EDGES, np.linspace(-40, 40, 997)]).astype(np.float32))
    exponents = (2, 3, -2, 0.5, -0.5, -1, 2.5, -1.5, 7)

    class Powers(torch.nn.Module):
        def __init__(self, exps):
            super().__init__()
            self.exps = exps

        def forward(self, t):
            return tuple(t ** e for e in self.exps)
    for e, got, want in zip(exponents, fxc.from_torch(Powers(exponents), (x,))(x), Powers(exponents)(x)):
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=2e-7, atol=0, equal_nan=True, err_msg=f"x ** {e}")
    assert not any("pow" in line for line in fxc.from_torch(Powers(exponents[:6]), (x,)).module.kernels)
