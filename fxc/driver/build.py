"""The compiler driver: graph IR -> graph passes -> fusion -> lowering -> backend -> runtime Module."""
from __future__ import annotations

import collections
import contextlib
import gc
import math
import os
import sys
import threading
import time

from ..errors import LoweringError, TargetError
from ..lowering import te
from ..lowering.expr import ITEMSIZE
from ..lowering.loop_ir import Buffer, format_kernel
from ..lowering.lower import lower_group
from ..lowering.optional import optional_input
from ..lowering.sym import SymInfo, facts
from ..ops.registry import get_op
from ..relay_like.passes.fuse_ops import fuse_ops
from ..relay_like.passes.hoist import hoisted_values
from ..relay_like.passes.plan_memory import output_sources, plan_memory, reshape_views
from ..relay_like.pipeline import run_pipeline
from ..runtime.cpu.dynamic import DynamicModule
from ..runtime.cpu.module import Module
from ..runtime.tensors import TensorSpec
from ..target import Target
from .cache import graph_fingerprint, load_module, source_fingerprint, store_module

TARGETS = ("llvm",)


def debug_level(options: dict) -> int:
    return int(options.get("debug", 0) or os.environ.get("FXC_DEBUG", "0") or 0)


def _log(msg):
    print(msg, file=sys.stderr)


def group_signature(gr, drop=None) -> str:
    """What group_kernel's code depends on: the ops, their attributes, wiring and types (not the values of
    constants, which are read through pointers). Groups with equal signatures compile to the same kernel.
    drop: (an `add` node of the group, its operand that is a group input): the signature of the group without
    that add (its users reading its other operand) and without that input."""
    node, gone = drop or (None, None)
    ref = {v.id: f"in{k}:{v.type!r}" for k, v in enumerate(v for v in gr.inputs if v is not gone)}
    parts = []
    for n in gr.nodes:
        if n is node:
            ref[n.outputs[0].id] = ref[n.inputs[1 if n.inputs[0] is gone else 0].id]
            continue
        parts.append(f"{n.op}({','.join(ref[v.id] for v in n.inputs)}){sorted(n.attrs.items())!r}")
        for k, o in enumerate(n.outputs):
            ref[o.id] = f"n{len(parts) - 1}.{k}:{o.type!r}"
    return ";".join(parts) + " -> " + ",".join(ref[o.id] for o in gr.outputs)


def optional_add(gr):
    """(node, input) when the group adds one of its inputs, read nowhere else in it, at full size to a value it
    computes (a residual): the same group without that add can run this group's kernel with the input left out
    (lowering/optional.py)."""
    inner = {o.id for n in gr.nodes for o in n.outputs}
    for n in gr.nodes[1:]:
        if n.op != "add" or len(n.inputs) != 2:
            continue
        for v, other in ((n.inputs[1], n.inputs[0]), (n.inputs[0], n.inputs[1])):
            if v.id not in inner and other.id in inner and v.type == n.outputs[0].type \
                    and sum(v is x for m in gr.nodes for x in m.inputs) == 1:
                return n, v
    return None


def _served_without_input(groups, sigs, first: int) -> dict:
    """signature -> (index of the group whose kernel runs it, position of the input it leaves out): groups from
    `first` on whose signature is another's with its add of an input dropped (optional_add)."""
    index: dict = {}
    for i, s in enumerate(sigs):
        index.setdefault(s, i)
    served = {}
    for j in range(first, len(groups)):
        d = optional_add(groups[j]) if sigs[j] is not None else None
        if d is None:
            continue
        plain = group_signature(groups[j], d)
        if index.get(plain, -1) >= first and plain not in served:
            served[plain] = (j, next(q for q, v in enumerate(groups[j].inputs) if v is d[1]))
    return {s: p for s, p in served.items() if sigs[p[0]] not in served}       # no chains


def group_tensors(gr, env: dict | None = None, tensors: dict | None = None) -> tuple:
    """The tensor expressions of one fused group: (roots, output buffers, input placeholder -> buffer), what a
    lowering (CPU: lower_group; devices: lower_group_device) takes. env: {symbol name: int}, the sizes at which a
    group with symbolic dims is built (static shapes and attributes); tensors: filled with Value id -> te.Tensor."""
    from ..lowering.sym import evaluate, substitute_attr

    def shape(v):
        return v.shape if env is None else tuple(evaluate(d, env) for d in v.shape)

    tensors = {} if tensors is None else tensors
    in_bufs = {}
    for k, v in enumerate(gr.inputs):
        t = te.placeholder(shape(v), v.dtype, f"in{k}")
        tensors[v.id] = t
        in_bufs[t] = Buffer(f"in{k}", v.dtype, math.prod(t.shape))
    for n in gr.nodes:
        attrs = n.attrs if env is None else {k: substitute_attr(a, env) for k, a in n.attrs.items()}
        res = get_op(n.op).compute(*[tensors[v.id] for v in n.inputs], **attrs)
        res = res if isinstance(res, (list, tuple)) else [res]
        for o, t in zip(n.outputs, res):
            tensors[o.id] = t
    roots = [tensors[o.id] for o in gr.outputs]
    out_bufs = [Buffer(f"out{k}", o.dtype, o.type.numel) for k, o in enumerate(gr.outputs)]
    return roots, out_bufs, in_bufs


def group_kernel(gr, name: str, num_threads: int, target: Target | None = None, sym_index: dict | None = None):
    """Tensor expressions for one fused group, lowered to a loop-IR Kernel. A group with symbolic rows becomes a
    row-block kernel (lowering/blocks.py), any other symbolic group loops over its symbolic extents
    (lowering/sym_loops.py); sym_index: symbol name -> its slot in the symbol header."""
    from ..lowering.blocks import group_symbols, lower_rows
    from ..lowering.sym_loops import lower_symbolic
    caps = Target.parse(target).caps
    if not group_symbols(gr):
        return lower_group(name, *group_tensors(gr), num_threads, caps=caps)

    def tensors_at(env):
        tensors: dict = {}
        roots, _, in_bufs = group_tensors(gr, env, tensors)
        return roots, list(in_bufs), tensors
    try:                                            # rows of one symbol or of a product (batch x sequence)
        kernel = lower_rows(gr, name, tensors_at, num_threads, caps, sym_index or {})
        stats["row_block_kernels"] += 1
        return kernel
    except (LoweringError, TypeError) as e:         # not rows: loops over the symbolic extents (sym_loops.py)
        if debug_level({}) >= 2:
            _log(f"[fxc] {name}: symbolic loops ({e})")
    stats["symbolic_loop_kernels"] += 1
    return lower_symbolic(name, *group_tensors(gr), caps, sym_index)


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


def build(graph, target: "str | Target" = "llvm", **options) -> Module:
    """Compile a graph for `target`; returns a runtime Module (numpy/pointer callable).

    target: a `fxc.target.Target` or its string: "llvm" (this CPU), "llvm -mcpu=haswell", "llvm -mcpu=x86-64-v2
    -mattr=+avx2", ... Code for a CPU this host is not builds (and exports); running it raises TargetError.
    Options: debug (level, or FXC_DEBUG), fuse (default True), profile (or FXC_PROFILE=1: time every
    kernel call; `Module.profile()` returns the per-kernel table), precision ("fp32", default; "bf16": convs and
    matmuls over weights take bfloat16 operands and accumulate in float32, on CPUs with AVX-512 BF16),
    weights_vary (the weight inputs change on every call, as in a training step, so their transforms are redone
    every call: passes/use_winograd.py). A device target ("opencl", "opencl -device=1") builds through
    fxc.driver.build_device."""
    target = Target.parse(target)
    stats["builds"] += 1
    if not target.is_cpu:           # every device target: one dispatch, no backend named here
        from .build_device import build_device
        return build_device(graph, target, **options)
    check_precision(options.get("precision", "fp32"), target)
    with gc_paused(), facts(getattr(graph, "symbols", {})):     # the symbols' ranges order symbolic dims
        module = _cached_build(graph, target, **options)
    module.target_spec = str(target)
    try:
        target.check_runnable()
    except TargetError as e:            # built (and exportable); its calls raise this before any kernel runs
        module.unrunnable = str(e)
    return module


def _cached_build(graph, target: Target, **options) -> Module:
    dbg = debug_level(options)
    t0 = time.perf_counter()
    symbolic = any(v.type.symbolic for v in graph.inputs)       # (the module cache keeps static modules only)
    key = _module_key(graph, target, options) if _cacheable(dbg) and target.kind == "llvm" and not symbolic \
        else None                                              # wasm: its parts are cached

    if key is not None:
        module = load_module(key)
        if module is not None:
            module.inputs = [TensorSpec(v.name, v.shape, v.dtype) for v in graph.inputs]
            module.outputs = [TensorSpec(v.name, v.shape, v.dtype) for v in graph.outputs]
            if dbg >= 1:
                _log(f"[fxc] module from the cache in {1e3 * (time.perf_counter() - t0):.1f} ms ({key[:12]})")
            return module
    module = _build(graph, target, dbg, t0, **options)
    if key is not None:
        try:
            store_module(key, module)
        except OSError as e:            # a read-only or full cache only costs the next process time
            _log(f"[fxc] warning: could not cache the module: {e}")
    return module


def check_precision(precision: str, target: "str | Target | None" = None):
    """A known precision the target CPU can run (bf16 needs AVX-512 BF16: vdpbf16ps). Without it bf16 is a
    TargetError rather than emulated: two FMAs per bf16 pair plus the unpacking do no fewer multiply-adds than
    float32 and round more."""
    from ..relay_like.pipeline import PRECISIONS
    if precision not in PRECISIONS:
        raise TargetError(f"unknown precision {precision!r}; valid: {', '.join(map(repr, PRECISIONS))}")
    target = Target.parse(target)
    if precision == "bf16" and not target.caps.has("avx512bf16"):
        raise TargetError(f"precision='bf16' needs a CPU with AVX-512 BF16 (vdpbf16ps); target '{target}' "
                          f"({target.mcpu}) lacks it: use precision='fp32', or a target such as "
                          f"'llvm -mcpu=sapphirerapids' for a CPU that has it")


WINOGRAD = ("auto", "off", "all")
BF16 = ("auto", "all", "weight_bound")
# the options build() takes besides target (the frontends check their users' options against these)
BUILD_OPTIONS = frozenset({"debug", "fuse", "profile", "precision", "winograd", "blocked_layout", "bf16"})


def layout_choices(options: dict) -> dict:
    """The build options that switch a CPU layout pass, for measuring one choice against its absence:
    winograd ("auto": where it pays, the default; "off": direct convs only; "all": every eligible conv) and
    blocked_layout (True, the default; False: NCHW everywhere). An unknown value is an FxcError naming the valid."""
    from ..errors import FxcError
    winograd, blocked = options.get("winograd", "auto"), options.get("blocked_layout", True)
    if winograd not in WINOGRAD:
        raise FxcError(f"unknown winograd={winograd!r}; valid: {', '.join(map(repr, WINOGRAD))}")
    if not isinstance(blocked, bool):
        raise FxcError(f"blocked_layout={blocked!r}: give True or False")
    return dict(winograd=winograd, blocked_layout=blocked)


def check_build_options(options: dict) -> None:
    """Every build option's value checked up front (torch.compile's backend, before Dynamo traces anything): an
    FxcError naming the option and its valid values."""
    layout_choices(options)
    bf16_mode(options)


def bf16_mode(options: dict) -> str:
    """The bf16 build option (used with precision="bf16"): "auto" (the default: bf16 everywhere where this CPU's
    vdpbf16ps beats its FMAs, else only on weight-streaming ops), "all" or "weight_bound". An unknown value is an
    FxcError naming the valid ones."""
    from ..errors import FxcError
    mode = options.get("bf16", "auto")
    if mode not in BF16:
        raise FxcError(f"unknown bf16={mode!r}; valid: {', '.join(map(repr, BF16))} (with precision='bf16')")
    return mode


def bf16_everywhere(target: "Target | None" = None, mode: str = "auto") -> bool:
    """With precision="bf16": bf16 on every conv/matmul over weights where vdpbf16ps beats FMAs per multiply-add on
    the target CPU (measured once on this host when it runs the target, backends/llvm_probe.py; a CPU it cannot run
    counts as not faster), or with the build option bf16="all"; else (and with bf16="weight_bound") only on those
    that stream their weight."""
    return mode == "all" or (mode != "weight_bound" and _bf16_gain(target) >= 1.0)


def _bf16_gain(target: "Target | None") -> float:
    from ..backends.llvm.probe import bf16_dot_gain
    target = Target.parse(target)
    if target.mcpu != Target.parse("llvm").mcpu or not target.caps.has("avx512bf16"):
        return 0.0      # measured only for this host's own CPU
    return bf16_dot_gain()


BF16_FAST_GAIN = 1.5    # vdpbf16ps multiply-adds per FMA's from which a bf16 direct conv outruns float32 Winograd


def bf16_direct_fast(target: "Target | None" = None) -> bool:
    """A bf16 direct conv runs at about twice the float32 rate on the target (measured, backends/llvm_probe.py):
    where bf16 is used everywhere, Winograd (float32) then keeps only the large maps where it still wins
    (passes/use_winograd.py)."""
    return _bf16_gain(target) >= BF16_FAST_GAIN


def _cacheable(dbg: int) -> bool:
    """Modules come from the on-disk cache unless FXC_MODULE_CACHE=0, debug >= 2 (which shows the passes) or
    an op of the graph was replaced at run time (a test's deliberately broken kernel)."""
    from ..ops.registry import as_registered
    return (dbg < 2 and os.environ.get("FXC_MODULE_CACHE", "1") != "0"
            and as_registered())


def _module_key(graph, target: Target, options: dict) -> str:
    """Everything a built module depends on: fxc's source, the graph, the target (its CPU, features and threads,
    not the host's), the options and fxc's environment variables (FXC_NUM_THREADS)."""
    import hashlib
    env = sorted((k, v) for k, v in os.environ.items()
                 if k.startswith("FXC_") and k not in ("FXC_CACHE_DIR", "FXC_DEBUG"))
    opts = sorted((k, repr(v)) for k, v in options.items() if k != "debug")
    parts = [source_fingerprint(), str(target), target.machine_key, repr(env), repr(opts),
             str(target.caps.threads), graph_fingerprint(graph)]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


stats = collections.Counter()     # "builds": how many graphs went through the compiler (tests count them); symbolic
                                  # groups lowered as "row_block_kernels" or "symbolic_loop_kernels"


SYM_HEADER_SLOTS = 8        # the symbol header: 64 bytes, one int64 per symbol


def symbol_slots(graph) -> dict:
    """Symbol name -> its slot in the workspace's symbol header: the symbols of the graph's input shapes (at most
    SYM_HEADER_SLOTS; CompileError otherwise)."""
    from ..errors import CompileError
    from ..lowering.sym import symbols_of
    names = sorted({s.name for v in graph.inputs for d in v.shape for s in symbols_of(d)})
    if len(names) > SYM_HEADER_SLOTS:
        raise CompileError(f"inputs with {len(names)} size symbols ({', '.join(names)}); at most "
                           f"{SYM_HEADER_SLOTS} are supported: make some dimensions static")
    return {n: k for k, n in enumerate(names)}


def symbolic_slots(calls: list, header: int, sym_index: dict) -> list:
    """The plan's calls with the symbolic slots resolved: ("work", "header") -> the header's offset; ("work",
    ("sym", offset polynomial)) -> ("work", (base, header byte of the symbol, per)) for base + symbol x per, or
    ("work", (base, ((coefficient, (header bytes of the monomial's symbols)), ...))) for a polynomial (several
    symbols, s x s): the symbolic region starts after the header."""
    from ..lowering.sym import _poly
    if not sym_index:
        return calls

    def slot(a):
        if a[0] == "work" and a[1] == "header":
            return ("work", header)
        if a[0] == "work" and isinstance(a[1], tuple):
            p = _poly(a[1][1])
            base = header + 64 + p.pop((), 0)
            terms = tuple((c, tuple(header + 8 * sym_index[x.name] for x in m)) for m, c in p.items())
            if not terms:
                return ("work", base)
            if len(terms) == 1 and len(terms[0][1]) == 1:
                return ("work", (base, terms[0][1][0], terms[0][0]))
            return ("work", (base, terms))
        return a
    return [(name, [slot(a) for a in args]) for name, args in calls]


def symbolic_bytes(size) -> list:
    """A symbolic region's size as [[coefficient, [symbol names]], ...] (the runtime's sum of products)."""
    from ..lowering.sym import _poly
    return [[c, [x.name for x in m]] for m, c in _poly(size).items()]


def spec_shape(shape) -> tuple:
    """A graph shape as the runtime's TensorSpec shape: ints, and '4*s0'-style text for symbolic dims."""
    from ..lowering.sym import dim_text
    return tuple(d if isinstance(d, int) else dim_text(d) for d in shape)


def _build(graph, target: Target, dbg: int, t0: float, **options) -> Module:
    from ..backends.llvm import compile as llvm
    llvm.start_workers()
    infos = dict(getattr(graph, "symbols", {}))
    precision, mode = options.get("precision", "fp32"), bf16_mode(options)
    everywhere = precision == "bf16" and bf16_everywhere(target, mode)
    graph = run_pipeline(graph, dbg, _log, precision, everywhere, everywhere and bf16_direct_fast(target),
                         bool(options.get("weights_vary")), target, **layout_choices(options))
    hoisted = hoisted_values(graph)
    groups = fuse_ops(graph, enable=options.get("fuse", True), hoisted=hoisted)
    # what depends on weights only (packing, batch-norm scales, ...) runs as a separate, cached prepack
    # step; its results live after the planned workspace, untouched by the main plan
    out_ids = {v.id for v in graph.outputs}
    prepack = [gr for gr in groups if all(o.id in hoisted and o.id not in out_ids for o in gr.outputs)]
    main = [gr for gr in groups if all(gr is not p for p in prepack)]
    packed_views = reshape_views(prepack, out_ids)      # a weight's reshape (a batch norm's scale): no copy either
    prepack = [gr for gr in prepack if gr.outputs[0].id not in packed_views]
    views = reshape_views(main, out_ids)
    main = [gr for gr in main if gr.outputs[0].id not in views]
    into_out = output_sources(main, graph.outputs, views)
    main = [gr for gr in main
            if not (gr.root.op == "reshape" and len(gr.nodes) == 1 and gr.root.inputs[0].id in into_out)]
    plan = plan_memory(main, graph.outputs, views, set(into_out))
    sym_index = symbol_slots(graph)
    packed_offsets, end = {}, plan.workspace_bytes
    for gr in prepack:
        for v in gr.outputs:
            packed_offsets[v.id] = end
            end += (max(v.type.numel * ITEMSIZE[v.dtype], 1) + 63) // 64 * 64
    num_threads = int(os.environ.get("FXC_NUM_THREADS", "0") or 0) or target.caps.threads
    slots = {v.id: ("in", i) for i, v in enumerate(graph.inputs)}
    consts = graph.constants()
    slots.update({v.id: ("const", i) for i, v in enumerate(consts)})
    slots.update({v.id: ("out", i) for i, v in enumerate(graph.outputs)})
    slots.update({vid: ("out", i) for vid, i in into_out.items()})
    slots.update({vid: ("work", off) for vid, off in plan.offsets.items()})
    slots.update({vid: ("work", ("sym", off)) for vid, off in plan.sym_offsets.items()})
    slots.update({vid: ("work", off) for vid, off in packed_offsets.items()})
    slots.update({vid: slots[src.id] for vid, src in packed_views.items()})
    slots.update({vid: slots[src.id] for vid, src in views.items()})
    profile = bool(options.get("profile") or os.environ.get("FXC_PROFILE", "0") not in ("", "0"))
    kernels, calls, pre_calls, lines, flops = [], [], [], [], []
    mw = llvm.module_writer(target)
    ordered = prepack + main
    sigs = [None if profile else group_signature(gr) for gr in ordered]   # profiled: a kernel, a counter per call
    served = _served_without_input(ordered, sigs, len(prepack))
    providers = {j: pos for j, pos in served.values()}
    same: dict = {}         # group signature -> kernel: groups of the same shape share one (less to compile)

    def kernel_of(j):
        """The kernel of group j, its input providers[j] optional where it can be (else j leaves providers)."""
        if sigs[j] in same:
            return same[sigs[j]]
        k = group_kernel(ordered[j], f"k{j}_{ordered[j].root.op}", num_threads, target, sym_index)
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
            _log(format_kernel(k))
        return k

    scratch = 0
    queue = llvm.CompileQueue(target).start()     # each kernel compiles in the workers as soon as it is rendered
    try:
        for i, gr in enumerate(ordered):
            args = [slots[v.id] for v in gr.outputs] + [slots[v.id] for v in gr.inputs]
            j, pos = served.get(sigs[i], (i, None))
            if j != i:      # the kernel of the same group with one add more, that input left out (a null address)
                kernel_of(j)
                if j in providers:      # (unless that kernel could not take the input as optional)
                    args.insert(len(gr.outputs) + pos, ("null", 0))
                else:
                    j = i
            k = kernel_of(j)
            if any(b.name == "syms" for b in k.params):       # the symbol header (lowering/blocks.py)
                args.append(("work", "header"))
            at = end            # scratch: after the packed weights, shared by the kernels (they run one at a time)
            for b in k.params:
                if b.scope == "scratch":
                    args.append(("work", at))
                    at += (b.nbytes + 63) // 64 * 64
            scratch = max(scratch, at - end)
            (pre_calls if i < len(prepack) else calls).append((k.name, args))
            lines.append(f"{k.name}: {gr.describe()}" + ("  [prepack]" if i < len(prepack) else ""))
            flops.append(k.flops)
        header = (end + scratch + 63) // 64 * 64
        calls, pre_calls = (symbolic_slots(c, header, sym_index) for c in (calls, pre_calls))
        ir = llvm.finish_module(mw, calls, pre_calls, profile)
        if dbg >= 4:
            _log(ir)
        lib, _ = _link(target)(ir, queue, target)
    finally:
        queue.close()
    if dbg >= 1:
        _log(f"[fxc] built {len(kernels)} kernels in {1e3 * (time.perf_counter() - t0):.1f} ms; "
             f"workspace {plan.workspace_bytes} B (unshared {plan.total_bytes} B)"
             f" + packed weights {end - plan.workspace_bytes} B"
             f" + kernel scratch {scratch} B")
    symbols = [dict(vars(infos.get(n) or SymInfo(n))) for n in sym_index]
    extra = dict(symbols=symbols, sym_header=header, sym_bytes=symbolic_bytes(plan.sym_bytes)) if symbols else {}
    if target.kind == "wasm":
        if symbols and not target.caps.dynamic_rows:
            raise LoweringError(f"symbolic sizes on the {target.kind} target: its plan runtime takes no symbolic "
                                f"offsets, so it builds per size")
        return _wasm_module(graph, target, lib, consts, header + 64 if sym_index else end + scratch, lines,
                            plan.total_bytes, pre_calls, calls, flops, profile, **extra)
    if symbols:
        extra["row_bytes"] = plan.row_bytes
    return (DynamicModule if symbols else Module)(target.kind, str(lib),
                  [TensorSpec(v.name, spec_shape(v.shape), v.dtype) for v in graph.inputs],
                  [TensorSpec(v.name, spec_shape(v.shape), v.dtype) for v in graph.outputs],
                  [c.data for c in consts], header + 64 if sym_index else end + scratch,
                  lines, plan.total_bytes, ir, **extra,
                  prepack_inputs=sorted({slots[v.id][1] for gr in prepack for v in gr.inputs
                                         if slots[v.id][0] == "in"}),
                  plan=pre_calls + calls, kernel_flops=flops, profiled=profile)


def _link(target: Target):
    """The step that makes the kernels' objects one loadable unit: a shared library (llvm), a .wasm module (wasm)."""
    if target.kind == "wasm":
        from ..backends.wasm import build_wasm
        return build_wasm
    from ..backends.llvm.compile import build_library
    return build_library


def _wasm_module(graph, target: Target, wasm: bytes, consts, workspace: int, lines, intermediate: int, pre_calls, calls,
                 flops, profile: bool, **symbolic):
    """The runtime module of a wasm build: the .wasm module and its plan (for explain and export), run in a browser
    page; the weights stay in the page between calls (resident), and are packed again only when they change. With
    size symbols (`symbolic`: symbols, sym_header, sym_bytes) the page sizes its buffers and writes the symbols'
    values into the workspace header per call, as the llvm runtime does."""
    from ..backends.wasm import MEMORY_PAGES
    from ..runtime.browser.wasm import WasmModule, program_text
    from ..runtime.plan import Launch
    plan = [Launch(name, list(args), (1,), (1,)) for name, args in pre_calls + calls]
    return WasmModule(str(target), program_text(wasm, bool(pre_calls), target.caps.threads, MEMORY_PAGES),
                      [TensorSpec(v.name, spec_shape(v.shape), v.dtype) for v in graph.inputs],
                      [TensorSpec(v.name, spec_shape(v.shape), v.dtype) for v in graph.outputs],
                      [c.data for c in consts], workspace, plan, kernels=lines,
                      prepack_inputs=sorted(i for i, v in enumerate(graph.inputs) if v.id in graph.weights),
                      profiled=profile, kernel_flops=flops, intermediate_bytes=intermediate, **symbolic)


def wasm_group_entries(groups: list, target="wasm") -> tuple:
    """Fused groups another browser target cannot express (webgl, webgpu), compiled to one wasm module with one
    entry per group, `fxc_group<i>(inputs, outputs, consts, work)`: the addresses of the group's inputs and outputs
    in the module's memory, consts unused, work a scratch area of scratch[i] bytes (fxc.backends.wasm.build_entries).
    Returns (the .wasm's bytes, [entry names], [scratch bytes per group])."""
    from ..backends.wasm import build_entries
    target = Target.parse(target)
    entries, scratch = [], []
    for i, gr in enumerate(groups):
        k = group_kernel(gr, f"k{i}_{gr.root.op}", 1, target)
        args = [("out", j) for j in range(len(gr.outputs))] + [("in", j) for j in range(len(gr.inputs))]
        at = 0
        for b in k.params:
            if b.scope == "scratch":
                args.append(("work", at))
                at += (b.nbytes + 63) // 64 * 64
        entries.append((f"fxc_group{i}", k, args))
        scratch.append(at)
    return build_entries(entries, target), [name for name, _, _ in entries], scratch
