"""oneDNN on the llvm target (Debian libdnnl2 here), for real: partition counts and reasons on the reference models
and on graphs made to hit each check's edge; regions equal to eager through torch.compile, from_onnx and
export/load (the C entry point built and run); LSTM and GRU layers against eager; offload="auto" against
"always"; a missing library at load."""
import json
import subprocess
import zipfile
from collections import Counter

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto as T, helper as h, numpy_helper

import fxc
from fxc.backends import libraries_of
from fxc.driver.build import build
from fxc.errors import TargetError
from fxc.relay_like.context import PassContext
from fxc.relay_like.graph import Graph
from fxc.relay_like.pipeline import plan_graph, run_passes
from fxc.runtime.artifact import loader
from fxc.runtime.artifact.extract import extract
from fxc.runtime.cpu import dnnl
from fxc.symbolic.sym import Sym
from fxc.target import Target
from fxc.tuning import log as tuning_log
from fxc.tuning.log import default_log_path
from tests.helpers_export import build_c_example

DNNL = "llvm -libs=dnnl"
FORCED = {"offload": "always"}


def _planned(g):
    t = Target.parse(DNNL)
    ctx = PassContext(t, libraries=libraries_of(t), offload="always")
    return plan_graph(run_passes(g, ctx), ctx)


def _matches(p) -> Counter:
    return Counter(pat for r in p.regions for pat, _ in r.matches)


def _graph_of(model, example):
    from fxc.tuning.frontends import graph_of
    return graph_of(model.eval(), example)


def _w(*shape, seed=0):
    return Graph.const((np.random.default_rng(seed).standard_normal(shape) * 0.2).astype(np.float32))


def _conv_graph(pad_value=0.0, bias_shape=(1, 16, 1, 1), batch=1, dtype="float32"):
    g = Graph()
    x = g.input((batch, 8, 12, 12), dtype, "x")
    y = g.call1("conv2d", [g.call1("pad", [x], pad=(1, 1, 1, 1), value=pad_value), _w(16, 8, 3, 3)])
    g.outputs = [g.call1("relu", [g.call1("add", [y, _w(*bias_shape, seed=1)])])]
    return g


def test_partition_counts_on_the_reference_models():
    """Every convolution fxc does not run as Winograd and every dense layer (ResNet-18: 13 convs + fc, the other
    3x3 convs are fxc's Winograd; MobileNetV2: 51 of its 52 convs, depthwise too, + classifier: its last 1x1 conv
    has only oneDNN's reference implementation); BERT's 24 dense layers (not attention's batched matmuls: a batched
    B); the LSTM's two layers."""
    from fxc.testing.models import example_inputs, make_model
    from fxc.testing.zoo import make_zoo_model, zoo_inputs
    p = _planned(_graph_of(make_model("resnet18"), (torch.randn(1, 3, 64, 64),)))
    assert _matches(p) == {"conv": 13, "matmul": 1} and len(p.regions) == 6
    lines = [x for x in fxc_lines(p) if x.startswith("fxc:")]
    assert any("no pattern of dnnl matches conv2d_winograd" in x for x in lines)
    p = _planned(_graph_of(make_model("mobilenet_v2"), (torch.randn(1, 3, 64, 64),)))
    assert _matches(p) == {"conv": 51, "matmul": 1}
    assert sum(x.startswith("fxc: conv2d_packed") and "oneDNN has only its reference implementation (ref:any)" in x
               for x in fxc_lines(p)) == 1
    p = _planned(_graph_of(make_model("bert"), example_inputs("bert", seq_len=16)))
    assert _matches(p) == {"matmul": 24}
    assert sum("refused: a batched B" in x for x in fxc_lines(p)) == 8
    p = _planned(_graph_of(make_zoo_model("lstm", small=True), zoo_inputs("lstm", small=True)))
    assert _matches(p) == {"rnn": 2}


def fxc_lines(p) -> list:
    from fxc.relay_like.passes import describe_partition
    return describe_partition(p)


def test_each_check_at_its_edge():
    p = _planned(_conv_graph(batch=2))          # batch 2: taken, pad, bias and relu folded in
    (r,) = p.regions
    assert [n.op for n in r.nodes] == ["pad", "conv2d_packed", "add", "relu"]
    p = _planned(_conv_graph(pad_value=1.0))    # a pad of ones stays fxc's; the conv alone is taken
    (pad,) = [n for n in p.graph.nodes if n.op == "pad"]
    assert [n.op for n in p.regions[0].nodes] == ["conv2d_packed", "add", "relu"]
    assert p.offload_notes[pad.name] == "dnnl/conv refused: a non-zero or non-constant pad", p.offload_notes
    p = _planned(_conv_graph(bias_shape=(1, 1, 12, 12)))    # an add broadcast over H, W: no bias, no residual
    assert [n.op for n in p.regions[0].nodes] == ["pad", "conv2d_packed"]
    assert any("neither a bias (per output channel) nor a residual" in v for v in p.offload_notes.values())
    g = Graph()                                 # int64: no packed matmul, nothing for oneDNN
    a = g.input((4, 8), "int64", "a")
    g.outputs = [g.call1("matmul", [a, Graph.const(np.ones((8, 16), np.int64))])]
    p = _planned(g)
    assert not p.regions and p.offload_notes[g.outputs[0].node.name] == "no pattern of dnnl matches matmul"
    g = Graph()                                 # a symbolic batch: a primitive takes fixed sizes
    g.outputs = [g.call1("matmul", [g.input((Sym("n"), 16), "float32", "a"), _w(16, 32)])]
    p = _planned(g)
    assert not p.regions and "symbolic sizes" in p.offload_notes[g.outputs[0].node.name]
    rnn = torch.nn.RNN(8, 16, batch_first=True)     # an Elman RNN: oneDNN's LSTM and GRU only
    p = _planned(_graph_of(rnn, (torch.randn(2, 5, 8),)))
    assert any("a rnn_tanh layer: fxc calls oneDNN's LSTM and GRU only" in v for v in p.offload_notes.values())
    with pytest.raises(TargetError, match="dnnl runs on llvm targets, not opencl"):
        libraries_of(Target.parse("opencl -libs=dnnl"))


class _Net(torch.nn.Module):
    """A conv with bias and ReLU, a residual block, a depthwise conv with ReLU6, a Linear: every conv pattern."""

    def __init__(self):
        super().__init__()
        self.c1 = torch.nn.Conv2d(3, 16, 3, padding=1)
        self.c2 = torch.nn.Conv2d(16, 16, 3, padding=1)
        self.dw = torch.nn.Conv2d(16, 16, 3, padding=1, groups=16, stride=2)
        self.fc = torch.nn.Linear(16, 24)

    def forward(self, x):
        y = torch.relu(self.c1(x))
        y = torch.relu(self.c2(y) + y)
        y = torch.nn.functional.relu6(self.dw(y))
        return torch.relu(self.fc(y.mean((2, 3))))


def test_torch_compile_regions_equal_eager_and_explain_shows_the_split():
    torch.manual_seed(0)
    net, x = _Net().eval(), torch.randn(2, 3, 20, 20)
    opts = {"target": DNNL, **FORCED}
    e = fxc.explain(net, options=opts)(x)
    regions = [r for r in e.offload if r.startswith("region")]
    assert regions and all("-> dnnl:" in r for r in regions), str(e)
    assert sum("dnnl:conv" in k for k in e.kernels) >= 3 and any("dnnl:matmul" in k for k in e.kernels), e.kernels
    assert any(r.startswith("fxc: mean") and "no pattern of dnnl matches mean" in r for r in e.offload)
    with torch.no_grad():
        got, want = torch.compile(net, backend="fxc", options=opts)(x), net(x)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


def test_weights_changed_in_place_are_reordered_again():
    """torch.compile passes the weights as inputs: oneDNN's copies of them are remade after each prepack (and for
    another weight set's workspace), never served stale."""
    torch.manual_seed(3)
    net, x = _Net().eval(), torch.randn(1, 3, 12, 12)
    other = _Net().eval()
    m = torch.compile(net, backend="fxc", options={"target": DNNL, **FORCED})
    with torch.no_grad():
        torch.testing.assert_close(m(x), net(x), rtol=1e-4, atol=1e-4)
        for p in net.parameters():
            p.mul_(0.5)
        torch.testing.assert_close(m(x), net(x), rtol=1e-4, atol=1e-4)
        o = torch.compile(other, backend="fxc", options={"target": DNNL, **FORCED})
        for _ in range(2):      # two weight sets of one build, in turn
            torch.testing.assert_close(o(x), other(x), rtol=1e-4, atol=1e-4)
            torch.testing.assert_close(m(x), net(x), rtol=1e-4, atol=1e-4)


def test_from_onnx_regions_equal_the_reference():
    from onnx.reference import ReferenceEvaluator
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.normal(size=s).astype(np.float32) * 0.3, n)
             for n, s in (("w", (16, 4, 3, 3)), ("b", (16,)), ("fw", (10, 16)), ("fb", (10,)))]
    nodes = [h.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]), h.make_node("Relu", ["c"], ["r"]),
             h.make_node("GlobalAveragePool", ["r"], ["p"]), h.make_node("Flatten", ["p"], ["f"]),
             h.make_node("Gemm", ["f", "fw", "fb"], ["y"], transB=1)]
    graph = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, [1, 4, 10, 10])],
                         [h.make_tensor_value_info("y", T.FLOAT, [1, 10])], initializer=inits)
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    f = fxc.from_onnx(model, target=DNNL, **FORCED)
    assert any("dnnl:conv" in k for k in f.module.kernels) and any("dnnl:matmul" in k for k in f.module.kernels)
    x = rng.normal(size=(1, 4, 10, 10)).astype(np.float32)
    np.testing.assert_allclose(f(x), ReferenceEvaluator(model).run(None, {"x": x})[0], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("kind,batch_first", [("LSTM", True), ("LSTM", False), ("GRU", True), ("GRU", False)])
def test_lstm_and_gru_layers_through_dnnl_equal_eager(kind, batch_first):
    """Two bidirectional layers (forward and reverse), with their states: through torch.compile."""
    torch.manual_seed(1)
    net = getattr(torch.nn, kind)(8, 16, 2, batch_first=batch_first, bidirectional=True).eval()
    x = torch.randn(3, 5, 8)
    opts = {"target": DNNL, **FORCED}
    with torch._dynamo.config.patch(allow_rnn=True):       # (else Dynamo leaves recurrent modules to eager)
        e = fxc.explain(net, options=opts)(x)
        assert sum("dnnl:rnn" in k for k in e.kernels) == 4, e.kernels
        torch._dynamo.reset()
        with torch.no_grad():
            got, want = torch.compile(net, backend="fxc", options=opts)(x), net(x)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def _conv_module():
    torch.manual_seed(2)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.ReLU(), torch.nn.Flatten(),
                              torch.nn.Linear(16 * 8 * 8, 10)).eval()
    return net, torch.randn(1, 3, 8, 8)


def test_export_links_dnnl_load_and_the_c_entry_point_run_it(tmp_path):
    net, x = _conv_module()
    with torch.no_grad():
        want = net(x).numpy()
    path = fxc.export(fxc.from_torch(net, (x,), target=DNNL, **FORCED), tmp_path / "m.fxc")
    with zipfile.ZipFile(path) as z:
        manifest = json.loads(z.read("manifest.json"))
    assert manifest["requires"] == ["dnnl"] and any(k.startswith("fxc_dnnl_") for k in manifest["kernels"])
    np.testing.assert_allclose(fxc.load(path)(x.numpy()), want, rtol=1e-4, atol=1e-4)
    d = extract(path, tmp_path / "model")
    assert "libdnnl.so.2" in subprocess.run(["ldd", str(d / "libfxc_model.so")], capture_output=True,
                                            text=True).stdout
    exe = build_c_example("run_model", d, tmp_path / "run_model")
    x.numpy().tofile(tmp_path / "in0.bin")
    p = subprocess.run([str(exe), str(d), str(tmp_path / "in0.bin"), str(tmp_path / "out0.bin")],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    np.testing.assert_allclose(np.fromfile(tmp_path / "out0.bin", np.float32).reshape(want.shape), want,
                               rtol=1e-4, atol=1e-4)
    plain = fxc.export(fxc.from_torch(net, (x,), target="llvm"), tmp_path / "plain.fxc")
    with zipfile.ZipFile(plain) as z:
        assert "requires" not in json.loads(z.read("manifest.json"))
    d = extract(plain, tmp_path / "plain")      # self-contained: no oneDNN
    assert "dnnl" not in subprocess.run(["ldd", str(d / "libfxc_model.so")], capture_output=True, text=True).stdout


def test_auto_keeps_what_it_measured_faster_and_always_forces(tmp_path, monkeypatch):
    monkeypatch.setenv("FXC_CACHE_DIR", str(tmp_path))
    g = _conv_graph()
    x = np.random.default_rng(3).standard_normal((1, 8, 12, 12)).astype(np.float32)
    want = build(g, "llvm")(x)
    auto, always = build(g, DNNL), build(g, DNNL, **FORCED)
    measured = [v for v in auto.offload if "measured faster (dnnl " in v]   # (offloaded or kept: each says why)
    assert measured, auto.offload
    for note in measured:       # "...: offloaded, measured faster (dnnl 0.035 ms, fxc 0.032 ms)" or "kept by fxc"
        t_lib, t_fxc = (float(s.split()[1]) for s in note.split("(")[1].rstrip(")").split(", "))
        assert ("offloaded" in note) == (t_lib < t_fxc) or t_lib == t_fxc, note    # (equal when rounded)
    offloaded = any(k.startswith("fxc_dnnl_") for k, _ in auto.plan)
    assert offloaded == any(r.startswith("region") for r in auto.offload), auto.offload
    assert all("offload='always'" in v for v in always.offload if "dnnl/" in v)
    assert any(k.startswith("fxc_dnnl_") for k, _ in always.plan)
    for m in (auto, always):
        np.testing.assert_allclose(m(x), want, rtol=1e-4, atol=1e-4)
    assert {r["config"].get("offload") for r in tuning_log.read(default_log_path())} == {"dnnl", None}


def test_a_missing_library_at_load_is_a_clear_error(tmp_path, monkeypatch):
    net, x = _conv_module()
    path = fxc.export(fxc.from_torch(net, (x,), target=DNNL, **FORCED), tmp_path / "m.fxc")
    monkeypatch.setattr(dnnl, "SONAME", "libdnnl.so.0-not-installed")
    dnnl._library.cache_clear()
    try:
        with pytest.raises(TargetError, match=r"libdnnl.so.0-not-installed is not installed here; install it: on "
                                              r"Debian `apt-get install libdnnl2`"):
            fxc.load(path)
    finally:
        dnnl._library.cache_clear()
    with pytest.raises(TargetError, match="the external library 'onednn', which this fxc runtime does not know"):
        loader.check_target({"target": "llvm", "requires": ["onednn"]})


@pytest.mark.parametrize("target", ["rasp4b64", "rasp3b"])
def test_a_cross_target_with_dnnl_is_refused_by_name(target):
    """oneDNN is this x86-64 machine's library: an ARM build cannot link it; the error says so and how to build."""
    t = Target.parse(f"{Target.parse(target)} -libs=dnnl")
    with pytest.raises(TargetError, match="drop -libs=dnnl to cross-compile"):
        libraries_of(t)
    with pytest.raises(TargetError, match="drop -libs=dnnl to cross-compile"):
        fxc.from_torch(torch.nn.Linear(8, 4), (torch.randn(1, 8),), target=str(t))
