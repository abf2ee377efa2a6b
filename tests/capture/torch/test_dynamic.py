"""Dynamic shapes (issue 26): size symbols through the compiler, one build for every size in range."""
import numpy as np
import pytest
import torch

import fxc.driver.build as BUILD
from fxc.errors import InputError
from fxc.relay_like.graph import Graph, TensorType
from fxc.symbolic.expr import Bin, Const, Sym
from fxc.symbolic.sym import SymInfo, canonical, dim_text, evaluate, linear


def builds() -> int:
    return BUILD.stats["builds"]


def test_canonical_dims():
    s = Sym("s0")
    assert Sym("s0") is s
    assert canonical(s * 64) is canonical(64 * s)
    assert canonical(Bin("idiv", s * 128, Const(64, "int64"))) is canonical(s * 2)
    assert canonical(s * 4 - s * 4) == 0
    assert TensorType((s * 2 * 3,), "float32").shape[0] is canonical(s * 6)
    assert linear(canonical(s * 6)) == (s, 6) and linear(canonical(s * s)) is None
    assert evaluate(canonical(s * 6 + 2), {"s0": 5}) == 32
    assert dim_text(canonical(s * 6)) == "6*s0" and dim_text(s) == "s0"
    assert SymInfo("s0", 2, 8).check(9) and not SymInfo("s0", 2, 8).check(8)


def _mlp_graph(lo=1, hi=64):
    g = Graph()
    b = Sym("batch")
    x = g.input((b, 64), "float32", "x")
    w1, b1 = g.input((128, 64), "float32", "w1"), g.input((128,), "float32", "b1")
    w2, b2 = g.input((64, 128), "float32", "w2"), g.input((64,), "float32", "b2")
    g.weights |= {w1.id, b1.id, w2.id, b2.id}
    h = g.call1("gelu", [g.call1("add", [g.call1("matmul", [x, w1], trans_b=True), b1])], approximate="none")
    y = g.call1("add", [g.call1("matmul", [h, w2], trans_b=True), b2])
    g.outputs = [y]
    g.symbols = {"batch": SymInfo("batch", lo, hi)}
    return g


def _mlp_ref(x, w1, b1, w2, b2):
    t = torch.nn.functional
    return t.linear(t.gelu(t.linear(torch.from_numpy(x), torch.from_numpy(w1), torch.from_numpy(b1))),
                    torch.from_numpy(w2), torch.from_numpy(b2)).numpy()


def test_graph_with_symbolic_batch_runs_every_size():
    import fxc.driver.build as fxc_build  # noqa: F401
    rng = np.random.default_rng(0)
    ws = [rng.standard_normal(s).astype(np.float32) for s in ((128, 64), (128,), (64, 128), (64,))]
    before = builds()
    module = BUILD.build(_mlp_graph())
    assert builds() == before + 1
    assert module.symbols and module.inputs[0].shape == ("batch", 64)
    for n in (1, 3, 8, 9, 17, 64):
        x = rng.standard_normal((n, 64)).astype(np.float32)
        np.testing.assert_allclose(module(x, *ws), _mlp_ref(x, *ws), rtol=1e-4, atol=1e-5)
    with pytest.raises(InputError, match="outside the compiled range"):
        module(rng.standard_normal((65, 64)).astype(np.float32), *ws)
    with pytest.raises(InputError, match="expected 2 dims"):
        module(rng.standard_normal((4, 64, 1)).astype(np.float32), *ws)


def test_inconsistent_symbol_is_an_input_error():
    g = Graph()
    b = Sym("n")
    x, y = g.input((b, 16), "float32", "x"), g.input((b, 16), "float32", "y")
    g.outputs = [g.call1("mul", [x, y])]
    module = BUILD.build(g)
    a = np.ones((5, 16), np.float32)
    np.testing.assert_array_equal(module(a, 2 * a), 2 * a)
    with pytest.raises(InputError, match="n = 4 here but 5"):
        module(a, np.ones((4, 16), np.float32))


def _compiled_sweep(model, make, sizes, **compile_kw):
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="fxc", **compile_kw)
    before = builds()
    with torch.no_grad():
        for n in sizes:
            x = make(n)
            torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-4)
    return builds() - before


def test_torch_compile_dynamic_mlp_builds_once():
    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 64)).eval()
    n = _compiled_sweep(mlp, lambda b: torch.randn(b, 64), (3, 5, 17, 33, 64, 100), dynamic=True)
    assert n == 1


def test_mark_dynamic_builds_once():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 48), torch.nn.ReLU(), torch.nn.Linear(48, 8),
                                torch.nn.Softmax(-1)).eval()

    def make(b):
        x = torch.randn(b, 32)
        torch._dynamo.mark_dynamic(x, 0)
        return x
    assert _compiled_sweep(model, make, (2, 7, 16)) == 1


def test_rows_mixed_across_batch_run_as_symbolic_loops():
    class Mix(torch.nn.Module):
        def forward(self, x):
            return (x - x.mean(0)) * 2      # reads every row: not a row-block kernel

    def batch_only(b):      # the features static: the row symbol alone, which the mean over it does not keep
        x = torch.randn(b, 16)
        torch._dynamo.mark_dynamic(x, 0)
        return x

    sizes = (3, 6)
    loops = BUILD.stats["symbolic_loop_kernels"]
    assert _compiled_sweep(Mix(), batch_only, sizes) == 1      # the mean: a symbolic loop over the batch, correct
    assert BUILD.stats["symbolic_loop_kernels"] > loops
    # dynamic=True makes the 16 a symbol too: with both symbolic the mean is a symbolic loop over the batch (one build)
    assert _compiled_sweep(Mix(), lambda b: torch.randn(b, 16), sizes, dynamic=True) == 1


def test_from_torch_with_dynamic_shapes():
    from torch.export import Dim

    import fxc
    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 64)).eval()
    before = builds()
    compiled = fxc.from_torch(mlp, (torch.randn(4, 64),), dynamic_shapes=({0: Dim("batch", min=1, max=64)},))
    assert builds() == before + 1
    with torch.no_grad():
        for n in (1, 3, 8, 64):
            x = torch.randn(n, 64)
            torch.testing.assert_close(compiled(x), mlp(x), rtol=1e-4, atol=1e-5)
            np.testing.assert_allclose(compiled(x.numpy()), mlp(x).numpy(), rtol=1e-4, atol=1e-5)
    with pytest.raises(InputError, match="outside the compiled range"):
        compiled(torch.randn(65, 64))


@pytest.mark.slow
def test_resnet18_with_dynamic_batch_builds_once():
    from fxc.testing.models import make_model
    model = make_model("resnet18")
    assert _compiled_sweep(model, lambda b: torch.randn(b, 3, 32, 32), (2, 3, 9), dynamic=True) == 1


@pytest.mark.slow
def test_mobilenet_v2_from_torch_with_dynamic_batch():
    from torch.export import Dim

    import fxc
    from fxc.testing.models import make_model
    model = make_model("mobilenet_v2")
    before = builds()
    compiled = fxc.from_torch(model, (torch.randn(2, 3, 32, 32),),
                              dynamic_shapes=({0: Dim("batch", min=1, max=16)},))
    assert builds() == before + 1
    with torch.no_grad():
        for n in (1, 5, 9):
            x = torch.randn(n, 3, 32, 32)
            torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-4)


# a fixed sample of registry ops over every fusion kind (the whole registry: python -m fxc.testing.symbolic_ops)
SYMBOLIC_OPS = ["add", "gelu", "where", "matmul", "conv2d", "softmax", "layer_norm", "max_pool2d", "gather",
                "sum", "permute", "cumsum"]


@pytest.mark.parametrize("name", SYMBOLIC_OPS)
def test_registry_op_with_a_symbolic_leading_dim(name):
    from fxc.testing.symbolic_ops import cases, check_symbolic
    results = [check_symbolic(name, k) for n, k in cases() if n == name]     # AssertionError when wrong
    assert results and all(r.startswith(("symbolic", "per size:")) for r in results)
    if name in ("add", "matmul", "conv2d", "softmax", "layer_norm"):
        assert results[0] == "symbolic", results


def test_specialize_builds_static_variants_for_hot_sizes():
    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8)).eval()
    n = _compiled_sweep(mlp, lambda b: torch.randn(b, 16), (3, 8, 5, 8, 9), dynamic=True,
                        options={"specialize": [8]})
    assert n == 2       # the symbolic build (3, 5, 9) and a static one for 8


def test_fuzz_dynamic_programs_are_right_at_two_sizes():
    from fxc.testing.fuzz import run
    stats = run(4, seed=100, batch=4, dynamic=True, progress=lambda m: None)
    assert stats["graphs"] == 4 and not stats["wrong"] and not stats["crashed"], stats["failures"]


def test_from_onnx_named_dim_builds_once():
    import fxc
    from tests.helpers_export import onnx_with_named_batch
    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 64)).eval()
    model = fxc.from_onnx(onnx_with_named_batch(mlp, torch.randn(3, 64)))
    before = builds()
    with torch.no_grad():
        for n in (1, 3, 9, 20):
            x = np.random.default_rng(n).standard_normal((n, 64)).astype(np.float32)
            np.testing.assert_allclose(model(x), mlp(torch.from_numpy(x)).numpy(), rtol=1e-4, atol=1e-5)
    assert builds() == before + 1 and model.module.symbols[0]["name"] == "batch"
