"""The WebGL device API (numpy + the browser harness, fxc.runtime.browser): a headless page running runtime.js.

    page = open_page()                      # the process's WebGL page (one WebGL 2 context, SwiftShader here)
    page.info                               # MAX_TEXTURE_SIZE, the renderer's name
    m = WebGLModule(target, program, inputs, outputs, consts, workspace_bytes, plan)   # from fxc.build_device

The program (fxc.backends.glsl.render_webgl) is JSON: fragment shaders over 2-D textures `width` texels wide.
Each tensor slot of the plan (an input, output, constant, or a workspace offset, per float/int kind) is one
texture in the page, sized for the largest tensor it holds; integers travel as int32 (int64 values must fit 32
bits: checked here, an ExecutionError otherwise). A call sends the inputs (base64) to the page, runs the plan
there, and reads the outputs back: Python in, Python out, the model runs in the browser (RPC).

Errors are named: TargetError (no Playwright, no Chromium at /usr/bin/chromium or $FXC_CHROMIUM, no WebGL 2 or no
float render targets in it), CompileError (a shader the browser rejected).
"""
from __future__ import annotations

import base64
import json
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ...errors import ExecutionError, TargetError
from ..browser import open_browser
from ..device_module import DeviceModule, _token_key

WIDTH = 2048            # texture width: WebGL 2 guarantees MAX_TEXTURE_SIZE >= 2048
RUNTIME_JS = Path(__file__).with_name("runtime.js")
SETUP = """() => { try { window.fxcBase = new FxcWebGL(); } catch (e) { return {error: String(e.message || e)}; }
  const gl = window.fxcBase.gl, d = gl.getExtension('WEBGL_debug_renderer_info');
  window.fxcModels = {};
  return {max_texture_size: gl.getParameter(gl.MAX_TEXTURE_SIZE), version: gl.getParameter(gl.VERSION),
          name: d ? gl.getParameter(d.UNMASKED_RENDERER_WEBGL) : gl.getParameter(gl.RENDERER)}; }"""


def open_page():
    """The process's WebGL page (a TargetError says what is missing: Playwright, Chromium, WebGL 2, float targets)."""
    browser = open_browser()
    page = browser.page("webgl", [RUNTIME_JS], SETUP)
    page.info.setdefault("browser", browser.version)
    page.info.setdefault("driver", f"Chromium {browser.version}")
    return page


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
        self.device = open_page()
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
        self._id = self.device.browser.new_id()
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
