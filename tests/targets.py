"""The targets the tests run on, and which test runs on which (conftest.py's `target` fixture reads this module).

Every target fxc has is a parameter of the `target` fixture. What a test that takes `target` runs on:

- unmarked: the host target alone (`HOST`): the frontends' and capture's tests, whose target only changes the kernels.
- `@pytest.mark.cpu_targets`: the host and the lower ISAs (`CPU_TARGETS`): the whole op matrix, the storage dtypes'
  conversions (code that differs with the CPU's vector width and instructions).
- `@pytest.mark.all_targets`: every target of `ALL_TARGETS` (the hardening cases that hold on every target).
- `@pytest.mark.targets("opencl", "wasm")`: the targets named, and only those: what holds on them alone (the device
  targets' shared cases, tests/backends/test_every_target.py; int64 beyond 32 bits on the 64-bit-integer targets).

`FXC_TEST_TARGETS` (a comma list) replaces the first three choices: every test that takes `target` runs on the
targets listed, but a `targets(...)` test only on those of them it names. E.g. the whole op matrix on OpenCL (which
the device targets run a fixed sample of in CI: it would take minutes per target, and their refusals fail it):
`FXC_TEST_TARGETS=opencl python -m pytest tests/ops/test_ops.py -k test_op_matches_reference`.

A device target whose runtime this machine lacks (no OpenCL platform, no EGL, no Chromium, no wasm-ld) is skipped, and
in CI (CI=true) it is a failure: CI installs every runtime (scripts/setup.sh). A CPU target whose instructions this
host lacks is skipped (hardware, not an install)."""
import functools
import os

import numpy as np
import pytest

HOST = "llvm"
ISA_TARGETS = ("llvm -mcpu=haswell",)               # a lower ISA than the host's: its code must run here
DEVICE_TARGETS = ("opencl", "opengl", "webgl", "webgpu", "wasm")
CPU_TARGETS = (HOST,) + ISA_TARGETS
ALL_TARGETS = CPU_TARGETS + DEVICE_TARGETS


def chosen_targets() -> tuple:
    """The comma list in FXC_TEST_TARGETS, or () when it is unset."""
    return tuple(t.strip() for t in os.environ.get("FXC_TEST_TARGETS", "").split(",") if t.strip())


def targets_of(markers) -> tuple:
    """The targets a test runs on, from its markers (see the module docstring)."""
    names = {m.name: m.args for m in markers}
    only = names.get("targets")
    chosen = chosen_targets()
    if chosen:
        return tuple(t for t in chosen if only is None or t in only)
    if only is not None:
        return tuple(only)
    return ALL_TARGETS if "all_targets" in names else CPU_TARGETS if "cpu_targets" in names else (HOST,)


@functools.cache
def missing_runtime(target: str) -> str | None:
    """Why `target`'s runtime cannot run here (None: it can): it builds and runs exp(x) once (the first test on that
    target pays for opening the device)."""
    from fxc.driver.build import build
    from fxc.errors import TargetError
    from fxc.relay_like.builder import Builder
    b = Builder()
    v = b.graph.input((4,), "float32")
    b.graph.outputs = [b.call("exp", [v])]
    try:
        build(b.graph, target=target)(np.zeros(4, np.float32))
    except TargetError as e:
        return str(e)
    return None


def require_runtime(target: str) -> None:
    """Skips the calling test when this host's CPU lacks a CPU target's instructions (hardware: a skip in CI too), or
    when `target`'s runtime is missing here, which fails it in CI, where every runtime is installed."""
    from fxc.target import Target, host_features
    if target.split()[0] == "llvm":
        lacks = Target.parse(target).caps.features - host_features()
        if lacks:
            pytest.skip(f"this host's CPU lacks {', '.join(sorted(lacks))}, which target {target!r} uses")
        return
    why = missing_runtime(target)
    if why is None:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"target {target!r} cannot run in CI: {why}", pytrace=False)
    pytest.skip(f"target {target!r} cannot run here: {why}")
