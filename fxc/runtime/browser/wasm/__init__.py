"""The wasm device API (numpy + the browser harness, fxc.runtime.browser.page): a model's `.wasm` module run by
runtime.js.

    rt = open_wasm_runtime()                # the process's "wasm" page of the shared browser, runtime.js loaded
    m = WasmModule(target, program, inputs, outputs, consts, workspace_bytes, plan, prepack_inputs=...)

The program (fxc.backends.wasm.link via fxc.driver.build) is JSON: {"wasm": base64 of the module, "prepack": whether
it has
`fxc_prepack` / `fxc_run_main`, "threads", "memory_pages"}. The page holds the model's buffers in the module's
memory: inputs, outputs, constants (written once) and the workspace. A call is one round trip to the page: the
inputs that changed go as one binary file (Page.put: the harness's loopback server, which the page fetches) or, up to
INLINE_IN bytes, as base64 within the call; the plan runs there (`fxc_run`, or the weight packing and
`fxc_run_main`; a threaded module's on its plan worker, fxc/runtime/browser/wasm/runtime.js); the outputs come back
within
the call's answer up to INLINE_OUT bytes, else the page POSTs them as one binary file (Page.take): Python
in, Python out, the model runs in the browser. The weights (`prepack_inputs`) stay in the page while the caller's
token says they are unchanged; then neither their upload nor their packing is repeated. The page is the shared
browser's (one Chromium per process), cross-origin isolated, so threaded modules get shared memory and workers.
Errors: TargetError (no browser), ExecutionError / IndexOutOfRangeError (a kernel's division by zero or
out-of-range index, as eager raises).
"""
from __future__ import annotations

import base64
import json
import weakref
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ....errors import ExecutionError, IndexOutOfRangeError, TargetError, index_error_message
from ...device_module import DeviceModule
from ...tensors import nbytes, np_dtype
from ..page import open_browser

RUNTIME_JS = Path(__file__).with_name("runtime.js")
ALIGN = 16          # offset of each tensor in a file sent to the page
INLINE_IN, INLINE_OUT = 64 << 10, 256 << 10     # bytes sent (returned) as base64 within the call, not as a file:
# below these a loopback request of its own (the page's fetch, its POST) costs more than the text in Playwright's call
SETUP = """() => { window.fxcWasmModels = {};
  return {isolated: crossOriginIsolated, cores: navigator.hardwareConcurrency}; }"""

_RELEASED: list = []        # ids of collected modules the page still holds (dropped at the next call)


def _released() -> list:
    """The ids collected since the last call (a finalizer only appends: it never calls into the browser)."""
    out = []
    while _RELEASED:
        out.append(_RELEASED.pop())
    return out


class WasmRuntime:
    """The shared browser's "wasm" page (fxc.runtime.browser.page) with runtime.js loaded; models by id in
    `window.fxcWasmModels`. `call`, `put`, `take` are the Page's; `info` names the engine."""

    def __init__(self, page):
        self.page, self.browser = page, page.browser
        self.info = {"name": f"WebAssembly (wasm32, SIMD128) in Chromium {self.browser.version}",
                     "driver": f"Chromium {self.browser.version}", **page.info}

    def call(self, script: str, arg=None):
        """page.evaluate(script, arg) on the browser's thread (Page.call: a JavaScript error is an ExecutionError)."""
        gone = _released()
        if gone:
            self.page.call("ids => ids.forEach(id => { window.fxcWasmModels[id].dispose(); "
                           "delete window.fxcWasmModels[id]; })", gone)
        return self.page.call(script, arg)

    def put(self, path: str, data: bytes) -> str:
        return self.page.put(path, data)

    def take(self, path: str) -> bytes:
        return self.page.take(path)

    def drop(self, path: str) -> None:
        self.page.files.pop(path, None)

    def new_model_id(self) -> int:
        return self.browser.new_id()


def open_wasm_runtime() -> WasmRuntime:
    """The process's page that runs wasm modules (TargetError when there is no browser: fxc.runtime.browser.page)."""
    page = open_browser().page("wasm", [RUNTIME_JS], SETUP)
    rt = getattr(page, "wasm_runtime", None)
    if rt is None:
        rt = page.wasm_runtime = WasmRuntime(page)
    return rt


def pack(arrays: list) -> tuple:
    """(bytes, [[offset, nbytes] or None]) of tensors one after another, each at an ALIGN-byte offset; None in
    `arrays` is a tensor not sent."""
    blob, records = bytearray(), []
    for a in arrays:
        if a is None:
            records.append(None)
            continue
        blob += bytes(-len(blob) % ALIGN)
        raw = np.ascontiguousarray(a).reshape(-1).view(np.uint8)
        records.append([len(blob), int(raw.size)])
        blob += raw.tobytes()
    return bytes(blob), records


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
    page is opened, and the module loaded into it, at the first call (building and exporting need no browser).
    With size symbols (`symbols`) its kernels are the llvm target's (row blocks, symbolic loops: fxc_run reads the
    symbols' int64 values at byte `sym_header` of the workspace); each call binds them from the input shapes
    (runtime/symbols.py: InputError outside the range), and the page grows its buffers to the call's sizes (the
    workspace: `workspace_bytes` + the `sym_bytes` terms, keeping the packed weights) and writes the header."""
    sym_header: int = 0
    sym_bytes: list = field(default_factory=list)   # the workspace's symbolic region: [[coefficient, [names]], ...]

    def __post_init__(self):
        self.consts = [np.ascontiguousarray(c) for c in self.consts]
        text = self.source      # an artifact's program starts with its interface line (a comment): skip it
        prog = json.loads(text.split("\n", 1)[1] if text.startswith("/*") else text)
        self.wasm = base64.b64decode(prog["wasm"])
        self._prepack = bool(prog["prepack"])
        self.threads, self._pages = int(prog.get("threads", 1)), prog.get("memory_pages")
        self._np = [np_dtype(s.dtype) for s in self.outputs]
        self._id = self._files = None
        self._init_call_state()
        self.device = _Info

    def _load(self) -> int:
        """Load the module into the page (once): instantiate it, place the buffers, write the constants."""
        if self._id is None:
            rt = open_wasm_runtime()
            sizes = lambda specs: [0 if self.symbols else nbytes(s) for s in specs]  # noqa: E731 (symbolic: per call)
            spec = {"inputs": sizes(self.inputs), "outputs": sizes(self.outputs),
                    "consts": [c.nbytes for c in self.consts], "workspace": int(self.workspace_bytes),
                    "prepack": self._prepack}
            if self.threads > 1 and not rt.info["isolated"]:
                raise TargetError(f"target {self.target}: threads need shared memory, and the browser's page is not "
                                  f"cross-origin isolated (COOP/COEP headers); use -num-threads=1")
            mid = rt.new_model_id()
            files = f"w{mid}"
            blob, records = pack(self.consts)
            rt.put(f"{files}.wasm", self.wasm)
            rt.put(f"{files}.consts", blob)
            try:
                rt.call("""async ([id, files, spec, threads, pages, records]) => {
                    const bytes = await (await fetch(files + ".wasm")).arrayBuffer();
                    const m = new FxcWasmModel(await FxcWasm.load(bytes, threads, pages), spec);
                    window.fxcWasmModels[id] = m;
                    m.load("consts", await (await fetch(files + ".consts")).arrayBuffer(), records); }""",
                        [mid, files, spec, self.threads, self._pages, records])
            finally:
                rt.drop(f"{files}.wasm")
                rt.drop(f"{files}.consts")
            self._id, self._files = mid, files
            self.device = rt
            weakref.finalize(self, _RELEASED.append, mid).atexit = False
        return self._id

    def run_arrays(self, ins: list, outs: list, token=None, sizes=None) -> None:
        """As DeviceModule.run_arrays; a symbolic module takes every symbol's value (`sizes(shapes)`)."""
        if self.symbols and not sizes:
            self._size(sizes)       # (raises: a symbolic module needs the sizes of its inputs)
        with self._lock:
            self._run(ins, outs, token, sizes if self.symbols else None)

    def _call_sizes(self, ins: list, outs: list, sizes: dict) -> list:
        """[input bytes, output bytes, workspace bytes, header byte, the symbols' values] of a symbolic call."""
        terms = sum(c * int(np.prod([sizes[x] for x in names], dtype=np.int64)) for c, names in self.sym_bytes)
        return [[a.nbytes for a in ins], [o.nbytes for o in outs], int(self.workspace_bytes) + terms,
                int(self.sym_header), [int(sizes[s["name"]]) for s in self.symbols]]

    def _run(self, ins: list, outs: list, token, sizes=None) -> None:
        mid = self._load()
        unchanged, fingerprint = self._weights_unchanged(ins, token)
        send = [None if (not a.size or (unchanged and i in self.prepack_inputs)) else a for i, a in enumerate(ins)]
        blob, records = pack(send)
        self.uploaded_bytes = sum(a.nbytes for a in send if a is not None)
        self.held.drop()                # until this call has put the weights in place
        rt, url, back = self.device, f"{self._files}.in", f"{self._files}.out"
        inline = len(blob) <= INLINE_IN
        if not inline:
            rt.put(url, blob)
        try:            # one round trip: this call's sizes (symbolic), the inputs, the plan, the outputs
            got = rt.call("""async ([id, sizes, url, b64, back, records, fresh]) => {
                const m = window.fxcWasmModels[id];
                if (sizes) m.size(...sizes);
                m.load("ins", b64 !== null ? fxcFromBase64(b64) : await (await fetch(url)).arrayBuffer(), records);
                const r = await m.step(fresh);
                if (r.rc) return r;
                if (back) await m.post(back); else r.out = fxcToBase64(m.outputBytes());
                return r; }""", [mid, self._call_sizes(ins, outs, sizes) if sizes else None, url,
                                 base64.b64encode(blob).decode() if inline else None,
                                 None if sum(o.nbytes for o in outs) <= INLINE_OUT else back, records, not unchanged])
        finally:
            rt.drop(url)
        _check(got)
        raw = base64.b64decode(got["out"]) if "out" in got else rt.take(back)
        self.held.hold(token, fingerprint)
        at = 0
        for o, dt in zip(outs, self._np):
            if o.size:
                o.reshape(-1)[:] = np.frombuffer(raw, dt, o.size, at)
            at += o.nbytes

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


NARROW_FAULT = 1 << 8       # webgl_steps.js: an int64 output of a wasm step beyond 32 bits (a texture holds int32)


def wasm_fault(fault: dict) -> None:
    """Raise the error of a wasm step inside another target's plan (webgl: fxc/runtime/browser/wasm/webgl_steps.js):
    {entry, rc, record}."""
    if int(fault["rc"]) & NARROW_FAULT:
        raise ExecutionError(f"{fault['entry']}: an int64 value beyond 32 bits went from a wasm kernel to a WebGL "
                             f"texture, which holds integers in 32 bits; keep int64 tensors within +-2**31 or use "
                             f"the wasm / llvm target")
    _check(fault)
