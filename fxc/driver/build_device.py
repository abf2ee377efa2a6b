"""The compiler driver for device targets (OpenCL): graph IR -> device Module.

graph -> pipeline_for(target) (no CPU passes) -> fusion -> per group: the GPU-family schedules
(fxc.lowering.schedules.gpu) -> scalar loop IR with launch geometry -> the target's renderer -> one program
-> DeviceModule (program source + launch plan over input/output/constant buffers and one planned workspace).
`fxc.driver.build.build` dispatches here for every target that is not a CPU. Backends are found through
`BACKENDS` (target kind -> renderer and module); nothing here names a device library.
A graph with a symbolic batch (one size symbol in the inputs' leading dims) builds once where the target's Caps
have `dynamic_rows`: its groups over rows become row launches (fxc/driver/rows.py), its symbolic buffers a region
of the workspace at base + symbol x bytes per unit; elsewhere (or for a group reading across rows) LoweringError,
and the caller builds per size.
"""
from __future__ import annotations

import os
import sys
import time

from ..errors import TargetError
from ..lowering.loop_ir import format_kernel
from ..target import Target, device_target


def _backend(kind: str, caps=None):
    """(render(kernels, rows=None) -> program source, Module class, needs_fp64(kernel)) of a device target kind;
    rows: (names of the row-launch kernels, elements of the largest tensor at the symbol's largest size), which
    only WebGL's renderer reads (its offsets are uniforms of the row kernels; its texture width fits that size)."""
    if kind == "opencl":
        from ..backends.opencl import needs_fp64, render_opencl
        from ..runtime.opencl.module import OpenCLModule
        return (lambda kernels, rows=None: render_opencl(kernels)), OpenCLModule, needs_fp64
    if kind == "opengl":
        from ..backends.glsl import needs_fp64, render_glsl
        from ..runtime.opengl.module import GLModule
        return (lambda kernels, rows=None: render_glsl(kernels)), GLModule, needs_fp64
    if kind == "webgl":
        from ..backends.glsl import needs_fp64
        from ..backends.webgl.program import render_webgl
        from ..runtime.browser.webgl import WIDTH, WebGLModule
        buffers = caps.draw_buffers if caps is not None else 1        # several texels a fragment (draw_buffers)
        return (lambda kernels, rows=None: render_webgl(kernels, WIDTH, *(rows or ()), draw_buffers=buffers)), \
            WebGLModule, needs_fp64
    if kind == "webgpu":
        from ..backends.wgsl import needs_fp64, render_wgsl
        from ..runtime.browser.webgpu import WebGPUModule
        return (lambda kernels, rows=None: render_wgsl(kernels)), WebGPUModule, needs_fp64
    raise TargetError(f"target kind {kind!r} has no device backend yet; available: opencl, opengl, webgl, webgpu (and "
                      f"llvm for the CPU)")


def _log(msg):
    print(msg, file=sys.stderr)


def group_launches(gr, name: str, caps) -> list:
    """The device kernels (launches in order) of one fused group."""
    from ..lowering.schedules.gpu import lower_group_device
    from .build import group_tensors
    return lower_group_device(name, *group_tensors(gr), caps)


def _single(k) -> bool:
    """A launch of one work-item: hand-written sequential loop IR that runs on the device, correct but serial."""
    return all(g == 1 for g in k.launch.grid) and all(b == 1 for b in k.launch.block)


def build_device(graph, target: Target, **options):
    """Compile `graph` for a device target; returns its runtime module (see fxc.driver.build.build for options)."""
    from ..lowering.expr import ITEMSIZE
    from ..lowering.sym import SymInfo
    from ..relay_like.passes.fuse_ops import fuse_ops
    from ..relay_like.passes.hoist import hoisted_values
    from ..relay_like.passes.plan_memory import output_sources, plan_memory, reshape_views
    from ..relay_like.pipeline import run_pipeline
    from ..runtime.plan import Launch
    from ..runtime.tensors import TensorSpec
    from .build import debug_level, gc_paused, group_signature, spec_shape
    from .page_kernels import Fallback
    render, module_class, needs_fp64 = _backend(target.kind)
    if options.get("precision", "fp32") != "fp32":
        raise TargetError(f"precision={options['precision']!r} is a CPU mode (AVX-512 BF16); the {target.kind} "
                          f"target computes in float32: use precision='fp32'")
    from .rows import ROW_BLOCK, graph_symbol, row_bytes, row_launches, symbolic_group
    target = device_target(target)
    render = _backend(target.kind, target.caps)[0]          # with the device's Caps (webgl: its render targets)
    dbg, t0 = debug_level(options), time.perf_counter()
    sym = graph_symbol(graph, target.caps, target.kind)
    with gc_paused():
        graph = run_pipeline(graph, dbg, _log, target=target)
        # weight-only values: a prepack step of their own (not on WebGL, whose host checks the indices a kernel
        # reads before the call: they must be inputs or constants there, so such values stay fused into their uses)
        hoisted = frozenset(hoisted_values(graph)) if target.caps.scatter else frozenset()
        groups = fuse_ops(graph, enable=options.get("fuse", True), hoisted=hoisted)
        out_ids = {v.id for v in graph.outputs}
        # what depends on weights only (a batch norm's scale, a weight's transpose) is the prepack step: run on
        # the first call and again only when a weight changed; its results live after the planned workspace
        prepack = [gr for gr in groups if all(o.id in hoisted and o.id not in out_ids for o in gr.outputs)]
        groups = [gr for gr in groups if all(gr is not p for p in prepack)]
        packed_views = reshape_views(prepack, out_ids)
        prepack = [gr for gr in prepack if gr.outputs[0].id not in packed_views]
        views = reshape_views(groups, out_ids)
        groups = [gr for gr in groups if gr.outputs[0].id not in views]
        into_out = output_sources(groups, graph.outputs, views)
        groups = [gr for gr in groups
                  if not (gr.root.op == "reshape" and len(gr.nodes) == 1 and gr.root.inputs[0].id in into_out)]
        plan = plan_memory(groups, graph.outputs, views, set(into_out))
        packed, end = {}, plan.workspace_bytes
        for gr in prepack:
            for v in gr.outputs:
                packed[v.id] = end
                end += (max(v.type.numel * ITEMSIZE[v.dtype], 1) + 63) // 64 * 64
        consts = graph.constants()
        slots = {v.id: ("in", i) for i, v in enumerate(graph.inputs)}
        slots.update({v.id: ("const", i) for i, v in enumerate(consts)})
        slots.update({v.id: ("out", i) for i, v in enumerate(graph.outputs)})
        slots.update({vid: ("out", i) for vid, i in into_out.items()})
        slots.update({vid: ("work", off) for vid, off in {**plan.offsets, **packed}.items()})
        slots.update({vid: ("work", ("rows", off)) for vid, off in plan.row_offsets.items()})
        slots.update({vid: slots[src.id] for vid, src in packed_views.items()})
        slots.update({vid: slots[src.id] for vid, src in views.items()})
        kernels, steps, lines, same, scratch, row_names, widest = [], [], [], {}, 0, set(), 0
        host = Fallback(target, render) if target.caps.fallback else None      # webgl: wasm kernels in the page
        for i, gr in enumerate(prepack + groups):
            is_pre, rowwise = i < len(prepack), symbolic_group(gr, sym)
            sig = group_signature(gr)
            args = [slots[v.id] for v in gr.outputs] + [slots[v.id] for v in gr.inputs]
            # (a group over symbolic rows is not probed: its row launches raise where the device refuses it, and
            # the graph then builds per size, where the in-page fallback kernels run)
            why = host.refusal(gr, sig, f"k{i}_{gr.root.op}", args) if host and not rowwise else None
            if why is not None:
                steps.append(Launch(host.entry(gr, sig, why), list(args), (1,), (1,), is_pre))
                lines.append(f"{gr.describe()}  [{target.caps.fallback} in the page: {steps[-1].kernel}; "
                             f"{target.kind} refused it: {why[:160]}]")
                continue
            if sig not in same:     # {rows: launches} of a group over symbolic rows, else {0: launches}
                name = f"k{i}_{gr.root.op}"
                same[sig] = row_launches(gr, name, target.caps, sym) if rowwise else \
                    {0: host.launches(sig) if host else group_launches(gr, name, target.caps)}
                kernels += [k for ks in same[sig].values() for k in ks]
                if rowwise:
                    row_names.update(k.name for ks in same[sig].values() for k in ks)
                    widest = max([widest] + row_bytes(gr, sym))
            sizes = list(same[sig])         # rows of each part: the block, then the tails (fxc/driver/rows.py)
            for part, (size, launches) in enumerate(same[sig].items()):
                extra, at = [], end     # scratch: after the packed weights, shared (the launches run one at a time)
                for b in launches[0].params if launches else ():
                    if b.scope == "scratch":
                        extra.append(("work", at))
                        at += (b.nbytes + 63) // 64 * 64
                scratch = max(scratch, at - end)
                tail = (size, sizes[part - 1] if part else ROW_BLOCK, int(part == len(sizes) - 1))
                rows, repeat = ((tuple(row_bytes(gr, sym) + [0] * len(extra)), (i, ROW_BLOCK, part) + tail)
                                if rowwise else ((), ()))
                steps += [Launch(k.name, args + extra, k.launch.grid, k.launch.block, is_pre, rows, repeat)
                          for k in launches]
            launches = next(iter(same[sig].values()))
            shapes = ", ".join(f"{k.name} {k.launch}" + (" (single work-item)" if _single(k) else "") for k in launches)
            if rowwise:
                shapes = f"per {ROW_BLOCK} rows {shapes}; then per row"
            lines.append(f"{gr.describe()}  [{target.kind}: {shapes}]" + ("  [prepack]" if is_pre else ""))
        if dbg >= 3:
            for k in kernels:
                _log(format_kernel(k))
        wide = [k.name for k in kernels if needs_fp64(k)]
        if wide and "float64" not in target.caps.dtypes:
            raise TargetError(f"kernels {', '.join(wide[:3])} compute in float64, which the device of {target} "
                              f"lacks (no cl_khr_fp64); cast the model to float32 (model.float()) or choose a "
                              f"device with fp64 (-device=)")
        base = (end + scratch + 63) // 64 * 64       # the symbolic region: base + symbol x per
        steps = [st if not st.repeat else Launch(st.kernel, [("work", (base, ix[1])) if k == "work" and
                                                            isinstance(ix, tuple) else (k, ix) for k, ix in st.args],
                                                 st.grid, st.block, st.prepack, st.rows, st.repeat) for st in steps]
        info = (dict(getattr(graph, "symbols", {})).get(sym.name) or SymInfo(sym.name)) if sym is not None else None
        rows = (frozenset(row_names), widest * min(int(info.max), 1 << 24)) if row_names else None
        source = render(kernels, rows) if host is None else host.attach(render(kernels, rows))
        if dbg >= 4:
            _log(source)
        extra = {}
        if sym is not None:
            extra = dict(symbols=[dict(vars(info))], row_bytes=plan.row_bytes)
        profile = bool(options.get("profile") or os.environ.get("FXC_PROFILE", "0") not in ("", "0"))
        module = module_class(str(target), source,
                              [TensorSpec(v.name, spec_shape(v.shape), v.dtype) for v in graph.inputs],
                              [TensorSpec(v.name, spec_shape(v.shape), v.dtype) for v in graph.outputs],
                              [c.data for c in consts], base if sym is not None else end + scratch, steps, lines,
                              prepack_inputs=sorted(i for i, v in enumerate(graph.inputs) if v.id in graph.weights),
                              profiled=profile, intermediate_bytes=plan.total_bytes, **extra)
    if dbg >= 1:
        _log(f"[fxc] built {len(kernels)} {target.kind} kernels ({len(steps)} launches) in "
             f"{1e3 * (time.perf_counter() - t0):.1f} ms; workspace {plan.workspace_bytes} B")
    if profile and os.environ.get("FXC_PROFILE", "0") not in ("", "0"):     # FXC_PROFILE=1: a table at exit
        module.print_profile_at_exit()
    return module

