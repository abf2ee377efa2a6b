"""CLBlast on the opencl target (PoCL here), for real: GEMM regions equal to eager through torch.compile, from_onnx
and from_mxnet with offload forced, convolutions through convgemm equal to eager through torch.compile,
profiled calls, explain's split, export naming the library and load checking it,
and the cost choice keeping fxc's kernel where it is faster.

CLBlast compiles each of its kernels on first use (~30 s on PoCL here; PoCL's kernel cache keeps the binaries for the
next process), so the GEMMs below stay few and small: float32, its direct kernel's shapes."""
import json
import zipfile

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto as T, helper as h, numpy_helper

import fxc
from fxc.driver.build import build
from fxc.errors import TargetError
from fxc.relay_like.graph import Graph
from fxc.runtime.launch import Launch
from fxc.runtime.opencl.module import check_libraries
from fxc.tuning import log as tuning_log
from fxc.tuning.log import default_log_path

pytestmark = pytest.mark.targets("opencl")
FORCED = {"offload": "always"}


class _Net(torch.nn.Module):
    """Linear + ReLU + Linear over a batch of 2, and a batched matmul: three GEMMs, the epilogues fxc's."""

    def __init__(self):
        super().__init__()
        self.l1, self.l2 = torch.nn.Linear(32, 16), torch.nn.Linear(16, 8)

    def forward(self, x, y):
        return self.l2(torch.relu(self.l1(x))), torch.bmm(y, y.transpose(1, 2))


def _inputs():
    torch.manual_seed(0)
    return torch.randn(2, 32), torch.randn(2, 4, 8)


def test_torch_compile_regions_equal_eager_and_explain_shows_the_split(target):
    torch.manual_seed(0)
    net, args = _Net().eval(), _inputs()
    opts = {"target": f"{target} -libs=clblast", **FORCED}
    e = fxc.explain(net, options=opts)(*args)
    regions = [x for x in e.offload if x.startswith("region")]
    assert len(regions) == 3 and all("-> clblast: gemm(matmul" in r for r in regions), str(e)
    assert any(x.startswith("fxc: relu") and "no pattern of clblast matches relu" in x for x in e.offload)
    assert sum("clblast:sgemm" in k for k in e.kernels) == 3 and "external libraries (-libs=" in str(e)
    with torch.no_grad():
        got, want = torch.compile(net, backend="fxc", options=opts)(*args), net(*args)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_from_onnx_regions_equal_the_reference(target):
    from onnx.reference import ReferenceEvaluator
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.normal(size=(16, 8)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.normal(size=(8,)).astype(np.float32), "b")
    nodes = [h.make_node("MatMul", ["x", "w"], ["m"]), h.make_node("Add", ["m", "b"], ["a"]),
             h.make_node("Relu", ["a"], ["y"])]
    graph = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, [2, 3, 16])],
                         [h.make_tensor_value_info("y", T.FLOAT, [2, 3, 8])], initializer=[w, b])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    f = fxc.from_onnx(model, target=f"{target} -libs=clblast", **FORCED)
    assert any("clblast:sgemm" in k for k in f.module.kernels), f.module.kernels
    x = rng.normal(size=(2, 3, 16)).astype(np.float32)
    np.testing.assert_allclose(f(x), ReferenceEvaluator(model).run(None, {"x": x})[0], rtol=1e-5, atol=1e-5)


def test_from_mxnet_regions_equal_numpy(target):
    from fxc.testing.mxnet_zoo import import_mxnet
    mx = import_mxnet()
    rng = np.random.default_rng(4)
    w, b = rng.normal(size=(8, 16)).astype(np.float32), rng.normal(size=(8,)).astype(np.float32)
    sym = mx.sym.relu(mx.sym.FullyConnected(mx.sym.Variable("data"), num_hidden=8, name="fc"))
    f = fxc.from_mxnet(sym, {"fc_weight": mx.nd.array(w), "fc_bias": mx.nd.array(b)}, shapes={"data": (2, 16)},
                       target=f"{target} -libs=clblast", **FORCED)
    assert f.module.offload[0].startswith("region 0 -> clblast: gemm(matmul"), f.module.offload
    x = rng.normal(size=(2, 16)).astype(np.float32)
    np.testing.assert_allclose(f(x), np.maximum(x @ w.T + b, 0), rtol=1e-5, atol=1e-5)


def _gemm_graph():
    g = Graph()
    x = g.input((2, 4, 32), "float32", "x")
    w = Graph.const(np.random.default_rng(1).normal(size=(16, 32)).astype(np.float32))
    g.outputs = [g.call1("relu", [g.call1("matmul", [x, w], trans_b=True)])]
    return g, w.data


def test_export_names_clblast_and_load_runs_it(target, tmp_path):
    g, w = _gemm_graph()
    path = fxc.export(build(g, f"{target} -libs=clblast", **FORCED), tmp_path / "gemm.fxc")
    with zipfile.ZipFile(path) as z:
        manifest = json.loads(z.read("manifest.json"))
    assert manifest["requires"] == ["clblast"] and manifest["plan"][0]["kernel"] == "clblast:sgemm"
    x = np.random.default_rng(2).normal(size=(2, 4, 32)).astype(np.float32)
    np.testing.assert_allclose(fxc.load(path)(x), np.maximum(x @ w.T, 0), rtol=1e-5, atol=1e-5)
    plain = fxc.export(build(g, target), tmp_path / "plain.fxc")
    with zipfile.ZipFile(plain) as z:
        assert json.loads(z.read("manifest.json"))["requires"] == []


def test_profile_times_the_library_call_as_a_kernel(target):
    g, w = _gemm_graph()
    m = build(g, f"{target} -libs=clblast", profile=True, **FORCED)
    x = np.random.default_rng(3).normal(size=(2, 4, 32)).astype(np.float32)
    np.testing.assert_allclose(m(x), np.maximum(x @ w.T, 0), rtol=1e-5, atol=1e-5)
    rows = {r["kernel"]: r for r in m.profile()}
    assert rows["clblast:sgemm"]["calls"] == 1 and rows["clblast:sgemm"]["total_ms"] > 0, rows


def test_a_plan_calling_an_unknown_library_is_a_clear_error():
    with pytest.raises(TargetError, match="external library 'onednn', which this fxc runtime does not know"):
        check_libraries([Launch("onednn:matmul", [], (1,), (1,), call=(1,))])


def test_cost_choice_follows_the_measured_figures_and_caches_them(target, tmp_path, monkeypatch):
    """A 2x4x2 GEMM measured both ways: the choice follows the figures (which side wins depends on the host's load at
    that moment, so it is read, not asserted); the figures go to the tuning log beside the cache and a second build
    measures nothing; with the figures set either way in a log, the build offloads or keeps fxc's kernel by them."""
    monkeypatch.setenv("FXC_CACHE_DIR", str(tmp_path / "measured"))
    g = Graph()
    a = g.input((2, 4), "float32", "a")
    g.outputs = [g.call1("matmul", [a, Graph.const(np.ones((4, 2), np.float32))])]
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    m = build(g, f"{target} -libs=clblast")
    (note,) = [v for v in m.offload if "measured faster" in v]     # (and a region line where it offloads)
    log = default_log_path()
    lib, own = sorted(tuning_log.read(log), key=lambda r: r["config"] == {})
    assert lib["config"] == {"offload": "clblast"} and own["config"] == {}
    assert lib["workload"].endswith(":clblast") and own["workload"] == lib["workload"].replace(":clblast", ":fxc")
    offloaded = tuning_log.cost(lib) < tuning_log.cost(own)
    figures = f"(clblast {1e3 * tuning_log.cost(lib):.3f} ms, fxc {1e3 * tuning_log.cost(own):.3f} ms)"
    assert note.endswith(("offloaded, measured faster " if offloaded else "kept by fxc, measured faster ") + figures)
    assert any("clblast:sgemm" in k for k in m.kernels) == offloaded, (note, list(m.kernels))
    before = log.stat().st_mtime_ns
    assert build(g, f"{target} -libs=clblast").offload == m.offload
    assert log.stat().st_mtime_ns == before
    again = build(g, f"{target} -libs=clblast", tuning_log=False)        # measured again, nothing written
    assert any("measured faster (clblast " in v for v in again.offload) and log.stat().st_mtime_ns == before
    for lib_ms, fxc_ms in ((0.5, 2.0), (2.0, 0.5)):
        monkeypatch.setenv("FXC_CACHE_DIR", str(tmp_path / f"set-{lib_ms}"))
        seeded = default_log_path()
        for r, ms in ((lib, lib_ms), (own, fxc_ms)):
            tuning_log.append(seeded, {**r, "costs": [ms * 1e-3]})
        stamp = seeded.stat().st_mtime_ns
        m = build(g, f"{target} -libs=clblast")
        (note,) = [v for v in m.offload if "measured faster" in v]
        want = lib_ms < fxc_ms
        assert note.endswith(("offloaded" if want else "kept by fxc")
                             + f", measured faster (clblast {lib_ms:.3f} ms, fxc {fxc_ms:.3f} ms)"), note
        assert any("clblast:sgemm" in k for k in m.kernels) == want, (note, list(m.kernels))
        assert seeded.stat().st_mtime_ns == stamp                       # the seeded figures were used, none measured
        np.testing.assert_allclose(m(x), x @ np.ones((4, 2)), rtol=1e-6)


class _Convs(torch.nn.Module):
    """conv (zero pad 1) -> ReLU -> conv (stride 2, dilation 2, no bias): CLBlast's convgemm; a grouped conv stays
    fxc's, and so does an asymmetric pad (the conv after it runs in CLBlast unpadded)."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.b = torch.nn.Conv2d(8, 4, 3, stride=2, dilation=2, bias=False)
        self.g = torch.nn.Conv2d(4, 4, 1, groups=2)
        self.c = torch.nn.Conv2d(4, 2, 3)

    def forward(self, x):
        y = self.g(self.b(torch.relu(self.a(x))))
        return self.c(torch.nn.functional.pad(y, (1, 0, 0, 1)))


def test_convolutions_through_convgemm_equal_eager(target):
    torch.manual_seed(0)
    net, x = _Convs().eval(), torch.randn(2, 3, 16, 16)
    opts = {"target": f"{target} -libs=clblast", **FORCED}
    e = fxc.explain(net, options=opts)(x)
    regions = [r for r in e.offload if r.startswith("region")]
    assert [r.split(": ", 1)[1].split(" ")[0] for r in regions] == ["convgemm(pad+conv2d", "convgemm(conv2d",
                                                                    "convgemm(conv2d"], str(e)
    assert any("a grouped conv (groups 2): convgemm runs groups = 1" in r for r in e.offload)
    assert any(r.startswith("fxc: pad") for r in e.offload)
    assert sum("clblast:sconvgemm" in k for k in e.kernels) == 3
    with torch.no_grad():
        got, want = torch.compile(net, backend="fxc", options=opts)(x), net(x)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
