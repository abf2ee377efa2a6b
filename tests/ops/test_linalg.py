"""Linear algebra through torch.compile(backend="fxc") vs eager: factorizations, solvers, determinants,
spectra (fxc/ops/linalg_factor.py, linalg_qr.py, linalg_eigen.py, linalg_exp.py). The kernels themselves are
checked against their numpy references in test_ops.py (generated from the registry)."""
import pytest
import torch

from fxc.capture.torch import explain as fxc_torch
from fxc.testing import opinfo

COMPILED = ["linalg.inv", "linalg.solve", "linalg.det", "linalg.slogdet", "linalg.lu_factor_ex", "linalg.lu",
            "lu_unpack", "linalg.lu_solve", "linalg.solve_triangular", "triangular_solve", "linalg.cholesky",
            "cholesky_solve", "cholesky_inverse", "geqrf", "linalg.qr", "linalg.householder_product", "ormqr",
            "linalg.eigvalsh", "linalg.svdvals", "linalg.matrix_rank", "linalg.pinv", "linalg.pinv.hermitian"]


@pytest.fixture(scope="module")
def ops():
    return {opinfo.op_key(o): o for o in opinfo.select_ops(set(COMPILED))}


@pytest.mark.parametrize("key", COMPILED)
def test_opinfo_linalg_compiles(key, ops):
    r = opinfo.run_op(ops[key], "llvm", max_samples=3)
    assert r["status"] == "compiled", f"{key}: {r['status']}: {r['error'] or r['fallback']}"


def _compare(fn, *xs):
    expected = fn(*xs)
    explained = fxc_torch.explain(fn, *xs)
    actual = torch.compile(fn, backend="fxc", dynamic=False)(*xs)
    torch.testing.assert_close(actual, expected, equal_nan=True)
    return explained


SINGULAR = torch.tensor([[0., 1, 2], [0, 3, 4], [0, 5, 7]])


@pytest.mark.parametrize("fn", [torch.linalg.lu_factor_ex, torch.linalg.inv_ex, torch.linalg.det, torch.linalg.lu],
                         ids=["lu_factor_ex", "inv_ex", "det", "lu"])
def test_singular_like_lapack(fn):
    """An exactly singular matrix: LAPACK's pivots, info and inf/nan pattern."""
    e = _compare(fn, SINGULAR)
    assert not e.fallback_ops, e.fallback_ops


def test_failed_cholesky_like_lapack():
    """Not positive definite: info is the failing column, the factor holds what LAPACK potf2 leaves."""
    a = torch.tensor([[4., 2, 1], [2, -3, 1], [1, 1, 5]])
    _compare(lambda x: torch.linalg.cholesky_ex(x, upper=True), a)
    _compare(torch.linalg.cholesky_ex, a)


def test_error_check_stays_eager_and_raises():
    """torch.linalg.inv raises on a singular matrix: the check on fxc's `info` runs in eager and is no fallback."""
    e = fxc_torch.explain(torch.linalg.inv, torch.eye(3) + 1)
    assert not e.fallback_ops and e.compiled_ops, str(e)
    with pytest.raises(torch.linalg.LinAlgError):
        torch.compile(torch.linalg.inv, backend="fxc", dynamic=False)(SINGULAR)


def test_vectors_fall_back_values_compile():
    """Singular/eigen vectors (LAPACK's signs) fall back; the values alone compile."""
    a = torch.randn(4, 4)
    assert "aten._linalg_svd.default" in fxc_torch.explain(lambda x: torch.linalg.svd(x)[0], a).fallback_ops
    assert "aten._linalg_eigh.default" in fxc_torch.explain(lambda x: torch.linalg.eigh(x)[1], a).fallback_ops
    assert not _compare(lambda x: torch.linalg.svd(x)[1], a).fallback_ops
    assert not _compare(lambda x: torch.linalg.eigh(x + x.mT)[0], a).fallback_ops


def test_ldl_float64_like_lapack():
    """Bunch-Kaufman pivots (2x2 blocks: negative) and info as LAPACK sytrf; float32 compiles too (computed in
    float64: as close to the float64 answer as eager's float32, pivots equal)."""
    torch.manual_seed(3)
    for a in [torch.tensor([[0., 1, 2], [1, 0, 3], [2, 3, 0]]), torch.zeros(3, 3), torch.randn(3, 6, 6)]:
        a = (a + a.mT).double()
        assert not _compare(lambda x: torch.linalg.ldl_factor_ex(x), a).fallback_ops
        ld, piv, info = torch.linalg.ldl_factor_ex(a)
        if not info.any():
            _compare(lambda x, p, y: torch.linalg.ldl_solve(x, p, y), ld, piv, a[..., :2])
    a = torch.randn(6, 6)
    a = a + a.mT
    f = lambda x: torch.linalg.ldl_factor_ex(x)
    assert not fxc_torch.explain(f, a).fallback_ops
    (ld, piv, info), (ld_e, piv_e, info_e) = torch.compile(f, backend="fxc")(a), f(a)
    ld_64 = f(a.double())[0]
    assert torch.equal(piv, piv_e) and torch.equal(info, info_e)
    assert (ld.double() - ld_64).abs().max() <= max(2 * (ld_e.double() - ld_64).abs().max(), 1e-6)


def test_batched_parallel():
    """Batches large enough to run in parallel."""
    x = torch.randn(6, 24, 24, dtype=torch.float64)
    spd = x @ x.mT + 24 * torch.eye(24, dtype=torch.float64)
    _compare(lambda a: torch.linalg.solve(a, a[..., :3]), spd)
    _compare(torch.linalg.cholesky, spd)
    _compare(torch.linalg.eigvalsh, spd)
    _compare(torch.linalg.qr, x)


def test_loop_rereads_what_its_previous_iteration_stored():
    """LLVM renderer regression: a scratch value loaded before a loop must not be reused inside the loop when the
    loop body stores to it (the sequential linalg kernels update scratch this way)."""
    import numpy as np

    from fxc.driver.build import build
    from fxc.lowering import te
    from fxc.lowering.loop_ir import Allocate, Buffer, For, Store, seq
    from fxc.ops import registry
    from fxc.relay_like.builder import Builder
    from fxc.relay_like.graph import TensorType
    from fxc.symbolic.expr import Const, Var, as_expr

    def compute(x):
        def lower(outs, ins):
            acc, z, k = Buffer("acc", "float32", 1, "private"), as_expr(0), Var("k")
            return Allocate(acc, seq(Store(acc, z, Const(0.0, "float32")), Store(outs[0], z, acc[z]),
                                     For(k, 5, Store(acc, z, acc[z] + ins[0][k])), Store(outs[0], as_expr(1), acc[z])))
        return te.extern([((2,), "float32")], [x], lower, "probe")[0]
    registry.all_ops()
    registry.register(registry.OpDef("_loop_probe", registry.Kind.OPAQUE, lambda t: [TensorType((2,), "float32")],
                                     None, compute, {}, None, None, ("float32",)))
    try:
        b = Builder()
        x = b.graph.input((5,), "float32")
        b.graph.outputs = [b.graph.call("_loop_probe", [x])[0]]
        np.testing.assert_array_equal(build(b.graph, target="llvm")(np.ones(5, np.float32)), [0, 5])
    finally:
        del registry._REGISTRY["_loop_probe"]
