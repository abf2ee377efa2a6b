"""The wasm device API (numpy + the webgl target's headless Chromium): a model's `.wasm` module run by runtime.js.

    rt = open_wasm_runtime()                # the process's browser page with runtime.js loaded
    m = WasmModule(target, program, inputs, outputs, consts, workspace_bytes, plan, prepack_inputs=...)

The program (fxc.backends.wasm via fxc.build) is JSON: {"wasm": base64 of the module, "prepack": whether it has
`fxc_prepack` / `fxc_run_main`}. The page holds the model's buffers in the module's memory: inputs, outputs,
constants (written once) and the workspace. A call sends the inputs (base64) to the page, runs the plan there
(`fxc_run`, or the weight packing and `fxc_run_main`), and reads the outputs back: Python in, Python out, the model
runs in the browser (RPC). The weights (`prepack_inputs`) stay in the page while the caller's token says they are
unchanged; then neither their upload nor their packing is repeated. The browser is the webgl target's (one per
process; fxc.runtime.webgl). Errors: TargetError (no browser), ExecutionError / IndexOutOfRangeError (a kernel's
division by zero or out-of-range index, as eager raises).
"""
from __future__ import annotations

import base64
import functools
import json
import threading
import weakref
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ...errors import ExecutionError, IndexOutOfRangeError, TargetError, index_error_message
from ..device_module import DeviceModule, _HostFingerprint, _token_key

RUNTIME_JS = Path(__file__).with_name("runtime.js")
PIECE = 4 << 20             # bytes of a tensor per message to the page


PAGE_URL = "http://fxc.localhost/"      # answered by Playwright's router, never the network
# shared memory and workers need a cross-origin isolated page (what `fxc serve` sends too)
ISOLATION = {"Cross-Origin-Opener-Policy": "same-origin", "Cross-Origin-Embedder-Policy": "require-corp"}


class WasmRuntime:
    """A page of the process's browser (fxc.runtime.webgl's) served with the COOP/COEP headers threads need, with
    runtime.js loaded; models by id in `window.fxcWasmModels`."""

    def __init__(self, browser):
        self.browser = browser
        self.page, facts = browser.thread.run(self._open)
        self.gone: list = []            # ids of models whose WasmModule was freed: dropped from the page next call
        self.info = {"name": f"WebAssembly (wasm32, SIMD128) in {browser.info['driver']}",
                     "driver": browser.info["driver"], **facts}

    def _open(self):
        page = self.browser.page.context.browser.new_page()     # a context of its own: its own origin
        page.route(PAGE_URL, lambda route: route.fulfill(status=200, content_type="text/html", headers=ISOLATION,
                                                         body="<!doctype html><html><body></body></html>"))
        page.goto(PAGE_URL)
        page.add_script_tag(content=RUNTIME_JS.read_text())
        facts = page.evaluate("""() => { window.fxcWasmModels = {};
            return {isolated: crossOriginIsolated, cores: navigator.hardwareConcurrency}; }""")
        return page, facts

    def call(self, script: str, arg=None):
        """page.evaluate(script, arg) on the browser's thread; a JavaScript error becomes an ExecutionError."""
        def go():
            from playwright.sync_api import Error
            try:
                if self.gone:
                    ids, self.gone[:] = list(self.gone), []
                    self.page.evaluate("ids => ids.forEach(id => { window.fxcWasmModels[id].dispose(); "
                                       "delete window.fxcWasmModels[id]; })", ids)
                return self.page.evaluate(script, arg)
            except Error as e:
                raise ExecutionError(f"the wasm runtime failed in the page: {str(e)[:2000]}") from None
        return self.browser.thread.run(go)

    def new_model_id(self) -> int:
        return self.browser.new_model_id()


@functools.cache
def _runtime(browser) -> WasmRuntime:
    return WasmRuntime(browser)


def open_wasm_runtime() -> WasmRuntime:
    """The process's page that runs wasm modules (TargetError when there is no browser: fxc.runtime.webgl)."""
    from ..webgl import open_browser
    return _runtime(open_browser())


def _b64(a: np.ndarray) -> str:
    return base64.b64encode(np.ascontiguousarray(a).view(np.uint8).reshape(-1)).decode()


def program_text(wasm: bytes, prepack: bool, threads: int = 1, pages=None) -> str:
    """A wasm module's program part (what WasmModule and the artifact hold): the module, whether it packs weights
    in a step of its own, its threads and (threaded) its shared memory's initial and largest size in pages."""
    return json.dumps({"wasm": base64.b64encode(wasm).decode(), "prepack": bool(prepack), "threads": int(threads),
                       "memory_pages": list(pages) if pages else None})


class _Info:
    """What an artifact records of the device (export_device): the wasm target, before any browser is opened."""

    info = {"name": "WebAssembly (wasm32, SIMD128)", "driver": "a browser's wasm engine"}


@dataclass
class WasmModule(DeviceModule):
    """A module of the wasm target: its plan runs inside the `.wasm` module (`fxc_run`) in a browser page. The
    page is opened, and the module loaded into it, at the first call (building and exporting need no browser)."""

    def __post_init__(self):
        from ..module import np_dtype
        self.consts = [np.ascontiguousarray(c) for c in self.consts]
        text = self.source      # an artifact's program starts with its interface line (a comment): skip it
        prog = json.loads(text.split("\n", 1)[1] if text.startswith("/*") else text)
        self.wasm = base64.b64decode(prog["wasm"])
        self._prepack = bool(prog["prepack"])
        self.threads, self._pages = int(prog.get("threads", 1)), prog.get("memory_pages")
        self._np = [np_dtype(s.dtype) for s in self.outputs]
        self._id = None
        self._resident = self._fingerprint_value = self._resident_objects = None
        self.uploaded_bytes = 0
        self._times: dict = {}
        self._lib = _HostFingerprint
        self._lock = threading.Lock()
        self.device = _Info

    def _load(self) -> int:
        """Load the module into the page (once): instantiate it, place the buffers, write the constants."""
        if self._id is None:
            from ..module import np_dtype
            rt = open_wasm_runtime()
            nbytes = lambda specs: [int(np.prod(s.shape, dtype=np.int64)) * np_dtype(s.dtype).itemsize  # noqa: E731
                                    for s in specs]
            spec = {"inputs": nbytes(self.inputs), "outputs": nbytes(self.outputs),
                    "consts": [c.nbytes for c in self.consts], "workspace": int(self.workspace_bytes),
                    "prepack": self._prepack}
            mid = rt.new_model_id()
            if self.threads > 1 and not rt.info["isolated"]:
                raise TargetError(f"target {self.target}: threads need shared memory, and the browser's page is not "
                                  f"cross-origin isolated (COOP/COEP headers); use -num-threads=1")
            rt.call("""async ([id, wasm, spec, threads, pages]) => {
                const bytes = Uint8Array.from(atob(wasm), c => c.charCodeAt(0));
                window.fxcWasmModels[id] = new FxcWasmModel(await FxcWasm.load(bytes, threads, pages), spec); }""",
                    [mid, base64.b64encode(self.wasm).decode(), spec, self.threads, self._pages])
            self._id = mid
            self.device = rt
            weakref.finalize(self, rt.gone.append, mid).atexit = False
            for i, c in enumerate(self.consts):
                self._put("consts", i, c)
        return self._id

    def _run(self, ins: list, outs: list, token) -> None:
        mid = self._load()
        key = _token_key(token)
        sample = self._weights_print(ins) if key is not None and self.prepack_inputs else None
        resident = key is not None and key == self._resident and sample == self._fingerprint_value
        upload = [i for i, a in enumerate(ins) if a.size and not (resident and i in self.prepack_inputs)]
        self.uploaded_bytes = sum(ins[i].nbytes for i in upload)
        self._resident = None           # until this call has put the weights in place
        for i in upload:
            self._put("ins", i, ins[i])
        got = self.device.call("([id, fresh]) => window.fxcWasmModels[id].run(fresh)", [mid, not resident])
        _check(got)
        self._resident, self._fingerprint_value = key, sample
        self._resident_objects = None if token is None else token[1][0]
        for o, b, dt in zip(outs, got["outputs"], self._np):
            if o.size:
                o.reshape(-1)[:] = np.frombuffer(base64.b64decode(b), dt)

    def _put(self, which: str, i: int, a: np.ndarray) -> None:
        """Write tensor `a` into the page's buffer `which`[i], PIECE bytes per message."""
        raw = np.ascontiguousarray(a).reshape(-1).view(np.uint8)
        for at in range(0, raw.size, PIECE):
            self.device.call("([id, which, i, at, b64]) => window.fxcWasmModels[id].put(which, i, at, b64)",
                             [self._id, which, i, at, _b64(raw[at:at + PIECE])])

    def benchmark(self, *arrays, runs: int = 20) -> float:
        """Milliseconds per run of the plan in the page (model execution only: inputs and weights in place)."""
        with self._lock:
            self._run(self.check_inputs(arrays), [np.empty(s.shape, d) for s, d in zip(self.outputs, self._np)],
                      None)
            return float(self.device.call("([id, runs]) => window.fxcWasmModels[id].bench(runs)",
                                          [self._id, int(runs)]))

    def launches(self) -> list:
        return [f"{s.kernel}: in the wasm module's plan" for s in self.plan]


def _check(got: dict) -> None:
    """Raise the error a kernel's return code stands for (as the CPU runtime does)."""
    rc = int(got["rc"])
    if rc & 4:
        op, index, size = got["record"] or (-1, "?", "?")
        raise IndexOutOfRangeError(index_error_message(int(op), index, size))
    if rc & 2:
        raise ExecutionError("integer division by zero in a compiled kernel (eager PyTorch raises ZeroDivisionError "
                             "here too); make the divisor nonzero or divide in floating point")
    if rc:
        raise ExecutionError(f"the wasm module's plan returned {rc}")
