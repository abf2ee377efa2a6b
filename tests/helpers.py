"""Helpers shared by the tests: comparisons with eager and numpy, and the `fxc` command run as a user runs it."""
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch


def assert_close_np(actual, expected, rtol=1e-4, atol=1e-5):
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.shape == expected.shape, f"shape {actual.shape} != {expected.shape}"
    assert actual.dtype == expected.dtype, f"dtype {actual.dtype} != {expected.dtype}"
    if actual.dtype.kind in "biu":
        np.testing.assert_array_equal(actual, expected)
    else:
        scale = max(float(np.nanmax(np.abs(expected))) if expected.size and np.isfinite(expected).any() else 1.0, 1.0)
        np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol * scale, equal_nan=True)


def check_module(model, *inputs, target="llvm", rtol=1e-4, atol=1e-5, **options):
    """torch.compile(model, backend="fxc") vs eager, like Hidet's check_module."""
    with torch.no_grad():
        expected = model(*inputs)
        compiled = torch.compile(model, backend="fxc", options=dict(target=target, **options))
        actual = compiled(*inputs)
    exp = expected if isinstance(expected, (tuple, list)) else (expected,)
    act = actual if isinstance(actual, (tuple, list)) else (actual,)
    assert len(exp) == len(act)
    for a, e in zip(act, exp):
        if isinstance(e, torch.Tensor):
            assert a.dtype == e.dtype and a.shape == e.shape, (a.dtype, e.dtype, a.shape, e.shape)
            scale = max(e.abs().max().item(), 1.0) if e.numel() and e.is_floating_point() else 1.0
            torch.testing.assert_close(a, e, rtol=rtol, atol=atol * scale, equal_nan=True)
        else:
            assert a == e
    return actual


def sgd_steps(models, x, y, steps=3, lr=0.1):
    """`steps` SGD steps of each model in turn on the mean squared error of model(x) against y (eager and compiled
    alike, so that their parameters can be compared afterwards)."""
    for m in models:
        opt = torch.optim.SGD(m.parameters(), lr=lr)
        for _ in range(steps):
            opt.zero_grad()
            loss = ((m(x) - y) ** 2).mean()
            loss.backward()
            opt.step()


class ConvNet(torch.nn.Module):
    """A 3x3 conv (3 input channels), relu, the spatial mean and a linear layer: a small network with weights to
    pack (the prepack and cross-compilation tests)."""

    def __init__(self, channels: int = 24, classes: int = 10):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, channels, 3, padding=1)
        self.fc = torch.nn.Linear(channels, classes)

    def forward(self, x):
        return self.fc(torch.relu(self.conv(x)).mean((2, 3)))


def _host_has_avx512f() -> bool:
    from fxc.target import Target
    return Target.parse("llvm").caps.has("avx512f")


# a test of the 16-lane (AVX-512) schedules' form (their loops, tiles, vector widths), not of the answer: on a host
# without AVX-512 the host target's schedules are the 8-lane ones, whose answers the op and model tests check
avx512_schedule = pytest.mark.skipif(not _host_has_avx512f(),
                                     reason="checks the 16-lane AVX-512 schedule: this host's CPU lacks avx512f")


FXC = Path(sys.executable).parent / "fxc"       # the console script pip installs beside the interpreter


def fxc_cli(*args, ok=True, env=None):
    """`fxc ARGS` run as a user runs it; ok: exit 0, else exit 1 with one error line and no traceback."""
    assert FXC.exists(), f"the console script {FXC} is missing: pip install -e ."
    p = subprocess.run([str(FXC), *map(str, args)], capture_output=True, text=True, timeout=600,
                       env=dict(os.environ, **(env or {})))
    if ok:
        assert p.returncode == 0, p.stderr
    else:
        assert p.returncode == 1, (p.returncode, p.stdout, p.stderr)
        assert "Traceback" not in p.stderr, p.stderr
    return p
