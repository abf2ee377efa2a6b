"""Page kernels: fused groups a browser device target refuses, compiled for another kind and run in the same page.

    page = PageKernels(target, render)          # target.caps.page_kernels names the other kind (webgl: "wasm")
    why = page.refusal(gr, sig, name, args)     # None: the device runs the group; else why it cannot
    entry = page.entry(gr, sig, why)            # the group as an entry of the page kernels' module (a plan step)
    source = page.attach(render(kernels))       # the device program with that module inside it

These are fxc's own kernels, compiled for the browser's CPU: not capture's eager fallback (ops torch runs).
fxc.driver.lower_gpu asks, for each fused group, whether the device target expresses it: its GPU schedules lower it,
its renderer renders it, and (WebGL) every index the kernel checks as eager does is an input or a constant, which
the host checks before the call. A group it refuses (64-bit integer arithmetic, scatter, a sequential loop such as
cumsum, an index computed by another kernel, several outputs a kernel) becomes a plan step naming an entry of one
wasm module (fxc.driver.groups.wasm_group_entries), which the device program carries as
`program["wasm"] = {"module": base64, "entries": {name: {"params": [[dtype, elements]], "outputs": count,
"scratch": bytes}}}`: the outputs' then the inputs' dtypes and sizes. In the page the plan runtime moves those
tensors between their textures and the module's memory at the step (fxc/runtime/browser/wasm/webgl_steps.js). Tensors at
such a boundary live in textures, so their dtypes must be ones a texture holds (float32 and integers within 32
bits, checked when they come back); a group with another one at its boundary (float64, bfloat16) stays refused,
and the whole graph with it (a LoweringError: torch.compile runs it in eager). webgpu (Caps.page_kernels "wasm" too)
keeps its tensors in one arena buffer: its steps copy bytes (fxc/runtime/browser/wasm/webgpu_steps.js), with the same
dtypes allowed.
"""
from __future__ import annotations

import base64
import json

from ..errors import FxcError, LoweringError, UnsupportedOpError
from .groups import group_launches, wasm_group_entries

TEXTURE_DTYPES = frozenset({"float32", "int32", "int64", "int16", "int8", "uint8", "bool"})


class PageKernels:
    """The groups of one build that run as the page kernels' target's, and the device's probes of the others."""

    def __init__(self, target, render):
        self.target, self.render = target, render
        self.probed: dict = {}          # group signature -> (launches, program) or the device's refusal
        self.groups: list = []          # one per entry, in entry order
        self.entries: dict = {}         # group signature -> entry name
        self.reasons: list = []         # why the device refused each entry's group

    def refusal(self, gr, sig, name: str, args: list) -> str | None:
        """Why the device target cannot run group `gr` with these plan slots (None: it can)."""
        if sig not in self.probed:
            try:
                launches = group_launches(gr, name, self.target.caps)
                self.probed[sig] = (launches, json.loads(self.render(launches)))
            except (LoweringError, UnsupportedOpError) as e:
                self.probed[sig] = str(e)
        got = self.probed[sig]
        if isinstance(got, str):
            return got
        for k in got[1].get("kernels", {}).values():        # WebGL: indices the host checks before the call
            for j, *_ in k.get("checks", ()):
                if args[j][0] not in ("in", "const"):
                    return f"{name}: an index checked as eager checks it, computed by another kernel"
        return None

    def launches(self, sig) -> list:
        """The device kernels of a group refusal() accepted."""
        return self.probed[sig][0]

    def entry(self, gr, sig, why: str) -> str:
        """The entry of the page kernels' module that runs `gr` (a LoweringError when its tensors cannot cross)."""
        if sig not in self.entries:
            bad = [f"{v.name} ({v.dtype})" for v in gr.outputs + gr.inputs if v.dtype not in TEXTURE_DTYPES]
            if bad:
                raise LoweringError(f"{why}; and it cannot run as {self.target.caps.page_kernels} kernels in the page: "
                                    f"{', '.join(bad[:3])} would cross between the two, which carry float32 and "
                                    f"integers only (a WebGL texture holds 32-bit values)")
            if any(v.type.symbolic for v in gr.outputs + gr.inputs):
                raise LoweringError(f"{why}; and a group of symbolic shape does not run as "
                                    f"{self.target.caps.page_kernels} kernels in the page yet (give the shapes)")
            self.entries[sig] = f"fxc_group{len(self.groups)}"
            self.groups.append(gr)
            self.reasons.append(why)
        return self.entries[sig]

    def attach(self, source: str) -> str:
        """The device program with the page kernels' module and its entries (unchanged when no group needs one)."""
        if not self.groups:
            return source
        try:
            wasm, names, scratch = wasm_group_entries(self.groups, self.target.caps.page_kernels)
        except FxcError as e:
            raise LoweringError(f"{self.reasons[0]}; and its {self.target.caps.page_kernels} kernels could not be "
                                f"built: {e}") from None
        program = json.loads(source)
        program["wasm"] = {"module": base64.b64encode(wasm).decode(), "entries": {
            name: {"params": [[v.dtype, int(v.type.numel)] for v in gr.outputs + gr.inputs],
                   "outputs": len(gr.outputs), "scratch": int(s)}
            for name, gr, s in zip(names, self.groups, scratch)}}
        return json.dumps(program)
