"""The WebGL device API (numpy + the browser harness, fxc.runtime.browser.page): a headless page running runtime.js.

    page = open_page()                      # the process's WebGL page (one WebGL 2 context, SwiftShader here)
    page.info                               # MAX_TEXTURE_SIZE, the renderer's name
    m = WebGLModule(target, program, inputs, outputs, consts, workspace_bytes, plan)   # from fxc.driver.lower_gpu
    desc = layout(program, plan, inputs, outputs, consts)      # what the page runs (the static package's too)

The program (fxc.backends.webgl.program.render_webgl) is JSON: fragment shaders over 2-D textures `width` texels wide.
`layout` gives every tensor place of the plan (an input, output, constant, or a workspace offset, per float/int
kind) one texture, sized for the largest tensor it holds: the intermediates' textures are a pool sized by the
memory plan. Integers travel as int32 (int64 values must fit 32 bits: checked here, an ExecutionError otherwise);
indices a kernel checks as eager does (embedding, gather) are checked here, on the host, before the call. Groups
WebGL refused run as wasm kernels in the same page (fxc.driver.page_kernels; `wasm_step`, `link_wasm_steps` and
fxc/runtime/browser/wasm/webgl_steps.js move their tensors between textures and the module's memory).

A module is loaded into the page once: programs compiled and linked, textures made, constants uploaded. A call is
one round trip: the inputs that changed go to the page (served as one binary file by the harness's loopback
server, which the page fetches), the plan runs there, the outputs come back (POSTed as one binary file).
Inputs that are weights (`prepack_inputs`) stay resident in their textures and are sent again only when they
changed (runtime/weights.py). Built with profile=True, a call also times each draw.

A module with a size symbol (a symbolic batch: fxc/driver/rows.py's row launches) is loaded once for every size:
each call passes the size, and the page grows the textures of the symbolic tensors and draws the row steps per
block of rows, each draw with its parameters' texel offsets (runtime.js: grow, draws); a size whose textures would
exceed MAX_TEXTURE_SIZE is an InputError naming the largest that fits.

A lost context (a shader SwiftShader's compiler hung on: the draw never returns and the browser gives the context
up; the browser reclaiming the GPU) never hands back zeros: runtime.js checks gl.isContextLost() after each link and
after the read-back, and the call raises a DeviceLostError naming what ran; the lost page is closed, and every
module loaded in it loads itself again into a fresh page at its next call (a call that finds the context lost
before it draws anything is retried there once).

Errors are named: DeviceLostError (above), TargetError (no Playwright, no Chromium at /usr/bin/chromium or
$FXC_CHROMIUM, no WebGL 2 or no float render targets in it), CompileError (a shader the browser rejected),
LoweringError (an index check the host cannot make), IndexOutOfRangeError, ExecutionError.
"""
from __future__ import annotations

import base64
import json
import weakref
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ....errors import (
    CompileError,
    DeviceLostError,
    ExecutionError,
    IndexOutOfRangeError,
    InputError,
    LoweringError,
    TargetError,
    index_error_message,
)
from ....target import Caps, Target
from ...device_module import DeviceModule
from ...row_plan import expand
from ...symbols import dim_value
from ...tensors import np_dtype
from ..page import open_browser
from ..wasm import INLINE_IN, INLINE_OUT, wasm_fault

WIDTH = 2048            # texture width: WebGL 2 guarantees MAX_TEXTURE_SIZE >= 2048
RUNTIME_JS = Path(__file__).with_name("runtime.js")
WASM_JS = Path(__file__).parents[1] / "wasm" / "runtime.js"
WASM_STEPS_JS = Path(__file__).parents[1] / "wasm" / "webgl_steps.js"
SETUP = """() => { try { window.fxcBase = new FxcWebGL(); } catch (e) { return {error: String(e.message || e)}; }
  const gl = window.fxcBase.gl, d = gl.getExtension('WEBGL_debug_renderer_info');
  window.fxcModels = {};
  return {max_texture_size: gl.getParameter(gl.MAX_TEXTURE_SIZE), version: gl.getParameter(gl.VERSION),
          max_draw_buffers: gl.getParameter(gl.MAX_DRAW_BUFFERS),
          high_int: (p => p && [p.rangeMin, p.rangeMax])(gl.getShaderPrecisionFormat(gl.FRAGMENT_SHADER, gl.HIGH_INT)),
          name: d ? gl.getParameter(d.UNMASKED_RENDERER_WEBGL) : gl.getParameter(gl.RENDERER)}; }"""


LOST = "the WebGL context was lost"        # runtime.js's FXC_LOST


def open_page():
    """The process's WebGL page (a TargetError says what is missing: Playwright, Chromium, WebGL 2, float targets);
    a fresh one when the last one's context was lost."""
    browser = open_browser()
    old = browser.pages.get("webgl")
    if old is not None and old.lost:
        browser.pages.pop("webgl", None)
        browser.served.pop("webgl", None)
        try:
            old.close()
        except Exception:       # noqa: BLE001 -- a crashed page may refuse to close; it is dropped either way
            pass
    page = browser.page("webgl", [RUNTIME_JS, WASM_JS, WASM_STEPS_JS], SETUP)     # wasm: fxc.driver.page_kernels
    page.info.setdefault("browser", browser.version)
    page.info.setdefault("driver", f"Chromium {browser.version}")
    return page


def webgl_caps(info: dict) -> Caps:
    """Caps of a WebGL 2 page (open_page().info): one work-item per fragment, no work-groups or shared memory, no
    scatter, weight-only values kept fused into their uses (the host checks the indices a kernel reads before the
    call), 32-bit indices, float32 and integers (int64 narrowed) only; what it refuses runs as wasm kernels in the
    same page."""
    return Caps(vector_bits=128, vector_registers=0, threads=1, features=frozenset(), local_memory_bytes=0,
                max_work_group_size=1, index_bits=32,
                dtypes=frozenset({"float32", "int8", "int16", "int32", "int64", "uint8", "bool"}), scatter=False,
                hoist_weights=False, math=Caps().math | {"expm1", "log1p", "asinh", "acosh", "atanh"},
                page_kernels="wasm", row_align=4, binary_tails=True, channel_block=4, texture_width=WIDTH,
                draw_buffers=max(1, min(4, int(info.get("max_draw_buffers", 4)))), int32_ops=int32_ints(info))


def int32_ints(info: dict) -> bool:
    """Whether the page's fragment shaders' highp int is 32-bit two's complement (range exponents 31 and 30, which
    GLSL ES 3.0 requires, and what a page that does not say is taken to have; a narrower one would not wrap as int32
    arithmetic must: Caps.int32_ops)."""
    low, high = info.get("high_int") or (31, 30)
    return low >= 31 and high >= 30


def open_target(target: Target) -> Target:
    """A webgl target filled: the process's WebGL page, opened, and its Caps."""
    page = open_page()
    return target.with_device(page, webgl_caps(page.info))


def lost_error(page, error: Exception) -> DeviceLostError | None:
    """The DeviceLostError for an error of a call into `page` when its context is lost (then the page is marked
    lost: open_page replaces it), else None (the error is the call's own)."""
    msg = str(error)
    lost = LOST in msg
    if not lost:
        try:
            lost = bool(page.call("() => !window.fxcBase || window.fxcBase.gl.isContextLost()"))
        except (CompileError, ExecutionError):
            lost = True             # the page itself is gone (crashed)
    if not lost:
        return None
    page.lost = True
    what = msg[msg.index(LOST) + len(LOST):].split("\n")[0].strip() if LOST in msg else f"during the call ({msg[:300]})"
    if "running the plan" in what:      # the read-back notices it; a profiled call checks after each draw
        what += " (a module built with profile=True names the draw it was lost in)"
    return DeviceLostError(
        f"{LOST} {what} on {page.info.get('name', 'this browser')}: the outputs are unknown, so the call fails "
        f"rather than return zeros. This model (and any other in that page) loads itself into a fresh context at "
        f"its next call. If it happens again with this model, one of its shaders hangs the GPU's shader compiler "
        f"(SwiftShader: see docs/web.md): build it for another target (wasm, webgpu or llvm), and report the kernel "
        f"(module.source holds its shaders)")


def program_of(source: str) -> dict:
    """The program JSON of a module's source (an artifact's starts with its interface line, a comment)."""
    return json.loads(source.split("\n", 1)[1] if source.startswith("/*") else source)


def _index_range(a: np.ndarray, size: int, wrap: bool):
    """The first value of `a` out of range for a dimension of `size`, or None."""
    lo = -size if wrap else 0
    bad = (a < lo) | (a >= size)
    return int(a.reshape(-1)[np.argmax(bad.reshape(-1))]) if bad.any() else None


def layout(program: dict, plan: list, inputs: list, outputs: list, consts: list, max_texture: int = 0,
           symbols: list = ()) -> dict:
    """What the page runs, as JSON: the program's shaders, the textures ("slots": float or int, elements), the
    steps (kernel and the slot of each parameter), and the slots of the inputs, outputs and constants; "checks":
    the inputs whose values index a dimension (input, size, wrap, op). A step draws the rows of its output tensor,
    not of the (perhaps larger) texture: a discarded fragment still runs on SwiftShader; a kernel with render targets
    (fxc.backends.webgl.draw_buffers: "targets" parts of "split" texels, in runs of "block") draws the rows of one part.
    A step never reads the texture it draws into (WebGL forbids it): a workspace place read and written by one step
    gets a second texture from then on.
    Constants used as indices are checked here (a LoweringError when out of range: the graph runs elsewhere).
    A symbolic plan (`symbols`: one size symbol; fxc/driver/rows.py) gives a slot that holds rows "per" elements per
    unit of the symbol besides its "elements" (the page grows it: rows(s) in runtime.js), a row step its "repeat"
    (group, rows per block, part, tail rows), each parameter's elements per row ("per") and its output's elements
    ("n"); the page expands them per size into draws, each with a texel offset per parameter."""
    width = int(program["width"])
    per_row = width * int(program.get("lanes", 1))     # elements a texture row (lanes: elements a texel)
    slots: list = []
    current: dict = {}                  # (kind, index, float?) -> its slot now

    def slot(kind, ix, dtype, n, fresh=False, per=0) -> int:
        key = (kind, int(ix) if isinstance(ix, (int, np.integer)) else tuple(ix), dtype == "float32")
        if key not in current or fresh:
            current[key] = len(slots)
            slots.append({"float": dtype == "float32", "elements": 1, "per": 0})
        s = current[key]
        slots[s]["elements"] = max(slots[s]["elements"], int(n))
        slots[s]["per"] = max(slots[s]["per"], int(per))
        return s
    size = lambda dt: 1 if dt == "bool" else np.dtype(dt).itemsize     # noqa: E731
    steps, checks = [], []
    wasm = program.get("wasm", {}).get("entries", {})      # groups WebGL refused (fxc.driver.page_kernels)
    for st in plan:
        if st.kernel in wasm:
            steps.append(wasm_step(st, wasm[st.kernel], slot))
            continue
        k = program["kernels"][st.kernel]
        if any(kind == "null" for kind, _ in st.args):
            raise TargetError(f"{st.kernel}: an absent optional input; the webgl target binds every input")
        params = list(zip(st.args, k["params"]))
        pers = [b // size(dt) for b, (dt, _) in zip(st.rows, k["params"])] if st.repeat else [0] * len(params)
        reads = [slot(kind, ix, dt, n, per=p) for j, (((kind, ix), (dt, n)), p) in enumerate(zip(params, pers))
                 if j != k["output"]]
        (kind, ix), (dt, n) = params[k["output"]]
        out = slot(kind, ix, dt, n, per=pers[k["output"]])
        if out in reads:
            out = slot(kind, ix, dt, n, fresh=True, per=pers[k["output"]])
        it = iter(reads)
        # the draw covers the output's texels (render targets: one part, then the parts are copied), no more: a
        # draw of 128 texels 128 fragments wide took 0.8 ms, 1024 wide (896 discarded) 3.7 ms (SwiftShader)
        texels = int(k.get("split") or -(-int(n) // (per_row // width)))
        cols = width // int(k.get("tiles") or 1)     # a part drawn as tiles: columns of width / tiles texels
        steps.append({"kernel": st.kernel, "rows": max(1, -(-texels // cols)), "cols": max(1, min(cols, texels)),
                      "slots": [out if j == k["output"] else next(it) for j in range(len(params))]})
        if st.repeat:
            steps[-1].update(repeat=[int(x) for x in st.repeat], per=pers, n=int(n))
        for j, size, wrap, op in k.get("checks", ()):
            kind, ix = st.args[j]
            if kind == "in" and [ix, size, wrap, op] not in checks:
                checks.append([ix, size, wrap, op])
            elif kind == "const":
                bad = _index_range(np.asarray(consts[ix]), size, wrap)
                if bad is not None:
                    raise LoweringError(f"{st.kernel}: a constant index {bad} is out of range for a dimension of "
                                        f"{size}; the graph runs elsewhere (eager raises as it does)")
            elif kind != "in":
                raise LoweringError(f"{st.kernel}: an index checked as eager checks it, computed by another kernel; "
                                    f"a WebGL fragment has no way to report one out of range")
    def spec(kind, i, s) -> dict:
        per = 0 if all(isinstance(d, int) for d in s.shape) else \
            int(np.prod([dim_value(d, {x["name"]: 1 for x in symbols}) for d in s.shape], dtype=np.int64))
        n = 0 if per else np.prod(s.shape, dtype=np.int64)
        return {"slot": slot(kind, i, s.dtype, n, per=per), "name": s.name, "shape": list(s.shape),
                "dtype": s.dtype, "per": per}
    ins = [spec("in", i, s) for i, s in enumerate(inputs)]
    outs = [spec("out", i, s) for i, s in enumerate(outputs)]
    cs = [{"slot": slot("const", i, str(c.dtype) if c.dtype != np.bool_ else "bool", c.size), "index": i}
          for i, c in enumerate(consts)]
    cap = max_texture or 1 << 30
    for s in slots:
        rows = -(-s["elements"] // per_row)
        if rows > cap:
            raise LoweringError(f"a tensor of {s['elements']} elements needs {rows} texture rows of {per_row}; this "
                                f"browser's MAX_TEXTURE_SIZE is {cap} (the graph runs elsewhere)")
    # a symbolic batch: the largest size whose textures MAX_TEXTURE_SIZE holds (the page grows them up to it)
    fit = min([(cap * per_row - s["elements"]) // s["per"] for s in slots if s["per"]] + [1 << 53])
    return link_wasm_steps({"width": width, "lanes": int(program.get("lanes", 1)),
                            "kernels": {n: {"shader": k["shader"], "output": k["output"],
                                            "targets": k.get("targets", 1), "split": k.get("split", 0),
                                            **{f: k[f] for f in ("block", "tiles") if f in k}}
                                        for n, k in program["kernels"].items()},
                            "steps": steps, "slots": slots, "inputs": ins, "outputs": outs, "consts": cs,
                            "checks": checks, "symbol": dict(symbols[0]) if symbols else None, "fit": fit})


def wasm_step(st, entry: dict, slot) -> dict:
    """The layout of a plan step that runs a wasm entry: its tensors' slots (outputs, then inputs), their dtypes and
    sizes in the module's memory, which are constants (read from their textures once) or inputs (read again only
    after a call uploads them), and its scratch bytes
    (fxc/runtime/browser/wasm/webgl_steps.js runs it; link_wasm_steps adds where its inputs are in the memory
    already)."""
    params = entry["params"]
    return {"wasm": st.kernel, "outputs": entry["outputs"], "scratch": entry["scratch"], "params": params,
            "slots": [slot(kind, ix, dt, n) for (kind, ix), (dt, n) in zip(st.args, params)],
            "const": [kind == "const" for kind, _ in st.args],
            "input": [int(ix) if kind == "in" else None for kind, ix in st.args]}


def link_wasm_steps(desc: dict) -> dict:
    """Each wasm step's "from": per parameter, [step, output] of the earlier wasm step of the same call whose output
    it reads, with no draw into that texture between them (the value is in the module's memory: no read-back)."""
    last: dict = {}                 # slot -> [step, output] of the wasm step that wrote it last
    for i, st in enumerate(desc["steps"]):
        if "wasm" in st:
            st["from"] = [None if j < st["outputs"] else last.get(s) for j, s in enumerate(st["slots"])]
            last.update({st["slots"][j]: [i, j] for j in range(st["outputs"])})
        else:
            last.pop(st["slots"][desc["kernels"][st["kernel"]]["output"]], None)
    return desc


def to_texture(a: np.ndarray, name: str) -> np.ndarray:
    """A tensor as texture data: float32 stays, every integer type becomes int32 (int64 must fit 32 bits)."""
    if a.dtype == np.float32:
        return a.reshape(-1)
    if a.dtype == np.int64 and a.size and (a.min() < -2 ** 31 or a.max() >= 2 ** 31):
        raise ExecutionError(f"{name}: an int64 value beyond 32 bits; the webgl target computes integers in 32 bits "
                             f"(keep int64 tensors within +-2**31, or use the llvm / opencl target)")
    return a.reshape(-1).astype(np.int32)


ALIGN = 16          # typed-array views need offsets that are multiples of their element size


def pack(arrays: list, names: list) -> tuple:
    """(bytes, [{offset, elements, float}]) of tensors as texture data (to_texture), each at an ALIGN-byte offset;
    None in `arrays` is a tensor not sent (its record is None)."""
    blob, records = bytearray(), []
    for a, name in zip(arrays, names):
        if a is None:
            records.append(None)
            continue
        t = to_texture(np.ascontiguousarray(a), name)
        blob += bytes(-len(blob) % ALIGN)
        records.append({"offset": len(blob), "elements": int(t.size), "float": t.dtype == np.float32})
        blob += t.tobytes()
    return bytes(blob), records


_RELEASED: list = []        # ids of collected modules whose textures and programs the page still holds


def _released() -> list:
    """The ids collected since the last call (a finalizer only appends: it never calls into the browser)."""
    out = []
    while _RELEASED:
        out.append(_RELEASED.pop())
    return out


@dataclass
class WebGLModule(DeviceModule):
    """A DeviceModule whose device is a WebGL 2 page in headless Chromium."""

    exports_symbols = True      # a symbolic batch exports (format 2) and runs from the artifact and `fxc web`

    def __post_init__(self):
        self.consts = [np.ascontiguousarray(c) for c in self.consts]
        self._id = open_browser().new_id()
        self._files = f"m{self._id}"
        given = self.device if self.device is not None and not self.device.lost else None  # (the build's page)
        self._init_call_state()
        try:
            self._load(given)
        except DeviceLostError:         # the page was lost before this module drew anything: once more, afresh
            self._load()
        weakref.finalize(self, _RELEASED.append, self._id)     # its textures and programs go at the next call
        self._np = [np_dtype(s.dtype) for s in self.outputs]

    def _load(self, page=None) -> None:
        """Load the module into the process's page (`page`, else the one open_page gives: a fresh one after a lost
        context): programs compiled and linked, textures made, constants uploaded; nothing is resident there until
        a call sends the inputs."""
        self.device = open_page() if page is None else page
        self.held.drop()
        self.desc = layout(program_of(self.source), self.plan, self.inputs, self.outputs, self.consts,
                           int(self.device.info["max_texture_size"]), self.symbols)
        blob, records = pack(self.consts, [f"constant {i}" for i in range(len(self.consts))])
        self.device.put(f"{self._files}.consts", blob)
        program = program_of(self.source)
        wasm = f"{self._files}.wasm" if "wasm" in program else None      # the groups WebGL refused
        if wasm:
            self.device.put(wasm, base64.b64decode(program["wasm"]["module"]))
        try:
            self.device.call("""async ([id, desc, url, records, gone, wasm]) => {
                fxcRelease(gone);
                const buf = await (await fetch(url)).arrayBuffer();
                const m = new FxcWebGL(window.fxcBase);
                if (wasm) m.wasm = await FxcWasm.load(await (await fetch(wasm)).arrayBuffer());
                m.load(desc, records.map(r => fxcView(buf, r)));
                window.fxcModels[id] = m; }""", [self._id, self.desc, f"{self._files}.consts", records, _released(),
                                                 wasm])
        except (CompileError, ExecutionError) as e:
            raise lost_error(self.device, e) or e from None
        finally:
            self.device.files.pop(f"{self._files}.consts")
            self.device.files.pop(wasm, None)

    def _run(self, ins: list, outs: list, token, s=None) -> None:
        if s is not None and s > self.desc["fit"]:
            raise InputError(f"{self.symbols[0]['name']} = {s} needs textures taller than this browser's "
                             f"MAX_TEXTURE_SIZE ({self.device.info['max_texture_size']} rows); sizes up to "
                             f"{self.desc['fit']} run here: split the batch, or use the webgpu or llvm target")
        for i, size, wrap, op in self.desc["checks"]:
            bad = _index_range(ins[i], size, wrap)
            if bad is not None:
                raise IndexOutOfRangeError(index_error_message(op, bad, size))
        if self.device.lost:            # its page's context was lost (by this module or another): a fresh one
            self._load()
        try:
            times, fault, raw = self._call(ins, outs, token, s)
        except DeviceLostError as e:
            if "before this call" not in str(e):
                raise
            self._load()                # lost before it drew anything (between calls): once more, afresh
            times, fault, raw = self._call(ins, outs, token, s)
        if fault:                       # a wasm step's error code (an index out of range, ...)
            wasm_fault(fault)
        self._read_outputs(outs, raw, times, s)

    def _call(self, ins: list, outs: list, token, s) -> tuple:
        """One round trip: the inputs not resident sent, the plan run, the outputs sent back (within the answer up to
        INLINE_OUT bytes, else POSTed); (times, fault, the outputs' bytes)."""
        unchanged, fingerprint = self._weights_unchanged(ins, token)
        send = [None if (unchanged and i in self.prepack_inputs) else a for i, a in enumerate(ins)]
        blob, records = pack(send, [s.name for s in self.inputs])
        self.uploaded_bytes = sum(a.nbytes for a in send if a is not None)
        self.held.drop()                # a failed call leaves nothing known held
        page, url = self.device, f"{self._files}.in"
        inline = len(blob) <= INLINE_IN
        if not inline:
            page.put(url, blob)
        back = None if 4 * sum(o.size for o in outs) <= INLINE_OUT else f"{self._files}.out"
        try:
            times, fault, got = page.call("""async ([id, url, b64, back, records, profile, gone, s]) => {
                fxcRelease(gone);
                const m = window.fxcModels[id];
                const buf = b64 !== null ? fxcFromBase64(b64) : await (await fetch(url)).arrayBuffer();
                const r = m.run(records.map(rec => rec === null ? null : fxcView(buf, rec)), profile, s);
                if (r.fault) return [null, r.fault, null];
                if (back === null) return [r.times, null, fxcToBase64(fxcBytes(r.outputs))];
                await fxcPost(back, r.outputs);
                return [r.times, null, null]; }""", [self._id, url, base64.b64encode(blob).decode() if inline else None,
                                                     back, records, self.profiled, _released(), s])
            raw = None if fault else base64.b64decode(got) if back is None else page.take(back)
        except (CompileError, ExecutionError) as e:
            raise lost_error(page, e) or e from None
        finally:
            page.files.pop(url, None)
        if not fault:
            self.held.hold(token, fingerprint)
        return times, fault, raw

    def _read_outputs(self, outs: list, raw: bytes, times, s) -> None:
        """The outputs the page sent back (`raw`, one after another) into `outs`; the draws' times to the profile."""
        at = 0
        for o, spec in zip(outs, self.outputs):
            n = o.size
            if o.size:
                o.reshape(-1)[:] = np.frombuffer(raw, np.float32 if spec.dtype == "float32" else np.int32, n, at)
            at += 4 * n
        for st, ms in zip(self.plan if s is None else [st for st, _ in expand(self.plan, s)], times or ()):
            self.timed(st.kernel, int(ms * 1e6))

    def launches(self) -> list:
        wasm = program_of(self.source).get("wasm", {}).get("entries", {})
        return [f"{s.kernel}: wasm kernel" if s.kernel in wasm else f"{s.kernel}: {s.grid[0]} fragments"
                for s in self.plan]
