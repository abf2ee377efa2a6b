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

GL_FAMILY = ("opengl", "webgl", "webgpu")            # 32-bit integers; float division by the GPU's own rules

# What a target does not do as eager does today, by test name ({t}: the target) and target: each is an expected
# failure, strict (when a fix makes one pass, its entry must go). Found by running the hardening tests on every target.
INT64_BEYOND_32_BITS = "an int64 value beyond 32 bits is an ExecutionError there (32-bit integers; docs/targets.md)"
FLOOR_DIVISION = "floor division is floor(a / b): 1.0 // 0.1 is 10, not 9"
INT64_DIVISION = "int64 division runs in eager on opengl (GLSL has 32-bit integers): eager's error, not fxc's"
KNOWN_FAILURES = {
    # wrong answers
    "test_floor_divide_is_exact[{t}]": dict.fromkeys(GL_FAMILY, FLOOR_DIVISION),
    "test_nan_inf_values[{t}-floor_divide]": dict.fromkeys(GL_FAMILY, FLOOR_DIVISION),
    "test_nan_inf_values[{t}-remainder]": dict.fromkeys(GL_FAMILY, "remainder and fmod go through floor(a / b)"),
    "test_nan_inf_values[{t}-softmax]": {"webgl": "softmax of a row with inf or nan differs from eager's"},
    "test_nan_inf_values[{t}-log_softmax]": dict.fromkeys(("webgl", "webgpu"),
                                                          "log_softmax of a row with inf or nan differs from eager's"),
    "test_embedding_out_of_range_raises_through_torch_compile[{t}--4611686018427387904]": {
        "wasm": "the IndexOutOfRangeError names -4611686018427388000 (the index went through a float64)",
        "opengl": INT64_BEYOND_32_BITS, "webgpu": INT64_BEYOND_32_BITS},
    # documented limits
    "test_embedding_out_of_range_raises_through_torch_compile[{t}-1099511627776]":
        dict.fromkeys(("opengl", "webgpu"), INT64_BEYOND_32_BITS),
    "test_out_of_range_float_to_int_casts_as_eager[{t}-src0-dtype4]": dict.fromkeys(GL_FAMILY, INT64_BEYOND_32_BITS),
    **{f"test_integer_division_by_zero_raises_as_eager[{{t}}-<lambda>{i}]": {"opengl": INT64_DIVISION}
       for i in range(3)},
}


def known_failure(test_name: str, target: str) -> str | None:
    """Why `test_name` (as pytest names it, parameters included) fails on `target` today, or None."""
    for pattern, reasons in KNOWN_FAILURES.items():
        if target in reasons and pattern.format(t=target) == test_name:
            return reasons[target]
    return None


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
