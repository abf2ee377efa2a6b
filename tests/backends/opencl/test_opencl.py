"""What only the OpenCL target (PoCL here) has: loop-IR fixtures on both renderers, the prepack step's runs,
single-work-item kernels in explain, per-kernel device times, the OpenCL device choice and its error cases, and the
opinfo and fuzz sweeps' fixed samples. The cases every device target shares (the fixed op sample, the reference models,
weights kept on the device, export and load...) are in tests/backends/test_every_target.py.

A missing OpenCL runtime is a failure, not a skip (scripts/setup.sh installs PoCL)."""
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import fxc
import fxc.capture.torch.recorder
from fxc.driver.build import build
from fxc.errors import CompileError, LoweringError, TargetError
from fxc.lowering.loop_ir import Barrier, Buffer, For, Kernel, Store, seq
from fxc.ops.registry import all_ops
from fxc.relay_like.builder import Builder
from fxc.runtime.cpu.module import Module
from fxc.runtime.tensors import TensorSpec
from fxc.symbolic.expr import Broadcast, Const, Var, VecLoad
from tests.helpers import assert_close_np
from tests.helpers_devices import (
    fixture_expected,
    fixture_kernel,
    fixture_launches,
    small_net,
)

ROOT = Path(__file__).resolve().parents[3]


# ------------------------------------------------------------------------------ loop-IR fixtures, both renderers
def _run_llvm(k: Kernel, x):
    from fxc.backends.llvm import compile as llvm
    ir = llvm.render([k], [(k.name, [("out", 0), ("in", 0)])])
    lib, _ = llvm.build_library(ir)
    m = Module("llvm", str(lib), [TensorSpec("x", x.shape, "float32")], [TensorSpec("y", x.shape, "float32")], [], 0)
    return m(x)


def _run_opencl(k: Kernel, x):
    from fxc.backends.opencl.render import render_opencl
    from fxc.runtime.opencl.module import OpenCLModule
    kernels, plan = fixture_launches(k)
    m = OpenCLModule("opencl", render_opencl(kernels), [TensorSpec("x", x.shape, "float32")],
                     [TensorSpec("y", x.shape, "float32")], [], 0, plan)
    return m(x), kernels


def test_fixture_kernel_on_both_renderers():
    """One hand-written loop-IR kernel (parallel rows, private accumulator, select, casts, floor division, vector
    loads/stores) rendered by the LLVM and the OpenCL renderer: both equal numpy."""
    x = np.random.default_rng(0).standard_normal((6, 32)).astype(np.float32)
    expected = fixture_expected(x)
    assert_close_np(_run_llvm(fixture_kernel(6, 32), x), expected)
    got, kernels = _run_opencl(fixture_kernel(6, 32), x)
    assert_close_np(got, expected)
    assert kernels[0].launch.grid == (2,) and kernels[0].launch.block == (4,)   # 6 rows: 2 work-groups of 4


def test_vector_expressions_scalarized_for_opencl():
    """Shuffles and lane reductions (the CPU schedules' vector forms) taken apart lane by lane: the same result on
    both renderers. y[r, c] = x[r, 7 - c] + sum(x[r, :])."""
    from fxc.symbolic.expr import LaneReduce, Shuffle
    rows = 5
    x, y = Buffer("x", "float32", rows * 8), Buffer("y", "float32", rows * 8)
    r = Var("r")
    v = VecLoad(x, r * 8, 8)
    body = For(r, rows, Store(y, r * 8, Shuffle(v, v, list(range(7, -1, -1))) + Broadcast(LaneReduce("add", v), 8)),
               "parallel")
    a = np.random.default_rng(2).standard_normal((rows, 8)).astype(np.float32)
    expected = a[:, ::-1] + a.sum(axis=1, keepdims=True)
    assert_close_np(_run_llvm(Kernel("vec", [y, x], body), a), expected)
    assert_close_np(_run_opencl(Kernel("vec", [y, x], body), a)[0], expected)


def test_cpu_renderer_rejects_device_constructs():
    from fxc.backends.llvm import compile as llvm
    y = Buffer("y", "float32", 64)
    sh = Buffer("sh", "float32", 64, "shared")
    g, t = Var("g"), Var("t")
    for body in (For(g, 4, For(t, 16, Store(y, g * 16 + t, Const(1.0, "float32")), "thread"), "grid"),
                 seq(Store(y, Const(0, "int64"), Const(1.0, "float32")), Barrier()),
                 For(t, 64, Store(y, t, sh[t]))):
        with pytest.raises(LoweringError):
            llvm.render([Kernel("dev", [y], body)], [("dev", [("out", 0)])])
    with pytest.raises(LoweringError, match="private"):
        Buffer("old", "float32", 1, "local")        # the kernel-private scope is "private" now


# ----------------------------------------------------------------------------- the prepack step, explain, profile


def test_weight_only_kernels_run_once_and_again_when_a_weight_changes():
    """The prepack step (a batch norm folded into the conv's weights: what reads weights only) runs on the first
    call, not on the next ones, and again after an in-place write to a weight (seen by its version, or by the
    sampled words when .data hides it); the result follows the weight."""
    model, x = small_net(), torch.randn(1, 3, 10, 11)
    compiled = torch.compile(model, backend="fxc", options={"target": "opencl"})
    fxc.capture.torch.recorder._recorders.append(rec := fxc.capture.torch.recorder.Explanation())
    try:
        with torch.no_grad():
            compiled(x)
    finally:
        fxc.capture.torch.recorder._recorders.remove(rec)
    assert any(k.endswith("[prepack]") for k in rec.kernels)
    import gc
    m, = [o for o in gc.get_objects() if type(o).__name__ == "OpenCLModule" and o.prepack_inputs
          and any(s.shape == (1, 3, 10, 11) for s in o.inputs)]
    with torch.no_grad():
        for _ in range(3):
            torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-5)
        assert m.prepack_runs == 1
        model[1].weight.mul_(2)
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-5)
        assert m.prepack_runs == 2
        model[1].running_var.data[:] += 1
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-5)
        compiled(x)
        assert m.prepack_runs == 3


def test_explain_marks_single_work_item_kernels():
    """An op whose definition is sequential loop IR (te.extern: a Cholesky factorisation, a scan) runs on the device
    as one work-item; fxc.explain says so on its kernel line, and on no parallel one."""
    def f(a, x):
        return torch.linalg.cholesky(a @ a.mT + torch.eye(4)), torch.cumsum(x, 0)

    a, x = torch.randn(4, 4), torch.randn(5, 6)
    e = fxc.explain(f, a, x, target="opencl")
    assert not e.fallback_ops and len(e.kernels) >= 3
    lines = {k.split(" ->")[0]: k for k in e.kernels}
    assert "(single work-item)" in lines["cholesky"] and "grid 1 x block 1" in lines["cholesky"]
    assert "(single work-item)" not in lines["matmul+add"] and "(single work-item)" in str(e)
    ref = f(a, x)
    for got, want in zip(torch.compile(f, backend="fxc", options={"target": "opencl"})(a, x), ref):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


def test_profile_gives_per_kernel_device_times():
    b = Builder()
    v = b.graph.input((64, 64), "float32")
    b.graph.outputs = [b.call("exp", [b.call("matmul", [v, v])])]
    m = build(b.graph, target="opencl", profile=True)
    m(np.ones((64, 64), np.float32))
    rows = m.profile()
    assert rows and all(r["calls"] == 1 and r["total_ms"] > 0 for r in rows)


# ------------------------------------------------------------------------------------------------- errors
NO_PLATFORM = """
import sys
import numpy as np
from fxc.errors import TargetError
from fxc.relay_like.builder import Builder
from fxc.driver.build import build
b = Builder(); v = b.graph.input((4,), "float32"); b.graph.outputs = [b.call("exp", [v])]
try:
    build(b.graph, target="opencl")
    sys.exit(1)
except TargetError as e:
    print("TargetError:", e)
import torch
try:        # torch.compile says so too, rather than running the model in eager on the CPU
    torch.compile(torch.nn.ReLU(), backend="fxc", options={"target": "opencl"})(torch.randn(3))
    sys.exit(2)
except Exception as e:
    print(type(e).__name__, e)
    sys.exit(0 if "no OpenCL platform" in str(e) else 3)
"""


def test_no_opencl_platform_is_a_target_error(tmp_path):
    env = dict(os.environ, OCL_ICD_VENDORS=str(tmp_path), PYTHONPATH=str(ROOT))
    p = subprocess.run([sys.executable, "-c", NO_PLATFORM], capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "no OpenCL platform" in p.stdout and "pocl-opencl-icd" in p.stdout


def test_unknown_device_names_the_devices_here():
    b = Builder()
    v = b.graph.input((4,), "float32")
    b.graph.outputs = [b.call("exp", [v])]
    with pytest.raises(TargetError, match="devices here"):
        build(b.graph, target="opencl -device=no-such-gpu")
    with pytest.raises(TargetError, match="devices here"):
        build(b.graph, target="opencl -device=99")


def _device_with(monkeypatch, **info):
    from fxc.runtime.opencl import device as opencl
    dev = opencl.open_device(None)
    monkeypatch.setattr(dev, "info", dict(dev.info, **info))
    monkeypatch.setattr(opencl, "open_device", lambda spec=None: dev)


def test_float64_on_a_device_without_fp64(monkeypatch):
    _device_with(monkeypatch, fp64=False)
    b = Builder()
    v = b.graph.input((4,), "float64")
    b.graph.outputs = [b.call("exp", [v])]
    with pytest.raises(TargetError, match="float64.*cl_khr_fp64"):
        build(b.graph, target="opencl")
    b = Builder()           # float32 code never uses double, so such a device runs it
    v = b.graph.input((4,), "float32")
    b.graph.outputs = [b.call("cast", [b.call("exp", [v])], dtype="int32")]
    m = build(b.graph, target="opencl")
    assert "double" not in m.source
    x = np.array([0.0, 1.0, 2.0, 5.5], np.float32)
    assert_close_np(m(x), all_ops()["cast"].reference(np.exp(x), dtype="int32"))


def test_too_little_device_memory(monkeypatch):
    _device_with(monkeypatch, global_memory_bytes=1024, max_alloc_bytes=1024)
    b = Builder()
    v = b.graph.input((64, 64), "float32")
    b.graph.outputs = [b.call("exp", [v])]
    with pytest.raises(TargetError, match="device memory"):
        build(b.graph, target="opencl")


def test_a_driver_build_error_carries_source_and_log():
    from fxc.runtime.opencl.device import open_device
    bad = "__kernel void broken(__global float *y) { y[0] = undefined_name; }"
    with pytest.raises(CompileError) as e:
        open_device(None).program(bad)
    assert e.value.source == bad and "undefined_name" in e.value.log


# ------------------------------------------------------------------ the sweeps' fixed samples (full: docs/targets.md)
OPINFO_SAMPLE = ["add", "softmax", "nn.functional.conv2d", "nn.functional.max_pool2d", "nn.functional.avg_pool2d",
                 "cumsum", "gather", "matmul"]


@pytest.mark.parametrize("key", OPINFO_SAMPLE)
def test_opinfo_sample_on_opencl(key):
    from fxc.testing import opinfo
    op, = [o for o in opinfo.select_ops({key}) if opinfo.op_key(o) == key]
    r = opinfo.run_op(op, "opencl", max_samples=2)
    assert r["status"] == "compiled", f"{key}: {r['status']}: {r['error'] or r['fallback']}"


def test_fuzz_sample_on_opencl():
    from fxc.testing import fuzz
    stats = fuzz.run(count=8, seed=0, target="opencl", save_dir=None, progress=lambda m: None, batch=8)
    assert stats["graphs"] == 8
    assert stats["wrong"] == 0 and stats["crashed"] == 0 and stats["uncompiled"] == 0, stats["failures"]
