"""Rough edges a new user meets (issue 42, items 3 and 14): dim names kept; from_torch without torch's FutureWarning
and without torch.export's partial graph printed before a graph-break error; `getitem` never listed as an unsupported
op; option values type-checked; internal switches and the clml kind not offered in error messages."""
import warnings

import numpy as np
import pytest
import torch
from torch.export import Dim

import fxc
from fxc.errors import FxcError, InputError, TargetError, UnsupportedOpError
from fxc.runtime.artifact.extract import extract
from fxc.target import Target


def test_dim_names_are_kept(tmp_path):
    m = torch.nn.Sequential(torch.nn.Linear(16, 8), torch.nn.ReLU()).eval()
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)           # torch's own LeafSpec deprecation: not the user's
        c = fxc.from_torch(m, (torch.randn(4, 16),), dynamic_shapes=({0: Dim("batch", min=1, max=64)},))
    assert c.module.inputs[0].shape == ("batch", 16) and c.module.outputs[0].shape == ("batch", 8)
    x = torch.randn(7, 16)
    np.testing.assert_allclose(c(x).numpy(), m(x).detach().numpy(), rtol=1e-5, atol=1e-6)
    with pytest.raises(InputError, match=r"batch = 70 is outside the compiled range \[1, 64\]"):
        c(torch.randn(70, 16))
    path = fxc.export(c, tmp_path / "m.fxc")
    assert fxc.load(path).inputs[0].shape == ("batch", 16)
    header = (extract(path, tmp_path / "m") / "fxc_model.h").read_text()
    assert "float32[batch, 16]" in header and "size symbols: batch in [1, 64]" in header


def test_graph_break_error_without_partial_graph(capfd):
    class Branchy(torch.nn.Module):
        def forward(self, x):
            return x + 1 if x.sum() > 0 else x - 1
    with pytest.raises(UnsupportedOpError, match=r"graph break in Branchy at .*if x.sum\(\) > 0"):
        fxc.from_torch(Branchy(), (torch.randn(3),))
    err = capfd.readouterr().err
    assert "def forward" not in err, err                        # torch printed it twice before


def test_getitem_is_not_an_unsupported_op():
    class Svd(torch.nn.Module):
        def forward(self, x):
            u, s, v = torch.linalg.svd(x)
            return u.sum() + s.sum()
    with pytest.raises(UnsupportedOpError) as e:
        fxc.from_torch(Svd(), (torch.randn(4, 4),))
    assert "_linalg_svd" in str(e.value) and "getitem" not in str(e.value), str(e.value)


def test_option_values_and_lists():
    m = torch.nn.Linear(4, 4)
    with pytest.raises(FxcError, match=r"freeze='yes': give True or False"):
        torch.compile(m, backend="fxc", options={"freeze": "yes"})(torch.randn(2, 4))
    torch._dynamo.reset()
    with pytest.raises(FxcError) as e:
        fxc.from_torch(m, (torch.randn(2, 4),), fusion=True)
    assert "fuse" in str(e.value) and "winograd" not in str(e.value) and "blocked_layout" not in str(e.value)
    fxc.from_torch(m.eval(), (torch.randn(2, 4),), winograd="off")   # still accepted (benchmarks measure it)
    with pytest.raises(TargetError) as e:
        Target.parse("cuda")
    assert "opencl" in str(e.value) and "clml" not in str(e.value)
