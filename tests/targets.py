"""Targets for test parametrisation. `TARGETS` (fxc.driver.build) is what the whole op matrix runs on (the host CPU);
device targets run the reference models and a fixed op sample (tests/backends/opencl/test_opencl.py). A test that
should run on
every target parametrises with `all_targets`:

    @all_targets
    def test_something(target): ...

A missing device runtime is a failure, not a skip (CI installs PoCL: scripts/setup.sh)."""
import os

import pytest

from fxc.driver.build import TARGETS

DEVICE_TARGETS = ("opencl", "opengl", "webgl", "wasm", "webgpu")
ALL_TARGETS = tuple(TARGETS) + DEVICE_TARGETS
all_targets = pytest.mark.parametrize("target", ALL_TARGETS)


def targets_under_test() -> tuple:
    """What conftest's `target` fixture runs: the host CPU, or the comma list in FXC_TEST_TARGETS (e.g. "opencl":
    the whole op matrix on OpenCL, `FXC_TEST_TARGETS=opencl pytest tests/ops/test_ops.py`)."""
    chosen = tuple(t for t in os.environ.get("FXC_TEST_TARGETS", "").split(",") if t)
    return chosen or tuple(TARGETS)
