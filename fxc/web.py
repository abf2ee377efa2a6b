"""The static web package of a model compiled for `webgl` (`fxc web`), and a local server for it (`fxc serve`).

    write_package("model.fxc", "site")      # site/index.html, page.js, runtime.js, layout.json, weights.bin, ...
    with serve("site") as server:           # http://127.0.0.1:<free port>/ with COOP/COEP headers
        print(server.url)

Takes a verified artifact (`fxc.export` of a webgl module: one hashed zip) and writes a folder that runs the model
in a browser with nothing else: `index.html` loads `runtime.js` (fxc/runtime/webgl, the plan runtime the RPC path
uses) and `page.js` with Subresource Integrity hashes; the page fetches `package.json`, then `layout.json` (the
shaders, textures and steps: fxc.runtime.webgl.layout), `weights.bin` (the constants as texture data, float32 or
int32) and `sample.bin` (one input set: the caller's, or standard normal floats and zero integers), checks each
one's sha256 with SubtleCrypto against package.json, runs the model (one warm-up call, then `runs` timed calls)
and shows each output's summary (shape, min, max, mean, argmax, first values) and the median latency of a call
(inputs uploaded, plan drawn, outputs read back). The page sets `document.body.dataset.state` to "done" or
"error" and keeps the outputs in `window.fxcOutputs` (what the tests read). Files are written atomically.

`serve` is a small http.server on 127.0.0.1 only, with the Cross-Origin-Opener/Embedder-Policy headers a
cross-origin-isolated page needs (SharedArrayBuffer, wasm threads); it stops on Ctrl-C, after `seconds`, or when
its context ends. Errors: ArtifactError (not a webgl artifact, a damaged one), InputError (sample inputs of
another signature), FxcError (a folder that cannot be served).
"""
from __future__ import annotations

import base64
import hashlib
import http.server
import json
import threading
from pathlib import Path

import numpy as np

from . import __version__
from .cache import atomic_write
from .errors import ArtifactError, FxcError
from .runtime.artifact import read_artifact
from .runtime.device_module import read_device
from .runtime.module import check_inputs
from .runtime.webgl import RUNTIME_JS, layout, pack, program_of

PAGE_JS = """"use strict";
(async () => {
  const status = document.getElementById("status"), shown = document.getElementById("result");
  try {
    const t0 = performance.now();
    const {model, pkg, inputs} = await fxcLoadPackage("./");
    const loadMs = performance.now() - t0;
    let r = model.run(inputs, false);               // the first draw of each program may compile it
    const times = [];
    for (let i = 0; i < pkg.runs; i++) {
      const t = performance.now();
      r = model.run(inputs, false);
      times.push(performance.now() - t);
    }
    times.sort((a, b) => a - b);
    const median = times.length ? times[times.length >> 1] : NaN;
    window.fxcOutputs = r.outputs.map(o => Array.from(o));
    const result = {model: pkg.model, latency_ms: median, runs: times.length, load_ms: loadMs,
                    renderer: model.renderer, outputs: r.outputs.map((o, i) => fxcSummary(o, pkg.outputs[i].shape))};
    const fmt = v => (Math.abs(v) >= 1e4 || (v !== 0 && Math.abs(v) < 1e-3)) ? v.toExponential(3) : v.toFixed(4);
    const table = document.getElementById("outputs");
    for (const [i, s] of result.outputs.entries()) {
      const row = table.insertRow();
      for (const v of [pkg.outputs[i].name, `[${s.shape.join(", ")}]`, fmt(s.min), fmt(s.max), fmt(s.mean),
                       s.argmax, s.first.slice(0, 4).map(fmt).join(", ")]) row.insertCell().textContent = v;
    }
    shown.textContent = JSON.stringify(result);
    document.getElementById("latency").textContent =
      `${median.toFixed(1)} ms a call (median of ${times.length}; load and checks ${loadMs.toFixed(0)} ms)`;
    status.textContent = "done: every part's sha256 matched package.json";
    document.body.dataset.state = "done";
  } catch (e) {
    status.textContent = "error: " + (e.message || e);
    document.body.dataset.state = "error";
  }
})();
"""
INDEX = """<!doctype html>
<html><head><meta charset="utf-8"><title>{title} (fxc webgl)</title>
<style>body {{ font: 15px system-ui, sans-serif; margin: 2em; }} pre {{ background: #f4f4f4; padding: 1em; }}
#latency {{ font-size: 1.6em; font-weight: bold; }}
table {{ border-collapse: collapse; }} td, th {{ border: 1px solid #ccc; padding: 0.3em 0.8em; text-align: right; }}
pre {{ white-space: pre-wrap; word-break: break-all; }}</style>
<script src="runtime.js" integrity="{runtime}"></script>
<script src="page.js" integrity="{page}" defer></script></head>
<body data-state="loading"><h1>{title}</h1>
<p>compiled by fxc {version} for the <code>webgl</code> target: {kernels} kernels, {launches} draws a call,
weights {weights_mb:.1f} MB</p>
<p id="status">loading and checking the package...</p><p id="latency"></p>
<table id="outputs"><tr><th>output</th><th>shape</th><th>min</th><th>max</th><th>mean</th><th>argmax</th>
<th>first values</th></tr></table>
<details><summary>result (JSON)</summary><pre id="result"></pre></details></body></html>
"""


def _sri(data: bytes) -> str:
    return "sha256-" + base64.b64encode(hashlib.sha256(data).digest()).decode()


def sample_inputs(specs: list, seed: int = 0) -> list:
    """One input set of the signature: standard normal floats, zero integers and False."""
    from .runtime.module import np_dtype
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s.shape).astype(np.float32) if s.dtype == "float32"
            else np.zeros(s.shape, np_dtype(s.dtype)) for s in specs]


def write_package(artifact, directory, inputs=None, runs: int = 10, trusted_keys=None) -> Path:
    """Write the static web package of a webgl artifact into `directory` (made if missing); returns index.html's
    path. inputs: the sample inputs the page runs (numpy arrays of the signature; default sample_inputs)."""
    manifest, parts = read_artifact(artifact, trusted_keys)
    if str(manifest.get("target", "")).split(" ")[0] != "webgl":
        raise ArtifactError(f"{artifact}: a {manifest.get('target')!r} artifact; `fxc web` packages a model compiled "
                            f"for webgl: compile it with target='webgl' (fxc compile --target webgl)")
    source, specs, outputs, consts, _, plan = read_device(artifact, manifest, parts)
    desc = layout(program_of(source), plan, specs, outputs, consts)
    inputs = check_inputs(specs, sample_inputs(specs) if inputs is None else list(inputs))
    weights, wrec = pack(consts, [f"constant {i}" for i in range(len(consts))])
    sample, srec = pack(inputs, [s.name for s in specs])
    files = {"layout.json": json.dumps(desc, separators=(",", ":")).encode(), "weights.bin": weights,
             "sample.bin": sample}
    sig = lambda ss: [{"name": s.name, "shape": list(s.shape), "dtype": s.dtype} for s in ss]  # noqa: E731
    title = Path(artifact).stem
    pkg = {"format": "fxc-web", "model": title, "target": manifest["target"], "fxc_version": __version__,
           "artifact_sha256": hashlib.sha256(Path(artifact).read_bytes()).hexdigest(), "runs": int(runs),
           "inputs": sig(specs), "outputs": sig(outputs), "layout": "layout.json",
           "weights": {"file": "weights.bin", "tensors": wrec}, "sample": {"file": "sample.bin", "tensors": srec},
           "parts": {n: {"sha256": hashlib.sha256(d).hexdigest(), "bytes": len(d)} for n, d in files.items()}}
    runtime, page = RUNTIME_JS.read_bytes(), PAGE_JS.encode()
    files.update({"package.json": json.dumps(pkg, indent=1).encode(), "runtime.js": runtime, "page.js": page})
    files["index.html"] = INDEX.format(title=title, runtime=_sri(runtime), page=_sri(page), version=__version__,
                                       kernels=len(desc["kernels"]), launches=len(desc["steps"]),
                                       weights_mb=len(weights) / 1e6).encode()
    out = Path(directory)
    for name, data in files.items():
        try:
            atomic_write(out / name, data)
        except OSError as e:
            raise FxcError(f"cannot write {out / name} ({e.strerror or e}); choose a writable folder") from None
    return out / "index.html"


class _Handler(http.server.SimpleHTTPRequestHandler):
    def end_headers(self):
        self.send_header("Cross-Origin-Opener-Policy", "same-origin")
        self.send_header("Cross-Origin-Embedder-Policy", "require-corp")
        self.send_header("Cross-Origin-Resource-Policy", "same-origin")
        self.send_header("Cache-Control", "no-store")
        super().end_headers()

    def log_message(self, fmt, *args):      # quiet: the page reports what matters
        pass


http.server.SimpleHTTPRequestHandler.extensions_map.setdefault(".wasm", "application/wasm")


class Server:
    """A running `serve`: .url, .port, .stop() (also a context manager)."""

    def __init__(self, directory, port: int = 0):
        d = Path(directory)
        if not (d / "index.html").is_file():
            raise FxcError(f"{d}: no index.html to serve; write a package there first (fxc web model.fxc {d})")
        handler = lambda *a, **k: _Handler(*a, directory=str(d), **k)  # noqa: E731
        try:
            self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", int(port)), handler)
        except OSError as e:
            raise FxcError(f"cannot listen on 127.0.0.1:{port} ({e.strerror or e}); choose another --port") from None
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}/"
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="fxc-serve", daemon=True)
        self._thread.start()

    def wait(self, seconds: float | None = None) -> None:
        """Serve until stopped, or for `seconds`."""
        self._thread.join(seconds)

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self._thread.join()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


def serve(directory, port: int = 0) -> Server:
    """Serve `directory` on 127.0.0.1:`port` (0: a free port) from a background thread; stop() ends it."""
    return Server(directory, port)
