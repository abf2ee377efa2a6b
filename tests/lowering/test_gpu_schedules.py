"""GPU-family schedules and the index width on the opencl target (PoCL here): the sliding-window schedule
(depthwise convolution, pooling) against eager PyTorch, the max pool's compute form and its CPU loop IR, and
32-bit index arithmetic where the interval analysis proves it exact (64-bit elsewhere)."""
import dataclasses
import re

import numpy as np
import pytest
import torch

from fxc.backends.opencl.render import render_opencl
from fxc.lowering.int_ranges import narrow_indices
from fxc.lowering.loop_ir import Buffer, For, Kernel, LetStmt, Store, launch_of
from fxc.lowering.schedules import gpu
from fxc.symbolic.expr import Var, as_expr, binary


def _compile(fn, *xs):
    """fn compiled for opencl at these inputs' static shapes (a second shape would otherwise make Dynamo's batch
    symbolic: row launches, each block at its own schedule)."""
    return torch.compile(fn, backend="fxc", dynamic=False, options={"target": "opencl"})(*xs)


def _sources(monkeypatch, **knobs) -> list:
    """Builds from now on use these knobs (and are not read back from the module cache); their OpenCL programs."""
    from fxc.runtime.opencl import module as opencl_module
    monkeypatch.setenv("FXC_MODULE_CACHE", "0")
    for_caps = gpu.Knobs.for_caps
    monkeypatch.setattr(gpu.Knobs, "for_caps", staticmethod(lambda caps: dataclasses.replace(for_caps(caps), **knobs)))
    seen = []
    init = opencl_module.OpenCLModule.__post_init__

    def record(self):
        seen.append(self.source)
        init(self)
    monkeypatch.setattr(opencl_module.OpenCLModule, "__post_init__", record)
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
    from fxc.runtime.launch import Launch
    from fxc.runtime.opencl.module import OpenCLModule
    from fxc.runtime.tensors import TensorSpec
    a = np.arange(1 << 12, dtype=np.float32)
    for src in (gpu32, cpu64):
        m = OpenCLModule("opencl", src, [TensorSpec("x", a.shape, "float32")], [TensorSpec("y", a.shape, "float32")],
                         [], 0, [Launch("copy", [("out", 0), ("in", 0)], k.launch.grid, k.launch.block)])
        np.testing.assert_array_equal(m(a), a + a[np.arange(a.size) % 64])


# ------------------------------------------------------------------------------------------------------------ GEMV
GEMV_FORMS = {"cpu-device": {}, "gpu-tree": {"gemv_threads": 8, "gemv_outputs": 4, "vector_width": 4},
              "scalar": {"gemv_threads": 4, "gemv_outputs": 3, "vector_width": 1}}


@pytest.mark.parametrize("form", GEMV_FORMS)
@pytest.mark.parametrize("rows,k,n", [(1, 1283, 37), (3, 64, 10), (2, 7, 5)])
def test_gemv_schedule_against_eager(form, rows, k, n, monkeypatch):
    """A linear layer with few rows (batch 1 to 3) and a GELU epilogue, k with a remainder after the vectors and after
    the work-items, columns that do not fill the last work-group: the GEMV schedule in the PoCL default form (one
    output per work-item, 16-lane vector loads), the GPU form (8 work-items along k, a shared-memory tree) and
    scalar loads; each equals eager."""
    sources = _sources(monkeypatch, **GEMV_FORMS[form])
    torch.manual_seed(rows * k)
    m = torch.nn.Sequential(torch.nn.Linear(k, n), torch.nn.GELU()).eval()
    x = torch.randn(rows, k)
    torch._dynamo.reset()
    with torch.no_grad():
        torch.testing.assert_close(_compile(m, x), m(x), rtol=1e-4, atol=1e-4)
    src = "\n".join(sources)
    assert "vacc" in src or "vtail" in src
    assert ("barrier(CLK_LOCAL_MEM_FENCE)" in src) == (form != "cpu-device")
    want_vectors = form != "scalar" and k >= GEMV_FORMS[form].get("vector_width", 16)
    assert bool(re.search(r"vload(4|16)\(", src)) == want_vectors


@pytest.mark.parametrize("lanes", [16, 4])
def test_gemv_along_columns(lanes, monkeypatch):
    """x @ w with w [k, n] (contiguous along the columns): each work-item a vector of columns (a broadcast of x times
    a vector load of w's row), the last n % lanes columns one by one; with a ReLU epilogue, against eager. Eight
    rows stay with the tiled GEMM."""
    sources = _sources(monkeypatch, vector_width=lanes)
    torch.manual_seed(lanes)
    x, w = torch.randn(8, 40), torch.randn(40, 37)
    torch._dynamo.reset()
    f = lambda a, b: torch.relu(a @ b)      # noqa: E731
    torch.testing.assert_close(_compile(f, x[:2], w), f(x[:2], w), rtol=1e-4, atol=1e-4)
    assert any("vacc" in s and f"vload{lanes}(" in s for s in sources)
    sources.clear()
    torch.testing.assert_close(_compile(f, x, w), f(x, w), rtol=1e-4, atol=1e-4)
    assert sources and not any("vacc" in s for s in sources)


def test_knobs_from_caps():
    """The schedule choice read from a device's Caps: a CPU device (PoCL: local memory that is plain memory, 16-lane
    vectors) gets one GEMV output per work-item in 16-lane vectors and windows read directly; a GPU (memory of its
    own, preferred width 1) 64 work-items along k in float4 loads and window tiles staged in half its local memory;
    WebGL (work-groups of one) no GEMV; a language without vector types scalar loads."""
    from fxc.runtime.opencl.device import opencl_caps
    from fxc.target import Caps
    pocl = opencl_caps({"compute_units": 2, "local_memory_bytes": 1 << 20, "max_work_group_size": 4096,
                        "preferred_vector_width_float": 16})
    gpu_ = opencl_caps({"compute_units": 132, "local_memory_bytes": 48 << 10, "max_work_group_size": 1024,
                        "preferred_vector_width_float": 1, "dedicated_local_memory": True})
    k = gpu.Knobs.for_caps(pocl)
    assert (k.gemv_threads, k.gemv_outputs, k.vector_width, k.window_local_bytes) == (1, 16, 16, 0)
    k = gpu.Knobs.for_caps(gpu_)
    assert (k.gemv_threads, k.gemv_outputs, k.vector_width, k.window_local_bytes) == (64, 4, 4, 24 << 10)
    assert gpu.Knobs.for_caps(Caps(max_work_group_size=1)).gemv_max_rows == 0
    assert gpu.Knobs.for_caps(Caps(max_work_group_size=256, local_memory_bytes=1 << 14)).vector_width == 1


# --------------------------------------------------------------------------- window schedule, staged input tile
WINDOW_FORMS = {"direct": {"window_local_bytes": 0},
                "staged-vec4": {"window_local_bytes": 1 << 15, "vector_width": 4},
                "staged-scalar": {"window_local_bytes": 1 << 15, "vector_width": 1},
                "staged-narrow": {"window_local_bytes": 1 << 15, "vector_width": 4, "window_width": 3,
                                  "window_cols": 2}}


@pytest.mark.parametrize("form", WINDOW_FORMS)
def test_window_forms_against_eager(form, monkeypatch):
    """Depthwise convolutions (padding, stride 2, dilation 2, no padding, a batch-norm + ReLU6 epilogue) and pools
    (max with padding, dilation and ceil mode; average with padding and count_include_pad off) in the window
    schedule, its input read directly or staged in local memory (float4 chunks inside the input, scalars at the
    edges and the padding; work-groups that do not divide the row), against eager."""
    sources = _sources(monkeypatch, **WINDOW_FORMS[form], extern_computes=True)
    torch.manual_seed(7)
    convs = [torch.nn.Conv2d(6, 6, 3, 1, 1, groups=6), torch.nn.Conv2d(6, 6, 3, 2, 1, groups=6),
             torch.nn.Conv2d(6, 6, 3, 1, 2, dilation=2, groups=6), torch.nn.Conv2d(6, 6, (3, 5), 1, 0, groups=6)]
    bn = torch.nn.BatchNorm2d(6).eval()

    def f(x):
        out = [torch.nn.functional.relu6(bn(c(x))) for c in convs]
        return out + [torch.nn.functional.max_pool2d(x, 3, 2, 1, dilation=1, ceil_mode=True),
                      torch.nn.functional.max_pool2d(x, 3, 1, 1, dilation=2),
                      torch.nn.functional.avg_pool2d(x, 3, 2, 1, count_include_pad=False)]

    x = torch.randn(2, 6, 15, 37)
    torch._dynamo.reset()
    with torch.no_grad():
        for got, want in zip(_compile(f, x), f(x)):
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    src = "\n".join(sources)
    staged = form != "direct"
    assert ("__local float wtile" in src) == staged and src.count("float wacc") >= 7
    assert ("vload4(" in src) == (form in ("staged-vec4", "staged-narrow"))


# ------------------------------------------------------------- loop-IR fixture: staged tile with vector loads
def _staged_fixture(rows: int = 3, cols: int = 37, threads: int = 8, lanes: int = 4) -> Kernel:
    """One work-group per row stages the row in shared memory (vector loads of `lanes` where a chunk fits, scalars
    for the rest), waits at a barrier, and each work-item writes y[r, c] = t[c] + 2 t[min(c + 1, cols - 1)] +
    (t[0] + t[1] + t[2] + t[3]) for its columns c = th + j * threads (the last sum a lane reduction of a vector
    read from shared memory)."""
    from fxc.lowering.loop_ir import Barrier, IfThen, seq
    from fxc.symbolic.expr import Const, LaneReduce, VecLoad, compare
    x, y = Buffer("x", "float32", rows * cols), Buffer("y", "float32", rows * cols)
    tile = Buffer("tile", "float32", cols, "shared")
    g, th, q, j = Var("g"), Var("th"), Var("q"), Var("j")
    chunks = -(-cols // lanes)
    at = (q * threads + th) * lanes
    scalar = seq(*(IfThen(compare("lt", at + e, as_expr(cols)), Store(tile, at + e, x[g * cols + at + e]))
                   for e in range(lanes)))
    stage = For(q, -(-chunks // threads), IfThen(compare("le", at + lanes, as_expr(cols)),
                                                Store(tile, at, VecLoad(x, g * cols + at, lanes)), scalar))
    c = th + j * threads
    value = tile[c] + tile[binary("min", c + 1, as_expr(cols - 1))] * Const(2.0, "float32") \
        + LaneReduce("add", VecLoad(tile, as_expr(0), lanes))
    write = For(j, -(-cols // threads), IfThen(compare("lt", c, as_expr(cols)), Store(y, g * cols + c, value)))
    body = For(g, rows, For(th, threads, seq(stage, Barrier(), write), "thread"), "grid")
    return Kernel("staged", [y, x], body, index_bits=32, launch=launch_of(body))


def _staged_expected(a):
    nxt = np.concatenate([a[:, 1:], a[:, -1:]], axis=1)
    return a + 2 * nxt + a[:, :4].sum(axis=1, keepdims=True)


def _device_module(cls, kind, source, k, a):
    from fxc.runtime.launch import Launch
    from fxc.runtime.tensors import TensorSpec
    plan = [Launch(k.name, [("out", 0), ("in", 0)], k.launch.grid, k.launch.block)]
    return cls(kind, source, [TensorSpec("x", a.shape, "float32")], [TensorSpec("y", a.shape, "float32")], [], 0, plan)


@pytest.mark.parametrize("vectors", [True, False], ids=["native-float4", "scalarized"])
def test_staged_fixture_on_opencl(vectors):
    """OpenCL C takes the fixture's float4 loads and stores as they are (vload4 / vstore4 from global and local
    memory, a lane reduction) or scalarized: both equal numpy."""
    from fxc.lowering.legalize import scalarize
    from fxc.runtime.opencl.module import OpenCLModule
    k = _staged_fixture()
    k = dataclasses.replace(k, body=scalarize(k.body, {4} if vectors else ()))
    src = render_opencl([k])
    assert "__local float tile" in src and "barrier(CLK_LOCAL_MEM_FENCE)" in src
    assert ("vload4(0, x + " in src and "vstore4(" in src and "vload4(0, tile + " in src) == vectors
    a = np.random.default_rng(5).standard_normal((3, 37)).astype(np.float32)
    np.testing.assert_allclose(_device_module(OpenCLModule, "opencl", src, k, a)(a), _staged_expected(a), rtol=1e-5)


def _scalarized_fixture(render):
    """The staged fixture, which `render` must refuse for its vectors, scalarized and rendered: (kernel, source)."""
    from fxc.errors import LoweringError
    from fxc.lowering.legalize import scalarize
    k = _staged_fixture()
    with pytest.raises(LoweringError, match="scalarize"):
        render([k])
    k = dataclasses.replace(k, body=scalarize(k.body))
    return k, render([k])


def test_staged_fixture_on_glsl():
    """GLSL compute rejects the fixture's vectors (its kernels come scalarized: Caps.vector_widths is empty for GL)
    and runs the scalarized fixture (shared memory, barrier) on the GL device: equal to numpy."""
    from fxc.backends.glsl import render_glsl
    from fxc.runtime.opengl.module import GLModule
    k, src = _scalarized_fixture(render_glsl)
    assert "shared float" in src and "barrier();" in src
    a = np.random.default_rng(5).standard_normal((3, 37)).astype(np.float32)
    np.testing.assert_allclose(_device_module(GLModule, "opengl", src, k, a)(a), _staged_expected(a), rtol=1e-5)


def test_staged_fixture_on_wgsl_webgl_and_llvm():
    """WGSL rejects the vectors and runs the scalarized fixture (workgroup memory, its barrier) on WebGPU: equal to
    numpy; WebGL (no shared memory) and the CPU's LLVM renderer (no work-groups) reject it with a LoweringError."""
    from fxc.backends.llvm import compile as llvm
    from fxc.backends.webgl.program import render_webgl
    from fxc.backends.webgpu.wgsl import render_wgsl
    from fxc.errors import LoweringError
    k, src = _scalarized_fixture(render_wgsl)
    assert "var<workgroup>" in src and "workgroupBarrier();" in src
    from fxc.runtime.browser.webgpu import WebGPUModule
    a = np.random.default_rng(5).standard_normal((3, 37)).astype(np.float32)
    np.testing.assert_allclose(_device_module(WebGPUModule, "webgpu", src, k, a)(a), _staged_expected(a), rtol=1e-5)
    with pytest.raises(LoweringError, match="work-groups of one|shared memory|barrier"):
        render_webgl([k], 64)
    with pytest.raises(LoweringError):
        llvm.render([k], [(k.name, [("out", 0), ("in", 0)])])


def test_gpu_defaults_run_on_pocl(monkeypatch):
    """The knobs a GPU gets from its Caps (local memory of its own: staged window tiles, the GEMV's shared-memory
    tree, float4 loads, 32-bit indices), forced onto PoCL's device: a MobileNet block (depthwise + batch norm +
    ReLU6, a max pool) and a classifier equal eager."""
    from fxc.runtime.opencl import device as cl_api
    caps = cl_api.opencl_caps
    monkeypatch.setattr(cl_api, "opencl_caps", lambda info: caps({**info, "dedicated_local_memory": True,
                                                                        "preferred_vector_width_float": 1}))
    sources = _sources(monkeypatch)
    torch.manual_seed(3)
    m = torch.nn.Sequential(torch.nn.Conv2d(8, 8, 3, 2, 1, groups=8), torch.nn.BatchNorm2d(8), torch.nn.ReLU6(),
                            torch.nn.MaxPool2d(3, 1, 1), torch.nn.Flatten(), torch.nn.Linear(8 * 9 * 10, 21)).eval()
    x = torch.randn(1, 8, 17, 19)
    torch._dynamo.reset()
    with torch.no_grad():
        torch.testing.assert_close(_compile(m, x), m(x), rtol=1e-4, atol=1e-4)
    src = "\n".join(sources)
    assert "__local float wtile" in src and "__local float vpart" in src and "vload4(" in src
    assert "const int gj" in src          # 32-bit indices
