"""Dynamic shapes on the device targets (issue 26): one build for every batch on opencl, opengl, webgpu and webgl
(row launches, fxc/driver/rows.py; webgl's own tests: tests/backends/webgl/test_dynamic_webgl.py) and wasm (the llvm
row-block
kernels; the page sizes its buffers and writes the symbol header per call). A missing device runtime is a failure,
not a skip."""
import numpy as np
import pytest
import torch

import fxc.driver.build as BUILD
from fxc.errors import InputError
from fxc.runtime.launch import Launch
from fxc.runtime.row_plan import expand

SYMBOLIC_TARGETS = ("opencl", "opengl", "webgpu", "webgl", "wasm")    # Caps.dynamic_rows


def _mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(24, 40), torch.nn.GELU(), torch.nn.Linear(40, 8),
                               torch.nn.Softmax(-1)).eval()


def _sweep(compiled, model, sizes, width=24) -> None:
    with torch.no_grad():
        for n in sizes:
            x = torch.randn(n, width)
            torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-5)


def test_expand_runs_blocks_then_single_rows_at_moved_offsets():
    plan = [Launch("static", [("const", 0), ("work", 64)], (1,), (1,)),
            Launch("a8", [("out", 0), ("work", (128, 32))], (1,), (1,), rows=(16, 32), repeat=(1, 8, 0)),
            Launch("b8", [("work", (128, 32)), ("in", 0)], (1,), (1,), rows=(32, 0), repeat=(1, 8, 0)),
            Launch("a1", [("out", 0), ("work", (128, 32))], (1,), (1,), rows=(16, 32), repeat=(1, 8, 1))]
    got = [(st.kernel, offs) for st, offs in expand(plan, 19)]
    region = 128 + 19 * 32
    assert got == [("static", [0, 64]),
                   ("a8", [0, region]), ("b8", [region, 0]),                    # rows 0-7: a and b per block
                   ("a8", [8 * 16, region + 8 * 32]), ("b8", [region + 8 * 32, 0]),
                   ("a1", [16 * 16, region + 16 * 32]), ("a1", [17 * 16, region + 17 * 32]),
                   ("a1", [18 * 16, region + 18 * 32])]
    assert [st.kernel for st, _ in expand(plan, 8)] == ["static", "a8", "b8"]


@pytest.mark.targets("llvm", *SYMBOLIC_TARGETS)
def test_symbolic_graph_runs_every_size_and_checks_static_dims(target):
    from tests.capture.torch.test_dynamic import _mlp_graph, _mlp_ref
    rng = np.random.default_rng(0)
    ws = [rng.standard_normal(s).astype(np.float32) for s in ((128, 64), (128,), (64, 128), (64,))]
    before = BUILD.stats["builds"]
    module = BUILD.build(_mlp_graph(1, 40), target)
    assert BUILD.stats["builds"] == before + 1
    assert module.symbols and module.inputs[0].shape == ("batch", 64)
    for n in (9, 1, 8, 40, 3):          # a block and a row, a row, a block, the largest (buffers grow), smaller
        x = rng.standard_normal((n, 64)).astype(np.float32)
        np.testing.assert_allclose(module(x, *ws), _mlp_ref(x, *ws), rtol=1e-4, atol=1e-4)
    with pytest.raises(InputError, match="outside the compiled range"):
        module(rng.standard_normal((41, 64)).astype(np.float32), *ws)
    with pytest.raises(InputError, match="only the symbolic dims may vary"):
        module(rng.standard_normal((4, 65)).astype(np.float32), *ws)
    assert target in ("llvm", "wasm") or any("per 8 rows" in line for line in module.kernels)


@pytest.mark.targets(*SYMBOLIC_TARGETS)
def test_torch_compile_dynamic_batch_builds_once_on_a_device(target):
    model = _mlp()
    compiled = torch.compile(model, backend="fxc", dynamic=True, options={"target": target})
    before = BUILD.stats["builds"]
    _sweep(compiled, model, (3, 8, 17, 5))
    assert BUILD.stats["builds"] - before == 1


@pytest.mark.slow
@pytest.mark.targets(*SYMBOLIC_TARGETS)
def test_mobilenet_v2_with_dynamic_batch_builds_once_on_a_device(target):
    from torch.export import Dim

    import fxc
    from fxc.testing.models import make_model
    model = make_model("mobilenet_v2")
    before = BUILD.stats["builds"]
    compiled = fxc.from_torch(model, (torch.randn(2, 3, 32, 32),), dynamic_shapes=({0: Dim("batch", min=1, max=16)},),
                              target=target)
    assert BUILD.stats["builds"] == before + 1
    with torch.no_grad():
        for n in (1, 5, 9):
            x = torch.randn(n, 3, 32, 32)
            torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-4)
    assert BUILD.stats["builds"] == before + 1


def test_wasm_two_symbols_one_build():
    """A graph with a batch and a sequence ([b, s, s] buffers: workspace slots that are polynomials of both) on
    wasm: one build, each (b, s) pair against torch, the page's buffers grown between calls."""
    from tests.deploy.test_export_dynamic import _attention_graph, check_attention_pairs
    before = BUILD.stats["builds"]
    module = BUILD.build(_attention_graph(), "wasm")
    assert BUILD.stats["builds"] == before + 1 and [s["name"] for s in module.symbols] == ["b", "s"]
    check_attention_pairs(module)
