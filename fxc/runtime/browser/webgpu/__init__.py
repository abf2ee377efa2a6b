"""The WebGPU device API (numpy + the browser harness, fxc.runtime.browser.page): a headless page running runtime.js.

    gpu = open_gpu()                        # the process's WebGPU page (SwiftShader's adapter here)
    gpu.info                                # the adapter (vendor, architecture), its limits
    m = WebGPUModule(target, program, inputs, outputs, consts, workspace_bytes, plan)   # from fxc.driver.lower_gpu

The page is the harness's (`open_browser().page("webgpu", ...)`: one Chromium per process, every call on its
thread), served by its loopback server at 127.0.0.1 — a secure context, where `navigator.gpu` exists (`about:blank`
is not one). Its setup asks for an adapter and a device. Bulk data travel over that server as binary: inputs and
weights over 64 KiB are one file the page fetches (`Page.put`; ~0.2 s for 32 MB, where a base64 argument of
page.evaluate took 28 s), outputs over 64 KiB one file it posts back (`Page.take`); smaller data ride inside the
call as base64 (no second request).

The program (fxc.backends.webgpu.wgsl.render_wgsl) is JSON: a WGSL compute shader per kernel. A module keeps all of its
tensors in one storage buffer in the page, the arena: a 64-byte header, then the inputs, outputs, constants and
the planned workspace, each 64-byte aligned (fxc.runtime.arena, as the GL module's). Constants are written once;
weights (`prepack_inputs`) stay until they change (DeviceModule's rules). A call is one page.evaluate: the page
takes the inputs, runs every launch in one compute pass, and returns the outputs and the error words. Groups WGSL
refused run as wasm kernels in the same page (fxc.driver.page_kernels: the program carries the wasm module; a wasm
step of
the plan copies its tensors' bytes between the arena and the module's memory, fxc/runtime/browser/wasm/webgpu_steps.js).

Errors are named: TargetError (no Playwright / Chromium: the harness's; no navigator.gpu or no adapter; a model
larger than one storage buffer binding), CompileError (a shader the browser rejected, with its source and the
messages), ExecutionError (integer division by zero, an int64 value beyond 32 bits), IndexOutOfRangeError.
"""
from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ....errors import CompileError, ExecutionError, IndexOutOfRangeError, TargetError, index_error_message
from ....target import Caps, Target
from ...arena import place_arena
from ...device_module import DeviceModule
from ...launch import dispatch_of
from ...row_plan import expand
from ..page import open_browser
from ..wasm import wasm_fault

RUNTIME_JS = Path(__file__).with_name("runtime.js")
WASM_JS = Path(__file__).parents[1] / "wasm" / "runtime.js"
WASM_STEPS_JS = Path(__file__).parents[1] / "wasm" / "webgpu_steps.js"
INLINE_BYTES = 64 << 10     # smaller data travel inside the call (base64); larger ones as files (Page.put/take)
# the page's setup: an adapter and a device, or {error} (the harness raises it as a TargetError)
SETUP = """async () => { try { window.fxcGPU = await FxcWebGPU.open(); }
  catch (e) { return {error: String(e.message || e)}; }
  window.fxcModels = {}; return window.fxcGPU.info; }"""


def open_gpu():
    """The process's WebGPU page (a harness Page; a TargetError says what is missing: Playwright, Chromium,
    navigator.gpu, an adapter)."""
    browser = open_browser()
    page = browser.page("webgpu", [RUNTIME_JS, WASM_JS, WASM_STEPS_JS], SETUP)      # fxc.driver.page_kernels
    info = page.info
    if "name" not in info:
        arch = info.get("architecture") or "?"
        info.update(name=f"{info.get('vendor') or '?'} {arch} (WebGPU)", browser=browser.version,
                    driver=f"Chromium {browser.version}",
                    dedicated_local_memory=arch != "swiftshader" and not info.get("fallback"))
    return page


def webgpu_caps(info: dict) -> Caps:
    """Caps of a WebGPU device (open_gpu().info): its work-group and shared-memory limits, 32-bit indices, float32
    and integers (int64 narrowed) only; shared memory counts as the device's own (feature "dedicated_local_memory")
    unless the adapter is SwiftShader, a CPU; what WGSL refuses runs as wasm kernels in the same page."""
    return Caps(vector_bits=128, vector_registers=0, threads=1,
                features=frozenset({"dedicated_local_memory"} if info.get("dedicated_local_memory") else ()),
                local_memory_bytes=int(info["local_memory_bytes"]),
                max_work_group_size=min(1024, int(info["max_work_group_size"])), index_bits=32,
                dtypes=frozenset({"float32", "int8", "int16", "int32", "int64", "uint8", "bool"}), scatter=True,
                math=Caps().math | {"expm1", "log1p", "asinh", "acosh", "atanh"}, page_kernels="wasm")


def open_target(target: Target) -> Target:
    """A webgpu target filled: the process's WebGPU page, opened, and its Caps."""
    page = open_gpu()
    return target.with_device(page, webgpu_caps(page.info))


def _call(page, script: str, arg=None):
    """page.call, with a device that cannot hold the model's buffers a TargetError (the harness already names a
    rejected shader a CompileError and anything else an ExecutionError)."""
    try:
        return page.call(script, arg)
    except ExecutionError as e:
        if "could not be made" in str(e):
            raise TargetError(f"the WebGPU device could not hold the model: {str(e)[:2000]}") from None
        raise


def _payload(page, name: str, arrays: list) -> tuple:
    """The bytes of `arrays` for the page, each padded to whole words (WebGPU writes buffers in 4-byte units): one
    base64 string when small, else a file `name` put on the page's server; and each array's [start, bytes]."""
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
    return {"file": page.put(name, data)}, spans


@dataclass
class WebGPUModule(DeviceModule):
    """A DeviceModule whose device is a WebGPU page in headless Chromium: one arena buffer, a pipeline per kernel."""

    def __post_init__(self):
        self.device = open_gpu() if self.device is None else self.device
        text = self.source      # an artifact's program starts with its interface line (a comment): skip it
        self._program = program = json.loads(text.split("\n", 1)[1] if text.startswith("/*") else text)
        self._wasm = program.get("wasm", {}).get("entries", {})     # groups WGSL refused: page kernels (wasm)
        missing = sorted({st.kernel for st in self.plan} - set(program["kernels"]) - set(self._wasm))
        if missing:
            raise CompileError(f"the WebGPU program lacks kernels {', '.join(missing[:3])}", self.source)
        self._id = self.device.browser.new_id()
        self._files = f"m{self._id}"            # this module's files on the page's server: .consts, .in, .out
        self._capacity, self._size_now, self._steps = 0, None, list(self.plan)
        if not self.symbols:        # (a symbolic module makes its page model at its first call's size: _grow_to)
            self._make(None)
        self._init_call_state()

    def _page_plan(self, s) -> list:
        """The plan as the page takes it at size s of the symbol (None: static): kernel, operand offsets, groups."""
        pairs = expand(self.plan, s)
        self._steps = [st for st, _ in pairs]
        plan = []
        for st, offs in pairs:
            offsets = [self._slot(kind, ix) + (off if kind != "null" else 0) for (kind, ix), off in zip(st.args, offs)]
            plan.append({"wasm": st.kernel, "offsets": offsets, **self._wasm[st.kernel]} if st.kernel in self._wasm
                        else {"kernel": st.kernel, "offsets": offsets, "groups": list(dispatch_of(tuple(st.grid))[0])})
        return plan

    def _grow_to(self, s: int) -> None:
        """The page's model at size s: placed anew in a larger arena (twice the size it held, within the symbol's
        range; weights upload again) when s exceeds it, else the plan for s over the same arena."""
        if s > self._capacity:
            cap = max(s, min(2 * self._capacity, int(self.symbols[0].get("max", s))))
            if self._capacity:
                _call(self.device, "([id]) => { window.fxcModels[id].destroy(); delete window.fxcModels[id]; }",
                      [self._id])
            self._capacity = cap
            self._make(s)
            self.held.drop()
        elif s != self._size_now:
            _call(self.device, "async ([id, program, plan]) => { await window.fxcModels[id].replan(program, plan); }",
                  [self._id, self._program, self._page_plan(s)])
        self._size_now = s

    def _make(self, s) -> None:
        """The page's model: its arena (at the capacity of a symbolic module), the constants, the plan at size s."""
        sizes = {self.symbols[0]["name"]: self._capacity} if self.symbols else None
        place_arena(self, int(self.device.info["max_storage_bytes"]), "WebGPU", self.device.info["name"], sizes)
        program, plan = self._program, self._page_plan(s)
        held = [(at, c) for at, c in zip(self._const_at, self.consts) if c.nbytes]
        payload, spans = _payload(self.device, f"{self._files}.consts", [c for _, c in held])
        consts = [[at, *span] for (at, _), span in zip(held, spans)]
        module = f"{self._files}.wasm" if self._wasm else None
        if module:
            self.device.put(module, base64.b64decode(program["wasm"]["module"]))
        program = {"kernels": program["kernels"]}
        try:
            _call(self.device, """async ([id, program, plan, bytes, payload, consts, module]) => {
                const data = await fxcData(payload);
                const wasm = module ? await (await fetch(module)).arrayBuffer() : null;
                window.fxcModels[id] = await window.fxcGPU.model(program, plan, bytes,
                    consts.map(([at, start, n]) => [at, data.subarray(start, start + n)]), wasm); }""",
                  [self._id, program, plan, self.arena_bytes, payload, consts, module])
        finally:
            self.device.files.pop(f"{self._files}.consts", None)
            self.device.files.pop(module, None)

    def _slot(self, kind: str, ix) -> int:
        """An operand's base byte offset in the arena (the launch's offset within it is added: device_rows)."""
        if kind == "null":
            return -1
        if kind == "work":
            return self._ws_at
        return {"in": self._in_at, "out": self._out_at, "const": self._const_at}[kind][ix]

    def _run(self, ins: list, outs: list, token, s=None) -> None:
        if s is not None:
            self._grow_to(s)
        unchanged, fingerprint = self._weights_unchanged(ins, token)
        upload = [i for i, a in enumerate(ins) if a.nbytes and not (unchanged and i in self.prepack_inputs)]
        self.uploaded_bytes = sum(ins[i].nbytes for i in upload)
        page, files = self.device, self._files
        payload, spans = _payload(page, f"{files}.in", [ins[i] for i in upload])
        data = [[self._in_at[i], *span] for i, span in zip(upload, spans)]
        wanted = [[at, o.nbytes] for at, o in zip(self._out_at, outs)]
        post = f"{files}.out" if sum(o.nbytes for o in outs) > INLINE_BYTES else None
        self.held.drop()                # a failed call leaves nothing known held
        try:
            err, got, times, fault = _call(page, """async ([id, payload, inputs, outputs, timed, post]) => {
                const data = await fxcData(payload);
                const [err, outs, times, fault] = await window.fxcModels[id].run(
                    inputs.map(([at, start, n]) => [at, data.subarray(start, start + n)]), outputs, timed);
                if (fault) return [err, null, times, fault];
                return [err, await fxcReturn(outs, post), times, null]; }""",
                                           [self._id, payload, data, wanted, bool(self.profiled), post])
        finally:
            page.files.pop(f"{files}.in", None)
        if fault:                       # a wasm step's error code (an index out of range, ...)
            wasm_fault(fault)
        if post is not None:        # the outputs, one after another, were posted back to the server
            raw, at = page.take(post), 0
            got = []
            for o in outs:
                got.append(raw[at:at + o.nbytes])
                at += o.nbytes
        else:
            got = [base64.b64decode(b) for b in got]
        for st, ms in zip(self._steps, times):       # profiled: each launch timed on its own (ns, as OpenCL's events)
            self.timed(st.kernel, int(ms * 1e6))
        self.held.hold(token, fingerprint)
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
