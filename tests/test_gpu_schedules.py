"""GPU-family schedules and the index width on the opencl target (PoCL here): the sliding-window schedule
(depthwise convolution, pooling) against eager PyTorch, the max pool's compute form and its CPU loop IR, and
32-bit index arithmetic where the interval analysis proves it exact (64-bit elsewhere)."""
import dataclasses
import re

import numpy as np
import pytest
import torch

from fxc.backends.opencl import render_opencl
from fxc.lowering.expr import Var, as_expr, binary
from fxc.lowering.int_ranges import narrow_indices
from fxc.lowering.loop_ir import Buffer, For, Kernel, LetStmt, Store, launch_of
from fxc.lowering.schedules import gpu


def _compile(fn, *xs):
    return torch.compile(fn, backend="fxc", options={"target": "opencl"})(*xs)


def _sources(monkeypatch, **knobs) -> list:
    """Builds from now on use these knobs (and are not read back from the module cache); their OpenCL programs."""
    from fxc.runtime import device_module
    monkeypatch.setenv("FXC_MODULE_CACHE", "0")
    for_caps = gpu.Knobs.for_caps
    monkeypatch.setattr(gpu.Knobs, "for_caps", staticmethod(lambda caps: dataclasses.replace(for_caps(caps), **knobs)))
    seen = []
    init = device_module.DeviceModule.__post_init__

    def record(self):
        seen.append(self.source)
        init(self)
    monkeypatch.setattr(device_module.DeviceModule, "__post_init__", record)
    return seen


@pytest.mark.parametrize("stride", [1, 2])
def test_depthwise_conv_with_epilogue_uses_the_window_schedule(stride, monkeypatch):
    """MobileNet's block: depthwise 3x3 (padding 1) + batch norm + ReLU6; the window schedule (several outputs per
    work-item, one accumulator each) equals eager; so does the one-work-item-per-output schedule."""
    torch.manual_seed(stride)
    m = torch.nn.Sequential(torch.nn.Conv2d(12, 12, 3, stride, 1, groups=12), torch.nn.BatchNorm2d(12),
                            torch.nn.ReLU6()).eval()
    with torch.no_grad():
        m[1].running_mean.uniform_(-0.5, 0.5)
        m[1].running_var.uniform_(0.5, 1.5)
    x = torch.randn(2, 12, 13, 11)
    for knobs, marker in (({}, "wacc"), ({"window_cols": 0}, None)):
        sources = _sources(monkeypatch, **knobs)
        torch._dynamo.reset()
        with torch.no_grad():
            torch.testing.assert_close(_compile(m, x), m(x), rtol=1e-4, atol=1e-5)
        assert sources and (marker is None) == all("wacc" not in s for s in sources)


@pytest.mark.parametrize("extern_computes", [True, False], ids=["compute-form", "cpu-loop-ir"])
def test_pools_on_the_device(extern_computes, monkeypatch):
    """Max pool (its compute form in the window schedule, or its CPU loop IR row by row) and average pool with
    padding, stride and ceil mode, against eager."""
    sources = _sources(monkeypatch, extern_computes=extern_computes)
    x = torch.randn(1, 5, 17, 14)

    def f(x):
        return (torch.nn.functional.max_pool2d(x, 3, 2, 1), torch.nn.functional.avg_pool2d(x, 3, 2, 1, ceil_mode=True),
                torch.nn.functional.max_pool2d(x, 2))

    for got, want in zip(_compile(f, x), f(x)):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    assert sum(s.count("float wacc") for s in sources) == (3 if extern_computes else 1)


def test_indices_are_32_bit_where_the_interval_analysis_proves_it():
    """At index width 32 (a GPU's) a copy over a small buffer renders int work-group / work-item indices and
    addresses; over 2**34 elements the flat index stays 64-bit (its work-group index still fits 32 bits); a let
    value (a flat index) narrows with the loop variables it is computed from. At width 64 (a CPU device's) only the
    remainder runs in 32 bits. Both run on the device: y[i] = x[i] + x[i % 64]."""
    def kernel(n: int, bits: int) -> Kernel:
        x, y = Buffer("x", "float32", n), Buffer("y", "float32", n)
        g, t, i = Var("g"), Var("th"), Var("i")
        body = For(g, n // 64, For(t, 64, LetStmt(i, g * 64 + t, Store(y, i, x[i] + x[binary("imod", i, as_expr(64))])),
                                   "thread"), "grid")
        return Kernel("copy", [y, x], body, index_bits=bits, launch=launch_of(body))
    gpu32, cpu64 = render_opencl([kernel(1 << 12, 32)]), render_opencl([kernel(1 << 12, 64)])
    assert "const int g" in gpu32 and "const int i" in gpu32
    assert not re.search(r"\blong\b", gpu32.split("void copy")[1])
    assert "const long g" in cpu64 and "const long i" in cpu64 and "((int)i" in cpu64 and "% (int)64L" in cpu64
    huge = render_opencl([kernel(1 << 34, 32)])
    assert "const int g" in huge and "const long i" in huge        # 2**28 work-groups, 2**34 elements
    k = kernel(1 << 12, 32)
    assert {v.name.rstrip("0123456789") for v in narrow_indices(k, set()) if isinstance(v, Var)} == {"g", "th", "i"}
    from fxc.runtime.device_module import DeviceModule, Launch
    from fxc.runtime.module import TensorSpec
    a = np.arange(1 << 12, dtype=np.float32)
    for src in (gpu32, cpu64):
        m = DeviceModule("opencl", src, [TensorSpec("x", a.shape, "float32")], [TensorSpec("y", a.shape, "float32")],
                         [], 0, [Launch("copy", [("out", 0), ("in", 0)], k.launch.grid, k.launch.block)])
        np.testing.assert_array_equal(m(a), a + a[np.arange(a.size) % 64])
