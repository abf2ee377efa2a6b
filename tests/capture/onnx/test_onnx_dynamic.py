"""ONNX models whose named dims stay dynamic (issue 42, items 2, 3 and 14): a torchvision-style classifier with a
named batch (Flatten, or a view(x.size(0), -1): Shape -> Gather -> Concat -> Reshape) builds once for every batch,
keeps the dim's name, and exports a dynamic artifact; a model that cannot keep its named dim says so in one WARNING
naming the op and the dim; inputs by name; shapes= as one tuple."""
import logging

import numpy as np
import pytest
import torch

import fxc
import fxc.driver.build as BUILD
from fxc.errors import InputError
from tests.helpers_export import onnx_with_named_batch


def builds() -> int:
    return BUILD.stats["builds"]


class Classifier(torch.nn.Module):
    """A small torchvision-style CNN: features, adaptive pooling, flattening, a linear head."""

    def __init__(self, view: bool):
        super().__init__()
        self.view = view
        self.features = torch.nn.Sequential(
            torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
            torch.nn.AdaptiveAvgPool2d((2, 2)))
        self.fc = torch.nn.Linear(32, 10)

    def forward(self, x):
        y = self.features(x)
        return self.fc(y.view(y.size(0), -1) if self.view else torch.flatten(y, 1))


@pytest.fixture(autouse=True)
def _no_cache(monkeypatch):
    monkeypatch.setenv("FXC_MODULE_CACHE", "0")


@pytest.mark.parametrize("view", [False, True], ids=["flatten", "view"])
def test_classifier_with_named_batch_builds_once(view, tmp_path):
    torch.manual_seed(0)
    net = Classifier(view).eval()
    model = fxc.from_onnx(onnx_with_named_batch(net, torch.randn(2, 3, 16, 16)))
    before = builds()
    with torch.no_grad():
        for n in (1, 2, 5, 8):
            x = torch.randn(n, 3, 16, 16)
            np.testing.assert_allclose(model(x.numpy()), net(x).numpy(), rtol=1e-4, atol=1e-4)
    assert builds() == before + 1
    assert model.module.inputs[0].shape == ("batch", 3, 16, 16) and model.module.outputs[0].shape == ("batch", 10)
    path = fxc.export(model.module, tmp_path / "cnn.fxc")           # one dynamic artifact for every batch
    loaded = fxc.load(path)
    with torch.no_grad():
        for n in (3, 6):
            x = torch.randn(n, 3, 16, 16)
            np.testing.assert_allclose(loaded(x.numpy()), net(x).numpy(), rtol=1e-4, atol=1e-4)
    with pytest.raises(InputError, match="batch"):
        loaded(np.zeros((2, 3, 16, 17), np.float32))


def test_dim_name_that_is_not_an_identifier_becomes_one():
    from fxc.capture.onnx import symbol_name
    assert symbol_name("batch") == "batch" and symbol_name("batch size") == "batch_size"
    assert symbol_name("2d").isidentifier() and symbol_name("unk__12") == "unk__12"


def test_a_named_dim_that_cannot_stay_symbolic_is_one_warning(caplog):
    """A cumsum along the named batch (its CPU schedule chooses its loop order from the size): one WARNING naming
    the dim and the op; every batch still right, built per size."""
    class Cum(torch.nn.Module):
        def forward(self, x):
            return torch.cumsum(x, 0) * 2
    model = fxc.from_onnx(onnx_with_named_batch(Cum(), torch.randn(3, 8)))
    with caplog.at_level(logging.WARNING, logger="fxc"):
        for n in (2, 5):
            x = np.random.default_rng(n).standard_normal((n, 8)).astype(np.float32)
            np.testing.assert_allclose(model(x), np.cumsum(x, 0) * 2, rtol=1e-5, atol=1e-5)
    warned = [r.getMessage() for r in caplog.records if "cannot stay symbolic" in r.getMessage()]
    assert len(warned) == 1 and "batch" in warned[0] and "cumsum" in warned[0].lower(), warned


def test_inputs_by_name_and_shapes_as_a_tuple():
    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.ReLU()).eval()
    proto = onnx_with_named_batch(mlp, torch.randn(3, 8))
    model = fxc.from_onnx(proto, shapes=(3, 8))                     # one input: its shape, as from_mxnet takes it
    x = np.random.default_rng(0).standard_normal((3, 8)).astype(np.float32)
    ref = mlp(torch.from_numpy(x)).detach().numpy()
    np.testing.assert_allclose(model(x=x), ref, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(model(**{"x": x}), model(x), rtol=0, atol=0)
    with pytest.raises(InputError, match=r"\['z'\] are not inputs of the model; its inputs are \['x'\]"):
        model(z=x)
    with pytest.raises(InputError, match="both by position and by name"):
        model(x, x=x)
    with pytest.raises(InputError, match="one shape, but the model has 2 inputs"):
        fxc.from_onnx(_two_inputs(), shapes=(3, 8))


def _two_inputs():
    from onnx import TensorProto, helper
    a = helper.make_tensor_value_info("a", TensorProto.FLOAT, [3, 8])
    b = helper.make_tensor_value_info("b", TensorProto.FLOAT, [3, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 8])
    g = helper.make_graph([helper.make_node("Add", ["a", "b"], ["y"])], "two", [a, b], [y])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_conformance_filter_selects_light_models_too():
    """Issue 42 item 13: `--filter` filters the light models as it does the node cases (a filtered run compiled
    every light model, filling the cache with their weights)."""
    from fxc.testing import onnx_conformance as conf
    every = [p.stem for p in conf.Path(conf.onnx.__file__).parent.joinpath("backend/test/data/light").glob("light_*")
             if p.suffix == ".onnx"]
    picked = [name for name, *_ in conf.light_models("squeezenet")]
    assert len(every) > 3 and picked == ["light_squeezenet"], (picked, every)
    assert conf.light_models("no_such_model") == []
