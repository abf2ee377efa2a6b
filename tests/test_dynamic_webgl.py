"""A symbolic batch on the `webgl` target (issue 26): one build for every batch by row launches (fxc/device_rows.py;
the page's plan runs each row group per block of 8 rows and per tail of 1, 2 or 4 rows, every operand moved by a
texel offset uniform). Results against eager PyTorch; a batch outside the range is an InputError. A missing browser
is a failure, not a skip."""
import sys

import numpy as np
import pytest
import torch
from torch.export import Dim

import fxc
from fxc.errors import InputError

BUILD = sys.modules["fxc.build"]


def _mlp():
    """Rows of 24, 37 and 6 elements: 37 and 6 are not whole texels, so their last rows run 4 and 2 at a time."""
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(24, 37), torch.nn.GELU(), torch.nn.Linear(37, 6),
                               torch.nn.Softmax(-1)).eval()


def _convnet():
    torch.manual_seed(1)
    return torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                               torch.nn.MaxPool2d(2), torch.nn.Conv2d(8, 6, 3, stride=2), torch.nn.ReLU(),
                               torch.nn.Flatten(), torch.nn.Linear(6 * 3 * 3, 5)).eval()


def _check(compiled, model, x):
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-4)


def test_torch_compile_dynamic_mlp_builds_once():
    model = _mlp()
    compiled = torch.compile(model, backend="fxc", dynamic=True, options={"target": "webgl"})
    before = BUILD.stats["builds"]
    for n in (3, 5, 17):
        _check(compiled, model, torch.randn(n, 24))
    assert BUILD.stats["builds"] - before == 1


def test_from_torch_dynamic_convnet_builds_once_and_refuses_out_of_range():
    model = _convnet()
    before = BUILD.stats["builds"]
    compiled = fxc.from_torch(model, (torch.randn(2, 3, 14, 14),), dynamic_shapes=({0: Dim("batch", min=1, max=20)},),
                              target="webgl")
    for n in (3, 5, 17):
        _check(compiled, model, torch.randn(n, 3, 14, 14))
    assert BUILD.stats["builds"] - before == 1
    with pytest.raises(InputError, match="outside the compiled range"):
        compiled(torch.randn(21, 3, 14, 14))


def test_symbolic_graph_on_webgl_every_size_from_one_build():
    """The row plan at sizes that take blocks only, rows only and both, growing and shrinking: each a fresh draw list
    over the same textures (or grown ones)."""
    from tests.test_dynamic import _mlp_graph, _mlp_ref
    rng = np.random.default_rng(0)
    ws = [rng.standard_normal(s).astype(np.float32) for s in ((128, 64), (128,), (64, 128), (64,))]
    before = BUILD.stats["builds"]
    module = BUILD.build(_mlp_graph(1, 40), "webgl")
    assert BUILD.stats["builds"] == before + 1 and module.symbols
    for n in (9, 1, 8, 40, 3):
        x = rng.standard_normal((n, 64)).astype(np.float32)
        np.testing.assert_allclose(module(x, *ws), _mlp_ref(x, *ws), rtol=1e-4, atol=1e-4)
    assert any("per 8 rows" in line for line in module.kernels)
    with pytest.raises(InputError, match="outside the compiled range"):
        module(rng.standard_normal((41, 64)).astype(np.float32), *ws)
