"""The targets the tests run on, and which test runs on which (conftest.py's `target` fixture reads this module).

Every target fxc has is a parameter of the `target` fixture. What a test that takes `target` runs on:

- unmarked: the host target alone (`HOST`); the whole op matrix and the frontends' tests are of this kind.
- `@pytest.mark.all_targets`: every target of `ALL_TARGETS`.
- `@pytest.mark.targets("opencl", "wasm")`: the targets named.

`FXC_TEST_TARGETS` (a comma list) replaces that choice: every test that takes `target` runs on the targets listed,
marked or not, unless its marker names none of them — e.g. the whole op matrix on OpenCL:
`FXC_TEST_TARGETS=opencl python -m pytest tests/ops/test_ops.py -k test_op_matches_reference`.

A target whose runtime this machine lacks (no OpenCL platform, no EGL, no Chromium, no wasm-ld, a CPU without the
ISA) is skipped, and in CI (CI=true) it is a failure: CI installs every runtime (scripts/setup.sh)."""
import functools
import os

import numpy as np
import pytest

HOST = "llvm"
ISA_TARGETS = ("llvm -mcpu=haswell",)               # a lower ISA than the host's: its code must run here
DEVICE_TARGETS = ("opencl", "opengl", "webgl", "webgpu", "wasm")
ALL_TARGETS = (HOST,) + ISA_TARGETS + DEVICE_TARGETS


def chosen_targets() -> tuple:
    """The comma list in FXC_TEST_TARGETS, or () when it is unset."""
    return tuple(t.strip() for t in os.environ.get("FXC_TEST_TARGETS", "").split(",") if t.strip())


def targets_of(markers) -> tuple:
    """The targets a test runs on, from its `all_targets` / `targets(...)` markers (see the module docstring)."""
    names = {m.name: m.args for m in markers}
    marked = ALL_TARGETS if "all_targets" in names else names.get("targets")
    chosen = chosen_targets()
    if chosen:
        return tuple(t for t in chosen if marked is None or t in marked)
    return tuple(marked) if marked is not None else (HOST,)


@functools.cache
def missing_runtime(target: str) -> str | None:
    """Why `target` cannot run on this machine (None: it can). A CPU target needs the host to have its ISA; any other
    target builds and runs exp(x) once (the first test on that target pays for opening the device)."""
    from fxc.errors import TargetError
    from fxc.target import Target, host_features
    if target.split()[0] == "llvm":
        lacks = Target.parse(target).caps.features - host_features()
        return f"this host's CPU lacks {', '.join(sorted(lacks))}" if lacks else None
    from fxc.driver.build import build
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
    """Skips the calling test when `target`'s runtime is missing here; fails it in CI, where every runtime is
    installed."""
    why = missing_runtime(target)
    if why is None:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"target {target!r} cannot run in CI: {why}", pytrace=False)
    pytest.skip(f"target {target!r} cannot run here: {why}")
