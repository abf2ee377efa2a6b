"""webgl and webgpu with wasm kernels in the same page (fxc.driver.page_kernels): a model mixing ops the GPU target
runs with
ops it refuses (int64 cumsum and index arithmetic, an argmax feeding a gather, a scatter) runs whole in the headless
browser's page — RPC from Python (from_torch, torch.compile: nothing falls back to eager; fxc.explain names the
wasm groups), export + load, and the static package (`fxc web`) — and matches eager. An int64 value beyond 32 bits
reaching a texture or a WGSL kernel is an ExecutionError, an index out of range in a wasm step eager's IndexError:
never a wrong answer."""
import json

import numpy as np
import pytest
import torch

import fxc
from fxc.deploy.web import serve, write_package
from fxc.errors import ExecutionError, IndexOutOfRangeError
from tests.deploy.test_web_package import _open
from tests.helpers import check_module


class Mixed(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)

    def forward(self, x, idx):
        h = torch.relu(self.lin(x))                                     # webgl
        c = torch.cumsum(idx, 0)                                        # int64 cumsum: wasm
        g = torch.gather(h, 1, h.argmax(1)[:, None])                    # argmax (webgl) feeding a gather: wasm
        s = torch.zeros(4, 8).scatter_add(1, idx[:, None] % 8, h)       # scatter: wasm
        return g.squeeze(1) * 2 + c.float(), s.exp(), c * 3             # exp: webgl; int64 mul: wasm


TARGETS = ("webgl", "webgpu")


@pytest.fixture(scope="module", params=TARGETS)
def mixed(request):
    torch.manual_seed(0)
    model = Mixed().eval()
    x, idx = torch.randn(4, 8), torch.tensor([3, 1, 7, 2])
    return model, x, idx, fxc.from_torch(model, (x, idx), target=request.param)


def _eager(model, *args):
    with torch.no_grad():
        return [t.numpy() for t in model(*args)]


def test_mixed_model_runs_whole_in_the_page(mixed):
    model, x, idx, compiled = mixed
    lines, target = compiled.module.kernels, compiled.module.target
    wasm = [line for line in lines if "[wasm in the page:" in line]
    assert len(wasm) >= 3 and any(f"[{target}:" in line for line in lines), lines
    assert any(line.startswith("cumsum") for line in wasm) and any(line.startswith("mul ") for line in wasm)
    if target == "webgl":           # WebGL refuses the scatter and the gather of the argmax too; WGSL runs them
        assert any(line.startswith("scatter") for line in wasm) and any("index checked" in line for line in wasm)
        # the cumsum's output reaches the later wasm steps in the module's memory, not read back from its texture
        assert any(f is not None for st in compiled.module.desc["steps"] if "wasm" in st for f in st["from"])
    for args in ((x, idx), (torch.randn(4, 8), torch.tensor([-5, 9, 0, 4]))):
        got = compiled(*args)
        for g, e in zip(got, _eager(model, *args)):
            assert g.dtype == torch.from_numpy(e).dtype
            np.testing.assert_array_equal(g.numpy(), e) if e.dtype == np.int64 else \
                np.testing.assert_allclose(g.numpy(), e, rtol=1e-5, atol=1e-6)


def test_torch_compile_runs_the_whole_graph_in_the_page(mixed):
    model, x, idx, compiled = mixed
    rep = fxc.explain(model, x, idx, target=compiled.module.target)
    assert not rep.fallback_ops and not rep.failures, str(rep)
    assert any("[wasm in the page:" in k for k in rep.kernels), str(rep)
    check_module(model, x, idx, target=compiled.module.target, rtol=1e-5, atol=1e-6)


def test_int64_beyond_32_bits_is_an_error(mixed):
    """webgl: the cumsum's output cannot go into its texture; webgpu: a WGSL kernel reading it checks it."""
    model, x, _, compiled = mixed
    big = torch.tensor([2 ** 30, 2 ** 30, 2 ** 30, 1])     # each fits 32 bits; their cumsum does not
    with pytest.raises(ExecutionError, match="beyond 32 bits"):
        compiled(x, big)
    got = compiled(x, torch.tensor([1, 2, 3, 4]))           # the module still works after the fault
    np.testing.assert_array_equal(got[2].numpy(), _eager(model, x, torch.tensor([1, 2, 3, 4]))[2])


@pytest.mark.parametrize("target", TARGETS)
def test_an_index_out_of_range_in_a_wasm_step_is_indexerror(target):
    class Pick(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("table", torch.randn(6, 3))

        def forward(self, idx):         # the index is computed: a wasm step; the table a constant, read once
            return torch.index_select(self.table, 0, torch.cumsum(idx, 0)) * 2
    torch.manual_seed(2)
    model = Pick()
    compiled = fxc.from_torch(model, (torch.tensor([1, 2, 1]),), target=target)
    assert any("[wasm in the page:" in line for line in compiled.module.kernels)
    if target == "webgl":
        assert any(True in st["const"] for st in compiled.module.desc["steps"] if "wasm" in st)
    for idx in ([1, 2, 1], [0, 0, 5], [5, -1, -4]):     # later calls reuse the table's copy in the wasm memory
        idx = torch.tensor(idx)
        np.testing.assert_allclose(compiled(idx).numpy(), model(idx).numpy(), rtol=1e-6)
    with pytest.raises(IndexOutOfRangeError, match="out of range for a dimension of size 6"):
        compiled(torch.tensor([1, 2, 3]))


def test_export_load_and_static_package_of_a_mixed_model(mixed, tmp_path):
    model, x, idx, compiled = mixed
    path = fxc.export(compiled, tmp_path / "mixed.fxc")
    idx2 = np.array([5, -3, 2, 6])
    loaded = fxc.load(path)                                 # the artifact alone (numpy and the browser) runs it too
    for g, e in zip(loaded(x.numpy(), idx2), _eager(model, x, torch.from_numpy(idx2))):
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-6)
    index = write_package(path, tmp_path / "site", inputs=[x.numpy(), idx2], runs=2)
    target = compiled.module.target
    assert {"module.wasm", "wasm.js", f"{target}_steps.js"} <= {p.name for p in index.parent.iterdir()}
    assert "wasm kernels" in index.read_text()
    expected = _eager(model, x, torch.from_numpy(idx2))
    with serve(index.parent) as server:
        page, got = _open(server.url)
        page.close()
    assert got["state"] == "done", got["status"]
    assert json.loads(got["result"])["runs"] == 2
    for g, e in zip(got["outputs"], expected):
        np.testing.assert_allclose(np.asarray(g).reshape(e.shape), e, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("target", TARGETS)
def test_a_changed_weight_reaches_the_wasm_step(target):
    """A parameter a wasm step reads is a live input: resident while unchanged (not read back from its texture), read
    again after an in-place update (as an optimizer step makes)."""
    class Lookup(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.randn(8, 4))

        def forward(self, idx):
            return torch.index_select(self.weight, 0, torch.cumsum(idx, 0)).relu()
    torch.manual_seed(3)
    model, idx = Lookup(), torch.tensor([1, 2, 0, 3])
    compiled = torch.compile(model, backend="fxc", options={"target": target})
    with torch.no_grad():
        for step in range(3):
            np.testing.assert_allclose(compiled(idx).numpy(), model(idx).numpy(), rtol=1e-6)
            np.testing.assert_allclose(compiled(idx).numpy(), model(idx).numpy(), rtol=1e-6)   # resident
            model.weight.add_(torch.randn(8, 4))
