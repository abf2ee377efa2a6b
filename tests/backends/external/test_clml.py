"""CLML ("clml" = "opencl -libs=clml") without an Adreno device: the pattern table's checks at their edges (batch 2,
NHWC, int64, broadcasting, dims over 32768, depthwise limits, softmax axis), partition counts and the ops left to
fxc on ResNet-18, MobileNetV2 and a BERT encoder, every region's serialised graph run by the numpy interpreter
(clml_interpreter.py) and compared with eager PyTorch, the region JSON of small graphs against known-good files
(clml_golden/; regenerate with `python tests/backends/external/test_clml.py` after a deliberate format change),
fxc.partition_for, and the runtime fallback: a clml build or artifact on PoCL (no cl_qcom_ml_ops) runs fxc's
kernels, equal to eager, with one warning; and, with the SDK's shim stood in for (it cannot be built here), the
region step replacing its fallback launches and the calls the runtime makes of the shim."""
import json
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

import fxc
import fxc.driver.build
from fxc.backends import libraries_of
from fxc.backends.external.clml.codegen import region_graph
from fxc.ops.registry import get_op
from fxc.relay_like.context import PassContext
from fxc.relay_like.graph import Graph
from fxc.relay_like.pipeline import plan_graph, run_passes
from fxc.runtime.opencl import clml
from fxc.target import Caps, Target
from fxc.testing import models as tv

try:
    from . import clml_interpreter
except ImportError:             # (run as a script to write the known-good files)
    import clml_interpreter

GOLDEN = Path(__file__).with_name("clml_golden")
CLML = Target.parse("clml")
CAPS = Caps()                   # (float16 and float32: an Adreno's; PoCL's would do too)
CONV = {"stride": (1, 1), "dilation": (1, 1), "groups": 1}


def _planned(g, target=CLML):
    ctx = PassContext(target.with_caps(CAPS), libraries=libraries_of(target))
    return plan_graph(run_passes(g, ctx), ctx)


def _regions(p):
    """[(region, its graph as parsed JSON, the JSON text, its operand Values)] of a planned graph."""
    users, outs, out = p.graph.users(), {v.id for v in p.graph.outputs}, []
    for r in p.regions:
        mine = set(r.nodes)
        leaving = {o.id for n in r.nodes for o in n.outputs
                   if o.id in outs or any(u not in mine for u, _ in users.get(o.id, []))}
        text, operands = region_graph(r, leaving)
        out.append((r, json.loads(text), text, operands))
    return out


def _run(p, feeds: list) -> list:
    """The planned graph run in numpy: each CLML region by the interpreter of its serialised graph, every other
    node by its op's numpy reference. Returns the graph's outputs."""
    env = {v.id: np.asarray(a) for v, a in zip(p.graph.inputs, feeds)}
    first = {r.nodes[0]: (r, graph, operands) for r, graph, _, operands in _regions(p)}
    inside = {n for r in p.regions for n in r.nodes}
    val = lambda v: v.data if v.is_const else env[v.id]     # noqa: E731
    for n in p.graph.nodes:
        if n in first:
            _, graph, operands = first[n]
            names = graph["operands"]
            ins = {name: val(v) for name, v in zip(names, operands) if name.startswith("in")}
            outs = [v for name, v in zip(names, operands) if name.startswith("out")]
            for v, got in zip(outs, clml_interpreter.run(graph, ins)):
                env[v.id] = got
        if n in inside:
            continue
        res = get_op(n.op).reference(*[val(v) for v in n.inputs], **n.attrs)
        for o, a in zip(n.outputs, res if isinstance(res, (tuple, list)) else (res,)):
            env[o.id] = np.asarray(a, dtype=o.dtype).reshape(o.shape)
    return [val(v) for v in p.graph.outputs]


def _capture(model, args):
    from fxc.capture.torch.aot import capture
    from fxc.capture.torch.graph import to_graph
    gm, _ = capture(model, args)
    return to_graph(gm, args)[0]


# -- the reference models: partition counts, every region interpreted against eager ----------------------------------
@pytest.mark.parametrize("name, matches, left", [
    ("resnet18", 40, {}),
    ("mobilenet_v2", 65, {}),
])
def test_cnn_regions_interpreted_equal_eager(name, matches, left):
    torch.manual_seed(0)
    model, x = getattr(tv, name)().eval(), torch.randn(1, 3, 64, 64)
    p = _planned(_capture(model, (x,)))
    assert len(p.regions) == 1 and len(p.regions[0].matches) == matches
    inside = {n.name for n in p.regions[0].nodes}
    assert {n.op for n in p.graph.nodes if n.name not in inside} == set(left)
    (got,) = _run(p, [x.numpy()])
    np.testing.assert_allclose(got, model(x).detach().numpy(), rtol=1e-4, atol=1e-4)


def test_bert_regions_interpreted_equal_eager_and_the_ops_left_to_fxc():
    torch.manual_seed(0)
    model = tv.bert_encoder(vocab=500, hidden=64, layers=1, heads=2, intermediate=128, max_len=16).eval()
    ids, mask = torch.randint(0, 500, (1, 16)), torch.ones(1, 16)
    p = _planned(_capture(model, (ids, mask)))
    pats = sorted(pat for r in p.regions for pat, _ in r.matches)
    assert pats.count("dense") == 6 and pats.count("batch_matmul") == 2 and len(p.regions) == 9
    reasons = {n.op: p.offload_notes[n.name] for n in p.graph.nodes if n.name not in
               {x.name for r in p.regions for x in r.nodes}}
    assert reasons["layer_norm"] == "no pattern of clml matches layer_norm"
    assert "softmax over axis 3 of a rank-4 tensor" in reasons["softmax"]
    assert "broadcasting" in reasons["div"]
    got = _run(p, [ids.numpy(), mask.numpy()])
    want = model(ids, mask)
    want = want if isinstance(want, tuple) else (want,)
    for g_, w in zip(got, want):
        np.testing.assert_allclose(g_, w.detach().numpy(), rtol=1e-4, atol=1e-4)


# -- known-good region graphs ------------------------------------------------------------------------------------------
def _w(*shape, seed=0):
    return Graph.const(np.random.default_rng(seed).standard_normal(shape).astype(np.float32))


def _conv_block():
    """pad -> conv -> bias -> batch norm -> ReLU6 (the scale folded into the conv's weights by fxc's passes), a
    max pool, a depthwise conv with ReLU, concat, softmax over the channels, a global average pool, a dense with
    bias."""
    g = Graph()
    x = g.input((1, 3, 8, 8), "float32", "x")
    y = g.call1("pad", [x], pad=(1, 1, 1, 1), value=0.0, mode="constant")
    y = g.call1("conv2d", [y, _w(4, 3, 3, 3)], stride=(1, 1), dilation=(1, 1), groups=1)
    y = g.call1("add", [y, _w(4, 1, 1, seed=1)])
    y = g.call1("add", [g.call1("mul", [y, _w(4, 1, 1, seed=2)]), _w(4, 1, 1, seed=3)])
    y = g.call1("hardtanh", [y], lo=0.0, hi=6.0)
    a = g.call1("max_pool2d", [y], kernel=(2, 2), stride=(2, 2), padding=(0, 0), dilation=(1, 1), ceil_mode=False)
    b = g.call1("pad", [y], pad=(1, 1, 1, 1), value=0.0, mode="constant")
    b = g.call1("relu", [g.call1("conv2d", [b, _w(4, 1, 3, 3, seed=4)], stride=(2, 2),
                                 dilation=(1, 1), groups=4)])
    z = g.call1("softmax", [g.call1("cat", [a, b], dim=1)], dim=1)
    z = g.call1("reshape", [g.call1("mean", [z], axes=(2, 3), keepdim=True)], shape=(1, 8))
    g.outputs = [g.call1("add", [g.call1("matmul", [z, _w(5, 8, seed=5)], trans_b=True),
                                 _w(5, seed=6)])]
    return g


def _conv_fp16(dtype="float16"):
    """A float16 region (weights as inputs: fxc keeps no float16 constants): pad -> conv -> bias -> ReLU, a max
    pool."""
    g = Graph()
    x, w, b = (g.input(s, dtype, n) for s, n in (((1, 3, 8, 8), "x"), ((4, 3, 3, 3), "w"), ((4, 1, 1), "b")))
    y = g.call1("conv2d", [g.call1("pad", [x], pad=(1, 1, 1, 1), value=0.0, mode="constant"), w], **CONV)
    y = g.call1("relu", [g.call1("add", [y, b])])
    g.outputs = [g.call1("max_pool2d", [y], kernel=(2, 2), stride=(2, 2), padding=(0, 0), dilation=(1, 1),
                         ceil_mode=False)]
    return g


def _pixel_shuffle():
    """conv, then PyTorch's pixel shuffle (depth to space) as the reshape/permute/reshape capture makes it."""
    g = Graph()
    x = g.input((1, 2, 4, 4), "float32", "x")
    y = g.call1("conv2d", [x, _w(8, 2, 1, 1)], stride=(1, 1), dilation=(1, 1), groups=1)
    y = g.call1("reshape", [y], shape=(1, 2, 2, 2, 4, 4))
    y = g.call1("permute", [y], dims=(0, 1, 4, 2, 5, 3))
    g.outputs = [g.call1("reshape", [y], shape=(1, 2, 8, 8))]
    return g


def _upsample():
    """conv, then a bilinear 2x upsample (half-pixel) and a 3x5 -> 8x8 one (align corners) of its result, added."""
    g = Graph()
    x = g.input((1, 2, 3, 5), "float32", "x")
    y = g.call1("conv2d", [x, _w(3, 2, 1, 1)], stride=(1, 1), dilation=(1, 1), groups=1)
    a = g.call1("resize2d", [y], size=(6, 10), mode="bilinear", coord="half_pixel", scales=(2.0, 2.0))
    b = g.call1("resize2d", [y], size=(6, 10), mode="bilinear", coord="align_corners")
    g.outputs = [g.call1("add", [a, b])]
    return g


SMALL = {"conv_block": _conv_block, "conv_fp16": _conv_fp16, "pixel_shuffle": _pixel_shuffle, "upsample": _upsample}


class _Interpolate(torch.nn.Module):
    def __init__(self, **kw):
        super().__init__()
        self.conv, self.kw = torch.nn.Conv2d(3, 4, 3, padding=1), kw

    def forward(self, x):
        return torch.relu(torch.nn.functional.interpolate(self.conv(x), **self.kw))


@pytest.mark.parametrize("kw", [dict(scale_factor=2, align_corners=False), dict(scale_factor=2, align_corners=True),
                                dict(size=(7, 5), align_corners=False), dict(size=(7, 5), align_corners=True)],
                         ids=["x2", "x2_align", "odd", "odd_align"])
def test_bilinear_upsampling_region_interpreted_equal_eager(kw):
    torch.manual_seed(0)
    model, x = _Interpolate(mode="bilinear", **kw).eval(), torch.randn(1, 3, 5, 6)
    p = _planned(_capture(model, (x,)))
    assert [[pat for pat, _ in r.matches] for r in p.regions] == [["conv2d", "resize_bilinear", "relu"]]
    (got,) = _run(p, [x.numpy()])
    np.testing.assert_allclose(got, model(x).detach().numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kw, why", [
    (dict(mode="nearest", scale_factor=2), "a nearest resize: CLML resizes bilinearly"),
    (dict(mode="bilinear", scale_factor=1.5), "scale factors (1.5, 1.5) that are not output/input (7, 9)/(5, 6)"),
])
def test_resizes_clml_refuses(kw, why):
    model, x = _Interpolate(**kw).eval(), torch.randn(1, 3, 5, 6)
    p = _planned(_capture(model, (x,)))
    (resize,) = [n for n in p.graph.nodes if n.op == "resize2d"]
    assert all(resize not in r.nodes for r in p.regions)
    assert why in p.offload_notes[resize.name]


@pytest.mark.parametrize("name", sorted(SMALL))
def test_region_json_equals_the_known_good_file_and_means_what_eager_computes(name):
    g = SMALL[name]()
    p = _planned(g)
    ((_, graph, text, _),) = _regions(p)
    assert text == (GOLDEN / f"{name}.json").read_text(), f"the region graph of {name} changed (see the docstring)"
    rng = np.random.default_rng(7)
    feeds = [rng.standard_normal(v.shape).astype(v.dtype) for v in g.inputs]
    (got,) = _run(p, feeds)
    twin = (lambda: _conv_fp16("float32")) if name == "conv_fp16" else SMALL[name]
    ref = _planned(twin(), Target.parse("opencl"))                  # every node by fxc's numpy reference
    (want,) = _run(ref, [f.astype(np.float32) for f in feeds])
    if name.endswith("fp16"):
        assert "float16" in graph["accuracy"] and "1e-2" in graph["accuracy"]
        np.testing.assert_allclose(got.astype(np.float32), want, rtol=1e-2, atol=1e-2)
    else:
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


# -- the checks at their edges -----------------------------------------------------------------------------------------
def _one(op, shapes, dtype="float32", **attrs):
    g = Graph()
    ins = [g.input(s, dtype, f"x{i}") if s is not None else _w(4, 3, 3, 3) for i, s in enumerate(shapes)]
    g.outputs = [g.call1(op, ins, **attrs)]
    return g


@pytest.mark.parametrize("g, why", [
    (_one("conv2d", [(2, 3, 8, 8), None], **CONV), "batch 2: CLML runs batch 1"),
    (_one("add", [(1, 4, 8, 8), (1, 4, 8, 8)], "int64"), "int64 tensors: CLML runs float32 and float16 only"),
    (_one("add", [(1, 4, 8, 8), (1, 4, 1, 1)]), "broadcasting (1, 4, 8, 8) with (1, 4, 1, 1)"),
    (_one("mul", [(1, 8, 8, 8), (8,)]), "broadcasting (1, 8, 8, 8) with (8,)"),      # (along W: no batch norm)
    (_one("relu", [(1, 40000)]), "dim 40000 of (1, 40000) exceeds CLML's limit of 32768"),
    (_one("relu", [(1, 2, 3, 4, 5)]), "rank 5"),
    (_one("conv2d", [(1, 4, 8, 8), (4, 2, 3, 3)], stride=(1, 1), dilation=(1, 1), groups=2),
     "a grouped conv (groups 2, 4 -> 4 channels): CLML runs depthwise only"),
    (_one("conv2d", [(1, 4, 8, 8), (4, 1, 3, 3)], stride=(1, 1), dilation=(2, 2), groups=4),
     "a dilated depthwise conv"),
    (_one("softmax", [(1, 4, 8, 8)], dim=3), "softmax over axis 3 of a rank-4 tensor"),
    (_one("hardtanh", [(1, 4, 8, 8)], lo=-1.0, hi=1.0), None),
], ids=["batch2", "int64", "broadcast", "broadcast_w", "dim_over_32768", "rank5", "grouped", "dilated_depthwise",
        "softmax_axis", "clip"])
def test_pattern_checks_at_their_edges(g, why):
    p = _planned(g)
    (root,) = [n for n in p.graph.nodes if n.outputs[0] is p.graph.outputs[0]]
    if why is None:
        assert len(p.regions) == 1 and p.offload_notes[root.name].startswith("clml/clip: offloaded")
    else:
        assert p.regions == () and why in p.offload_notes[root.name], p.offload_notes[root.name]


def test_nhwc_model_keeps_its_permutes_with_fxc_and_offloads_the_nchw_conv():
    """fxc's conv is NCHW by construction: a channels-last model's permutes are not CLML's (no NHWC pattern)."""
    class Nhwc(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 4, 3)

        def forward(self, x):                       # x: NHWC
            return self.conv(x.permute(0, 3, 1, 2)).relu().permute(0, 2, 3, 1)

    torch.manual_seed(0)
    m, x = Nhwc().eval(), torch.randn(1, 8, 8, 3)
    p = _planned(_capture(m, (x,)))
    left = [n.op for n in p.graph.nodes if n.name not in {x.name for r in p.regions for x in r.nodes}]
    assert left == ["permute", "permute"] and [pat for pat, _ in p.regions[0].matches] == ["conv2d"]
    np.testing.assert_allclose(_run(p, [x.numpy()])[0], m(x).detach().numpy(), rtol=1e-5, atol=1e-5)


def test_a_dependency_leaving_and_reentering_splits_the_regions():
    """relu(a) -> exp (fxc's) -> add(relu, exp): the add's region cannot take the relu (exp sits between)."""
    g = Graph()
    x = g.input((1, 4, 8, 8), "float32", "x")
    r = g.call1("relu", [x])
    g.outputs = [g.call1("add", [r, g.call1("exp", [r])])]
    p = _planned(g)
    assert [[pat for pat, _ in reg.matches] for reg in p.regions] == [["relu"], ["binary"]]


# -- partition_for, the target, explain ----------------------------------------------------------------------------
def test_partition_for_reports_the_split_before_building():
    torch.manual_seed(0)
    part = fxc.partition_for(tv.mobilenet_v2().eval(), torch.randn(1, 3, 32, 32), "clml")
    assert part.target == "opencl -libs=clml" and len(part.regions) == 1 and part.left == {}
    assert part.offloaded_ops["conv2d"] == 52 and part.regions[0].graph["format"] == "fxc.clml.region"
    assert str(part).startswith("partition for opencl -libs=clml: 1 region(s), 171 ops offloaded, 0 left to fxc")
    with pytest.raises(fxc.errors.TargetError, match="names no external library"):
        fxc.partition_for(Graph(), None, "opencl")
    with pytest.raises(fxc.FxcError, match="takes a torch.nn.Module"):
        fxc.partition_for(object(), None, "clml")


def test_partition_for_an_onnx_model_gives_the_torch_models_split(tmp_path):
    """The same small conv net as a torch module and as its ONNX file: one region each, the same ops offloaded."""
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
                            torch.nn.Conv2d(8, 4, 1)).eval()
    x = torch.randn(1, 3, 16, 16)
    torch.onnx.export(m, (x,), tmp_path / "m.onnx", dynamo=False)
    from_torch, from_onnx = fxc.partition_for(m, x, "clml"), fxc.partition_for(str(tmp_path / "m.onnx"), None, "clml")
    assert len(from_onnx.regions) == len(from_torch.regions) == 1
    assert from_onnx.offloaded_ops["conv2d"] == from_torch.offloaded_ops["conv2d"] == 2


def test_clml_target_is_opencl_with_clml_regions():
    assert str(Target.parse("clml")) == "opencl -libs=clml"
    assert str(Target.parse("clml -device=0 -libs=clblast")) == "opencl -device=0 -libs=clml,clblast"


def test_torch_compile_for_clml_equals_eager_and_explain_shows_the_split():
    """torch.compile keeps the weights as inputs: fxc folds the batch norm's scale into the conv's weights in the
    prepack step (left to fxc: weights only), and its shift is the conv match's second add."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU6(),
                              torch.nn.Conv2d(8, 8, 3, groups=8), torch.nn.Sigmoid()).eval()
    x = torch.randn(1, 3, 16, 16)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)        # (PoCL: the fallback's warning, tested below)
        e = fxc.explain(net, options={"target": "clml"})(x)
        with torch.no_grad():
            got = torch.compile(net, backend="fxc", options={"target": "clml"})(x)
    regions = [r for r in e.offload if r.startswith("region")]
    assert len(regions) == 1 and regions[0].startswith("region 0 -> clml: conv2d(pad+conv2d+add+add+hardtanh"), \
        str(e)
    assert any(r.startswith("fxc: sigmoid") and "no pattern of clml matches sigmoid" in r for r in e.offload)
    assert any("[clml:region: external library clml; fxc's" in k for k in e.kernels)
    torch.testing.assert_close(got, net(x), rtol=1e-4, atol=1e-4)


# -- the runtime: what is missing, and the fallback -------------------------------------------------------------------
class _Adreno:
    info = {"name": "QUALCOMM Adreno(TM) 740", "extensions": ["cl_khr_fp16", "cl_qcom_ml_ops"]}


def test_the_missing_piece_is_named(monkeypatch, tmp_path):
    class Pocl:
        info = {"name": "pthread-cpu", "extensions": ["cl_khr_fp64"]}
    assert "has no cl_qcom_ml_ops extension" in clml.missing(Pocl())
    monkeypatch.delenv("FXC_CLML_SDK", raising=False)
    assert "FXC_CLML_SDK is not set" in clml.missing(_Adreno())
    monkeypatch.setenv("FXC_CLML_SDK", str(tmp_path))
    assert f"FXC_CLML_SDK={tmp_path} holds no include/CL/cl_qcom_ml_ops.h" in clml.missing(_Adreno())


def test_clml_artifact_falls_back_to_fxc_kernels_on_pocl_with_one_warning(tmp_path, monkeypatch):
    torch.manual_seed(0)
    model, x = tv.mobilenet_v2().eval(), torch.randn(1, 3, 32, 32)
    monkeypatch.setattr(clml, "_warned", set())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        m = fxc.from_torch(model, (x,), target="clml")
        np.testing.assert_allclose(m(x).numpy(), model(x).detach().numpy(), rtol=1e-4, atol=1e-4)
        fxc.export(m, tmp_path / "m.fxc")
        loaded = fxc.load(tmp_path / "m.fxc")
        np.testing.assert_allclose(loaded(x.numpy())[0] if isinstance(loaded(x.numpy()), (list, tuple))
                                   else loaded(x.numpy()), model(x).detach().numpy(), rtol=1e-4, atol=1e-4)
    mine = [w for w in caught if "CLML regions run as fxc's OpenCL kernels" in str(w.message)]
    assert len(mine) == 1 and "has no cl_qcom_ml_ops" in str(mine[0].message)
    assert any(st.kernel == "clml:region" for st in m.module.plan)
    assert "opencl -libs=clml" in m.module.target and "/* clml:region 0" in m.module.source
    assert clml.region_graphs(m.module.source)[0]["nodes"][0]["op"] == "convolution"


class _ShimCalls:
    """Stands in for the shim compiled against the SDK (it cannot be built here: no header): records the calls
    the runtime's driver makes, to check the protocol of clml_shim.c (tensor k is operand k; op codes)."""

    def __init__(self):
        self.tensors, self.ops, self.finished = [], [], 0

    def fxc_clml_new(self, ctx, dev, status):
        return 1

    def fxc_clml_tensor(self, g, dtype, dims, role):
        self.tensors.append((dtype, list(dims[:4]), role))
        return len(self.tensors) - 1

    def fxc_clml_op(self, g, kind, ints, n, floats):
        self.ops.append((kind, list(ints[:n])))
        return 0

    def fxc_clml_finish(self, g, queue):
        self.finished += 1
        return 0


def test_with_clml_present_the_region_step_replaces_its_fallback_launches(monkeypatch):
    g = _conv_fp16("float32")
    m = fxc.driver.build.build(g, "clml")
    calls = _ShimCalls()
    monkeypatch.setattr(clml, "missing", lambda device: None)
    monkeypatch.setenv("FXC_CLML_SDK", "/sdk")
    monkeypatch.setattr(clml, "shim", lambda sdk: calls)
    monkeypatch.setattr(clml, "_graphs", {})
    (step,) = [st for st in m.plan if st.kernel == "clml:region"]
    chosen = clml.choose(m.plan, m.device, m.source)
    assert len(chosen) == len(m.plan) - step.call[0] and chosen[0].kernel == "clml:region"
    assert chosen[0].call[:2] == step.call[:2] and len(chosen[0].call) == 3     # (+ the program's digest)
    assert [r for _, _, r in calls.tensors[:4]] == [2, 1, 1, 1]                 # out0, in0 (x), in1 (w), in2 (b)
    assert calls.tensors[0][1] == [1, 4, 4, 4] and calls.finished == 1
    (conv, conv_ints), (pool, pool_ints) = calls.ops
    assert (conv, pool) == (clml.OPS["convolution"], clml.OPS["pool"])
    assert conv_ints[:9] == [4, 5, 1, 2, 3, -1, -1, 0, 1]      # out t0; 5 inputs: x, w, b, no bn; conv; relu
    assert conv_ints[13:17] == [1, 1, 1, 1] and pool_ints[:3] == [0, 1, 4]       # padding; out0 <- t0


if __name__ == "__main__":      # write the known-good files (after a deliberate change of the format)
    for name, make in SMALL.items():
        ((_, _, text, _),) = _regions(_planned(make()))
        (GOLDEN / f"{name}.json").write_text(text)
        print("wrote", GOLDEN / f"{name}.json", file=sys.stderr)
