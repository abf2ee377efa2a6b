"""The WebGL device API (numpy + Playwright driving Debian's Chromium): a headless page running runtime.js.

    browser = open_browser()                # one headless Chromium per process (SwiftShader WebGL 2 here)
    browser.info                            # MAX_TEXTURE_SIZE, float render targets, the renderer's name
    m = WebGLModule(target, program, inputs, outputs, consts, workspace_bytes, plan)   # from fxc.build_device

The program (fxc.backends.glsl.render_webgl) is JSON: fragment shaders over 2-D textures `width` texels wide.
Each tensor slot of the plan (an input, output, constant, or a workspace offset, per float/int kind) is one
texture in the page, sized for the largest tensor it holds; integers travel as int32 (int64 values must fit 32
bits: checked here, an ExecutionError otherwise). A call sends the inputs (base64) to the page, runs the plan
there, and reads the outputs back: Python in, Python out, the model runs in the browser (RPC).

Playwright's API is bound to the thread that started it: every browser call runs on one thread. Errors are
named: TargetError (no Playwright, no Chromium at /usr/bin/chromium or $FXC_CHROMIUM, no WebGL 2 or no float
render targets in it), CompileError (a shader the browser rejected).
"""
from __future__ import annotations

import base64
import functools
import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ...errors import CompileError, ExecutionError, TargetError
from ..device_module import DeviceModule, _token_key
from ..opengl import _GLThread

INSTALL = ("install Chromium and Playwright: on Debian `apt-get install chromium` (fonts-liberation too), and "
           "`pip install playwright` (the fxc[web] extra; never `playwright install`, fxc uses the system browser)")
# headless WebGL 2 on SwiftShader, as root too (Playwright gives the browser a fresh profile directory of its own);
# --enable-unsafe-webgpu exposes WebGPU (SwiftShader's adapter) to the webgpu target's page (fxc.runtime.webgpu)
FLAGS = ["--headless=new", "--no-sandbox", "--use-angle=swiftshader", "--enable-unsafe-swiftshader",
         "--enable-unsafe-webgpu", "--ignore-gpu-blocklist", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run"]
WIDTH = 2048            # texture width: WebGL 2 guarantees MAX_TEXTURE_SIZE >= 2048
RUNTIME_JS = Path(__file__).with_name("runtime.js")


class Browser:
    """One headless Chromium page with the runtime loaded, driven from its own thread."""

    def __init__(self, executable: str):
        self.thread = _GLThread("fxc-browser")
        self.info = self.thread.run(self._start, executable)
        self._models = 0

    def _start(self, executable: str) -> dict:
        try:
            from playwright.sync_api import Error, sync_playwright
        except ImportError as e:
            raise TargetError(f"the webgl target needs Playwright ({e}); {INSTALL}") from None
        if not os.access(executable, os.X_OK):
            raise TargetError(f"no Chromium at {executable} (set FXC_CHROMIUM to another); {INSTALL}")
        self._pw = sync_playwright().start()
        try:
            self._browser = self._pw.chromium.launch(executable_path=executable, headless=True, args=FLAGS)
            self.page = self._browser.new_page()
            self.page.set_content("<!doctype html><html><body></body></html>")
            self.page.add_script_tag(content=RUNTIME_JS.read_text())
            info = self.page.evaluate("""() => { try { window.fxcBase = new FxcWebGL(); } catch (e) {
                return {error: String(e.message || e)}; }
              const gl = window.fxcBase.gl, d = gl.getExtension('WEBGL_debug_renderer_info');
              window.fxcModels = {};
              return {max_texture_size: gl.getParameter(gl.MAX_TEXTURE_SIZE), version: gl.getParameter(gl.VERSION),
                      name: d ? gl.getParameter(d.UNMASKED_RENDERER_WEBGL) : gl.getParameter(gl.RENDERER)}; }""")
        except Error as e:
            raise TargetError(f"Chromium at {executable} did not start a page ({e}); {INSTALL}") from None
        if "error" in info:
            raise TargetError(f"the headless Chromium cannot run the webgl target: {info['error']} (flags: "
                              f"{' '.join(FLAGS)})")
        info.update(browser=self._browser.version, driver=f"Chromium {self._browser.version}")
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
                if "compile failed" in msg or "link failed" in msg:
                    raise CompileError("the browser rejected a generated WebGL shader", str(arg)[:2000], msg) from None
                raise ExecutionError(f"the WebGL runtime failed in the page: {msg[:2000]}") from None
        return self.thread.run(go)

    def new_model_id(self) -> int:
        self._models += 1
        return self._models


@functools.cache
def _open(executable: str) -> Browser:
    return Browser(executable)


def open_browser() -> Browser:
    """The process's headless Chromium (FXC_CHROMIUM names another executable)."""
    return _open(os.environ.get("FXC_CHROMIUM", "/usr/bin/chromium"))


def _b64(a: np.ndarray) -> str:
    return base64.b64encode(np.ascontiguousarray(a).tobytes()).decode()


def to_texture(a: np.ndarray, name: str) -> np.ndarray:
    """A tensor as texture data: float32 stays, every integer type becomes int32 (int64 must fit 32 bits)."""
    if a.dtype == np.float32:
        return a.reshape(-1)
    if a.dtype == np.int64 and a.size and (a.min() < -2 ** 31 or a.max() >= 2 ** 31):
        raise ExecutionError(f"{name}: an int64 value beyond 32 bits; the webgl target computes integers in 32 bits "
                             f"(keep int64 tensors within +-2**31, or use the llvm / opencl target)")
    return a.reshape(-1).astype(np.int32)


@dataclass
class WebGLModule(DeviceModule):
    """A DeviceModule whose device is a WebGL 2 page in headless Chromium."""

    def __post_init__(self):
        from ..module import np_dtype
        self.device = open_browser()
        self.consts = [np.ascontiguousarray(c) for c in self.consts]
        text = self.source      # an artifact's program starts with its interface line (a comment): skip it
        prog = json.loads(text.split("\n", 1)[1] if text.startswith("/*") else text)
        keys: dict = {}                     # (kind, index, float?) -> [slot, elements]

        def slot(kind, ix, dtype, n) -> int:
            k = (kind, int(ix), dtype == "float32")
            s = keys.setdefault(k, [len(keys), 0])
            s[1] = max(s[1], int(n))
            return s[0]
        steps = []
        for st in self.plan:
            k = prog["kernels"][st.kernel]
            if any(kind == "null" for kind, _ in st.args):
                raise TargetError(f"{st.kernel}: an absent optional input; the webgl target binds every input")
            steps.append({"kernel": st.kernel, "slots": [slot(kind, ix, dt, n) for (kind, ix), (dt, n)
                                                         in zip(st.args, k["params"])]})
        self._in_slots = [slot("in", i, s.dtype, np.prod(s.shape, dtype=np.int64)) for i, s in enumerate(self.inputs)]
        self._out_slots = [slot("out", i, s.dtype, np.prod(s.shape, dtype=np.int64))
                           for i, s in enumerate(self.outputs)]
        const_slots = [slot("const", i, str(c.dtype) if c.dtype != np.bool_ else "bool", c.size)
                       for i, c in enumerate(self.consts)]
        slots = [None] * len(keys)
        for (_, _, is_float), (s, n) in keys.items():
            slots[s] = {"float": is_float, "elements": max(1, n)}
        consts = [[s, _b64(to_texture(c, f"constant {i}")), c.dtype == np.float32]
                  for i, (s, c) in enumerate(zip(const_slots, self.consts)) if c.size]
        self._np = [np_dtype(s.dtype) for s in self.outputs]
        self._id = self.device.new_model_id()
        self.device.call("""([id, program, plan, slots, consts]) => {
            const m = new FxcWebGL(window.fxcBase);
            m.load(program, plan, slots, consts.map(([s, b, f]) => [s, fxcDecode(b, f)]));
            window.fxcModels[id] = m; }""", [self._id, prog, steps, slots, consts])
        self._resident = None
        self._fingerprint_value = None
        self._resident_objects = None
        self.uploaded_bytes = 0
        self._times: dict = {}
        from ..device_module import _HostFingerprint
        self._lib = _HostFingerprint
        self._lock = threading.Lock()

    def _run(self, ins: list, outs: list, token) -> None:
        key = _token_key(token)
        sample = self._weights_print(ins) if key is not None and self.prepack_inputs else None
        resident = key is not None and key == self._resident and sample == self._fingerprint_value
        upload = [i for i, a in enumerate(ins) if a.size and not (resident and i in self.prepack_inputs)]
        data = [[self._in_slots[i], _b64(to_texture(ins[i], self.inputs[i].name)), ins[i].dtype == np.float32]
                for i in upload]
        self.uploaded_bytes = sum(ins[i].nbytes for i in upload)
        got = self.device.call("""([id, inputs, outSlots]) => window.fxcModels[id].run(
            inputs.map(([s, b, f]) => [s, fxcDecode(b, f)]), outSlots).map(fxcEncode)""",
                               [self._id, data, self._out_slots])
        self._resident, self._fingerprint_value = key, sample
        self._resident_objects = None if token is None else token[1][0]
        for o, b, spec, dt in zip(outs, got, self.outputs, self._np):
            if o.size:
                raw = np.frombuffer(base64.b64decode(b), np.float32 if spec.dtype == "float32" else np.int32)
                o.reshape(-1)[:] = raw.astype(dt)

    def launches(self) -> list:
        return [f"{s.kernel}: {s.grid[0]} fragments" for s in self.plan]
