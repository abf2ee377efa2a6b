"""PyTorch capture: the `fxc` torch.compile backend.

Dynamo's FX graph goes through AOT autograd with core-ATen decompositions (forward and backward graphs,
parameters as live inputs); with grad mode off, straight to an ATen inference graph without AOT autograd's
runtime wrappers (inference.py). Nodes fxc supports are partitioned into subgraphs that fxc compiles
(specialised on the concrete input shapes at first call); the rest runs in eager PyTorch, and fxc says
once which op caused it. Torch tensors in, torch tensors out.

Takes Dynamo's FX graph, its example inputs and the options of torch.compile; produces the compiled callable. This
file is the entry, its options, the decompositions and the partitioning (`compile_aten_graph`); the conversion of a
partition to the graph IR is graph.py, the partition's per-call runner (`FxcSubgraph`, the weights' checks)
partition.py (their names stay importable from here), what the capture reports recorder.py, fxc.explain explain.py.
"""
from __future__ import annotations

import collections
import functools
import logging
import operator
import threading

import torch
import torch.fx
from torch._decomp import _core_aten_decompositions_post_autograd, get_decompositions
from torch._guards import TracingContext
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
from torch.fx.passes.operator_support import create_op_support

from ...backends import backend_of, check_runnable, fill
from ...driver.build import gc_paused
from ...driver.options import OPTION_NAMES, check_options, check_precision
from ...errors import FxcError
from .fused import fused_decompositions, route_rnn_calls
from .graph import _meta, _Support
from .inference import inference_graph
from .partition import FxcSubgraph
from .recorder import Explanation, GraphBreak, _record, _say_once

log = logging.getLogger("fxc")



def _warn_once(op: str, reason: str):
    _say_once(op, "fxc: %s is not supported (%s); it runs in eager PyTorch", op, reason)


# -- the backend ------------------------------------------------------------------------------------
def fxc_backend(gm: torch.fx.GraphModule, example_inputs, options: dict | None = None, **kwargs):
    """torch.compile backend entry (registered as `fxc` through the torch_dynamo_backends entry point)."""
    from torch._dynamo.backends.common import aot_autograd  # deferred: torch._dynamo is slow to import
    try:
        options = checked_options(dict(options or {}, **kwargs))
    except FxcError as e:       # the caller's own mistake: raised as itself, never as BackendCompilerFailed
        raise as_user_error(e) from None
    target = options["target"]
    backend_of(target).start()      # (llvm: the compile workers' start-up overlaps AOT autograd's tracing)

    def fw(g, ins):
        return compile_aten_graph(g, ins, options, is_forward=True)

    def bw(g, ins):
        return compile_aten_graph(g, ins, options, is_forward=False)

    _record_break(gm)
    route_rnn_calls(gm)     # nn.LSTM / GRU / RNN as one op each (fused.py)
    with gc_paused():       # AOT autograd's tracing and fxc's partitioning: see gc_paused
        inference = inference_graph(gm, example_inputs, decompositions())    # grad mode off: no AOT autograd
        if inference is not None:
            _record(lambda r: setattr(r, "inference_graphs", r.inference_graphs + 1))
            return compile_aten_graph(inference[0], example_inputs, options, static=inference[1], boxed=False)
        return aot_autograd(fw_compiler=fw, bw_compiler=bw, decompositions=decompositions())(gm, example_inputs)


def _record_break(gm) -> None:
    """Dynamo's reason for ending this graph where it did, when it is a graph break (fxc.explain lists them); an op
    Dynamo left out of its graphs (nonzero: a data-dependent shape) counts as fallen back, with that reason."""
    why = getattr(gm, "compile_subgraph_reason", None)
    if why is None or not getattr(why, "graph_break", False):
        return
    lines = [x.strip() for x in str(why.reason).splitlines() if x.strip()]
    field = lambda name: next((x.split(":", 1)[1].strip() for x in lines[1:] if x.startswith(name)), "")  # noqa: E731
    reason = lines[0] if lines else "graph break"
    if reason.startswith("generic_jump"):       # Dynamo's words for a Python `if` on a tensor's value
        reason = "data-dependent branching (a Python if on a tensor's value)"
    frame = why.user_stack[-1] if getattr(why, "user_stack", None) else None
    where = f"{frame.filename.rsplit('/', 1)[-1]}:{frame.lineno} in {frame.name} `{(frame.line or '').strip()}`" \
        if frame is not None else "?"
    brk = GraphBreak(reason, field("Explanation:"), where)
    op = field("Developer debug context:")

    def rec(r: Explanation):
        r.graph_breaks.append(brk)
        if op.startswith("aten."):
            r.fallback_ops[op] += 1
            r.fallback_reasons.setdefault(op, f"Dynamo runs it outside its graphs: {brk.detail or reason}")
    _record(rec)


def checked_options(options: dict) -> dict:
    """The options with their target parsed and filled, all checked before anything is traced: the target, parsed
    and filled once here ("llvm", "llvm -mcpu=haswell", "opencl": its device opened, a TargetError if bad), is what
    every build of this model gets. torch.compile runs what it compiles: a CPU this host is not is an error now, and
    so is a device target without its runtime or device (never a silent eager run of a model meant for a device)."""
    check_options(options, OPTION_NAMES)
    options["target"] = target = fill(options.get("target", "llvm"))
    check_runnable(target)
    check_precision(options.get("precision", "fp32"), target)
    return options


def as_user_error(e: FxcError) -> FxcError:
    """`e` (its class and message) as an exception Dynamo lets through to the caller of the compiled function.
    Dynamo wraps whatever a backend raises in BackendCompilerFailed, which `except fxc.errors.TargetError` misses,
    except its own ShortenTraceback (what BackendCompilerFailed itself derives from): the copy derives from both."""
    cls = _user_error_class(type(e))
    out = cls.__new__(cls)
    Exception.__init__(out, *e.args)
    out.first_useful_frame = None       # (ShortenTraceback's: None keeps the traceback whole)
    return out


@functools.cache
def _user_error_class(cls: type) -> type:
    from torch._dynamo.exc import ShortenTraceback  # deferred: torch._dynamo is slow to import
    return type(cls.__name__, (cls, ShortenTraceback), {"__module__": cls.__module__, "__doc__": cls.__doc__})


# ATen ops outside core ATen whose torch._decomp decomposition is exact and made only of ops fxc has
_EXTRA_DECOMPS = ("addmv", "dist", "narrow_copy", "permute_copy", "view_copy", "unbind_copy",
                  "_batch_norm_with_update", "_batch_norm_with_update_functional", "max_pool3d_with_indices",
                  "adaptive_max_pool3d")


def _take(x, index):
    """torch.take as one gather: core ATen's own decomposition indexes with a Python `[]`, which turns a
    0-d index into a data-dependent view that AOT autograd replays eagerly (nothing left to compile)."""
    return torch.ops.aten.index.Tensor(x.reshape(-1), [index])


@functools.lru_cache(maxsize=None)
def decompositions() -> dict:
    """The decomposition table of the capture: core ATen, plus `_EXTRA_DECOMPS`, plus fxc's own. Core ATen as AOT
    autograd needs it: the decompositions of non-core ops, without the entries torch.export's table adds for every
    CompositeImplicitAutograd op (AOT autograd's tracing decomposes those through their own kernels anyway);
    collecting them took 0.14 s of every process's first compile."""
    table = dict(_core_aten_decompositions_post_autograd())
    table.update(get_decompositions([getattr(torch.ops.aten, n) for n in _EXTRA_DECOMPS]))
    table[torch.ops.aten.take.default] = _take
    return keep_whole(table)


def keep_whole(table: dict) -> dict:
    """A decomposition table without the ops fxc converts whole, better than their decompositions (both captures:
    torch.compile's and fxc.from_torch's): aten._safe_softmax is one softmax kernel (ops/reduce.py), not three
    passes; and with fxc's own for PyTorch's fused module fast paths and its recurrent modules (fused.py:
    a TransformerEncoderLayer's fused op as its GEMMs, an LSTM as one op that runs a loop over time steps)."""
    table.pop(torch.ops.aten._safe_softmax.default, None)
    table.update(fused_decompositions(table))
    return table



def compile_aten_graph(gm: torch.fx.GraphModule, example_inputs, options: dict, is_forward: bool = True,
                       static: set | None = None, boxed: bool = True):
    """An ATen graph with fxc's partitions compiled: AOT autograd's boxed function, or with boxed=False the plain
    forward (the inference path, inference.py). static: the placeholders that are parameters or buffers
    (default: AOT autograd's static inputs of a forward graph)."""
    from torch._functorch.aot_autograd import make_boxed_func  # deferred: torch._functorch is slow to import

    if static is None:
        static = _static_placeholders(gm) if is_forward else set()
    views = _view_outputs(gm)
    _twin_views(gm, views)
    support = _Support(views, random=True)
    partitioner = CapabilityBasedPartitioner(gm, create_op_support(support), allows_single_node_partition=True)
    partitions = partitioner.propose_partitions()
    compiled_ops, fallback = collections.Counter(), collections.Counter()
    for node in gm.graph.nodes:
        if node.op != "call_function" or node.target is operator.getitem:
            continue
        if node in support.reasons:
            r = support.reasons[node]
            if r not in _NOT_FALLBACK:
                fallback[str(node.target)] += 1
                _warn_once(str(node.target), r)
        else:
            compiled_ops[str(node.target)] += 1
    fused = partitioner.fuse_partitions(partitions) if partitions else gm
    calls = {n.target: n for n in fused.graph.nodes if n.op == "call_module"}
    subs = []
    for name, mod in list(fused.named_children()):
        if isinstance(mod, torch.fx.GraphModule):
            args = calls[name].args if name in calls else ()
            weights = {i for i, a in enumerate(args) if isinstance(a, torch.fx.Node) and a.name in static}
            sub = FxcSubgraph(mod, options, name, weights, training=not is_forward or _saves_for_backward(gm))
            setattr(fused, name, sub)
            subs.append(sub)
    reasons = {str(n.target): r for n, r in support.reasons.items()
               if r not in _NOT_FALLBACK and n.op == "call_function"}

    def rec(r: Explanation):
        r.graphs += 1
        r.subgraphs += len(subs)
        r.compiled_ops.update(compiled_ops)
        r.fallback_ops.update(fallback)
        r.fallback_reasons.update(reasons)
        r.captured.append((fused, frozenset(static)))     # (the picture: fxc/capture/torch/drawing.py)
    _record(rec)
    fused.recompile()
    _build_early([(sub, [_meta(a) if isinstance(a, torch.fx.Node) else a for a in calls[sub.name].args])
                  for sub in subs if sub.name in calls])
    return make_boxed_func(fused.forward) if boxed else fused.forward


def _build_early(subs) -> None:
    """Start building the partitions for the argument shapes of the trace (its FakeTensors), in one thread, in
    order: their kernels lower, and compile in the LLVM worker processes, while Dynamo goes on to build its
    guards; a partition's first call with those shapes waits for its build (FxcSubgraph.forward). Partitions
    with symbolic shapes or other non-static arguments, the freeze/check modes and partitions with weight zero points
    (which read the weights' values: FxcSubgraph.baked), build at their first call instead."""
    early = [(sub, args, sub.expect(args)) for sub, args in subs if _static(args)
             and not (sub.options.get("freeze") or sub.options.get("check") or sub.baked)]
    if not early:
        return

    def run():
        for sub, args, slot in early:
            try:
                slot["entry"] = sub.compile(args)
            except Exception:       # the first call builds again, with its real arguments, and reports it
                pass
            finally:
                slot["done"].set()
    threading.Thread(target=run, name="fxc-early-build", daemon=True).start()



def _static(args) -> bool:
    """Every argument a tensor of concrete shape and strides, or a plain Python scalar."""
    for a in args:
        if isinstance(a, torch.Tensor):
            if not all(type(d) is int for d in (*a.shape, *a.stride())):
                return False
        elif type(a) not in (int, float, bool):
            return False
    return True


_NOT_FALLBACK = ("size arithmetic", "view output", "error check")


def _view_outputs(gm) -> set:
    """View ops whose result is returned (directly or through further views): they run as torch views of
    fxc's results, so outputs that alias each other (or an input) in eager alias in the compiled result too
    (AOT autograd relies on the compiled graph returning real views)."""
    out = next(n for n in reversed(gm.graph.nodes) if n.op == "output")
    keep: set = set()
    for node in reversed(gm.graph.nodes):
        if node.op == "call_function" and getattr(node.target, "is_view", False) and \
                any(u is out or u in keep for u in node.users):
            keep.add(node)
    return keep


def _twin_views(gm, views: set) -> None:
    """Give the compiled ops that read a view kept in torch (`_view_outputs`) a twin of it to read instead, made
    the same way from the twins of its own kept inputs. The kept view then only feeds the output (and other kept
    views), so it no longer cuts the compiled ops around it into separate partitions: a training graph returns the
    views AOT autograd saves for the backward, and BERT's forward was 29 partitions that way. The outputs stay
    real views."""
    twins: dict = {}

    def twin(v):
        if v not in twins:
            with gm.graph.inserting_after(v):
                t = gm.graph.call_function(v.target, *torch.fx.node.map_arg((v.args, v.kwargs),
                                                                            lambda a: twin(a) if a in views else a))
            t.meta = dict(v.meta)
            twins[v] = t
        return twins[v]
    for v in [n for n in gm.graph.nodes if n in views]:
        for u in [u for u in v.users if u.op != "output" and u not in views]:
            u.replace_input_with(v, twin(v))


def _saves_for_backward(gm) -> bool:
    """A forward graph of a training step: it returns more than the user's outputs (what AOT autograd saves for
    the backward)."""
    meta = getattr(TracingContext.try_get(), "fw_metadata", None)
    returns = getattr(meta, "num_forward", None)
    out = next(n for n in reversed(gm.graph.nodes) if n.op == "output")
    outs = out.args[0] if isinstance(out.args[0], (list, tuple)) else (out.args[0],)
    return returns is not None and len(outs) > returns


def _static_placeholders(gm) -> set:
    """Names of the placeholders that are parameters or buffers (AOT autograd's static inputs): fxc treats
    them as weights, whose derived values are computed once per weight version (fxc/relay_like/passes/hoist.py),
    or as constants under options={'freeze': True}."""
    ctx = TracingContext.try_get()
    idx = getattr(getattr(ctx, "fw_metadata", None), "static_input_indices", None) or ()
    placeholders = [n.name for n in gm.graph.nodes if n.op == "placeholder"]
    return {placeholders[i] for i in idx if i < len(placeholders)}

