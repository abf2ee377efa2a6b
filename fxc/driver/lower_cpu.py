"""The CPU family (llvm, wasm): a plan's groups as the kernels of one LLVM module, compiled and linked.

Takes the Plan (fxc/driver/plan.py) and the target's Backend; produces its runtime module. Each group is lowered
by the CPU schedules (groups.group_kernel) and rendered into the module as soon as it is lowered, while the compile
workers compile the kernels already rendered (the backend's `compiler`: fxc.backends.llvm.compile). Groups of equal
signature share one kernel; a group equal to another but for an added input (a residual) runs that kernel with the
input left out (a null address: lowering/optional.py). The module's entry runs the plan's calls; the backend's `link`
makes it a shared library (form "library": Module, or DynamicModule with size symbols) or a .wasm module (form
"program": its program text and a plan of steps).
"""
from __future__ import annotations

import os
import time

from ..backends import libraries_of
from ..lowering.loop_ir import format_kernel
from ..lowering.optional import optional_input
from ..lowering.schedules.knobs import Chooser
from ..runtime.launch import Launch
from .groups import group_kernel, group_signature, naming, served_without_input
from .options import log
from .plan import (
    Plan,
    align64,
    prepack_inputs,
    scratch_args,
    symbolic_bytes,
    symbolic_slots,
    tensor_specs,
)
from .tuned import config_of, tuned_note


def external_step(llvm, mw, libs: dict, plan: Plan, gr, i: int, num_threads: int) -> tuple:
    """(step name, its slots, its kernel line) of group i, an external library's match: a call of the library's
    runtime `fxc_<library>_run` (dnnl: fxc/runtime/cpu/dnnl_shim.c) with the step's parameters, where the threads
    (parameter 1) and how its weights are made (parameter 2, which the library wrote as a bit mask of their operand
    positions) are filled in: 1 all constants (the library's copy of them is made once), 2 constants or made by
    the prepack step (remade after a prepack, whose last step fxc_<library>_prepack_end says so, and for another
    weight set's addresses), 0 otherwise (remade every call)."""
    name, nodes, _ = plan.external[gr.root.name]
    kind, call, operands = libs[name].lower(nodes)
    args = [plan.slots.get(v.id, ("null", 0)) for v in operands]      # (an output no one reads: none)
    step = f"fxc_{name}_{i}_{kind.split(':')[1]}"
    weights = [v for k, v in enumerate(operands) if call[2] >> k & 1]
    const = [plan.slots[v.id][0] == "const" for v in weights]
    prepacked = {v.id for g in plan.groups[:len(plan.prepack)] for v in g.outputs}
    made = 1 if all(const) else 2 if all(c or v.id in prepacked for c, v in zip(const, weights)) else 0
    llvm.add_external(mw, step, f"fxc_{name}_run", (call[0], num_threads, made, *call[3:]))
    return step, args, f"{step}: {gr.describe()}  [{kind}{list(call[3:])}: external library {name}]"


def lower_cpu(graph, plan: Plan, target, backend, dbg: int, t0: float, profile: bool, symbols: list,
              tuned: dict | None = None):
    """The runtime module of `plan` for a CPU-family target (profile: a kernel and a counter per call); tuned:
    workload key -> the tuning record whose config a group's schedules take (fxc/driver/tuned.py)."""
    llvm = backend.compiler
    num_threads = int(os.environ.get("FXC_NUM_THREADS", "0") or 0) or target.caps.threads
    ordered, first = plan.groups, len(plan.prepack)
    kernels, calls, pre_calls, lines, flops = [], [], [], [], []
    mw = llvm.module_writer(target)
    libs = {lib.name: lib for lib in libraries_of(target)} if plan.external else {}
    sigs = [None if profile or gr.root.name in plan.external else group_signature(gr)
            for gr in ordered]          # profiled: a kernel, a counter per call; an external call: its own step
    served = served_without_input(ordered, sigs, first)
    providers = {j: pos for j, pos in served.values()}
    same: dict = {}         # group signature -> kernel: groups of the same shape share one (less to compile)
    records = [config_of(tuned, gr, target, num_threads) for gr in ordered]

    def kernel_of(j):
        """The kernel of group j, its input providers[j] optional where it can be (else j leaves providers)."""
        if sigs[j] in same:
            return same[sigs[j]]
        rec = records[j]
        k = group_kernel(ordered[j], f"k{j}_{ordered[j].root.op}", num_threads, target, plan.sym_index,
                         Chooser(rec["config"]) if rec else None)
        if j in providers:
            opt = optional_input(k, k.params[len(ordered[j].outputs) + providers[j]])
            if opt is None:
                providers.pop(j)
            k = opt or k
        kernels.append(k)
        llvm.add_kernel(mw, k, queue)
        if sigs[j] is not None:
            same[sigs[j]] = k
        if dbg >= 3:
            log(format_kernel(k))
        dbg.note("loop_ir.txt", format_kernel(k))
        return k

    scratch = 0
    queue = llvm.CompileQueue(target).start()     # each kernel compiles in the workers as soon as it is rendered
    try:
        for i, gr in enumerate(ordered):
            dbg.progress.set("lowering kernels", i, len(ordered))
            if i == first and first and libs:       # the prepack's end: the libraries' copies of weights are stale
                for lib in libs.values():
                    llvm.add_external(mw, f"fxc_{lib.name}_prepack_end", f"fxc_{lib.name}_prepacked", (0,))
                    pre_calls.append((f"fxc_{lib.name}_prepack_end", []))
                    lines.append(f"fxc_{lib.name}_prepack_end: the weights packed anew ({lib.name} remakes its "
                                 f"copies)  [prepack]")
                    flops.append(0)
            if gr.root.name in plan.external:       # an external library's call (docs/byoc.md)
                step, args, line = external_step(llvm, mw, libs, plan, gr, i, num_threads)
                (pre_calls if i < first else calls).append((step, args))
                lines.append(line)
                flops.append(0)
                continue
            args = plan.args(gr)
            j, pos = served.get(sigs[i], (i, None))
            if j != i:      # the kernel of the same group with one add more, that input left out (a null address)
                kernel_of(j)
                if j in providers:      # (unless that kernel could not take the input as optional)
                    args.insert(len(gr.outputs) + pos, ("null", 0))
                else:
                    j = i
            with naming(gr, bool(plan.sym_index)):
                k = kernel_of(j)
            if any(b.name == "syms" for b in k.params):       # the symbol header (lowering/blocks.py)
                args.append(("work", "header"))
            extra, at = scratch_args(k.params, plan.end)        # scratch: after the packed weights
            args += extra
            scratch = max(scratch, at - plan.end)
            (pre_calls if i < first else calls).append((k.name, args))
            lines.append(f"{k.name}: {gr.describe()}" + ("  [prepack]" if i < first else "") + tuned_note(records[j]))
            flops.append(k.flops)
        header = align64(plan.end + scratch)
        calls, pre_calls = (symbolic_slots(c, header, plan.sym_index) for c in (calls, pre_calls))
        ir = llvm.finish_module(mw, calls, pre_calls, profile)
        if dbg >= 4:
            log(ir)
        dbg.note("source.txt", ir)
        dbg.progress.set("compiling kernels", count=lambda: (len(queue.objects), len(queue.names)))
        lib, _ = backend.link(ir, queue, target)
    finally:
        queue.close()
    if dbg >= 1:
        log(f"[fxc] built {len(kernels)} kernels in {1e3 * (time.perf_counter() - t0):.1f} ms; "
            f"workspace {plan.memory.workspace_bytes} B (unshared {plan.memory.total_bytes} B)"
            f" + packed weights {plan.end - plan.memory.workspace_bytes} B"
            f" + kernel scratch {scratch} B")
    workspace = header + 64 if plan.sym_index else plan.end + scratch
    extra = dict(symbols=symbols, sym_header=header, sym_bytes=symbolic_bytes(plan.memory.sym_bytes)) \
        if symbols else {}
    module = backend.module_class(bool(symbols))
    common = (tensor_specs(graph.inputs), tensor_specs(graph.outputs), [c.data for c in plan.consts], workspace)
    if backend.form == "library":       # a shared library this process loads: its entry runs the calls in place
        if symbols:
            extra["row_bytes"] = plan.memory.row_bytes
        return module(target.kind, str(lib), *common, lines, plan.memory.total_bytes, ir, **extra,
                      prepack_inputs=prepack_inputs(plan, graph, backend.form), plan=pre_calls + calls,
                      kernel_flops=flops, profiled=profile)
    steps = [Launch(name, list(args), (1,), (1,)) for name, args in pre_calls + calls]     # a program: its steps
    return module(str(target), backend.program(lib, bool(pre_calls), target), *common, steps, kernels=lines,
                  prepack_inputs=prepack_inputs(plan, graph, backend.form), profiled=profile, kernel_flops=flops,
                  intermediate_bytes=plan.memory.total_bytes, device=target.device, **extra)
