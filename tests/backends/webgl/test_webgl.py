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
browser is a failure, not a skip (scripts/setup.sh installs Debian's chromium and pip's playwright)."""

import numpy as np
import pytest
import torch

import fxc
from fxc.driver.build import build
from fxc.errors import IndexOutOfRangeError, LoweringError
from fxc.relay_like.builder import Builder
from tests.helpers import assert_close_np, check_module
from tests.helpers_devices import CASE_IDS, CASES, check_op_sample, run_script, small_net, target_error_script

# the sample's cases a fragment shader cannot express (see the module docstring): they run as wasm kernels in the
# page (fxc.driver.page_kernels), but for those whose float64 would cross between the two or that wasm lacks (lgamma)
IN_WASM = {(n, k) for n in ("cholesky", "cumsum", "grid_sample", "index_put", "random_uniform", "scatter", "sort")
           for k in (0, 1)} | {("floordiv", 1), ("remainder", 1)}
REFUSED = {case: (LoweringError, None)
           for case in (("cholesky", 1), ("lgamma", 0), ("lgamma", 1), ("random_uniform", 1))}
IN_WASM -= set(REFUSED)


@pytest.mark.parametrize("name,k", CASES, ids=CASE_IDS)
def test_op_sample_on_webgl(name, k):
    check_op_sample("webgl", name, k, refused=REFUSED, in_wasm=IN_WASM)


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


def test_torch_compile_and_export_on_webgl(tmp_path):
    """torch.compile(target="webgl") runs the small conv net in the page (nothing falls back); from_torch, export and
    load run it too."""
    model, x = small_net(), torch.randn(2, 3, 16, 16)
    rep = fxc.explain(model, x, target="webgl")
    assert not rep.fallback_ops and not rep.failures and all("[webgl:" in k for k in rep.kernels), str(rep)
    check_module(model, x, target="webgl", rtol=1e-4, atol=1e-5)
    compiled = fxc.from_torch(model, (x,), target="webgl")
    with torch.no_grad():
        expected = model(x).numpy()
    assert_close_np(compiled(x.numpy()), expected)
    path = fxc.export(compiled, tmp_path / "m.fxc")
    import json
    import zipfile
    with zipfile.ZipFile(path) as z:
        assert json.loads(z.read("manifest.json"))["target"] == "webgl"
        assert "#version 300 es" in z.read("program.webgl.json").decode()
    assert_close_np(fxc.load(path)(x.numpy()), expected)


def test_no_browser_is_a_target_error():
    script = target_error_script("webgl", "no Chromium at /nonexistent/chromium", "apt-get install chromium")
    p = run_script(script, FXC_CHROMIUM="/nonexistent/chromium")
    assert p.returncode == 0, p.stdout + p.stderr


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


# the conv nets at a smaller resolution than their 224x224 (the same layers, a tenth of the work: SwiftShader runs
# every fragment on the CPU); `python -m benchmarks.webgl_models` runs them at full size
MODEL_INPUT = {"resnet18": (1, 3, 64, 64), "mobilenet_v2": (1, 3, 96, 96)}


@pytest.mark.slow
@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v2", "bert"])
def test_reference_models_on_webgl(name):
    """ResNet-18 (max_pool2d), MobileNetV2 and the BERT encoder (embedding, layer_norm, softmax) run whole in the
    page under torch.compile (nothing falls back) and match eager within 1e-4 x the output's scale."""
    from fxc.testing.models import example_inputs, make_model
    model = make_model(name)
    inputs = example_inputs(name, batch=1, seq_len=32)
    if name in MODEL_INPUT:
        inputs = (torch.randn(MODEL_INPUT[name], generator=torch.Generator().manual_seed(1)),)
    rep = fxc.explain(model, *inputs, target="webgl")
    assert not rep.fallback_ops and not rep.failures, str(rep)
    assert all("[webgl:" in k for k in rep.kernels)
    out = check_module(model, *inputs, target="webgl", rtol=0, atol=1e-4)
    assert torch.isfinite(out).all() and out.abs().max() > 1e-2


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
