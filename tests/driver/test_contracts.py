"""Where fxc's float32 result differs from eager's beyond assert_close, each op's contract checked directly
(issue 27 item 5; docs/correctness.md, "Contracts").

A plain comparison with eager flags four ops: `linalg.ldl_factor` / `linalg.ldl_factor_ex` (fxc pivots in float64
and may choose another Bunch-Kaufman pivot than float32 LAPACK, so its factors differ by whole entries),
`matrix_exp` (fxc computes in float64 and rounds once) and `nn.functional.conv_transpose3d` (another summation
order). For each, the test shows what the op promises, through `torch.compile(backend="fxc")` with fxc having
compiled the op (nothing fell back, no subgraph failed):

- LDL: valid LAPACK pivots, and the factors rebuild A by LAPACK's convention (sytrf, UPLO=L) within a
  backward-error bound; LAPACK's own `ldl_solve` (eager) solves A X = B from fxc's factors;
- matrix_exp: exp(A) exp(-A) = I where both are finite, no farther from the float64 answer than eager; where exp(A)
  overflows, the call runs in eager (the fallback rule, `test_matrix_exp_overflow_runs_in_eager`);
- conv_transpose3d: every element's error against float64 no larger than eager's own (see `_conv_tolerance`).

Inputs follow OpInfo's samples (uniform in make_tensor's default range [-9, 9], the same shapes), seeded.
"""
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import fxc
from fxc.capture.torch.recorder import recording

U = 2.0 ** -24          # float32's unit roundoff


def through_fxc(fn, *xs, target="llvm"):
    """fn(*xs) compiled by fxc; fails unless fxc compiled every op of it (no fallback, no failed subgraph)."""
    with recording() as rec:
        out = torch.compile(fn, backend="fxc", dynamic=False, options={"target": target})(*xs)
    assert rec.compiled_ops and not rec.fallback_ops and not rec.failures, str(rec)
    return out


def _gen(seed):
    return torch.Generator().manual_seed(seed)


def _symmetric(shape, seed, integer=False):
    g = _gen(seed)
    a = torch.randint(-3, 4, shape, generator=g).float() if integer else torch.rand(shape, generator=g) * 18 - 9
    return a + a.mT


# -- LDL^T (Bunch-Kaufman) ------------------------------------------------------------------------------------------
def lapack_rebuild(ld, piv):
    """A from sytrf's lower factorization, by LAPACK's documented convention: A = L D L^T with
    L = P(1) L(1) P(2) L(2) ..., P(k) interchanging rows k (k+1 for a 2x2 block) and |piv[k]|, L(k) unit lower with
    the block's column(s) of LD below it, D the 1x1/2x2 diagonal blocks. Returns (A, |M| |D| |M|^T) in float64,
    the second the magnitude that bounds the rounding of the product."""
    ld, piv = ld.double().numpy(), piv.numpy()
    n = ld.shape[-1]
    out, mag = np.empty(ld.shape), np.empty(ld.shape)
    for idx in np.ndindex(*ld.shape[:-2]):
        x, p = ld[idx], piv[idx]
        m, d, k = np.eye(n), np.zeros((n, n)), 0
        while k < n:
            s = 1 if p[k] > 0 else 2
            kp = abs(int(p[k])) - 1
            perm = np.eye(n)
            perm[[k + s - 1, kp]] = perm[[kp, k + s - 1]]
            lk = np.eye(n)
            lk[k + s:, k:k + s] = x[k + s:, k:k + s]
            m = m @ perm @ lk
            d[k:k + s, k:k + s] = x[k:k + s, k:k + s]
            d[k, k + s - 1] = d[k + s - 1, k]
            k += s
        out[idx] = m @ d @ m.T
        mag[idx] = np.abs(m) @ np.abs(d) @ np.abs(m).T
    return out, mag


def assert_valid_pivots(piv):
    """LAPACK's pivot encoding: 1-based; a 1x1 block at k swaps with a row kp >= k; a 2x2 block at k, k+1 has
    piv[k] == piv[k+1] = -(kp + 1) with kp >= k + 1."""
    n = piv.shape[-1]
    for p in piv.reshape(-1, n).tolist():
        k = 0
        while k < n:
            if p[k] > 0:
                assert k + 1 <= p[k] <= n, p
                k += 1
            else:
                assert k + 1 < n and p[k + 1] == p[k] and k + 2 <= -p[k] <= n, p
                k += 2


def assert_ldl_contract(a, ld, piv):
    """fxc's factors of a: pivots LAPACK can read, a strictly upper part of zeros (as eager's), A rebuilt within
    Bunch-Kaufman's backward-error bound |A - L D L^T| <= c n u (|A| + |L||D||L^T|) (Higham, Accuracy and Stability,
    11.1.1; c = 4 covers the float32 rounding of factors computed in float64), and LAPACK's ldl_solve (eager, sytrs)
    solving A X = B from them (A regular) with a backward error no worse than from eager's own factors (x 4, floor
    n u)."""
    n = a.shape[-1]
    assert_valid_pivots(piv)
    assert torch.equal(ld.triu(1), torch.zeros_like(ld))
    rebuilt, mag = lapack_rebuild(ld, piv)
    a64 = a.double().numpy()
    err, bound = np.abs(rebuilt - a64), 4 * n * U * (np.abs(a64) + mag)
    assert (err <= bound).all(), f"A rebuilt from fxc's factors is off by {(err / bound)[err > bound].max():.2f}x"
    b = torch.rand(a.shape[:-1] + (2,), generator=_gen(3)) * 2 - 1

    def backward_error(x):
        r = (a.double() @ x.double() - b.double()).abs().amax((-1, -2))
        return r / (a.double().abs().amax((-1, -2)) * x.double().abs().amax((-1, -2)) + b.double().abs().amax((-1, -2)))
    ld_e, piv_e, info_e = torch.linalg.ldl_factor_ex(a)
    eta_fxc = backward_error(torch.linalg.ldl_solve(ld, piv, b))
    eta_eager = backward_error(torch.linalg.ldl_solve(ld_e, piv_e, b))
    regular = info_e == 0           # (a singular A has no solution to check)
    assert (eta_fxc <= 4 * torch.clamp(eta_eager, min=n * U))[regular].all(), (eta_fxc, eta_eager)


@pytest.mark.parametrize("shape", [(5, 5), (2, 5, 5), (3, 8, 8)])
def test_ldl_factor_rebuilds_a(shape, target):
    a = _symmetric(shape, seed=sum(shape))
    ld, piv = through_fxc(torch.linalg.ldl_factor, a, target=target)
    assert_ldl_contract(a, ld, piv)


def test_ldl_factor_ex_rebuilds_a_where_its_pivots_differ_from_lapacks(target):
    """Small integer matrices tie in Bunch-Kaufman's tests: in this batch fxc (float64 arithmetic) chooses other
    pivots than float32 LAPACK for some matrices, so their factors differ from eager's by whole entries; they still
    rebuild A. Singular ones (info > 0: an exactly zero pivot, where LAPACK goes on) rebuild A too."""
    v = torch.tensor([1.0, -2, 0, 3, 1])
    a = torch.cat([_symmetric((600, 5, 5), seed=1, integer=True), torch.zeros(1, 5, 5), torch.outer(v, v)[None]])
    ld, piv, info = through_fxc(torch.linalg.ldl_factor_ex, a, target=target)
    _, piv_e, info_e = torch.linalg.ldl_factor_ex(a)
    other = (piv != piv_e).any(-1)
    assert other.any(), "no matrix with other pivots than LAPACK's: the test lost its point"
    assert torch.equal(info[~other], info_e[~other]) and (info > 0).any()
    assert_ldl_contract(a, ld, piv)


# -- matrix_exp -----------------------------------------------------------------------------------------------------
def _exp_pair(a, target):
    """fxc's exp(A) and exp(-A), in one compiled call."""
    e = through_fxc(torch.linalg.matrix_exp, torch.stack([a, -a]), target=target)
    return e[0], e[1]


@pytest.mark.parametrize("shape,scale", [((5, 5), 1.0), ((5, 5, 5), 1.0), ((4, 4), 4.0)], ids=["5x5", "5x5x5", "big"])
def test_matrix_exp_times_its_inverse_is_identity(shape, scale, target):
    """exp(A) exp(-A) = I, componentwise within c n u |exp(A)| |exp(-A)| (each factor's float32 rounding, c = 4), and
    fxc no farther from the float64 exp(A) than eager (the float64 judge of docs/correctness.md)."""
    a = (torch.rand(shape, generator=_gen(len(shape))) * 18 - 9) * scale
    e1, e2 = _exp_pair(a, target)
    assert torch.isfinite(e1).all() and torch.isfinite(e2).all()
    assert not torch.equal(e1, torch.linalg.matrix_exp(a)), "eager's digits: not fxc's kernel (float64 inside)"
    n = shape[-1]
    prod = e1.double() @ e2.double()
    bound = 4 * n * U * (e1.double().abs() @ e2.double().abs())
    assert ((prod - torch.eye(n, dtype=torch.float64)).abs() <= bound).all()
    ref = torch.linalg.matrix_exp(a.double())
    err_fxc = (e1.double() - ref).abs().amax((-1, -2))
    err_eager = (torch.linalg.matrix_exp(a).double() - ref).abs().amax((-1, -2))
    assert (err_fxc <= 2 * torch.clamp(err_eager, min=U * ref.abs().amax((-1, -2)))).all(), (err_fxc, err_eager)


def test_matrix_exp_overflow_runs_in_eager(target):
    """Where exp(A) overflows float32, fxc cannot show eager's inf/NaN pattern: eager's float32 squarings make NaN
    (inf - inf) where the true value is an overflow, and fxc's float64 ones give its sign, +-inf. The fallback rule
    (OpDef.eager_unless_finite): a call of a subgraph with matrix_exp whose results are not all finite runs again in
    eager, so torch.compile gives eager's pattern exactly. fxc's own kernel (fxc.from_torch, which has no eager)
    shows why: the same non-finite entries, +-inf with the float64 answer's sign where eager has NaN."""
    g = _gen(7)
    a = torch.cat([torch.rand(6, 3, 3, generator=g) * 400 - 200, torch.rand(6, 3, 3, generator=g) * 200,
                   torch.rand(4, 3, 3, generator=g) * 2e5 - 1e5])
    got, eager = through_fxc(torch.linalg.matrix_exp, a, target=target), torch.linalg.matrix_exp(a)
    assert torch.equal(torch.isnan(got), torch.isnan(eager)) and torch.equal(got.nan_to_num(), eager.nan_to_num())

    own = fxc.from_torch(torch.linalg.matrix_exp, (a,), target=target)(a)
    ref = torch.linalg.matrix_exp(a.double())
    assert torch.equal(torch.isfinite(own), torch.isfinite(eager))
    assert torch.equal(own[torch.isinf(eager)], eager[torch.isinf(eager)])          # same signs of infinity
    differ = torch.isnan(eager) & ~torch.isnan(own)
    assert differ.any(), "fxc's kernel gives eager's NaNs here: the rule lost its point"
    assert torch.isinf(own[differ]).all() and (own[differ] == ref[differ].sign() * math.inf).all()
    assert not (torch.isnan(own) & ~torch.isnan(eager)).any()                          # no NaN eager lacks


# -- conv_transpose3d -----------------------------------------------------------------------------------------------
CONV_T3D = [   # OpInfo's samples of nn.functional.conv_transpose3d (shapes and arguments)
    ((1, 3, 4, 4, 4), (3, 3, 3, 3, 3), True, dict(stride=(2, 2, 2), padding=2, output_padding=(1, 1, 1), groups=1)),
    ((2, 2, 4, 4, 4), (2, 2, 4, 5, 6), True, dict(stride=(3, 2, 1), padding=(1, 2, 3), output_padding=(2, 3, 1),
                                                  groups=2, dilation=(4, 4, 4))),
    ((1, 1, 4, 5, 2), (1, 1, 4, 3, 1), True, dict(stride=2, padding=1, output_padding=1, groups=1, dilation=(2, 3, 2))),
    ((1, 1, 4, 3, 4), (1, 2, 3, 4, 5), False, dict()),
    ((1, 4, 5, 5, 5), (4, 8, 3, 3, 3), False, dict()),
]


def _conv_tolerance(err_eager, w, groups, magnitude):
    """What fxc's error at each element may be: 2 x eager's own, floored at sqrt(k) u S. An output element is a
    sum of at most k = (C_in / groups) x kernel volume products; S is the sum of their magnitudes (the same conv
    over |x|, |w|, |b|). fxc and eager add them in other orders, and each order's float32 rounding error is a
    random walk of about sqrt(k) u S: at an element where eager's order happened to be nearly exact, fxc's
    ordinary rounding is no error. A wrong or missing product is off by about S / k, far above that floor."""
    k = w.shape[0] // groups * math.prod(w.shape[2:])
    return 2 * torch.maximum(err_eager, math.sqrt(k) * U * magnitude)


@pytest.mark.parametrize("case", range(len(CONV_T3D)))
def test_conv_transpose3d_error_no_larger_than_eagers(case, target):
    xs, ws, bias, kw = CONV_T3D[case]
    g = _gen(case)
    x, w = torch.rand(xs, generator=g) * 18 - 9, torch.rand(ws, generator=g) * 18 - 9
    b = torch.rand(ws[1] * kw.get("groups", 1), generator=g) * 18 - 9 if bias else None
    fn = lambda x, w, b: F.conv_transpose3d(x, w, b, **kw)       # noqa: E731
    got = through_fxc(fn, x, w, b, target=target)
    ref = fn(x.double(), w.double(), None if b is None else b.double())
    magnitude = fn(x.double().abs(), w.double().abs(), None if b is None else b.double().abs())
    err_fxc, err_eager = (got.double() - ref).abs(), (fn(x, w, b).double() - ref).abs()
    tol = _conv_tolerance(err_eager, w, kw.get("groups", 1), magnitude)
    assert (err_fxc <= tol).all(), f"{int((err_fxc > tol).sum())} elements beyond: max {(err_fxc / tol).max():.2f}x"
