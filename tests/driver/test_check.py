"""Check mode (options={"check": True}): compiled kernels against the numpy references; names the first node
that differs."""
import dataclasses

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import fxc.ops.elementwise as elementwise
from fxc.capture.torch.explain import explain
from fxc.driver.check import CheckError, check_graph
from fxc.ops import registry
from fxc.relay_like.builder import Builder
from fxc.symbolic.expr import unary as un


def model(x, w):
    return torch.tanh(F.linear(x, w)).sum(1) + torch.sigmoid(x).mean(1)


@pytest.fixture
def broken_tanh():
    """tanh compiled 1% too large: a wrong kernel that check mode must find."""
    op = registry.get_op("tanh")
    registry._REGISTRY["tanh"] = dataclasses.replace(op,
                                                     compute=elementwise._map(lambda x: un("tanh", x) * 1.01, "tanh"))
    yield
    registry._REGISTRY["tanh"] = op


def test_check_mode_passes_a_correct_model(target):
    x, w = torch.randn(4, 8), torch.randn(5, 8)
    c = torch.compile(model, backend="fxc", options={"check": True, "target": target})
    torch.testing.assert_close(c(x, w), model(x, w))
    rec = explain(model, x, w, check=True, target=target)
    assert rec.subgraphs >= 1 and not rec.failures, rec


def test_check_mode_names_the_node_that_differs(broken_tanh, target):
    x, w = torch.randn(4, 8), torch.randn(5, 8)
    rec = explain(model, x, w, check=True, target=target)      # falls back to eager: still correct
    (failure,) = rec.failures
    assert "tanh" in str(failure) and "CheckError" in failure.error, rec.failures
    torch._dynamo.reset()
    c = torch.compile(model, backend="fxc", options={"check": True, "debug": 1, "target": target})
    with pytest.raises(CheckError, match=r"first differing node 'tanh_\d+'.*tanh\(") as e:
        c(x, w)
    assert "elements differ" in str(e.value)


def test_check_graph_api(broken_tanh, target):
    b = Builder()
    x = b.graph.input((3, 7), "float32", "x")
    y = b.call("exp", [x])
    b.graph.outputs = [b.call("tanh", [y]), b.call("relu", [x])]
    xs = np.random.default_rng(0).standard_normal((3, 7)).astype(np.float32)
    r = check_graph(b.graph, [xs], target)
    assert not r.ok and r.node.op == "tanh" and "tanh" in str(r)
