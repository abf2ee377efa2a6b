"""The static web package of a model compiled for `webgl`, `webgpu` or `wasm` (`fxc web`), and a local server
(`fxc serve`).

    write_package("model.fxc", "site")      # site/index.html, page.js, runtime.js, layout.json, weights.bin, ...
    with serve("site") as server:           # http://127.0.0.1:<free port>/ with COOP/COEP headers
        print(server.url)

Takes a verified artifact (`fxc.export` of a webgl, webgpu or wasm module: one hashed zip) and writes a folder that
runs the model in a browser with nothing else: `index.html` loads, with Subresource Integrity hashes, `runtime.js`
(the target's plan runtime, fxc/runtime/browser/webgl, webgpu or wasm, the one the RPC path uses), for a webgl or
webgpu model with wasm kernels `wasm.js` (fxc/runtime/browser/wasm's runtime) and the target's side of the boundary
(`webgl_steps.js` or `webgpu_steps.js`), `package.js` (fxc/runtime/browser/web_package.js: fetch, check, load) and
`page.js` (one for all three targets). The page fetches `package.json`, then every part it lists and checks each
one's sha256 with SubtleCrypto: `layout.json` (webgl: the shaders, textures and steps of
fxc.runtime.browser.webgl.layout; webgpu: the WGSL program and its launches over the arena's byte offsets; wasm:
the buffers' sizes, whether the module packs its weights, its threads and shared memory pages), `weights.bin` (the
constants: webgl texture data, float32 or int32; webgpu the bytes the arena holds; wasm the tensors at 16-byte
offsets), `sample.bin` (one input set: the caller's, or standard normal floats and zero integers) and `module.wasm`
(webgl, webgpu: the groups WebGL or WGSL cannot express, compiled for wasm32: fxc.driver.page_kernels; wasm: the
model's module, its whole plan inside, run by FxcWasmModel as fxc.runtime.browser.wasm.WasmModule runs it; a threaded
one needs the page cross-origin isolated, which `serve` provides). It runs the model (one
warm-up call, then `runs` timed calls) and shows each output's summary (shape, min, max, mean, argmax, first
values) and the median latency of a call (inputs uploaded, plan run, outputs read back). The page sets
`document.body.dataset.state` to "done" or "error" and keeps the outputs in `window.fxcOutputs` (what the tests
read). Files are written atomically.

`package.json` lists every file of the package ("files"). `write_package` writes into a new or empty folder, or
over an earlier package (a folder holding only files an fxc web package has, package.json saying so; the files of
the earlier package the new one lacks are removed); any other non-empty folder is refused, as `fxc extract` does.

`serve` is a small http.server on 127.0.0.1 only, with the Cross-Origin-Opener/Embedder-Policy headers a
cross-origin-isolated page needs (SharedArrayBuffer, wasm threads). It serves the files package.json lists and
nothing else: each a regular file of the folder opened without following links (no listings, no other files, no
links out; `/` is index.html), GET and HEAD only. It answers only requests whose Host is its own address
(127.0.0.1:<port>, localhost:<port> or [::1]:<port>): a page elsewhere that rebinds its DNS name to 127.0.0.1 gets
421 Misdirected Request, never the model. At most MAX_CONNECTIONS connections are served at once (more are closed
at once) and one idle past `timeout` seconds is closed: half-sent requests hold neither threads nor the server. It
stops on Ctrl-C, after `seconds`, or when its context ends. Errors: ArtifactError (not a webgl, webgpu or wasm
artifact, a damaged one, size symbols on webgpu or wasm), InputError (sample inputs of another signature), FxcError
(a folder that cannot be written or served).
"""
from __future__ import annotations

import base64
import hashlib
import http.server
import json
import os
import stat
import sys
import threading
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from ..errors import ArtifactError, FxcError
from ..runtime.arena import place_arena
from ..runtime.artifact.device import read_device
from ..runtime.artifact.read import read_artifact
from ..runtime.browser import wasm, webgpu
from ..runtime.browser.page import ISOLATION, TYPES
from ..runtime.browser.webgl import RUNTIME_JS, WASM_JS, WASM_STEPS_JS, layout, pack, program_of
from ..runtime.launch import dispatch_of
from ..runtime.row_plan import shape_at
from ..runtime.store import atomic_write
from ..runtime.symbols import bind_symbols
from ..runtime.tensors import check_inputs, nbytes, np_dtype
from ..version import __version__

PACKAGE_JS = Path(__file__).parents[1] / "runtime" / "browser" / "web_package.js"
# every file name a package may have (its package.json lists the ones it has)
PACKAGE_FILES = frozenset({"index.html", "package.json", "page.js", "package.js", "runtime.js", "wasm.js",
                           "webgl_steps.js", "webgpu_steps.js", "layout.json", "weights.bin", "sample.bin",
                           "module.wasm"})
MAX_CONNECTIONS = 32        # served at once; more are closed at once
IDLE_SECONDS = 10.0         # a connection silent this long is closed

PAGE_JS = """"use strict";
(async () => {
  const status = document.getElementById("status"), shown = document.getElementById("result");
  try {
    const t0 = performance.now();
    let {model, pkg, inputs} = await fxcLoadPackage("./");
    const loadMs = performance.now() - t0;
    const check = r => {                            // a wasm step's error code (webgl with wasm kernels)
      if (r.fault) throw new Error(`${r.fault.entry} returned ${r.fault.rc} ${JSON.stringify(r.fault.record)}`);
      return r; };
    const size = fxcPackageSize(pkg);                // a symbolic batch: the page's ?size=N (else the sample's)
    if (size !== null) inputs = fxcTile(inputs, pkg, size);
    let r = check(await model.run(inputs, false, size));  // the first draw of each program may compile it
    const times = [];
    for (let i = 0; i < pkg.runs; i++) {
      const t = performance.now();
      r = check(await model.run(inputs, false, size));
      times.push(performance.now() - t);
    }
    times.sort((a, b) => a - b);
    const median = times.length ? times[times.length >> 1] : NaN;
    window.fxcOutputs = r.outputs.map(o => Array.from(o));
    const result = {model: pkg.model, latency_ms: median, runs: times.length, load_ms: loadMs,
                    renderer: model.renderer,
                    outputs: r.outputs.map((o, i) => fxcSummary(o, fxcShape(pkg.outputs[i].shape, size)))};
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
<html><head><meta charset="utf-8"><title>{title} (fxc {kind})</title>
<style>body {{ font: 15px system-ui, sans-serif; margin: 2em; }} pre {{ background: #f4f4f4; padding: 1em; }}
#latency {{ font-size: 1.6em; font-weight: bold; }}
table {{ border-collapse: collapse; }} td, th {{ border: 1px solid #ccc; padding: 0.3em 0.8em; text-align: right; }}
pre {{ white-space: pre-wrap; word-break: break-all; }}</style>
{scripts}</head>
<body data-state="loading"><h1>{title}</h1>
<p>compiled by fxc {version} for the <code>{kind}</code> target: {kernels} kernels, {launches} launches a call{mixed},
weights {weights_mb:.1f} MB</p>
<p id="status">loading and checking the package...</p><p id="latency"></p>
<table id="outputs"><tr><th>output</th><th>shape</th><th>min</th><th>max</th><th>mean</th><th>argmax</th>
<th>first values</th></tr></table>
<details><summary>result (JSON)</summary><pre id="result"></pre></details></body></html>
"""


def _sri(data: bytes) -> str:
    return "sha256-" + base64.b64encode(hashlib.sha256(data).digest()).decode()


def sample_inputs(specs: list, seed: int = 0, sizes: dict | None = None) -> list:
    """One input set of the signature (at the size symbols' `sizes`): standard normal floats, zero integers, False."""
    rng = np.random.default_rng(seed)
    shapes = [shape_at(s, sizes) if sizes else s.shape for s in specs]
    return [rng.standard_normal(shape).astype(np.float32) if s.dtype == "float32"
            else np.zeros(shape, np_dtype(s.dtype)) for s, shape in zip(specs, shapes)]


def _webgl_parts(source, specs, outputs, consts, workspace, plan, inputs, symbols=()) -> tuple:
    """The webgl package's own parts: layout.json, weights.bin, sample.bin and, when some groups run as wasm
    kernels (what WebGL cannot express), module.wasm; (files, package.json entries, scripts, kernels, launches)."""
    program = program_of(source)
    desc = layout(program, plan, specs, outputs, consts, symbols=symbols)
    weights, wrec = pack(consts, [f"constant {i}" for i in range(len(consts))])
    sample, srec = pack(inputs, [s.name for s in specs])
    files = {"layout.json": json.dumps(desc, separators=(",", ":")).encode(), "weights.bin": weights,
             "sample.bin": sample}
    extra = {"weights": {"file": "weights.bin", "tensors": wrec}, "sample": {"file": "sample.bin", "tensors": srec}}
    scripts = {"runtime.js": RUNTIME_JS.read_bytes()}
    if "wasm" in program:
        files["module.wasm"] = base64.b64decode(program["wasm"]["module"])
        extra["wasm"] = "module.wasm"
        scripts["wasm.js"] = WASM_JS.read_bytes()
        scripts["webgl_steps.js"] = WASM_STEPS_JS.read_bytes()
    return files, extra, scripts, len(desc["kernels"]), len(desc["steps"])


def _raw(arrays: list) -> tuple:
    """(bytes, [[start, bytes]]): the arrays' bytes as an arena holds them, each padded to whole 4-byte words."""
    blob, records = bytearray(), []
    for a in arrays:
        raw = np.ascontiguousarray(a).reshape(-1).view(np.uint8).tobytes()
        raw += bytes(-len(raw) % 4)
        records.append([len(blob), len(raw)])
        blob += raw
    return bytes(blob), records


def _webgpu_parts(source, specs, outputs, consts, workspace, plan, inputs) -> tuple:
    """The webgpu package's own parts: layout.json (the WGSL program, the launches with their operands' byte
    offsets in the arena: fxc.runtime.browser.webgpu's layout), weights.bin and sample.bin (bytes as the arena holds
    them)."""
    m = SimpleNamespace(inputs=specs, outputs=outputs, consts=consts, workspace_bytes=workspace)
    place_arena(m, 1 << 62, "WebGPU", "the browser")        # the page checks its adapter's binding limit
    where = {"in": m._in_at, "out": m._out_at, "const": m._const_at}
    at = lambda kind, ix: -1 if kind == "null" else m._ws_at + ix if kind == "work" else where[kind][ix]  # noqa: E731
    program = json.loads(source.split("\n", 1)[1] if source.startswith("/*") else source)
    wasm = program.pop("wasm", {})          # groups WGSL refused: wasm steps (fxc.driver.page_kernels)
    entries = wasm.get("entries", {})
    desc = {"program": program, "arena_bytes": m.arena_bytes, "inputs": m._in_at, "outputs": m._out_at,
            "output_bytes": [nbytes(s) for s in outputs], "consts": m._const_at,
            "plan": [{"wasm": st.kernel, "offsets": [at(kind, ix) for kind, ix in st.args], **entries[st.kernel]}
                     if st.kernel in entries else
                     {"kernel": st.kernel, "offsets": [at(kind, ix) for kind, ix in st.args],
                      "groups": list(dispatch_of(tuple(st.grid))[0])} for st in plan]}
    weights, wrec = _raw(m.consts)
    sample, srec = _raw(inputs)
    files = {"layout.json": json.dumps(desc, separators=(",", ":")).encode(), "weights.bin": weights,
             "sample.bin": sample}
    extra = {"weights": {"file": "weights.bin", "tensors": wrec}, "sample": {"file": "sample.bin", "tensors": srec}}
    scripts = {"runtime.js": webgpu.RUNTIME_JS.read_bytes()}
    if wasm:
        files["module.wasm"] = base64.b64decode(wasm["module"])
        extra["wasm"] = "module.wasm"
        scripts.update({"wasm.js": webgpu.WASM_JS.read_bytes(), "webgpu_steps.js": webgpu.WASM_STEPS_JS.read_bytes()})
    return files, extra, scripts, len(program["kernels"]), len(plan)


def _wasm_parts(source, specs, outputs, consts, workspace, plan, inputs) -> tuple:
    """The wasm package's own parts: module.wasm (the model's module, its plan inside: fxc.backends.wasm.link),
    layout.json (the buffers' bytes, whether it packs weights, its threads and shared memory pages), weights.bin and
    sample.bin (tensors at ALIGN-byte offsets: fxc.runtime.browser.wasm.pack); runtime.js is the wasm device
    module's own (fxc/runtime/browser/wasm/runtime.js)."""
    program = json.loads(source.split("\n", 1)[1] if source.startswith("/*") else source)
    desc = {"spec": {"inputs": [nbytes(s) for s in specs], "outputs": [nbytes(s) for s in outputs],
                     "consts": [int(np.asarray(c).nbytes) for c in consts], "workspace": int(workspace),
                     "prepack": bool(program["prepack"])},
            "threads": int(program.get("threads", 1)), "memory_pages": program.get("memory_pages")}
    weights, wrec = wasm.pack(consts)
    sample, srec = wasm.pack(inputs)
    files = {"layout.json": json.dumps(desc, separators=(",", ":")).encode(), "weights.bin": weights,
             "sample.bin": sample, "module.wasm": base64.b64decode(program["wasm"])}
    extra = {"weights": {"file": "weights.bin", "tensors": wrec}, "sample": {"file": "sample.bin", "tensors": srec},
             "module": "module.wasm"}
    return files, extra, {"runtime.js": wasm.RUNTIME_JS.read_bytes()}, len({st.kernel for st in plan}), len(plan)


PARTS = {"webgl": _webgl_parts, "webgpu": _webgpu_parts, "wasm": _wasm_parts}   # target kind -> its package's parts


def write_package(artifact, directory, inputs=None, runs: int = 10, trusted_keys=None, **expected) -> Path:
    """Write the static web package of a webgl, webgpu or wasm artifact into `directory` (made if missing; else empty,
    or an earlier package: the module's doc); returns index.html's path. inputs: the sample inputs the page runs
    (numpy arrays of the signature; default sample_inputs). expected: expected_name, min_version, expected_sha256
    (fxc.load's)."""
    out = Path(directory)
    earlier = _earlier_package(out)         # refused before any work: a folder that is not ours
    manifest, parts = read_artifact(artifact, trusted_keys, **expected)
    kind = str(manifest.get("target", "")).split(" ")[0]
    if kind not in PARTS:
        raise ArtifactError(f"{artifact}: a {manifest.get('target')!r} artifact; `fxc web` packages a model compiled "
                            f"for webgl, webgpu or wasm: compile it with target='webgl' (fxc compile --target webgl), "
                            f"target='webgpu' or target='wasm'")
    source, specs, outputs, consts, workspace, plan = read_device(artifact, manifest, parts)
    symbols, dynamic = list(manifest.get("symbols") or ()), {}
    if symbols and kind != "webgl":
        raise ArtifactError(f"{artifact}: a {kind} artifact with size symbols; `fxc web` packages a symbolic batch for "
                            f"webgl only (fxc.load runs this one at any size): export a {kind} build with static "
                            f"shapes for the web package, or a webgl build with the dynamic batch")
    if symbols:     # a symbolic batch (webgl): the sample at its size; the page runs any size (?size=N) in range
        sizes = {symbols[0]["name"]: min(max(8, symbols[0]["min"]), symbols[0]["max"])} if inputs is None else \
            bind_symbols(specs, [np.shape(a) for a in inputs], symbols)
        inputs = sample_inputs(specs, sizes=sizes) if inputs is None else list(inputs)
        dynamic = {"symbol": symbols[0], "sample_size": int(sizes[symbols[0]["name"]])}
    inputs = check_inputs(specs, sample_inputs(specs) if inputs is None else list(inputs), symbols)
    files, extra, scripts, kernels, launches = PARTS[kind](source, specs, outputs, consts, workspace, plan, inputs,
                                                           **({"symbols": symbols} if symbols else {}))
    sig = lambda ss: [{"name": s.name, "shape": list(s.shape), "dtype": s.dtype} for s in ss]  # noqa: E731
    title = Path(artifact).stem
    pkg = {"format": "fxc-web", "model": title, "target": manifest["target"], "fxc_version": __version__,
           "artifact_sha256": hashlib.sha256(Path(artifact).read_bytes()).hexdigest(), "runs": int(runs),
           "inputs": sig(specs), "outputs": sig(outputs), "layout": "layout.json", **extra, **dynamic,
           "parts": {n: {"sha256": hashlib.sha256(d).hexdigest(), "bytes": len(d)} for n, d in files.items()}}
    scripts.update({"package.js": PACKAGE_JS.read_bytes(), "page.js": PAGE_JS.encode()})
    tags = "\n".join(f'<script src="{n}" integrity="{_sri(d)}"{" defer" if n == "page.js" else ""}></script>'
                     for n, d in scripts.items())
    files.update(scripts)
    mixed = f" ({len(program_of(source)['wasm']['entries'])} wasm kernels among them)" if "wasm" in extra else ""
    files["index.html"] = INDEX.format(title=title, kind=kind, scripts=tags, version=__version__, kernels=kernels,
                                       launches=launches, mixed=mixed,
                                       weights_mb=len(files["weights.bin"]) / 1e6).encode()
    pkg["files"] = sorted([*files, "package.json"])
    files["package.json"] = json.dumps(pkg, indent=1).encode()
    for name, data in files.items():
        try:
            atomic_write(out / name, data)
        except OSError as e:
            raise FxcError(f"cannot write {out / name} ({e.strerror or e}); choose a writable folder") from None
    for name in earlier - set(files):       # the earlier package's files this one has not (module.wasm...)
        (out / name).unlink(missing_ok=True)
    return out / "index.html"


def _earlier_package(d: Path) -> set:
    """The file names in `d` when it may be written: missing, empty, or an earlier fxc web package (package.json
    says so and every entry is a regular file of a package's name); FxcError for any other folder."""
    try:
        entries = list(os.scandir(d))
    except FileNotFoundError:
        return set()
    except OSError as e:
        raise FxcError(f"cannot write a web package into {d} ({e.strerror or e}); name a new folder") from None
    if not entries:
        return set()
    names = {e.name for e in entries}
    ours = all(e.name in PACKAGE_FILES and e.is_file(follow_symlinks=False) for e in entries)
    if not ours or _package_format(d) != "fxc-web":
        stray = sorted(names - PACKAGE_FILES) or sorted(names)
        raise FxcError(f"cannot write a web package into {d}: the folder is not empty and is not an earlier fxc web "
                       f"package (it holds {', '.join(stray[:5])}{', ...' if len(stray) > 5 else ''}); name a new or "
                       f"empty folder")
    return names


def _package_format(d: Path):
    try:
        return json.loads(_read_regular(d, "package.json")).get("format")
    except (OSError, ValueError, AttributeError):
        return None


def _read_regular(d, name: str, dir_fd: int | None = None) -> bytes:
    """The bytes of the regular file `name` in the folder d (or dir_fd), never through a link; OSError otherwise."""
    fd = os.open(name if dir_fd is not None else Path(d) / name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK,
                 dir_fd=dir_fd)
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise IsADirectoryError(f"{name} is not a regular file")
        return f.read()


class _Handler(http.server.BaseHTTPRequestHandler):
    """GET/HEAD of the files package.json lists, for requests to the server's own Host; nothing else."""

    timeout = IDLE_SECONDS      # the socket's: a request not sent within it is dropped (Server sets its own)

    def setup(self):
        self.timeout = self.server.idle_seconds
        super().setup()

    def _reply(self, status: int, body: bytes = b"", ctype: str = "text/plain; charset=utf-8", head: bool = False):
        self.send_response(status)
        for k, v in {**ISOLATION, "Content-Type": ctype, "Content-Length": str(len(body)),
                     "X-Content-Type-Options": "nosniff"}.items():
            self.send_header(k, v)
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def do_GET(self, head: bool = False):
        server = self.server
        host = (self.headers.get("Host") or "").strip().lower()
        if host not in server.hosts:        # DNS rebinding: another site's name pointed at 127.0.0.1
            self._reply(421, b"fxc serve answers only http://127.0.0.1:%d/\n" % server.port, head=head)
            return
        name = self.path.split("?", 1)[0].split("#", 1)[0]
        name = "index.html" if name == "/" else name[1:] if name.startswith("/") else ""
        if name not in server.files:
            self._reply(404, b"not a file of this package\n", head=head)
            return
        try:
            body = _read_regular(None, name, dir_fd=server.dir_fd)
        except OSError:
            self._reply(404, b"not a regular file of this package\n", head=head)
            return
        self._reply(200, body, TYPES.get(Path(name).suffix, "application/octet-stream"), head=head)

    def do_HEAD(self):
        self.do_GET(head=True)

    def log_message(self, fmt, *args):      # quiet: the page reports what matters
        pass


class _BoundedServer(http.server.ThreadingHTTPServer):
    """A thread per connection, at most MAX_CONNECTIONS at once: a connection past that is closed at once."""

    daemon_threads = True
    request_queue_size = 64     # the listen backlog: connections past the limit are accepted and closed at once

    def __init__(self, address, handler, limit: int):
        self.slots = threading.BoundedSemaphore(limit)
        super().__init__(address, handler)

    def process_request(self, request, client_address):
        if not self.slots.acquire(blocking=False):
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.slots.release()
            raise

    def handle_error(self, request, client_address):
        if not isinstance(sys.exc_info()[1], OSError):      # a client that hung up or timed out: nothing to say
            super().handle_error(request, client_address)

    def process_request_thread(self, request, client_address):
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()


class Server:
    """A running `serve`: .url, .port, .stop() (also a context manager)."""

    def __init__(self, directory, port: int = 0, timeout: float = IDLE_SECONDS, connections: int = MAX_CONNECTIONS):
        d = Path(directory)
        files = self._listed(d)
        try:
            self.httpd = _BoundedServer(("127.0.0.1", int(port)), _Handler, connections)
        except (OSError, OverflowError) as e:
            raise FxcError(f"cannot listen on 127.0.0.1:{port} ({getattr(e, 'strerror', None) or e}); choose another "
                           f"--port (0 to 65535; 0: a free one)") from None
        self.port = self.httpd.server_address[1]
        self.httpd.files, self.httpd.port, self.httpd.idle_seconds = files, self.port, float(timeout)
        self.httpd.hosts = {f"{h}:{self.port}" for h in ("127.0.0.1", "localhost", "[::1]")}
        try:
            self.httpd.dir_fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
        except OSError as e:
            self.httpd.server_close()
            raise FxcError(f"cannot serve {d} ({e.strerror or e})") from None
        self.url = f"http://127.0.0.1:{self.port}/"
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="fxc-serve", daemon=True)
        self._thread.start()

    @staticmethod
    def _listed(d: Path) -> frozenset:
        """The files package.json lists (FxcError when the folder is not a package of this fxc's)."""
        try:
            pkg = json.loads(_read_regular(d, "package.json"))
            files = pkg["files"] if isinstance(pkg, dict) and pkg.get("format") == "fxc-web" else None
        except (OSError, ValueError, KeyError):
            files = None
        if not (d / "index.html").is_file() or not isinstance(files, list) or "index.html" not in files:
            raise FxcError(f"{d} is not an fxc web package (no index.html and package.json listing the package's "
                           f"files; packages of older fxc versions list none): write one there first (fxc web "
                           f"model.fxc {d})")
        return frozenset(files) & PACKAGE_FILES

    def wait(self, seconds: float | None = None) -> None:
        """Serve until stopped, or for `seconds`."""
        self._thread.join(seconds)

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self._thread.join()
        os.close(self.httpd.dir_fd)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


def serve(directory, port: int = 0, timeout: float = IDLE_SECONDS, connections: int = MAX_CONNECTIONS) -> Server:
    """Serve the web package in `directory` on 127.0.0.1:`port` (0: a free port) from a background thread, closing
    connections idle `timeout` seconds and serving at most `connections` at once; stop() ends it."""
    return Server(directory, port, timeout, connections)
