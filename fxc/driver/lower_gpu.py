"""The GPU family (opencl, opengl, webgl, webgpu): a plan's groups as device launches of one rendered program.

Takes the Plan (fxc/driver/plan.py) and the target's Backend; produces its runtime module (form "program": the
program source and a launch plan over input/output/constant buffers and one planned workspace). Each group is lowered
by the GPU schedules (fxc.lowering.schedules.gpu) to scalar loop IR with launch geometry; groups of equal signature
share their kernels; the backend's `render` makes all of them one program. A group over a symbolic number of rows
becomes row launches (fxc/driver/rows.py; its symbolic buffers a region of the workspace at base + symbol x bytes per
row). Where the target names Caps.page_kernels (webgl, webgpu: "wasm"), a group the device refuses runs as a kernel of
that kind in the same page (fxc/driver/page_kernels.py). An external library's match is a call step; a whole-region
library's region (CLML) is one call step before fxc's own launches of its groups (the runtime runs one or the other:
_whole_region), its region graph carried in the program text as a comment.
"""
from __future__ import annotations

import os
import time

from ..backends import libraries_of
from ..errors import TargetError
from ..lowering.loop_ir import format_kernel
from ..runtime.launch import Launch
from ..tuning.workload import threads_of
from .groups import group_launches, group_signature, naming
from .options import log
from .page_kernels import PageKernels
from .plan import Plan, align64, prepack_inputs, scratch_args, tensor_specs
from .rows import ROW_BLOCK, row_bytes, row_launches, symbolic_group
from .tuned import config_of, tuned_note


def _single(k) -> bool:
    """A launch of one work-item: hand-written sequential loop IR that runs on the device, correct but serial."""
    return all(g == 1 for g in k.launch.grid) and all(b == 1 for b in k.launch.block)


def _whole_region(lib, region, plan: Plan, steps: list, start: int, regions: list) -> str:
    """Insert a whole-region library's call step before the fallback launches steps[start:] of its groups: call =
    (how many launches follow it as its fallback, the index of its region graph in the program text); regions gets
    (kernel, region graph text). Returns the kernel line."""
    mine = {id(n) for n in region.nodes}
    outside = [v for gr in plan.groups if id(gr.root) not in mine for v in gr.inputs]
    produced = {v.id for gr in plan.groups for v in gr.outputs}
    views = {plan.slots[v.id] for v in outside if v.id not in produced and plan.slots[v.id][0] == "work"}
    leaving = {v.id for v in outside} | {vid for vid, slot in plan.slots.items() if slot[0] == "out"}
    leaving |= {o.id for n in region.nodes for o in n.outputs if plan.slots.get(o.id) in views}   # (read as a view)
    kernel, call, operands, text = lib.lower(region, leaving)
    steps.insert(start, Launch(kernel, [plan.slots[v.id] for v in operands], (1,), (1,), False,
                               call=(len(steps) - start, len(regions)) + tuple(call)))
    regions.append((kernel, text.replace("*/", "*\\/")))      # (JSON reads \/ as /)
    return (f"region {len(regions) - 1} of {len(region.matches)} matches  [{kernel}: external library {lib.name}; "
            f"fxc's {len(steps) - start - 1} launches after it are its fallback]")


def lower_gpu(graph, plan: Plan, target, backend, dbg: int, t0: float, profile: bool, symbols: list,
              tuned: dict | None = None):
    """The runtime module of `plan` for a GPU-family target; tuned: workload key -> the tuning record whose config a
    group's schedules take (fxc/driver/tuned.py)."""
    caps, sym = target.caps, plan.row_symbol
    symbols = symbols[:1]       # row launches: the one symbol of the rows

    def render(kernels, rows=None) -> str:
        return backend.render(kernels, rows, caps)

    kernels, steps, lines, same, scratch, row_names, widest = [], [], [], {}, 0, set(), 0
    page = PageKernels(target, render) if caps.page_kernels else None      # webgl, webgpu: wasm kernels in the page
    libs = {lib.name: lib for lib in libraries_of(target)} if plan.external else {}
    regions, starts = [], {}                    # whole-region calls: their texts; a region -> its first step
    for i, gr in enumerate(plan.groups):
        dbg.progress.set("lowering kernels", i, len(plan.groups))
        is_pre, rowwise = i < len(plan.prepack), symbolic_group(gr, sym)
        ext = plan.external.get(gr.root.name)
        whole = ext is not None and libs[ext[0]].whole_regions and sym is None
        if whole:
            starts.setdefault(ext[2], len(steps))
        elif gr.root.name in plan.external:     # an external library's call (fxc.backends.external)
            name, nodes, _ = plan.external[gr.root.name]
            kernel, call, operands = libs[name].lower(nodes)
            steps.append(Launch(kernel, [plan.slots[v.id] for v in operands], (1,), (1,), is_pre, call=call))
            lines.append(f"{gr.describe()}  [{kernel}{list(call)}: external library {name}]")
            continue
        sig = group_signature(gr)
        rec = None if rowwise or page else config_of(tuned, gr, target, threads_of(target))
        args = plan.args(gr)
        # (a group over symbolic rows is not probed: its row launches raise where the device refuses it, and
        # the graph then builds per size, where the in-page kernels run)
        why = page.refusal(gr, sig, f"k{i}_{gr.root.op}", args) if page and not rowwise else None
        if why is not None:
            steps.append(Launch(page.entry(gr, sig, why), list(args), (1,), (1,), is_pre))
            lines.append(f"{gr.describe()}  [{caps.page_kernels} in the page: {steps[-1].kernel}; "
                         f"{target.kind} refused it: {why[:160]}]")
            continue
        if sig not in same:     # {rows: launches} of a group over symbolic rows, else {0: launches}
            name = f"k{i}_{gr.root.op}"
            with naming(gr, sym is not None):
                same[sig] = row_launches(gr, name, caps, sym) if rowwise else \
                    {0: page.launches(sig) if page else group_launches(gr, name, caps, rec and rec["config"])}
            kernels += [k for ks in same[sig].values() for k in ks]
            if rowwise:
                row_names.update(k.name for ks in same[sig].values() for k in ks)
                widest = max([widest] + row_bytes(gr, sym))
        sizes = list(same[sig])         # rows of each part: the block, then the tails (fxc/driver/rows.py)
        for part, (size, launches) in enumerate(same[sig].items()):
            extra, at = scratch_args(launches[0].params if launches else (), plan.end)   # after the packed weights
            scratch = max(scratch, at - plan.end)
            tail = (size, sizes[part - 1] if part else ROW_BLOCK, int(part == len(sizes) - 1))
            rows, repeat = ((tuple(row_bytes(gr, sym) + [0] * len(extra)), (i, ROW_BLOCK, part) + tail)
                            if rowwise else ((), ()))
            steps += [Launch(k.name, args + extra, k.launch.grid, k.launch.block, is_pre, rows, repeat)
                      for k in launches]
        launches = next(iter(same[sig].values()))
        shapes = ", ".join(f"{k.name} {k.launch}" + (" (single work-item)" if _single(k) else "") for k in launches)
        if rowwise:
            shapes = f"per {ROW_BLOCK} rows {shapes}; then per row"
        lines.append(f"{gr.describe()}  [{target.kind}: {shapes}]" + ("  [prepack]" if is_pre else "")
                     + tuned_note(rec))
        if whole and gr.root is ext[2].matches[-1][1][-1]:
            lines.append(_whole_region(libs[ext[0]], ext[2], plan, steps, starts[ext[2]], regions))
    for k in kernels:
        if dbg >= 3:
            log(format_kernel(k))
        dbg.note("loop_ir.txt", format_kernel(k))
    wide = [k.name for k in kernels if backend.needs_fp64(k)]
    if wide and "float64" not in caps.dtypes:
        raise TargetError(f"kernels {', '.join(wide[:3])} compute in float64, which the device of {target} "
                          f"lacks (no cl_khr_fp64); cast the model to float32 (model.float()) or choose a "
                          f"device with fp64 (-device=)")
    base = align64(plan.end + scratch)       # the symbolic region: base + symbol x per
    steps = [st if not st.repeat else Launch(st.kernel, [("work", (base, ix[1])) if k == "work" and
                                                        isinstance(ix, tuple) else (k, ix) for k, ix in st.args],
                                             st.grid, st.block, st.prepack, st.rows, st.repeat) for st in steps]
    rows = (frozenset(row_names), widest * min(int(symbols[0]["max"]), 1 << 24)) if row_names else None
    source = render(kernels, rows) if page is None else page.attach(render(kernels, rows))
    source += "".join(f"\n/* {kernel} {k}\n{text}\n*/\n" for k, (kernel, text) in enumerate(regions))
    if dbg >= 4:
        log(source)
    dbg.note("source.txt", source)
    extra = dict(symbols=symbols, row_bytes=plan.memory.row_bytes) if sym is not None else {}
    dbg.progress.set(f"building the {target.kind} program ({len(kernels)} kernels)")
    module = backend.module_class(sym is not None)(
        str(target), source, tensor_specs(graph.inputs), tensor_specs(graph.outputs), [c.data for c in plan.consts],
        base if sym is not None else plan.end + scratch, steps, lines,
        prepack_inputs=prepack_inputs(plan, graph, backend.form), profiled=profile,
        intermediate_bytes=plan.memory.total_bytes, device=target.device, **extra)
    if dbg >= 1:
        log(f"[fxc] built {len(kernels)} {target.kind} kernels ({len(steps)} launches) in "
            f"{1e3 * (time.perf_counter() - t0):.1f} ms; workspace {plan.memory.workspace_bytes} B")
    if profile and os.environ.get("FXC_PROFILE", "0") not in ("", "0"):     # FXC_PROFILE=1: a table at exit
        module.print_profile_at_exit()
    return module
