"""The cases every device target shares, parametrised by conftest's `target` fixture (which test runs on which target:
tests/targets.py): the fixed op sample covering every op kind, the reference models and a small conv net against
eager, weights kept on the device, export and load, an index out of range, int64 in 32 bits, division by zero,
shared-memory reductions, GEMM tiles, folded grids, and the error cases. What only one device has stays in its
folder (tests/backends/<kind>/: the loop-IR fixture on its renderer, its math helpers, WebGL's lanes, draw buffers
and lost contexts, the OpenCL device choice, wasm's threads...).

A missing device runtime is a failure in CI, not a skip (scripts/setup.sh installs PoCL, Mesa's EGL, Chromium, lld)."""
import gc
import json
import zipfile

import numpy as np
import pytest
import torch

import fxc
import fxc.capture.torch.recorder
from fxc.driver.build import build
from fxc.errors import CompileError, IndexOutOfRangeError, LoweringError, TargetError
from fxc.relay_like.builder import Builder
from tests.helpers import assert_close_np, check_module
from tests.helpers_devices import (
    CASE_IDS,
    CASES,
    check_folded_grid,
    check_int64_embedding,
    check_int_division_by_zero,
    check_op_sample,
    check_tiled_gemm,
    export_and_load_without_torch,
    run_script,
    small_net,
    target_error_script,
)
from tests.targets import DEVICE_TARGETS

GPU_TARGETS = ("opencl", "opengl", "webgpu")          # compute shaders with work-group memory and barriers
BROWSER_TARGETS = ("webgl", "webgpu")                 # shaders in a page of the headless browser

# the op sample's cases each target must refuse (the build raises the error; torch.compile runs their graph in eager):
# GL and the browsers' shaders lack float64 (cholesky's samples, and lgamma, which computes in float64 for float32 too,
# as every special function) and 64-bit hash constants (random_uniform); wasm lacks the C libm lgamma needs (a
# build-time error naming the function, never an unresolved import)
REFUSED = {
    "opencl": {},
    "opengl": {case: (LoweringError, None) for case in (("cholesky", 0), ("cholesky", 1), ("lgamma", 0),
                                                         ("lgamma", 1), ("random_uniform", 0), ("random_uniform", 1))},
    "webgl": {case: (LoweringError, None)
              for case in (("cholesky", 1), ("lgamma", 0), ("lgamma", 1), ("random_uniform", 1))},
    "webgpu": {case: (LoweringError, None)
               for case in (("cholesky", 1), ("lgamma", 0), ("lgamma", 1), ("random_uniform", 1))},
    "wasm": {("lgamma", 0): (CompileError, "needs lgamma[ ,]"), ("lgamma", 1): (CompileError, "needs lgamma[ ,]")},
}
# the cases a browser target's shaders cannot express that run as wasm kernels in the same page
# (fxc.driver.page_kernels): a fragment writes its own element only (scatter, the hand-written loop IR of cumsum,
# sort...) and cannot divide by a divisor that may be 0; WGSL lacks float64 and 64-bit hash constants
IN_WASM = {
    "webgl": ({(n, k) for n in ("cholesky", "cumsum", "grid_sample", "index_put", "random_uniform", "resize2d",
                                "scatter", "sort")
               for k in (0, 1)} | {("floordiv", 1), ("remainder", 1)}) - set(REFUSED["webgl"]),
    "webgpu": {("cholesky", 0), ("random_uniform", 0)},
}
# how a target's source shows work-group memory and a barrier
SHARED_MEMORY = {"opencl": ("__local", "barrier(CLK_LOCAL_MEM_FENCE)"), "opengl": ("shared float", "barrier();"),
                 "webgpu": ("var<workgroup>", "workgroupBarrier();")}
# what a target's artifact holds: its program file and a line of its code
PROGRAM = {"opencl": ("program.cl", "__kernel"), "opengl": ("program.glsl", "#version 430"),
           "webgpu": ("program.wgsl.json", "@compute"), "webgl": ("program.webgl.json", "#version 300 es")}


def check_artifact(z: zipfile.ZipFile, target: str) -> None:
    """The artifact's manifest names `target` and its program file holds that target's code."""
    assert json.loads(z.read("manifest.json"))["target"].split()[0] == target
    if target == "wasm":
        assert json.loads(z.read("program.wasm.json").decode().split("\n", 1)[1])["wasm"].startswith("AGFzbQ")
    else:
        name, code = PROGRAM[target]
        assert code in z.read(name).decode()


def compile_recorded(model, inputs, target, **tolerances):
    """check_module (torch.compile vs eager) with explain's report of that same compile: (output, report)."""
    fxc.capture.torch.recorder._recorders.append(rep := fxc.capture.torch.recorder.Explanation())
    try:
        out = check_module(model, *inputs, target=target, **tolerances)
    finally:
        fxc.capture.torch.recorder._recorders.remove(rep)
    return out, rep


def kernels_on(rep, target: str) -> bool:
    """Every kernel line of the report ran on `target` (wasm's lines are the llvm target's: `name: group`)."""
    return target == "wasm" or all(f"[{target}:" in k for k in rep.kernels)


# ---------------------------------------------------------------------------------------- a fixed op sample
@pytest.mark.targets(*DEVICE_TARGETS)
@pytest.mark.parametrize("name,k", CASES, ids=CASE_IDS)
def test_op_sample(name, k, target):
    module = check_op_sample(target, name, k, refused=REFUSED[target], in_wasm=IN_WASM.get(target))
    if module is not None:                  # a wasm module, or a device plan of launches
        assert module.wasm[:4] == b"\0asm" if target == "wasm" else module.plan


# ------------------------------------------------------------------------------------- models against eager
# the conv nets at a smaller resolution than their 224x224 on webgl (the same layers, a tenth of the work: SwiftShader
# runs every fragment on the CPU); `python -m benchmarks.webgl_models` runs them at full size
SMALLER_INPUT = {("webgl", "resnet18"): (1, 3, 64, 64), ("webgl", "mobilenet_v2"): (1, 3, 96, 96)}


@pytest.mark.slow
@pytest.mark.targets(*DEVICE_TARGETS)
@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v2", "bert"])
def test_reference_models(name, target):
    """A reference model (fxc.testing.models, batch 1, 32 tokens) runs whole on `target` under torch.compile (nothing
    falls back) and matches eager within 1e-4 x the output's scale."""
    from fxc.testing.models import example_inputs, make_model
    model = make_model(name)
    inputs = example_inputs(name, batch=1, seq_len=32)
    if (target, name) in SMALLER_INPUT:
        inputs = (torch.randn(SMALLER_INPUT[target, name], generator=torch.Generator().manual_seed(1)),)
    out, rep = compile_recorded(model, inputs, target, rtol=0, atol=1e-4)
    assert rep.kernels and not rep.fallback_ops and not rep.failures, str(rep)
    assert kernels_on(rep, target), rep.kernels
    assert torch.isfinite(out).all() and out.abs().max() > 1e-2


@pytest.mark.targets(*DEVICE_TARGETS)
def test_small_net_matches_eager(target):
    """The small conv net (conv, batch norm, relu, pooling, linear) through torch.compile: every kernel on `target`
    (nothing falls back) and the output equal to eager."""
    model, x = small_net(), torch.randn(2, 3, 16, 16)
    rep = fxc.explain(model, x, target=target)
    assert not rep.fallback_ops and not rep.failures and kernels_on(rep, target), str(rep)
    check_module(model, x, target=target, rtol=1e-4, atol=1e-5)


# ---------------------------------------------------------------------------------- weights kept on the device
# the class of a target's modules
MODULE_CLASS = {"opencl": "OpenCLModule", "opengl": "GLModule", "webgpu": "WebGPUModule", "webgl": "WebGLModule",
                "wasm": "WasmModule"}


@pytest.mark.targets(*DEVICE_TARGETS)
def test_torch_compile_keeps_weights_on_the_device(target):
    """torch.compile(target=...): nothing falls back; the weights are uploaded once, and again only when one changes
    (an optimizer step, an in-place write)."""
    module_class = MODULE_CLASS[target]
    before = {id(o) for o in gc.get_objects() if type(o).__name__ == module_class}         # earlier tests' modules
    model, x = small_net(), torch.randn(2, 3, 12, 12)
    compiled = torch.compile(model, backend="fxc", options={"target": target})
    fxc.capture.torch.recorder._recorders.append(rec := fxc.capture.torch.recorder.Explanation())
    try:
        with torch.no_grad():
            torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-5)
    finally:
        fxc.capture.torch.recorder._recorders.remove(rec)
    assert rec.kernels and kernels_on(rec, target), rec.kernels
    (m,) = [o for o in gc.get_objects()
            if type(o).__name__ == module_class and o.prepack_inputs and id(o) not in before]
    with torch.no_grad():
        compiled(x)
        assert m.uploaded_bytes == x.numel() * 4            # the activation only
        model[5].weight.mul_(2)
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-5)
        assert m.uploaded_bytes > x.numel() * 4             # the changed weights again
        model[0].weight.mul_(0.5)                           # the conv's weights (before the batch norm folds in)
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-5)


# ------------------------------------------------------------------------------------------- export and load
@pytest.mark.targets(*GPU_TARGETS)
def test_from_torch_export_and_load_without_torch(target, tmp_path):
    """fxc.from_torch -> fxc.export -> fxc.load in a process that cannot import torch, llvmlite or the compiler; the
    artifact holds the target's code."""
    with export_and_load_without_torch(target, tmp_path) as z:
        check_artifact(z, target)


@pytest.mark.targets("webgl", "wasm")
def test_from_torch_export_and_load(target, tmp_path):
    """fxc.from_torch -> fxc.export -> fxc.load of the small conv net: both match eager; the artifact holds the target's
    code."""
    model, x = small_net(), torch.randn(2, 3, 16, 16)
    compiled = fxc.from_torch(model, (x,), target=target)
    with torch.no_grad():
        expected = model(x).numpy()
    assert_close_np(compiled(x.numpy()), expected)
    path = fxc.export(compiled, tmp_path / "m.fxc")
    with zipfile.ZipFile(path) as z:
        check_artifact(z, target)
    assert_close_np(fxc.load(path)(x.numpy()), expected)


# ----------------------------------------------------------------------------------------- indices, integers
@pytest.mark.targets("opencl", "wasm")
def test_out_of_range_index_raises_as_eager_does(target):
    """An index op on the device checks its indices as eager does: IndexOutOfRangeError naming the op and index."""
    emb = torch.nn.Embedding(100, 8)
    m = fxc.from_torch(emb, (torch.tensor([1, 2]),), target=target)
    np.testing.assert_allclose(m(torch.tensor([3, 99])).numpy(), emb(torch.tensor([3, 99])).detach().numpy())
    with pytest.raises(IndexOutOfRangeError, match="embedding: index 100 is out of range"):
        m(torch.tensor([3, 100]))
    with pytest.raises(IndexError):
        m(torch.tensor([-1, 2]))
    np.testing.assert_allclose(m(torch.tensor([0, 5])).numpy(), emb(torch.tensor([0, 5])).detach().numpy())


@pytest.mark.targets("opengl", "webgpu")
def test_int64_indices_narrowed_and_checked(target):
    """int64 indices (an embedding) run in 32 bits: an int64 value beyond 32 bits is an ExecutionError, never a wrong
    row; an index out of range is eager's IndexError."""
    check_int64_embedding(target)


@pytest.mark.targets("opengl", "webgpu")
def test_int_division_by_zero_raises(target):
    """int32 floor division: a zero divisor is an ExecutionError, and the next call is right again."""
    m = check_int_division_by_zero(target)
    a = np.array([7, -7, 5, 1], np.int32)
    np.testing.assert_array_equal(m(a, np.array([1, 2, 3, 4], np.int32)), np.floor_divide(a, [1, 2, 3, 4]))


# -------------------------------------------------------------------------------- GPU schedules: memory, grids
@pytest.mark.targets(*GPU_TARGETS)
@pytest.mark.parametrize("case", ["sum", "mean", "norm", "all"])
def test_tree_reduction_uses_shared_memory_and_barriers(case, target):
    """Long rows reduce in a work-group (work-group memory, barriers), the reduction alone or under an epilogue (mean's
    scale, a norm's square root), and equal numpy."""
    x = np.random.default_rng(1).standard_normal((3, 5000)).astype(np.float32)
    b = Builder()
    v = b.graph.input(x.shape, "float32")
    out, expected = {
        "sum": (lambda: b.call("sum", [v], axes=[1], keepdim=False), lambda: x.sum(axis=1)),
        "mean": (lambda: b.call("mean", [v], axes=[1], keepdim=False), lambda: x.mean(axis=1)),
        "norm": (lambda: b.call("sqrt", [b.call("sum", [b.call("mul", [v, v])], axes=[1], keepdim=True)]),
                 lambda: np.sqrt((x * x).sum(axis=1, keepdims=True))),
        "all": (lambda: b.call("sum", [v], axes=None, keepdim=False), lambda: np.array(x.sum(), np.float32)),
    }[case]
    b.graph.outputs = [out()]
    m = build(b.graph, target=target)
    memory, barrier = SHARED_MEMORY[target]
    assert memory in m.source and barrier in m.source
    assert_close_np(m(x), expected().astype(np.float32), rtol=1e-4, atol=1e-5)


@pytest.mark.targets("opencl", "webgpu")
@pytest.mark.parametrize("shared", [True, False], ids=["shared-memory-tiles", "register-tiles"])
def test_tiled_gemm_both_forms(shared, target, monkeypatch):
    """The GEMM schedule's two forms (work-group memory blocks: GPUs; register tiles: devices whose local memory is
    plain memory, PoCL and SwiftShader), over a batched matmul with a bias + relu epilogue and sizes that leave partial
    tiles."""
    m = check_tiled_gemm(target, shared, monkeypatch)
    assert (SHARED_MEMORY[target][1] in m.source) == shared


@pytest.mark.targets("opengl", "webgpu")
def test_grid_longer_than_the_dispatch_limit_is_folded(target):
    """More than 65535 work-groups on one axis: split over two dispatch axes, recombined in the shader."""
    check_folded_grid(target)


# ------------------------------------------------------------------------------------------------- errors
@pytest.mark.targets(*BROWSER_TARGETS)
def test_no_browser_is_a_target_error(target):
    script = target_error_script(target, "no Chromium at /nonexistent/chromium", "apt-get install chromium")
    p = run_script(script, FXC_CHROMIUM="/nonexistent/chromium")
    assert p.returncode == 0, p.stdout + p.stderr


@pytest.mark.targets("opengl", "webgpu")
def test_target_takes_no_options(target):
    b = Builder()
    v = b.graph.input((4,), "float32")
    b.graph.outputs = [b.call("exp", [v])]
    with pytest.raises(TargetError, match="takes none"):
        build(b.graph, target=f"{target} -device=1")
