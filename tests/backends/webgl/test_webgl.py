"""The webgl target (RPC from Python): GLSL ES 3.00 fragment shaders over R32F/R32I textures, run by
fxc/runtime/browser/webgl/runtime.js in a headless Chromium page that Playwright drives (one browser per test process).

What runs: every kernel that computes one output element per work-item (elementwise, broadcast, injective,
reductions per output, convolutions and matmuls written as computes); layer_norm, softmax, log_softmax and
max_pool2d as compositions of those (relay_like/passes/expand_opaque.py); index ops whose indices come from an input
or a constant (the host checks them). What a fragment cannot express runs as wasm kernels in the same page
(fxc.driver.page_kernels): stores elsewhere than the fragment's own element (scatter and the hand-written loop IR of
cumsum,
sort...), integer division by a divisor that may be 0, float -> int64 casts, an index computed in the kernel; what
neither can (float64 between the two, lgamma) is a LoweringError, so torch.compile runs that graph in eager. A missing
browser is a failure, not a skip (scripts/setup.sh installs Debian's chromium and pip's playwright).

The cases every device target shares (the fixed op sample with the cases webgl runs as wasm, the reference models,
weights kept in the page, export and load...) are in tests/backends/test_every_target.py."""

import numpy as np
import pytest

from fxc.driver.build import build
from fxc.errors import IndexOutOfRangeError
from fxc.relay_like.builder import Builder
from tests.helpers import assert_close_np
from tests.helpers_devices import run_script, target_error_script


def test_tensor_taller_than_one_texture_row_block():
    """A tensor of more elements than the texture width (2048) spans rows; a reduction reads across them."""
    x = np.random.default_rng(4).standard_normal((3, 5000)).astype(np.float32)
    b = Builder()
    v = b.graph.input(x.shape, "float32")
    b.graph.outputs = [b.call("sum", [b.call("exp", [v])], axes=[1], keepdim=False)]
    m = build(b.graph, target="webgl")
    assert "#version 300 es" in m.source and "texelFetch" in m.source
    assert_close_np(m(x), np.exp(x).sum(axis=1), rtol=1e-4, atol=1e-5)


def test_checked_indices_are_checked_on_the_host():
    """An index op checks its indices as eager does. A fragment cannot report a bad one, so the host checks the index
    tensor before the call (IndexOutOfRangeError, as eager's IndexError); an index computed inside a kernel cannot be
    checked there, so that group runs as a wasm kernel in the page, which checks it (fxc.driver.page_kernels)."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((50, 8)).astype(np.float32)
    b = Builder()
    vw, vi = b.graph.input((50, 8), "float32"), b.graph.input((1, 4), "int64")
    b.graph.outputs = [b.call("embedding", [vw, vi])]
    m = build(b.graph, target="webgl")
    idx = np.array([[3, 0, 49, 7]])
    assert_close_np(m(w, idx), w[idx])
    with pytest.raises(IndexOutOfRangeError, match="index 50 is out of range for a dimension of size 50"):
        m(w, np.array([[3, 50, 1, 2]]))
    b = Builder()
    vw, vi = b.graph.input((50, 8), "float32"), b.graph.input((1, 4), "int32")
    b.graph.outputs = [b.call("embedding", [vw, b.call("add", [vi, vi])])]
    m = build(b.graph, target="webgl")
    assert any("[wasm in the page:" in line and "index checked" in line for line in m.kernels), m.kernels
    assert_close_np(m(w, np.array([[3, 0, 24, 7]], np.int32)), w[2 * np.array([[3, 0, 24, 7]])])
    with pytest.raises(IndexOutOfRangeError, match="index 50 is out of range for a dimension of size 50"):
        m(w, np.array([[3, 25, 1, 2]], np.int32))


def test_browser_harness_pages_are_isolated_and_secure():
    """fxc.runtime.browser.page serves a target's page from memory at a secure origin with COOP/COEP (the webgpu and
    wasm targets' runtimes need WebGPU, SubtleCrypto and SharedArrayBuffer there)."""
    from fxc.runtime.browser.webgl import open_page
    page = open_page()
    got = page.call("() => [crossOriginIsolated, isSecureContext, typeof SharedArrayBuffer, !!crypto.subtle]")
    assert got == [True, True, "function", True]
    assert page.info["max_texture_size"] >= 2048 and "driver" in page.info


def test_browser_without_webgl2_is_a_target_error(tmp_path):
    """A Chromium whose WebGL is off (a wrapper adding --disable-3d-apis) is a TargetError naming what is missing."""
    wrapper = tmp_path / "chromium"
    wrapper.write_text('#!/bin/sh\nexec /usr/bin/chromium --disable-3d-apis "$@"\n')
    wrapper.chmod(0o755)
    p = run_script(target_error_script("webgl", "no WebGL 2 context"), timeout=180, FXC_CHROMIUM=str(wrapper))
    assert p.returncode == 0, p.stdout + p.stderr


def test_collected_modules_free_their_textures_in_the_page():
    """A module's textures and programs live in the page; once Python collects the module, the next call frees them."""
    import gc

    from fxc.runtime.browser.webgl import open_page
    x = np.linspace(-1, 1, 3000).astype(np.float32)
    ids = []
    for scale in (1.0, 2.0):
        b = Builder()
        v = b.graph.input(x.shape, "float32")
        b.graph.outputs = [b.call("exp", [b.call("mul", [v, scale])])]
        m = build(b.graph, target="webgl")
        assert_close_np(m(x), np.exp(x * scale))
        ids.append(str(m._id))
        del m
        gc.collect()
    held = open_page().call("() => Object.keys(window.fxcModels)")
    assert ids[0] not in held and ids[1] in held


@pytest.mark.parametrize("fn", ["sin", "cos", "tan"])
def test_trigonometry_is_accurate(fn):
    """GLSL ES states no precision for sin/cos/tan (SwiftShader's are 2e-4 off at a few units): the WebGL renderer
    computes them itself (Cephes's reduction and polynomials), within a few ulp for |x| up to thousands."""
    x = np.concatenate([np.linspace(-100, 100, 4001), [0.0, -0.0, 1e-8, 1000.5, 5000.25, np.inf, -np.inf, np.nan]])
    x = x.astype(np.float32)
    b = Builder()
    v = b.graph.input(x.shape, "float32")
    b.graph.outputs = [b.call(fn, [v])]
    got = build(b.graph, target="webgl")(x)
    with np.errstate(invalid="ignore"):
        ref = getattr(np, fn)(x.astype(np.float64))
    assert np.array_equal(np.isnan(got), np.isnan(ref))
    ok = np.isfinite(ref)
    assert (np.abs(got[ok] - ref[ok]) / np.maximum(np.abs(ref[ok]), 1.0)).max() < 5e-7
