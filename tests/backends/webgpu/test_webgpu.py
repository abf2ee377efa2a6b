"""The webgpu target: WGSL compute shaders run by fxc/runtime/browser/webgpu/runtime.js in a headless Chromium page
(WebGPU on
SwiftShader here) that Playwright drives: the loop-IR fixture on the WGSL renderer, shared memory and barriers, the
OpenCL test's fixed op sample, WGSL's float32 math helpers against numpy, int64 in 32 bits (proved, checked or
refused), torch.compile / from_torch / export + load without torch, and the error cases.

A missing browser or WebGPU adapter is a failure, not a skip (scripts/setup.sh installs Debian's chromium and pip's
playwright). One browser per test process (fxc.runtime.browser.page.open_browser), shared with the webgl target."""
import json

import numpy as np
import pytest
import torch

import fxc
import fxc.capture.torch.recorder
from fxc.driver.build import build
from fxc.errors import CompileError, LoweringError, TargetError
from fxc.ops.registry import all_ops
from fxc.relay_like.builder import Builder
from fxc.runtime.tensors import TensorSpec
from tests.helpers import assert_close_np
from tests.helpers_devices import (
    CASE_IDS,
    CASES,
    check_binary_ops,
    check_folded_grid,
    check_int64_embedding,
    check_int_division_by_zero,
    check_op_sample,
    check_reference_model,
    check_row_sum,
    check_tiled_gemm,
    export_and_load_without_torch,
    fixture_expected,
    fixture_kernel,
    fixture_launches,
    run_script,
    small_net,
    target_error_script,
)

# ops of the sample that WGSL refuses: float64 (cholesky's samples, and lgamma, which computes in float64 for float32
# too) and 64-bit hash constants (random_uniform). They run as wasm kernels in the page (fxc.driver.page_kernels), but
# for
# those whose float64 tensors would cross between the two or that wasm lacks (lgamma): a LoweringError, so
# torch.compile runs their graph in eager
IN_WASM = {("cholesky", 0), ("random_uniform", 0)}
REFUSED = {case: (LoweringError, None)
           for case in (("cholesky", 1), ("lgamma", 0), ("lgamma", 1), ("random_uniform", 1))}


# ------------------------------------------------------------------------------------------ the loop-IR fixture
def test_fixture_kernel_on_wgsl():
    """The renderers' shared loop-IR fixture (parallel rows, private accumulator, select, casts, floor division,
    vector loads/stores) as WGSL compute shaders equals numpy."""
    from fxc.backends.wgsl import render_wgsl
    from fxc.runtime.browser.webgpu import WebGPUModule
    x = np.random.default_rng(0).standard_normal((6, 32)).astype(np.float32)
    kernels, plan = fixture_launches(fixture_kernel(6, 32), index_bits=32)
    source = render_wgsl(kernels)
    shader = json.loads(source)["kernels"][kernels[0].name]["shader"]
    assert "@compute @workgroup_size(4, 1, 1)" in shader and "fxc_wid" in shader
    m = WebGPUModule("webgpu", source, [TensorSpec("x", x.shape, "float32")], [TensorSpec("y", x.shape, "float32")],
                     [], 0, plan)
    assert_close_np(m(x), fixture_expected(x))


def test_tree_reduction_uses_workgroup_memory_and_barriers():
    m = check_row_sum("webgpu")
    assert "var<workgroup>" in m.source and "workgroupBarrier();" in m.source


@pytest.mark.parametrize("shared", [True, False], ids=["workgroup-memory-tiles", "register-tiles"])
def test_tiled_gemm_both_forms(shared, monkeypatch):
    """The GEMM schedule's two forms (workgroup-memory blocks: GPUs; register tiles: SwiftShader, a CPU), over a
    batched matmul with a bias + relu epilogue and sizes that leave partial tiles."""
    m = check_tiled_gemm("webgpu", shared, monkeypatch)
    assert ("workgroupBarrier();" in m.source) == shared


def test_grid_longer_than_the_dispatch_limit_is_folded():
    """More than 65535 work-groups on one axis: split over two dispatch axes, recombined in the shader."""
    check_folded_grid("webgpu")


# ---------------------------------------------------------------------------------------------- the op sample
@pytest.mark.parametrize("name,k", CASES, ids=CASE_IDS)
def test_op_sample_on_webgpu(name, k):
    module = check_op_sample("webgpu", name, k, refused=REFUSED, in_wasm=IN_WASM)
    assert module is None or module.plan


MATH = ("erf", "expm1", "log1p", "tanh", "sigmoid", "log10", "asinh", "atan", "exp", "sqrt", "sin", "cos", "tan")


def test_wgsl_math_helpers_in_float32():
    """The functions WGSL lacks or computes loosely (fxc.backends.wgsl helpers) against the op references, every one
    in one module (one build, one call)."""
    x = np.concatenate([np.linspace(-6, 6, 997), [0.0, 1e-6, -1e-6, 1e-3, 20.0, -20.0]]).astype(np.float32)
    b = Builder()
    inputs, arrays = [], []
    for name in MATH:
        a = np.abs(x) + np.float32(0.01) if name in ("log10", "sqrt") else np.abs(x) - np.float32(0.5) \
            if name == "log1p" else x
        arrays.append(a)
        inputs.append(b.graph.input(a.shape, "float32"))
    b.graph.outputs = [b.call(name, [v]) for name, v in zip(MATH, inputs)]
    got = build(b.graph, target="webgpu", fuse=False)(*arrays)
    for name, a, g in zip(MATH, arrays, got):
        ref = np.asarray(all_ops()[name].reference(a.astype(np.float64))).astype(np.float32)
        assert_close_np(g, ref, rtol=2e-5, atol=1e-6)


def test_pow_atan2_fmod_nan_edge_cases():
    """C's pow / atan2 / fmod edge cases, NaN-propagating max and the x86 float -> int cast of NaN and infinity."""
    a = np.array([-2.0, -2.0, 0.0, 0.0, 2.0, -0.0, 3.0, -8.0, 5.3, -5.3, np.nan, np.inf], np.float32)
    e = np.array([3.0, 0.5, 0.0, -1.0, 10.0, 3.0, -2.0, 2.0, 0.7, 0.7, 1.0, 2.0], np.float32)
    check_binary_ops("webgpu", ("pow", "atan2", "remainder", "fmod", "maximum", "minimum"), a, e)
    b = Builder()
    x = b.graph.input(a.shape, "float32")
    b.graph.outputs = [b.call("cast", [x], dtype="int32")]
    got = build(b.graph, target="webgpu")(a)
    np.testing.assert_array_equal(got[:10], a[:10].astype(np.int32))
    assert (got[10:] == np.iinfo(np.int32).min).all()      # as x86 (and so PyTorch on the CPU)


def test_bool_and_byte_stores_do_not_race():
    """Work-items that write neighbouring bytes of one word (bool, uint8, int8, int16 outputs) all land."""
    x = np.random.default_rng(5).standard_normal(1001).astype(np.float32)
    b = Builder()
    v = b.graph.input(x.shape, "float32")
    b.graph.outputs = [b.call("gt", [v, b.const(np.float32(0))]),
                       b.call("cast", [b.call("mul", [v, b.const(np.float32(50))])], dtype="int8"),
                       b.call("cast", [b.call("mul", [v, b.const(np.float32(3000))])], dtype="int16")]
    got = build(b.graph, target="webgpu")(x)
    np.testing.assert_array_equal(got[0], x > 0)
    np.testing.assert_array_equal(got[1], (x * 50).astype(np.int8))
    np.testing.assert_array_equal(got[2], (x * 3000).astype(np.int16))


# ------------------------------------------------------------------------------------------ int64 in 32 bits
def test_int64_indices_narrowed_and_checked():
    """int64 indices (an embedding) run in 32 bits; an int64 value beyond 32 bits is an ExecutionError, never a
    wrong row; an index out of range is eager's IndexError; int64 arithmetic that may overflow 32 bits runs as a
    wasm kernel in the page (fxc.driver.page_kernels), in 64 bits."""
    check_int64_embedding("webgpu")
    b = Builder()
    x, y = b.graph.input((4,), "int64"), b.graph.input((4,), "int64")
    b.graph.outputs = [b.call("add", [x, y])]
    m = build(b.graph, target="webgpu")
    assert any("[wasm in the page:" in line and "WGSL has 32-bit integers only" in line for line in m.kernels)
    big = np.array([2 ** 40, -3, 2 ** 31, 5], np.int64)
    np.testing.assert_array_equal(m(big, big), 2 * big)


def test_int_division_by_zero_raises():
    m = check_int_division_by_zero("webgpu")
    a = np.array([7, -7, 5, 1], np.int32)
    np.testing.assert_array_equal(m(a, np.array([1, 2, 3, 4], np.int32)), np.floor_divide(a, [1, 2, 3, 4]))


# ---------------------------------------------------------------------------------------- users: torch, export
def test_torch_compile_keeps_weights_resident():
    """torch.compile(target="webgpu"): nothing falls back; weights are uploaded once and again only when changed."""
    import gc
    model, x = small_net(), torch.randn(2, 3, 12, 12)
    before = {id(o) for o in gc.get_objects() if type(o).__name__ == "WebGPUModule"}     # earlier tests' modules
    compiled = torch.compile(model, backend="fxc", options={"target": "webgpu"})
    fxc.capture.torch.recorder._recorders.append(rec := fxc.capture.torch.recorder.Explanation())
    try:
        with torch.no_grad():
            torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-5)
    finally:
        fxc.capture.torch.recorder._recorders.remove(rec)
    assert rec.kernels and all("[webgpu:" in k for k in rec.kernels), rec.kernels
    (m,) = [o for o in gc.get_objects()
            if type(o).__name__ == "WebGPUModule" and o.prepack_inputs and id(o) not in before]
    with torch.no_grad():
        compiled(x)
        assert m.uploaded_bytes == x.numel() * 4
        model[5].weight.mul_(2)
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-5)
        assert m.uploaded_bytes > x.numel() * 4


def test_from_torch_export_and_load_without_torch(tmp_path):
    """from_torch(target="webgpu") -> export -> load in a process that cannot import torch or llvmlite."""
    with export_and_load_without_torch("webgpu", tmp_path) as z:
        assert "@compute" in z.read("program.wgsl.json").decode()
        assert json.loads(z.read("manifest.json"))["target"] == "webgpu"


@pytest.mark.slow
@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v2", "bert"])
def test_reference_models_on_webgpu(name):
    check_reference_model("webgpu", name)


# ------------------------------------------------------------------------------------------------- errors
def test_no_browser_is_a_target_error():
    script = target_error_script("webgpu", "no Chromium at /nonexistent/chromium", "apt-get install chromium")
    p = run_script(script, FXC_CHROMIUM="/nonexistent/chromium")
    assert p.returncode == 0, p.stdout + p.stderr


def test_a_page_without_webgpu_is_a_target_error():
    """A page where navigator.gpu is missing (here: about:blank, not a secure context, where Chromium does not
    expose it) reports what is missing, which the harness raises as a TargetError; never a hang or a JS error."""
    from fxc.runtime.browser.page import Page, open_browser
    from fxc.runtime.browser.webgpu import RUNTIME_JS, SETUP
    browser = open_browser()
    page = browser.visit("about:blank", name="no-webgpu")
    try:
        page.call("(src) => { const s = document.createElement('script'); s.textContent = src; "
                  "document.head.appendChild(s); }", RUNTIME_JS.read_text())
        assert page.call("() => window.isSecureContext") is False
        assert "no WebGPU" in page.call(SETUP)["error"]
    finally:
        page.close()
    with pytest.raises(TargetError, match="no WebGPU"):     # the same, through the harness's page setup
        Page(browser, "no-webgpu", None, f"async () => {{ {RUNTIME_JS.read_text()}; return await ({SETUP})(); }}",
             "about:blank")


def test_large_inputs_and_outputs_travel_as_files(monkeypatch):
    """Data over 64 KiB go through the harness's server (Page.put: fetched once; Page.take: posted back), smaller
    data inline: both give the same bytes, and no file is left on the server after a call."""
    from fxc.runtime.browser.webgpu import INLINE_BYTES, open_gpu
    page, moved = open_gpu(), []
    for name in ("put", "take"):
        monkeypatch.setattr(page, name, lambda path, *a, f=getattr(page, name): moved.append(path) or f(path, *a))
    for n in (100, INLINE_BYTES // 4 + 1001):
        x = np.random.default_rng(n).standard_normal(n).astype(np.float32)
        b = Builder()
        v = b.graph.input(x.shape, "float32")
        c = np.random.default_rng(n + 1).standard_normal(n).astype(np.float32)      # a constant of n too
        b.graph.outputs = [b.call("neg", [v]), b.call("gt", [v, b.const(c)])]
        m = build(b.graph, target="webgpu")
        files = set(page.files)
        y, z = m(x)
        np.testing.assert_array_equal(y, -x)
        np.testing.assert_array_equal(z, x > c)
        assert set(page.files) == files and not page.received
        big = n * 4 > INLINE_BYTES
        assert sorted(p.rsplit(".", 1)[1] for p in moved) == (["consts", "in", "out"] if big else []), moved
        moved.clear()


def test_a_rejected_shader_carries_source_and_messages():
    from fxc.runtime.browser.webgpu import open_gpu
    bad = {"kernels": {"bad": {"shader": "@compute @workgroup_size(1) fn main() { undefined_name = 1; }",
                               "params": 0}}}
    with pytest.raises(CompileError) as e:
        open_gpu().call("([p]) => window.fxcGPU.model(p, [], 64, [])", [bad])
    assert "undefined_name" in e.value.log


def test_webgpu_target_takes_no_options():
    b = Builder()
    v = b.graph.input((4,), "float32")
    b.graph.outputs = [b.call("exp", [v])]
    with pytest.raises(TargetError, match="takes none"):
        build(b.graph, target="webgpu -device=1")
