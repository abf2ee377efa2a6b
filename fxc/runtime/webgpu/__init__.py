"""The WebGPU device API (numpy + Playwright driving Debian's Chromium): a headless page running runtime.js.

    gpu = open_gpu()                        # a WebGPU page in the process's headless Chromium (SwiftShader here)
    gpu.info                                # the adapter (vendor, architecture), its limits
    m = WebGPUModule(target, program, inputs, outputs, consts, workspace_bytes, plan)   # from fxc.build_device

The browser is the `webgl` target's (fxc.runtime.webgl.open_browser: one Chromium per process, driven from one
thread); this module opens a second page in it at a secure origin (`https://fxc.invalid/`, served by Playwright
from memory: `navigator.gpu` exists only in secure contexts) and asks it for an adapter and a device.

The program (fxc.backends.wgsl.render_wgsl) is JSON: a WGSL compute shader per kernel. A module keeps all of its
tensors in one storage buffer in the page, the arena: a 64-byte header, then the inputs, outputs, constants and
the planned workspace, each 64-byte aligned (the layout of fxc.runtime.opengl). Constants are written once;
weights (`prepack_inputs`) stay until they change (DeviceModule's rules). A call sends the inputs (base64), runs
every launch in one compute pass, and returns the outputs and the error words in the same reply: one RPC round
trip per call.

Errors are named: TargetError (no Playwright / Chromium: as for webgl; no navigator.gpu or no adapter; a model
larger than one storage buffer binding), CompileError (a shader the browser rejected, with its source and the
messages), ExecutionError (integer division by zero, an int64 value beyond 32 bits), IndexOutOfRangeError.
"""
from __future__ import annotations

import base64
import functools
import json
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ...errors import CompileError, ExecutionError, IndexOutOfRangeError, TargetError, index_error_message
from ..device_module import DeviceModule, _HostFingerprint, _nbytes, _token_key
from ..opengl import dispatch_of
from ..webgl import open_browser

RUNTIME_JS = Path(__file__).with_name("runtime.js")
ORIGIN = "https://fxc.invalid/"         # a secure origin no network serves: Playwright answers it
HEADER = 64
_ALIGN = 64
NEEDS = ("Chromium's WebGPU: the browser runs with --enable-unsafe-webgpu (fxc.runtime.webgl.FLAGS); on a machine "
         "without a GPU Chromium's SwiftShader adapter serves it")


class GPUPage:
    """A page of the shared headless Chromium with runtime.js loaded and a WebGPU device opened."""

    def __init__(self, browser):
        self.browser = browser
        self.info = browser.thread.run(self._start)
        self._models = 0

    def _start(self) -> dict:
        from playwright.sync_api import Error
        try:
            self.page = self.browser._browser.new_page()
            self.page.route(ORIGIN + "**", lambda route: route.fulfill(
                status=200, content_type="text/html", body="<!doctype html><html><body></body></html>"))
            self.page.goto(ORIGIN)
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

    def call(self, script: str, arg=None):
        """page.evaluate(script, arg) on the browser's thread; a JavaScript error becomes a CompileError when the
        browser rejected a shader, else an ExecutionError."""
        def go():
            from playwright.sync_api import Error
            try:
                return self.page.evaluate(script, arg)
            except Error as e:
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


def _b64(a: np.ndarray) -> str:
    """The bytes of a tensor padded to a whole number of words (WebGPU writes buffers in 4-byte units)."""
    raw = np.ascontiguousarray(a).reshape(-1).view(np.uint8)
    if raw.size % 4:
        raw = np.concatenate([raw, np.zeros(4 - raw.size % 4, np.uint8)])
    return base64.b64encode(raw.tobytes()).decode()


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
        consts = [[at, _b64(c)] for at, c in zip(self._const_at, self.consts) if c.nbytes]
        self._id = self.device.new_model_id()
        self.device.call("""async ([id, program, plan, bytes, consts]) => {
            window.fxcModels[id] = await window.fxcGPU.model(program, plan, bytes,
                consts.map(([at, b]) => [at, fxcBytes(b)])); }""", [self._id, program, plan, self.arena_bytes, consts])
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
        data = [[self._in_at[i], _b64(ins[i])] for i in upload]
        wanted = [[at, o.nbytes] for at, o in zip(self._out_at, outs)]
        err, got, times = self.device.call("""async ([id, inputs, outputs, timed]) => {
            const [err, outs, times] = await window.fxcModels[id].run(inputs.map(([at, b]) => [at, fxcBytes(b)]),
                                                                      outputs, timed);
            return [err, outs.map(fxcBase64), times]; }""", [self._id, data, wanted, bool(self.profiled)])
        for st, ms in zip(self.plan, times):       # profiled: each launch timed on its own (ns, as OpenCL's events)
            t = self._times.setdefault(st.kernel, [0, 0])
            t[0] += int(ms * 1e6)
            t[1] += 1
        self._resident, self._fingerprint_value = key, sample
        self._resident_objects = None if token is None else token[1][0]
        for o, b in zip(outs, got):
            if o.nbytes:
                o.reshape(-1).view(np.uint8)[:] = np.frombuffer(base64.b64decode(b), np.uint8)
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
