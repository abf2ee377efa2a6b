"""Fragments that write four texels (render targets, fxc/backends/webgl_targets.py) on the webgl target, against eager
PyTorch: matmuls with their epilogues (bias, gelu, a residual), a batched matmul, the parts whole texture rows or all
in one row; which kernels get render targets and which do not; the fetches a jammed matmul's inner loop makes. Runs
in the headless Chromium page (one per test process), small shapes."""
import json
import re

import numpy as np
import pytest
import torch
from torch import nn

import fxc
from fxc.runtime.webgl import program_of
from tests.helpers import assert_close_np


class _LinearGeluResidual(nn.Module):
    def __init__(self, k, n):
        super().__init__()
        self.lin = nn.Linear(k, n)

    def forward(self, x, r):
        return nn.functional.gelu(self.lin(x)) + r


class _Bmm(nn.Module):
    def forward(self, q, k):
        return torch.softmax(q @ k.transpose(-1, -2) / 4.0, -1) @ k


CASES = {       # name: (model, input shapes, kernels with render targets at least)
    "linear_gelu_residual_rows": (lambda: _LinearGeluResidual(64, 32), [(64, 64), (64, 32)], 1),
    "linear_one_row": (lambda: nn.Linear(64, 32), [(8, 64)], 1),
    "linear_no_bias_k40": (lambda: nn.Linear(40, 64, bias=False), [(32, 40)], 1),
    "attention_bmm": (_Bmm, [(2, 32, 16), (2, 32, 16)], 1),
    "linear_rows_not_cut": (lambda: nn.Linear(64, 12), [(6, 64)], 0),     # 72 outputs: no exact cut in 4 parts
    "elementwise": (lambda: nn.GELU(), [(64, 64)], 0),                      # no reduction: nothing to share
}


@pytest.mark.parametrize("name", list(CASES))
def test_render_targets_match_eager(name):
    make, shapes, least = CASES[name]
    torch.manual_seed(0)
    model = make().eval()
    xs = [torch.randn(s) for s in shapes]
    with torch.no_grad():
        expected = model(*xs).numpy()
    compiled = fxc.from_torch(model, tuple(xs), target="webgl")
    kernels = program_of(compiled.module.source)["kernels"]
    with_targets = [n for n, k in kernels.items() if k.get("targets", 1) > 1]
    assert len(with_targets) >= least if least else not with_targets, (name, with_targets)
    for n in with_targets:
        assert kernels[n]["targets"] == 4 and "fxc_out3" in kernels[n]["shader"]
    got = compiled(*[x.numpy() for x in xs])
    assert got.shape == expected.shape
    assert_close_np(got, expected, rtol=1e-5, atol=1e-5 * max(1.0, float(np.abs(expected).max())))


def test_jammed_matmul_fetches_eight_texels_for_sixty_four_multiply_adds():
    """A linear layer of 64 rows: a fragment computes rows m, m + 16, m + 32, m + 48 of four columns; each step of
    its reduction loop (four k) fetches one activation texel per row and one weight texel per column, shared by the
    four rows (one target: 5 fetches for 16 multiply-adds)."""
    torch.manual_seed(0)
    model, x = nn.Linear(32, 16).eval(), torch.randn(64, 32)
    compiled = fxc.from_torch(model, (x,), target="webgl")
    (k,) = program_of(compiled.module.source)["kernels"].values()
    assert k["targets"] == 4 and k["split"] * 4 * 4 == 64 * 16
    loop = re.search(r"for \(int \w+ = 0; \w+ < 32; \w+ \+= 4\) \{(.*?)\n    \}", k["shader"], re.S).group(1)
    assert loop.count("texelFetch(") == 8, loop
    with torch.no_grad():
        assert_close_np(compiled(x.numpy()), model(x).numpy(), rtol=1e-5, atol=1e-5)


def test_program_without_targets_still_loads():
    """A program of an earlier build (no "targets" in its kernels) lays out and runs as before."""
    from fxc.runtime.webgl import layout
    program = {"width": 64, "lanes": 4, "kernels": {"k": {"shader": "", "output": 0, "params": [["float32", 8]]}}}
    desc = layout(program, [], [], [], [])
    assert json.loads(json.dumps(desc))["kernels"]["k"] == {"shader": "", "output": 0, "targets": 1, "split": 0}
