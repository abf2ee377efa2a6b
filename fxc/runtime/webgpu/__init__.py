"""The WebGPU device API (numpy + Playwright driving Debian's Chromium): a headless page running runtime.js.

    gpu = open_gpu()                        # a WebGPU page in the process's headless Chromium (SwiftShader here)
    gpu.info                                # the adapter (vendor, architecture), its limits
    m = WebGPUModule(target, program, inputs, outputs, consts, workspace_bytes, plan)   # from fxc.build_device

The browser is the `webgl` target's (fxc.runtime.webgl.open_browser: one Chromium per process, driven from one
thread); this module opens a second page in it, served by a small HTTP server of its own on 127.0.0.1 (a secure
context: `navigator.gpu` exists only there; `about:blank` is not one), and asks it for an adapter and a device.
The server also carries the bulk data: inputs and weights over 64 KiB are a blob the page fetches once (binary,
~0.2 s for 32 MB; as a base64 argument of page.evaluate the same took 28 s here), outputs over 64 KiB one the page
posts back. Blob names are random and each is served once; the server answers 127.0.0.1 only.

The program (fxc.backends.wgsl.render_wgsl) is JSON: a WGSL compute shader per kernel. A module keeps all of its
tensors in one storage buffer in the page, the arena: a 64-byte header, then the inputs, outputs, constants and
the planned workspace, each 64-byte aligned (the layout of fxc.runtime.opengl). Constants are written once;
weights (`prepack_inputs`) stay until they change (DeviceModule's rules). A call is one page.evaluate: the page
takes the inputs, runs every launch in one compute pass, and returns the outputs and the error words.

Errors are named: TargetError (no Playwright / Chromium: as for webgl; no navigator.gpu or no adapter; a model
larger than one storage buffer binding), CompileError (a shader the browser rejected, with its source and the
messages), ExecutionError (integer division by zero, an int64 value beyond 32 bits), IndexOutOfRangeError.
"""
from __future__ import annotations

import base64
import functools
import json
import secrets
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np

from ...errors import CompileError, ExecutionError, IndexOutOfRangeError, TargetError, index_error_message
from ..device_module import DeviceModule, _HostFingerprint, _nbytes, _token_key
from ..opengl import dispatch_of
from ..webgl import open_browser

RUNTIME_JS = Path(__file__).with_name("runtime.js")
HEADER = 64
_ALIGN = 64
INLINE_BYTES = 64 << 10     # smaller data travel inside the call (base64); larger ones as blobs over HTTP
BLANK = b"<!doctype html><html><body></body></html>"
NEEDS = ("Chromium's WebGPU: the browser runs with --enable-unsafe-webgpu (fxc.runtime.webgl.FLAGS); on a machine "
         "without a GPU Chromium's SwiftShader adapter serves it")


class BlobServer:
    """The page's HTTP server on 127.0.0.1: `/` a blank page; GET `/blob/<name>` a blob put here (served once);
    POST `/blob/<name>` a blob the page sends back, for a name Python expects."""

    def __init__(self):
        self.blobs: dict = {}
        self.expected: set = set()
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                name = self.path[len("/blob/"):] if self.path.startswith("/blob/") else None
                with server.lock:
                    data = BLANK if self.path == "/" else server.blobs.pop(name, None) if name else None
                self.reply(200 if data is not None else 404, data or b"",
                           "text/html" if self.path == "/" else "application/octet-stream")

            def do_POST(self):
                name = self.path[len("/blob/"):]
                with server.lock:
                    ok = self.path.startswith("/blob/") and name in server.expected
                    server.expected.discard(name)
                data = self.rfile.read(int(self.headers.get("Content-Length", 0))) if ok else b""
                with server.lock:
                    if ok:
                        server.blobs[name] = data
                self.reply(200 if ok else 404, b"", "text/plain")

            def reply(self, code, body, kind):
                self.send_response(code)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, name="fxc-webgpu-http", daemon=True).start()
        self.origin = f"http://127.0.0.1:{self.httpd.server_port}/"

    def put(self, data: bytes) -> str:
        name = secrets.token_hex(16)
        with self.lock:
            self.blobs[name] = data
        return name

    def expect(self) -> str:
        name = secrets.token_hex(16)
        with self.lock:
            self.expected.add(name)
        return name

    def drop(self, names) -> None:
        """Forget blobs a failed call left (never fetched, never posted)."""
        with self.lock:
            for n in names:
                self.blobs.pop(n, None)
                self.expected.discard(n)

    def take(self, name: str) -> bytes:
        with self.lock:
            self.expected.discard(name)
            return self.blobs.pop(name)


class GPUPage:
    """A page of the shared headless Chromium with runtime.js loaded and a WebGPU device opened. `url`: another
    page to open instead of the server's (answered blank by Playwright: to see how a page without WebGPU fails)."""

    def __init__(self, browser, url: str | None = None):
        self.browser = browser
        self.server = BlobServer()
        self.info = browser.thread.run(self._start, url)
        self._models = 0

    def _start(self, url) -> dict:
        from playwright.sync_api import Error
        try:
            self.page = self.browser._browser.new_page()
            if url is not None:
                self.page.route(url + "**", lambda route: route.fulfill(status=200, content_type="text/html",
                                                                         body=BLANK))
            self.page.goto(url or self.server.origin)
            self.page.add_script_tag(content=RUNTIME_JS.read_text())
            info = self.page.evaluate("""async () => { try { window.fxcGPU = await FxcWebGPU.open(); }
                catch (e) { return {error: String(e.message || e)}; }
                window.fxcModels = {}; return window.fxcGPU.info; }""")
        except Error as e:
            raise TargetError(f"the headless Chromium could not open a WebGPU page ({e}); {NEEDS}") from None
        if "error" in info:
            raise TargetError(f"the headless Chromium cannot run the webgpu target: {info['error']}; {NEEDS}")
        arch = info.get("architecture") or "?"
        info.update(name=f"{info.get('vendor') or '?'} {arch} (WebGPU)",
                    driver=f"Chromium {self.browser.info['browser']}",
                    dedicated_local_memory=arch != "swiftshader" and not info.get("fallback"))
        return info

    def call(self, script: str, arg=None, blobs=()):
        """page.evaluate(script, arg) on the browser's thread; a JavaScript error becomes a CompileError when the
        browser rejected a shader, else an ExecutionError. blobs: the server's blobs of this call, forgotten if the
        call failed before it took them."""
        def go():
            from playwright.sync_api import Error
            try:
                return self.page.evaluate(script, arg)
            except Error as e:
                self.server.drop([b for b in blobs if b])
                msg = str(e)
                if "WGSL compile failed" in msg:
                    raise CompileError("the browser rejected a generated WGSL shader", str(arg)[:4000], msg) from None
                if "could not be made" in msg:
                    raise TargetError(f"the WebGPU device could not hold the model: {msg[:2000]}") from None
                raise ExecutionError(f"the WebGPU runtime failed in the page: {msg[:2000]}") from None
        return self.browser.thread.run(go)

    def new_model_id(self) -> int:
        self._models += 1
        return self._models


@functools.cache
def _open(browser) -> GPUPage:
    return GPUPage(browser)


def open_gpu() -> GPUPage:
    """The WebGPU page of the process's headless Chromium (FXC_CHROMIUM names another executable)."""
    return _open(open_browser())


def _payload(page: GPUPage, arrays: list) -> tuple:
    """The bytes of `arrays` for the page, each padded to whole words (WebGPU writes buffers in 4-byte units): one
    base64 string when small, else the name of a blob the page fetches; and each array's [start, bytes]."""
    parts, spans, at = [], [], 0
    for a in arrays:
        raw = np.ascontiguousarray(a).reshape(-1).view(np.uint8).tobytes()
        raw += bytes(-len(raw) % 4)
        parts.append(raw)
        spans.append([at, len(raw)])
        at += len(raw)
    data = b"".join(parts)
    if len(data) <= INLINE_BYTES:
        return {"b64": base64.b64encode(data).decode()}, spans
    return {"blob": page.server.put(data)}, spans


def _aligned(n: int) -> int:
    return (n + _ALIGN - 1) // _ALIGN * _ALIGN


@dataclass
class WebGPUModule(DeviceModule):
    """A DeviceModule whose device is a WebGPU page in headless Chromium: one arena buffer, a pipeline per kernel."""

    def __post_init__(self):
        self.device = open_gpu()
        self.consts = [np.ascontiguousarray(c) for c in self.consts]
        at, self._in_at, self._out_at, self._const_at = HEADER, [], [], []
        for specs, offs in ((self.inputs, self._in_at), (self.outputs, self._out_at)):
            for s in specs:
                offs.append(at)
                at = _aligned(at + _nbytes(s))
        for c in self.consts:
            self._const_at.append(at)
            at = _aligned(at + c.nbytes)
        self._ws_at = at
        self.arena_bytes = _aligned(at + self.workspace_bytes)
        limit = int(self.device.info["max_storage_bytes"])
        if self.arena_bytes > limit:
            mib = 2 ** 20
            raise TargetError(f"the model needs {self.arena_bytes / mib:.1f} MiB of WebGPU storage but "
                              f"{self.device.info['name']} binds at most {limit / mib:.1f} MiB in one storage buffer; "
                              f"use a smaller batch or the opencl target")
        text = self.source      # an artifact's program starts with its interface line (a comment): skip it
        program = json.loads(text.split("\n", 1)[1] if text.startswith("/*") else text)
        missing = sorted({st.kernel for st in self.plan} - set(program["kernels"]))
        if missing:
            raise CompileError(f"the WebGPU program lacks kernels {', '.join(missing[:3])}", self.source)
        plan = [{"kernel": st.kernel, "offsets": [self._slot(kind, ix) for kind, ix in st.args],
                 "groups": list(dispatch_of(tuple(st.grid))[0])} for st in self.plan]
        held = [(at, c) for at, c in zip(self._const_at, self.consts) if c.nbytes]
        payload, spans = _payload(self.device, [c for _, c in held])
        consts = [[at, *span] for (at, _), span in zip(held, spans)]
        self._id = self.device.new_model_id()
        self.device.call("""async ([id, program, plan, bytes, payload, consts]) => {
            const data = await fxcData(payload);
            window.fxcModels[id] = await window.fxcGPU.model(program, plan, bytes,
                consts.map(([at, start, n]) => [at, data.subarray(start, start + n)])); }""",
                         [self._id, program, plan, self.arena_bytes, payload, consts], blobs=[payload.get("blob")])
        self._resident = None
        self._fingerprint_value = None
        self._resident_objects = None
        self.uploaded_bytes = 0
        self._times: dict = {}
        self._lib = _HostFingerprint
        self._lock = threading.Lock()

    def _slot(self, kind: str, ix: int) -> int:
        if kind == "null":
            return -1
        if kind == "work":
            return self._ws_at + ix
        return {"in": self._in_at, "out": self._out_at, "const": self._const_at}[kind][ix]

    def _run(self, ins: list, outs: list, token) -> None:
        key = _token_key(token)
        sample = self._weights_print(ins) if key is not None and self.prepack_inputs else None
        resident = key is not None and key == self._resident and sample == self._fingerprint_value
        upload = [i for i, a in enumerate(ins) if a.nbytes and not (resident and i in self.prepack_inputs)]
        self.uploaded_bytes = sum(ins[i].nbytes for i in upload)
        payload, spans = _payload(self.device, [ins[i] for i in upload])
        data = [[self._in_at[i], *span] for i, span in zip(upload, spans)]
        wanted = [[at, o.nbytes] for at, o in zip(self._out_at, outs)]
        post = self.device.server.expect() if sum(o.nbytes for o in outs) > INLINE_BYTES else None
        err, got, times = self.device.call("""async ([id, payload, inputs, outputs, timed, post]) => {
            const data = await fxcData(payload);
            const [err, outs, times] = await window.fxcModels[id].run(
                inputs.map(([at, start, n]) => [at, data.subarray(start, start + n)]), outputs, timed);
            return [err, await fxcReturn(outs, post), times]; }""",
                                           [self._id, payload, data, wanted, bool(self.profiled), post],
                                           blobs=[payload.get("blob"), post])
        if post is not None:        # the outputs, one after another, were posted back to the server
            raw, at = self.device.server.take(post), 0
            got = []
            for o in outs:
                got.append(raw[at:at + o.nbytes])
                at += o.nbytes
        else:
            got = [base64.b64decode(b) for b in got]
        for st, ms in zip(self.plan, times):       # profiled: each launch timed on its own (ns, as OpenCL's events)
            t = self._times.setdefault(st.kernel, [0, 0])
            t[0] += int(ms * 1e6)
            t[1] += 1
        self._resident, self._fingerprint_value = key, sample
        self._resident_objects = None if token is None else token[1][0]
        for o, b in zip(outs, got):
            if o.nbytes:
                o.reshape(-1).view(np.uint8)[:] = np.frombuffer(b, np.uint8)
        if err[0] or err[1]:
            if err[1]:
                raise IndexOutOfRangeError(index_error_message(int(err[1]) - 1, int(err[2]), int(err[3])))
            if err[0] == 1:
                raise ExecutionError("integer division by zero in a compiled kernel (eager PyTorch raises "
                                     "ZeroDivisionError here too); make the divisor nonzero or divide in floating "
                                     "point")
            raise ExecutionError("an int64 value beyond 32 bits reached a kernel of the webgpu target, which computes "
                                 "integers in 32 bits (WGSL has no int64); keep int64 tensors within +-2**31 or use "
                                 "the llvm / opencl target")

    def launches(self) -> list:
        return [f"{s.kernel}: work-groups {'x'.join(map(str, s.grid))}, work-group size {'x'.join(map(str, s.block))}"
                for s in self.plan]
