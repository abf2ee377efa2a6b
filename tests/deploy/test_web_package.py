"""The static web package of a webgl (webgpu, wasm) model (fxc/deploy/web.py): `fxc.export` -> `write_package` /
`fxc web` -> `serve` /
`fxc serve` on a free loopback port -> the page in the headless browser (fxc.runtime.browser.page) fetches and checks
every part's sha256, runs the model and shows the outputs' summary and the latency; the test reads them from the
DOM and the page's outputs and compares with eager PyTorch. A tampered part is reported on the page."""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import fxc
from fxc.deploy.web import serve, write_package
from fxc.errors import ArtifactError
from fxc.runtime.browser.page import open_browser
from tests.helpers import assert_close_np
from tests.helpers_devices import small_net

ROOT = Path(__file__).resolve().parents[2]


def _exported(tmp_path_factory, target: str, seed: int, name: str):
    """The small net (seeded) compiled for target and exported: (model, artifact path)."""
    torch.manual_seed(seed)
    model, x = small_net(), torch.randn(2, 3, 16, 16)
    path = fxc.export(fxc.from_torch(model, (x,), target=target), tmp_path_factory.mktemp(name) / f"{name}.fxc")
    return model, path


@pytest.fixture(scope="module")
def artifact(tmp_path_factory):
    return _exported(tmp_path_factory, "webgl", 0, "net")


def _open(url):
    page = open_browser().visit(url, name="package-test")
    try:
        page.wait_for("document.body.dataset.state !== 'loading'", seconds=300)
        return page, page.call("""() => ({state: document.body.dataset.state, status: document.getElementById('status')
            .textContent, result: document.getElementById('result').textContent, outputs: window.fxcOutputs || null,
            latency: document.getElementById('latency').textContent})""")
    except BaseException:
        page.close()
        raise


def _check_page_output(got, result, expected) -> float:
    """The page's first output (the whole array it posted back, and its argmax in the result) against `expected`,
    within 1e-4 of its scale; returns the scale."""
    scale = float(np.abs(expected).max())
    assert result["outputs"][0]["argmax"] == int(expected.argmax())
    assert_close_np(np.asarray(got["outputs"][0], np.float32).reshape(expected.shape), expected,
                    rtol=0, atol=1e-4 * scale)
    return scale


def test_package_runs_in_the_browser_and_matches_eager(artifact, tmp_path):
    model, path = artifact
    x = np.random.default_rng(3).standard_normal((2, 3, 16, 16)).astype(np.float32)
    index = write_package(path, tmp_path / "site", inputs=[x], runs=3)
    names = sorted(p.name for p in index.parent.iterdir())
    assert names == ["index.html", "layout.json", "package.js", "package.json", "page.js", "runtime.js", "sample.bin",
                     "weights.bin"]
    with torch.no_grad():
        expected = model(torch.from_numpy(x)).numpy()
    with serve(index.parent) as server:
        page, got = _open(server.url)
        try:
            assert got["state"] == "done", got["status"]
            assert got["status"].startswith("done: every part's sha256 matched")
            shot = tmp_path / "page.png"
            page.screenshot(shot)
            assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
            headers = page.call("async () => { const r = await fetch('package.json'); return "
                                "[crossOriginIsolated, r.headers.get('cross-origin-embedder-policy')]; }")
            assert headers == [True, "require-corp"]
        finally:
            page.close()
    result = json.loads(got["result"])
    out = result["outputs"][0]
    assert out["shape"] == list(expected.shape) and result["runs"] == 3 and result["latency_ms"] > 0
    assert "ms a call" in got["latency"]
    scale = _check_page_output(got, result, expected)
    assert abs(out["max"] - expected.max()) <= 1e-4 * scale and abs(out["mean"] - expected.mean()) <= 1e-4 * scale


def test_a_tampered_part_is_reported_on_the_page(artifact, tmp_path):
    _, path = artifact
    index = write_package(path, tmp_path / "site", runs=1)
    weights = index.parent / "weights.bin"
    data = bytearray(weights.read_bytes())
    data[5] ^= 1
    weights.write_bytes(bytes(data))
    with serve(index.parent) as server:
        page, got = _open(server.url)
        page.close()
    assert got["state"] == "error" and "weights.bin: sha256" in got["status"] and "write the package again" in \
        got["status"], got["status"]


def test_cli_web_and_bounded_serve(artifact, tmp_path):
    _, path = artifact
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    p = subprocess.run([sys.executable, "-m", "fxc.cli", "web", str(path), str(tmp_path / "site")],
                       capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 0 and "fxc serve" in p.stdout, p.stderr
    p = subprocess.run([sys.executable, "-m", "fxc.cli", "serve", str(tmp_path / "site"), "--port", "0",
                        "--seconds", "0.5"], capture_output=True, text=True, env=env, timeout=60)
    assert p.returncode == 0 and "http://127.0.0.1:" in p.stdout, p.stderr
    p = subprocess.run([sys.executable, "-m", "fxc.cli", "serve", str(tmp_path)], capture_output=True, text=True,
                       env=env, timeout=60)
    assert p.returncode == 1 and "no index.html" in p.stderr


def test_web_refuses_other_targets(tmp_path):
    from fxc.driver.build import build
    from fxc.relay_like.builder import Builder
    b = Builder()
    v = b.graph.input((4,), "float32")
    b.graph.outputs = [b.call("exp", [v])]
    path = fxc.export(build(b.graph, target="llvm"), tmp_path / "cpu.fxc")
    with pytest.raises(ArtifactError, match="compile it with target=.webgl. .*, target=.webgpu. or target=.wasm."):
        write_package(path, tmp_path / "site")


@pytest.fixture(scope="module")
def gpu_artifact(tmp_path_factory):
    return _exported(tmp_path_factory, "webgpu", 1, "gpunet")


def test_webgpu_package_runs_in_the_browser_and_matches_eager(gpu_artifact, tmp_path):
    model, path = gpu_artifact
    x = np.random.default_rng(4).standard_normal((2, 3, 16, 16)).astype(np.float32)
    index = write_package(path, tmp_path / "site", inputs=[x], runs=3)
    assert sorted(p.name for p in index.parent.iterdir()) == [
        "index.html", "layout.json", "package.js", "package.json", "page.js", "runtime.js", "sample.bin",
        "weights.bin"]
    assert "FxcWebGPU" in (index.parent / "runtime.js").read_text()
    with torch.no_grad():
        expected = model(torch.from_numpy(x)).numpy()
    with serve(index.parent) as server:
        page, got = _open(server.url)
        page.close()
    assert got["state"] == "done", got["status"]
    result = json.loads(got["result"])
    assert "WebGPU" in result["renderer"] and result["runs"] == 3 and result["latency_ms"] > 0
    _check_page_output(got, result, expected)


def test_webgpu_package_reports_a_tampered_shader(gpu_artifact, tmp_path):
    _, path = gpu_artifact
    index = write_package(path, tmp_path / "site", runs=1)
    lay = index.parent / "layout.json"
    lay.write_bytes(lay.read_bytes().replace(b"fn main", b"fn main ", 1))
    with serve(index.parent) as server:
        page, got = _open(server.url)
        page.close()
    assert got["state"] == "error" and "layout.json: sha256" in got["status"], got["status"]


@pytest.mark.parametrize("threads", [1, 2])
def test_wasm_package_runs_in_the_browser_and_matches_eager(tmp_path, threads):
    """The wasm target's package: its own module.wasm run by the wasm device module's runtime.js; a threaded module
    (shared memory, workers) in the page fxc serve makes cross-origin isolated."""
    torch.manual_seed(2)
    model, x = small_net(), np.random.default_rng(5).standard_normal((2, 3, 16, 16)).astype(np.float32)
    compiled = fxc.from_torch(model, (torch.from_numpy(x),), target=f"wasm -num-threads={threads}")
    path = fxc.export(compiled, tmp_path / "wnet.fxc")
    index = write_package(path, tmp_path / "site", inputs=[x], runs=3)
    assert sorted(p.name for p in index.parent.iterdir()) == [
        "index.html", "layout.json", "module.wasm", "package.js", "package.json", "page.js", "runtime.js",
        "sample.bin", "weights.bin"]
    assert "FxcWasmModel" in (index.parent / "runtime.js").read_text()
    with torch.no_grad():
        expected = model(torch.from_numpy(x)).numpy()
    with serve(index.parent) as server:
        page, got = _open(server.url)
        page.close()
    assert got["state"] == "done", got["status"]
    result = json.loads(got["result"])
    assert f"WebAssembly (wasm32, SIMD128), {threads} thread" in result["renderer"] and result["runs"] == 3
    assert result["latency_ms"] > 0
    _check_page_output(got, result, expected)
