"""The measurement payload without pickle (fxc/tuning/payload.py): every workload of the reference models written
as JSON + .npy and read back builds to the same outputs; no pickle anywhere in the files; an attribute JSON cannot
carry is refused with its value named."""
import numpy as np
import pytest
import torch

from fxc.driver.build import build
from fxc.errors import FxcError
from fxc.relay_like.graph import Graph
from fxc.testing.models import mobilenet_v2, resnet18
from fxc.tuning import payload
from fxc.tuning.frontends import graph_of
from fxc.tuning.measure import example_arrays
from fxc.tuning.tasks import clone_graph, extract_tasks
from tests.tune.models import small


def _roundtrip(task, folder):
    payload.write(folder, {"task": task, "target": "llvm", "configs": [{}, {"conv2d.rows": 4}], "params": {}})
    back = payload.read(folder)
    assert back["configs"] == [{}, {"conv2d.rows": 4}] and back["task"].key == task.key
    return back["task"].graph


@pytest.mark.parametrize("name", ["small", "resnet18", "mobilenet_v2"])
def test_every_workload_survives_the_payload(name, tmp_path):
    if name == "small":
        m, x = small()
    else:
        torch.manual_seed(0)
        m, x = (resnet18 if name == "resnet18" else mobilenet_v2)().eval(), (torch.randn(1, 3, 32, 32),)
    _, tasks = extract_tasks(graph_of(m, x), "llvm")
    for i, task in enumerate(tasks):
        g = _roundtrip(task, tmp_path / f"t{i}")
        assert [(n.op, n.attrs) for n in g.nodes] == [(n.op, n.attrs) for n in task.graph.nodes]
        assert sorted(g.inputs.index(v) for v in g.inputs if v.id in g.weights) == \
            sorted(task.graph.inputs.index(v) for v in task.graph.inputs if v.id in task.graph.weights)
        if i < 4:   # (a few built: the reads are checked above for all)
            arrays = example_arrays(task.graph)
            want = build(clone_graph(task.graph), "llvm", tuning_log=False)(*arrays)
            got = build(g, "llvm", tuning_log=False)(*arrays)
            for a, b in zip(want if isinstance(want, (list, tuple)) else [want],
                            got if isinstance(got, (list, tuple)) else [got]):
                np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_an_attribute_json_cannot_carry_is_refused(tmp_path):
    g = Graph()
    x = g.input((4,), "float32", "x")
    g.outputs = [g.call1("relu", [x])]
    g.nodes[0].attrs["odd"] = object()
    task = type("T", (), dict(key="k", desc="d", graph=g, count=1, prepack=False, threads=1))()
    with pytest.raises(FxcError, match="cannot carry the attribute value <object"):
        payload.write(tmp_path, {"task": task})
