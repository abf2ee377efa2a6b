"""The compiler driver: `build(graph, target, **options)` makes a graph IR a runtime module, the same way for
every target; everything the target decides is found through its backend (fxc.backends.BACKENDS).

    graph -> the graph passes and plan steps (hoisting, fusion, prepack split, memory plan: relay_like.pipeline)
    with the context the target and options make (options.pass_context) -> the plan: slots, offsets, symbol
    header (plan.py) -> the groups lowered by the target's family, "cpu" (lower_cpu.py: one LLVM module, linked)
    or "gpu" (lower_gpu.py: launches of one rendered program) -> the backend's runtime module.
"""
from __future__ import annotations

import contextlib
import gc
import threading
import time
import warnings

from ..backends import backend_of, fill
from ..errors import LoweringError, TargetError
from ..relay_like.passes import describe_partition
from ..relay_like.pipeline import plan_graph, run_passes
from ..runtime.cpu.module import Module
from ..runtime.tensors import TensorSpec
from ..symbolic.expr import facts
from ..target import Target
from ..tuning.workload import threads_of
from .cache import cacheable, load_module, module_key, store_module
from .debug import Debug, plan_text
from .groups import stats
from .lower_cpu import lower_cpu
from .lower_gpu import lower_gpu
from .offload import offload_cost
from .options import check_precision, debug_level, log, pass_context, profiled
from .plan import make_plan
from .progress import Progress
from .tuned import graph_knob, log_path, tuned_digest, tuned_records

LOWER = {"cpu": lower_cpu, "gpu": lower_gpu}        # a backend's family -> how its groups become a module


def build(graph, target: "str | Target" = "llvm", **options) -> Module:
    """Compile a graph for `target`; returns a runtime Module (numpy/pointer callable).

    target: a `fxc.target.Target` (as the entry point parsed and filled it) or its string: "llvm" (this CPU), "llvm
    -mcpu=haswell", "llvm -mcpu=x86-64-v2 -mattr=+avx2", "opencl -device=1", "opengl", "webgl", "webgpu", "wasm".
    Code for a CPU this host is not builds (and exports); running it raises TargetError.
    Options (fxc/driver/options.py): debug (level, or FXC_DEBUG), fuse (default True), profile (or FXC_PROFILE=1:
    time every kernel call; `Module.profile()` returns the per-kernel table), precision ("fp32", default; "bf16":
    convs and matmuls over weights take bfloat16 operands and accumulate in float32, on CPUs with AVX-512 BF16),
    weights_vary (the weight inputs change on every call, as in a training step, so their transforms are redone
    every call: passes/use_winograd.py)."""
    target = Target.parse(target)       # a Target passes as it is
    backend = backend_of(target)
    stats["builds"] += 1
    check_precision(options.get("precision", "fp32"), target, backend.family)
    target = fill(target)               # its device opened and its Caps filled (once: an entry point's stay)
    check_half_floats(graph, target)
    with gc_paused(), facts(getattr(graph, "symbols", {})):     # the symbols' ranges order symbolic dims
        module = _cached_build(graph, target, backend, options)
    module.target_spec = str(target)
    try:
        backend.check_runnable(target)
    except TargetError as e:            # built (and exportable); its calls raise this before any kernel runs
        module.unrunnable = str(e)
    return module


def check_half_floats(graph, target: Target) -> None:
    """A graph with float16 / bfloat16 tensors builds only for a target whose Caps has those dtypes (stored in 16
    bits, computed in float32 inside the kernels); elsewhere (GL, WebGL, WebGPU, wasm's float16) a LoweringError names
    the missing dtype, and torch.compile runs the graph in eager PyTorch with that reason."""
    values = list(graph.inputs) + [o for n in graph.nodes for o in n.outputs]
    for dt in ("float16", "bfloat16"):
        v = next((v for v in values if v.dtype == dt), None)
        if v is not None and dt not in target.caps.dtypes:
            raise LoweringError(f"tensor {v.name} is {dt}, and the {target.kind} target has no {dt} (its "
                                f"Caps.dtypes: {', '.join(sorted(target.caps.dtypes))}); compile the model in "
                                f"float32 (model.float(), no autocast) for {target.kind}, or choose a target with "
                                f"{dt}: llvm, opencl")


def _cached_build(graph, target: Target, backend, options: dict) -> Module:
    dbg = Debug(debug_level(options), target.kind)       # (with FXC_DEBUG_DIR, its folder: driver/debug.py)
    t0 = time.perf_counter()
    symbolic = any(v.type.symbolic for v in graph.inputs)       # (the module cache keeps static modules only)
    tuned = tuned_records(options, target)                      # the tuning log's best configs for this target
    key = module_key(graph, target, options, tuned_digest(tuned)) \
        if cacheable(dbg) and dbg.folder is None and backend.cached_modules and not symbolic else None
    if key is not None:
        module = load_module(key, lambda: _consts(graph, target, backend, dbg, options))
        if module is not None:
            module.inputs = [TensorSpec(v.name, v.shape, v.dtype) for v in graph.inputs]
            module.outputs = [TensorSpec(v.name, v.shape, v.dtype) for v in graph.outputs]
            if dbg >= 1:
                log(f"[fxc] module from the cache in {1e3 * (time.perf_counter() - t0):.1f} ms ({key[:12]}); "
                    f"FXC_DEBUG=2 or FXC_MODULE_CACHE=0 builds it again, showing the passes")
            return module
    dbg.progress = Progress(target.kind)     # (a line on a terminal while a long build runs: driver/progress.py)
    try:
        module = _build(graph, target, backend, dbg, t0, options, tuned)
    finally:
        dbg.progress.close()
    dbg.write(module, str(target), time.perf_counter() - t0)
    if key is not None:
        try:
            store_module(key, module)
        except OSError as e:            # a read-only or full cache only costs the next process time
            log(f"[fxc] warning: could not cache the module: {e}")
    return module


def _build(graph, target: Target, backend, dbg: Debug, t0: float, options: dict, tuned: dict) -> Module:
    """Passes, plan steps, the plan, and the target family's lowering of it (each group with its tuned config)."""
    backend.start()         # (the LLVM compile workers start while the passes run)
    symbols = dict(getattr(graph, "symbols", {}))
    warned = []

    def warn(w: Warning):   # shown now, and kept with the module: one from the cache shows it again (cache.py)
        warned.append([type(w).__name__, str(w)])
        warnings.warn(w, stacklevel=4)

    ctx = pass_context(target, options, dbg, offload_cost(target, build, log_path(options)) if target.libs else None,
                       knob=graph_knob(tuned, target, threads_of(target)), warn=warn)
    dbg.progress.set("graph passes")
    dbg.note("graph_00_input.txt", str(graph))
    graph = run_passes(graph, ctx)
    planned = plan_graph(graph, ctx)
    dbg.note("plan.txt", plan_text(planned))
    dbg.progress.set("planning")
    plan = make_plan(planned, backend.family, target.caps, target.kind)
    module = LOWER[backend.family](graph, plan, target, backend, dbg, t0, profiled(options), plan.symbols(symbols),
                                   tuned)
    module.offload = describe_partition(planned)        # the -libs= regions and reasons (fxc.explain)
    module.warned = warned
    return module


def _consts(graph, target: Target, backend, dbg: int, options: dict) -> list:
    """The constants a build of `graph` gives its module (the passes and the plan only: for a cache entry too large
    to hold them, fxc/driver/cache.py)."""
    ctx = pass_context(target, options, dbg, warn=lambda w: None)      # (the entry shows the build's warnings)
    return [c.data for c in make_plan(plan_graph(run_passes(graph, ctx), ctx), backend.family, target.caps,
                                      target.kind).consts]


_gc_pauses = {"depth": 0, "was": False}
_gc_lock = threading.Lock()


@contextlib.contextmanager
def gc_paused():
    """Python's cyclic garbage collector off for the duration (as it was before, after the last of the pauses
    that overlap, in any threads). A compile allocates hundreds of thousands of objects; each full collection then
    walks the whole heap, torch's included (0.1-0.2 s a time here). What the compile leaves behind is freed by
    reference counting or by the next collection."""
    with _gc_lock:
        if _gc_pauses["depth"] == 0:
            _gc_pauses["was"] = gc.isenabled()
            gc.disable()
        _gc_pauses["depth"] += 1
    try:
        yield
    finally:
        with _gc_lock:
            _gc_pauses["depth"] -= 1
            if _gc_pauses["depth"] == 0 and _gc_pauses["was"]:
                gc.enable()
