"""The webgpu target: WGSL compute shaders run by fxc/runtime/browser/webgpu/runtime.js in a headless Chromium page
(WebGPU on SwiftShader here) that Playwright drives. What only it has: the loop-IR fixture on the WGSL renderer, WGSL's
float32 math helpers against numpy, C's edge cases, byte stores, int64 arithmetic as wasm in the page, data as files,
and its error cases. The cases every device target shares (the fixed op sample, the reference models, shared memory
and barriers, weights kept on the device, export and load...) are in tests/backends/test_every_target.py.

A missing browser or WebGPU adapter is a failure, not a skip (scripts/setup.sh installs Debian's chromium and pip's
playwright). One browser per test process (fxc.runtime.browser.page.open_browser), shared with the webgl target."""
import json

import numpy as np
import pytest

from fxc.driver.build import build
from fxc.errors import CompileError, TargetError
from fxc.ops.registry import all_ops
from fxc.relay_like.builder import Builder
from fxc.runtime.tensors import TensorSpec
from tests.helpers import assert_close_np
from tests.helpers_devices import (
    check_binary_ops,
    fixture_expected,
    fixture_kernel,
    fixture_launches,
)


# ------------------------------------------------------------------------------------------ the loop-IR fixture
def test_fixture_kernel_on_wgsl():
    """The renderers' shared loop-IR fixture (parallel rows, private accumulator, select, casts, floor division,
    vector loads/stores) as WGSL compute shaders equals numpy."""
    from fxc.backends.webgpu.wgsl import render_wgsl
    from fxc.runtime.browser.webgpu import WebGPUModule
    x = np.random.default_rng(0).standard_normal((6, 32)).astype(np.float32)
    kernels, plan = fixture_launches(fixture_kernel(6, 32), index_bits=32)
    source = render_wgsl(kernels)
    shader = json.loads(source)["kernels"][kernels[0].name]["shader"]
    assert "@compute @workgroup_size(4, 1, 1)" in shader and "fxc_wid" in shader
    m = WebGPUModule("webgpu", source, [TensorSpec("x", x.shape, "float32")], [TensorSpec("y", x.shape, "float32")],
                     [], 0, plan)
    assert_close_np(m(x), fixture_expected(x))


# ------------------------------------------------------------------------------------- math and edge cases


MATH = ("erf", "expm1", "log1p", "tanh", "sigmoid", "log10", "asinh", "atan", "exp", "sqrt", "sin", "cos", "tan")


def test_wgsl_math_helpers_in_float32():
    """The functions WGSL lacks or computes loosely (fxc.backends.webgpu.wgsl helpers) against the op references,
    every one
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
def test_int64_arithmetic_that_may_overflow_32_bits_runs_as_wasm_in_the_page():
    """int64 arithmetic that may overflow 32 bits runs as a wasm kernel in the page (fxc.driver.page_kernels), in 64
    bits (int64 indices narrowed and checked: tests/backends/test_every_target.py)."""
    b = Builder()
    x, y = b.graph.input((4,), "int64"), b.graph.input((4,), "int64")
    b.graph.outputs = [b.call("add", [x, y])]
    m = build(b.graph, target="webgpu")
    assert any("[wasm in the page:" in line and "WGSL has 32-bit integers only" in line for line in m.kernels)
    big = np.array([2 ** 40, -3, 2 ** 31, 5], np.int64)
    np.testing.assert_array_equal(m(big, big), 2 * big)


# ------------------------------------------------------------------------------------------------- errors


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
