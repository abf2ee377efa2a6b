"""Layer norm and softmax on the webgl target (relay_like/passes/expand_opaque.py's forms for a target without
scatter), against eager PyTorch: the row moments of x - x[first] in one reduction (four outputs a row), at BERT's
width and scale, rows far from zero (the shift), rows of equal values (exact mean, zero variance), a norm over two
axes, and the mean / rstd outputs of aten.native_layer_norm. Small shapes, in the headless Chromium page."""
import numpy as np
import pytest
import torch
from torch import nn

import fxc
from tests.helpers import assert_close_np


class _Norms(nn.Module):
    """A layer norm then a softmax over the same rows (BERT's attention scores and hidden states)."""

    def __init__(self, shape):
        super().__init__()
        self.ln = nn.LayerNorm(shape)

    def forward(self, x):
        return torch.softmax(self.ln(x) * 3.0, dim=-1)


class _Moments(nn.Module):
    """aten.native_layer_norm's three outputs (out, mean, rstd), without weight or bias."""

    def forward(self, x):
        out, mean, rstd = torch.ops.aten.native_layer_norm(x, [x.shape[-1]], None, None, 1e-5)
        return out + mean * rstd


def _rows(kind, shape):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(shape, generator=g)
    if kind == "bert_scale":            # BERT's hidden states: std ~1, a few large outliers
        x = x * 2.0
        x[..., 3] = 25.0
    elif kind == "far_from_zero":       # mean 1000, std 1e-1: what the first-element shift is for
        x = 1000.0 + 0.1 * x
    elif kind == "equal_rows":          # every row constant: exact mean, zero variance (eager: exactly 0 out)
        x = torch.arange(shape[0] * shape[1], dtype=torch.float32).reshape(shape[0], shape[1], 1).expand(shape)
        x = x.contiguous() * 0.37 - 3.0
    return x


@pytest.mark.parametrize("kind", ["bert_scale", "far_from_zero", "equal_rows"])
def test_layer_norm_matches_eager(kind):
    torch.manual_seed(0)
    model = nn.LayerNorm(256).eval()
    with torch.no_grad():
        model.weight.normal_()
        model.bias.normal_()
    x = _rows(kind, (1, 12, 256))
    with torch.no_grad():
        expected = model(x).numpy()
    got = fxc.from_torch(model, (x,), target="webgl")(x.numpy())
    scale = max(1.0, float(np.abs(expected).max()))
    assert_close_np(got, expected, rtol=1e-4, atol=1e-4 * scale)


@pytest.mark.parametrize("model, shape", [(lambda: nn.LayerNorm((6, 12)), (3, 6, 12)), (_Moments, (5, 36)),
                                          (lambda: _Norms(20), (2, 7, 20))],
                         ids=["two_axes", "moments", "norm_softmax"])
def test_norm_forms_match_eager(model, shape):
    torch.manual_seed(0)
    model = model().eval()
    x = torch.randn(shape) * 3.0 + 1.5
    with torch.no_grad():
        expected = model(x).numpy()
    got = fxc.from_torch(model, (x,), target="webgl")(x.numpy())
    assert_close_np(got, expected, rtol=1e-5, atol=1e-5 * max(1.0, float(np.abs(expected).max())))
