"""PyTorch capture: the `fxc` torch.compile backend.

Dynamo's FX graph goes through AOT autograd with core-ATen decompositions (forward and backward graphs,
parameters as live inputs); with grad mode off, straight to an ATen inference graph without AOT autograd's
runtime wrappers (torch_inference.py). Nodes fxc supports are partitioned into subgraphs that fxc compiles
(specialised on the concrete input shapes at first call); the rest runs in eager PyTorch, and fxc says
once which op caused it. Torch tensors in, torch tensors out.
"""
from __future__ import annotations

import collections
import functools
import logging
import operator
import threading

import torch
import torch.fx

from ..build import BUILD_OPTIONS
from ..errors import FxcError, InputError, UnsupportedOpError
from ..ops.complex import REAL_OF, Complex, complex_table, is_complex_call
from ..ops.registry import aten_table, get_op
from ..relay_like.builder import Builder
from ..relay_like.graph import Value
from ..runtime.cpu import pointer_array

# re-exported: fxc.capture.torch.explain, .Explanation, .recording, ._recorders (one list) stay valid
from .explain import Explanation, _record, _recorders, explain, recording, uncaptured_rnn_notes  # noqa: F401
from .torch_symbolic import symbolic_tries
from .torch_weights import WeightSampler

log = logging.getLogger("fxc")

TORCH_DTYPES = {torch.float32: "float32", torch.float64: "float64", torch.int64: "int64", torch.int32: "int32",
                torch.int16: "int16", torch.int8: "int8", torch.uint8: "uint8", torch.bool: "bool",
                torch.float16: "float16", torch.bfloat16: "bfloat16",
                torch.complex32: "complex32", torch.complex64: "complex64", torch.complex128: "complex128"}
FROM_STR = {v: k for k, v in TORCH_DTYPES.items()}
SUPPORTED_DTYPES = {"float32", "float64", "int64", "int32", "int16", "int8", "uint8", "bool", "float16", "bfloat16",
                    "complex32", "complex64", "complex128"}   # complex: real [..., 2] tensors (fxc/ops/complex.py)
# torch.compile's options: every build option (fxc.build.BUILD_OPTIONS) and the capture's own
OPTION_NAMES = BUILD_OPTIONS | {"target", "freeze", "check", "specialize"}

# python-level ops on sizes that may appear in graphs with dynamic shapes; evaluated during conversion
_SCALAR_FNS = {operator.add, operator.sub, operator.mul, operator.floordiv, operator.truediv, operator.mod,
               operator.neg, operator.pow, operator.eq, operator.ne, operator.lt, operator.le, operator.gt,
               operator.ge}
_SYM_ATEN = {"aten.sym_size.int": lambda x, d: x.shape[d], "aten.sym_numel.default": lambda x: x.type.numel,
             "aten.sym_stride.int": None}

_warned: set = set()
_lock = threading.Lock()


def _say_once(key: str, message: str, *args):
    with _lock:
        if key in _warned:
            return
        _warned.add(key)
    log.warning(message, *args)


def _warn_once(op: str, reason: str):
    _say_once(op, "fxc: %s is not supported (%s); it runs in eager PyTorch", op, reason)


# -- the backend ------------------------------------------------------------------------------------
def fxc_backend(gm: torch.fx.GraphModule, example_inputs, options: dict | None = None, **kwargs):
    """torch.compile backend entry (registered as `fxc` through the torch_dynamo_backends entry point)."""
    from torch._dynamo.backends.common import aot_autograd
    options = dict(options or {}, **kwargs)
    unknown = set(options) - OPTION_NAMES
    if unknown:
        from ..errors import FxcError as _E
        raise _E(f"unknown fxc option(s) {sorted(unknown)}; known: {sorted(OPTION_NAMES)}")
    from ..target import Target, device_target
    target = Target.parse(options.get("target", "llvm"))   # "llvm", "llvm -mcpu=haswell", "opencl": TargetError if bad
    if target.is_cpu:
        target.check_runnable()     # torch.compile runs what it compiles: a CPU this host is not is an error now
    else:
        # a device target without its runtime or device is a TargetError here: never a silent eager (CPU) run of a
        # model the user asked to run on a device
        device_target(target)
    from ..build import check_build_options, check_precision
    check_precision(options.get("precision", "fp32"), target)
    check_build_options(options)
    from ..backends.llvm import start_workers
    start_workers()         # their start-up overlaps AOT autograd's tracing: ready when the first kernel is

    def fw(g, ins):
        return compile_aten_graph(g, ins, options, is_forward=True)

    def bw(g, ins):
        return compile_aten_graph(g, ins, options, is_forward=False)

    from ..build import gc_paused
    from .torch_fused import route_rnn_calls
    from .torch_inference import inference_graph
    route_rnn_calls(gm)     # nn.LSTM / GRU / RNN as one op each (torch_fused.py)
    with gc_paused():       # AOT autograd's tracing and fxc's partitioning: see gc_paused
        inference = inference_graph(gm, example_inputs, decompositions())    # grad mode off: no AOT autograd
        if inference is not None:
            _record(lambda r: setattr(r, "inference_graphs", r.inference_graphs + 1))
            return compile_aten_graph(inference[0], example_inputs, options, static=inference[1], boxed=False)
        return aot_autograd(fw_compiler=fw, bw_compiler=bw, decompositions=decompositions())(gm, example_inputs)


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
    from torch._decomp import _core_aten_decompositions_post_autograd, get_decompositions
    table = dict(_core_aten_decompositions_post_autograd())
    table.update(get_decompositions([getattr(torch.ops.aten, n) for n in _EXTRA_DECOMPS]))
    table[torch.ops.aten.take.default] = _take
    return keep_whole(table)


def keep_whole(table: dict) -> dict:
    """A decomposition table without the ops fxc converts whole, better than their decompositions (both captures:
    torch.compile's and fxc.from_torch's): aten._safe_softmax is one softmax kernel (ops/reduce.py), not three
    passes; and with fxc's own for PyTorch's fused module fast paths and its recurrent modules (torch_fused.py:
    a TransformerEncoderLayer's fused op as its GEMMs, an LSTM as one op that runs a loop over time steps)."""
    from .torch_fused import fused_decompositions
    table.pop(torch.ops.aten._safe_softmax.default, None)
    table.update(fused_decompositions(table))
    return table


def _meta(node):
    return node.meta.get("val", node.meta.get("example_value"))


def _hint(s) -> int:
    if isinstance(s, int):
        return s
    try:
        return int(s.node.hint)
    except Exception:
        return 2


def _tensor_type(t):
    return tuple(_hint(s) for s in t.shape), TORCH_DTYPES.get(t.dtype)


def _norm_arg(a):
    """Convert non-tensor ATen arguments to plain python (dtypes -> 'float32', devices -> 'cpu')."""
    if isinstance(a, torch.dtype):
        return TORCH_DTYPES.get(a, str(a))
    if isinstance(a, (torch.device, torch.layout, torch.memory_format)):
        return str(a)
    if isinstance(a, (list, tuple)):
        return type(a)(_norm_arg(x) for x in a)
    return a


def _complex_input(b: Builder, shape, dtype: str, name=None):
    """A graph input for a tensor of `shape`/`dtype`: complex ones are their real [..., 2] view."""
    if dtype in REAL_OF:
        return Complex(b.graph.input(tuple(shape) + (2,), REAL_OF[dtype], name))
    return b.graph.input(tuple(shape), dtype, name)


def _convert_call(b: Builder, target: str, args, kwargs):
    args, kwargs = _norm_arg(tuple(args)), {k: _norm_arg(v) for k, v in kwargs.items()}
    if is_complex_call(args, kwargs):    # complex values: only converters that know the [..., 2] form
        conv = complex_table().get(target)
        if conv is None:
            raise UnsupportedOpError(f"{target} on complex values")
        return conv(b, *args, **kwargs)
    entry = aten_table().get(target)
    if entry is None:
        raise UnsupportedOpError(f"no fxc op for {target}")
    op, conv = entry
    if conv is None:   # the default: every argument is an input of the op
        return b.call(op.name, list(args), **kwargs)
    return conv(b, *args, **kwargs)


def used_outputs(node):
    """Indices of a multi-output node's results that its users read (None: any may be); converters of ops
    whose extra outputs fxc cannot reproduce (e.g. singular vectors) read it as `b.used_outputs`."""
    if node.users and all(u.op == "call_function" and u.target is operator.getitem for u in node.users):
        return {u.args[1] for u in node.users}
    return None


class _Support:
    """Which FX nodes fxc compiles: ATen ops it can convert (tried on a scratch graph), with
    supported dtypes on CPU, and the size arithmetic that feeds them."""

    def __init__(self, keep_views=(), random: bool = False):
        self.reasons: dict = {}
        self.keep_views = set(keep_views)   # view nodes that must stay torch views (see _view_outputs)
        self.random = random                # random ops (dropout) convert: the caller feeds their seed

    def __call__(self, submodules, node: torch.fx.Node) -> bool:
        ok, reason = self.check(node)
        if not ok:
            self.reasons[node] = reason
        return ok

    def check(self, node):
        if node.op != "call_function":
            return False, "not a call"
        if node.target is operator.getitem:
            src = node.args[0]
            return (src.op == "call_function" and src not in self.reasons and
                    (str(src.target) in aten_table() or str(src.target) in complex_table())), "getitem"
        if node.target in _SCALAR_FNS or str(node.target) in _SYM_ATEN:
            return False, "size arithmetic"
        if str(node.target) == "with_effects" and str(node.args[1]) == "aten._linalg_check_errors.default":
            return False, "error check"     # raises torch's own error on a bad `info` (compiled by fxc); stays eager
        if node in self.keep_views:
            return False, "view output"
        target = str(node.target)
        if target not in aten_table() and target not in complex_table():
            return False, "no fxc op"
        vals = [_meta(a) for a in node.all_input_nodes] + [_meta(node)]
        for v in vals:
            for t in (v if isinstance(v, (list, tuple)) else [v]):
                if isinstance(t, torch.Tensor):
                    if t.device.type != "cpu":
                        return False, f"device {t.device}"
                    if TORCH_DTYPES.get(t.dtype) not in SUPPORTED_DTYPES:
                        return False, f"dtype {t.dtype}"
        b = Builder(random=self.random)
        env = {}
        for a in node.all_input_nodes:
            m = _meta(a)
            if isinstance(m, torch.Tensor):
                shape, dt = _tensor_type(m)
                env[a] = _complex_input(b, shape, dt)
            elif isinstance(m, (int, float, bool, torch.SymInt, torch.SymFloat, torch.SymBool)):
                env[a] = (_hint(m) if isinstance(m, (int, torch.SymInt))
                          else (float(m.node.hint) if hasattr(m, "node") else m))
            else:
                return False, "non-tensor input"
        try:
            b.used_outputs = used_outputs(node)
            out = _convert_call(b, target, torch.fx.node.map_arg(node.args, env.get),
                                torch.fx.node.map_arg(node.kwargs, env.get))
        except FxcError as e:
            return False, str(e)
        except Exception as e:   # a converter bug must never break the user's program
            return False, f"{type(e).__name__}: {e}"
        m = _meta(node)
        outs = out if isinstance(out, tuple) else (out,)
        metas = m if isinstance(m, (list, tuple)) else (m,)
        for o, t in zip(outs, metas):
            if isinstance(t, torch.Tensor) and isinstance(o, (Value, Complex)):
                if _tensor_type(t) != (tuple(o.shape), o.dtype):
                    return False, f"type rule gives {o.type} but torch says {_tensor_type(t)}"
        return True, ""


def compile_aten_graph(gm: torch.fx.GraphModule, example_inputs, options: dict, is_forward: bool = True,
                       static: set | None = None, boxed: bool = True):
    """An ATen graph with fxc's partitions compiled: AOT autograd's boxed function, or with boxed=False the plain
    forward (the inference path, torch_inference.py). static: the placeholders that are parameters or buffers
    (default: AOT autograd's static inputs of a forward graph)."""
    from torch._functorch.aot_autograd import make_boxed_func
    from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
    from torch.fx.passes.operator_support import create_op_support

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
    _record(rec)
    fused.recompile()
    _build_early([(sub, [_meta(a) if isinstance(a, torch.fx.Node) else a for a in calls[sub.name].args])
                  for sub in subs if sub.name in calls])
    return make_boxed_func(fused.forward) if boxed else fused.forward


def _build_early(subs) -> None:
    """Start building the partitions for the argument shapes of the trace (its FakeTensors), in one thread, in
    order: their kernels lower, and compile in the LLVM worker processes, while Dynamo goes on to build its
    guards; a partition's first call with those shapes waits for its build (FxcSubgraph.forward). Partitions
    with symbolic shapes or other non-static arguments, and the freeze/check modes (which read the weights'
    values), build at their first call instead."""
    early = [(sub, args, sub.expect(args)) for sub, args in subs if _static(args)
             and not (sub.options.get("freeze") or sub.options.get("check"))]
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


def _finite(t: torch.Tensor) -> bool:
    return not t.is_floating_point() or bool(torch.isfinite(t).all())


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
    from torch._guards import TracingContext
    meta = getattr(TracingContext.try_get(), "fw_metadata", None)
    returns = getattr(meta, "num_forward", None)
    out = next(n for n in reversed(gm.graph.nodes) if n.op == "output")
    outs = out.args[0] if isinstance(out.args[0], (list, tuple)) else (out.args[0],)
    return returns is not None and len(outs) > returns


def _static_placeholders(gm) -> set:
    """Names of the placeholders that are parameters or buffers (AOT autograd's static inputs): fxc treats
    them as weights, whose derived values are computed once per weight version (fxc/relay_like/hoist.py),
    or as constants under options={'freeze': True}."""
    from torch._guards import TracingContext
    ctx = TracingContext.try_get()
    idx = getattr(getattr(ctx, "fw_metadata", None), "static_input_indices", None) or ()
    placeholders = [n.name for n in gm.graph.nodes if n.op == "placeholder"]
    return {placeholders[i] for i in idx if i < len(placeholders)}


class FxcSubgraph(torch.nn.Module):
    """One partition: converted to fxc's graph IR and compiled per concrete input signature."""

    def __init__(self, gm: torch.fx.GraphModule, options: dict, name: str, weights: set = frozenset(),
                 training: bool = False):
        super().__init__()
        self.gm, self.options, self.name = gm, options, name
        self.training_step = training   # a part of a training step's graphs: its modules use OpenMP's team
        self.weights = weights          # positions of the arguments that are parameters or buffers
        self.cache: dict = {}
        self.eager_keys: set = set()
        self.finite_only = False        # a call whose results are not all finite reruns eagerly (an op of the
                                        # graph is OpDef.eager_unless_finite)
        self._dynamic = None            # argument positions in the cache key (all but the weights)
        self._held: dict = {}           # key -> the weights' tensors, (version, address)s and prepared forms
        self._last = None               # the module of the previous call: woken first thing (Module.wake)
        self._early: dict = {}          # key -> the slot of its build started at compile time (_build_early)
        self._tries = symbolic_tries(gm)    # the symbolic forms to try: every symbol, then the row symbol alone
        self._symbolic = self._tries.pop(0) if self._tries else None    # (per placeholder: its shape/value with
                                                     # size symbols, {name: SymInfo}), None: sizes static

    def expect(self, args) -> dict:
        """The slot an early build (_build_early) of these arguments' shapes fills: {"done": Event, "entry"}."""
        slot = {"done": threading.Event()}
        self._early[self._key(args)] = slot
        return slot

    def _key(self, args):
        """Shapes, dtypes and devices of the arguments: what a compiled module is specialised on. Weights
        are left out: Dynamo guards their shapes (parameters and buffers are static) and a changed weight
        brings a new graph, so the per-call key covers only the activations and scalars."""
        if self._dynamic is None:
            self._dynamic = [i for i in range(len(args)) if i not in self.weights]
        key = []
        sym = self._symbolic[0] if self._symbolic is not None and not self._specialised(args) else None
        for i in self._dynamic:
            a = args[i]
            if isinstance(a, torch.Tensor):
                shape = tuple(a.shape) if sym is None else \
                    tuple(n if d is None or isinstance(d, int) else repr(d) for n, d in zip(a.shape, sym[i]))
                key.append((shape, a.dtype, a.device.type))
            else:
                key.append(("s", type(a), a if sym is None or sym[i] is None else repr(sym[i])))
        return tuple(key)

    def _specialised(self, args) -> bool:
        """Whether this call's symbolic size is one of options["specialize"] (hot sizes that get a static build of
        their own besides the symbolic one)."""
        hot = self.options.get("specialize")
        if not hot:
            return False
        for shape, a in zip(self._symbolic[0], args):
            if isinstance(shape, tuple) and isinstance(a, torch.Tensor):
                for d, n in zip(shape, a.shape):
                    if d is not None and not isinstance(d, int):
                        return int(n) in hot
        return False

    def forward(self, *args):
        if self._last is not None:     # before anything else: the wake-up overlaps this call's preparations
            self._last.wake()
        key = self._key(args)
        entry = self.cache.get(key)
        if entry is None:
            if key in self.eager_keys:
                return self.gm(*args)
            early = self._early.pop(key, None)
            if early is not None:
                early["done"].wait()
                entry = early.get("entry")
                if entry is not None:
                    self.cache[key] = entry
        if entry is None and self._symbolic is not None and not self._specialised(args):
            entry = self._compile_symbolic(args)
            key = self._key(args)   # (of the symbolic form that built, or of static sizes)
            if entry is None:       # sizes the compiler cannot keep symbolic: one build per size, as before
                entry = self.cache.get(key)
            else:
                self.cache[key] = entry
        if entry is None:
            try:
                entry = self.cache[key] = self.compile(args)
            except Exception as e:   # never crash the user's program: run this part eagerly instead
                if isinstance(e, InputError):
                    raise
                self.eager_keys.add(key)
                msg = f"{self.name}: {type(e).__name__}: {str(e)[:300]}"
                _record(lambda r: r.failures.append(msg))
                log.warning("fxc: could not compile subgraph %s (%s: %s); it runs in eager PyTorch",
                            self.name, type(e).__name__, e)
                if self.options.get("debug"):
                    raise
                return self.gm(*args)
        module, tensor_pos, out_struct, orders = entry
        if module is None:
            return self.gm(*args)
        if module is not self._last:
            self._last = module
            module.wake()
        got = self._inputs(key, tensor_pos, orders, args, module)
        if got is None:
            return self.gm(*args)
        ins, array, token = got       # ins keeps contiguous copies alive while the module reads them
        if getattr(module, "symbols", None):      # symbolic sizes (runtime/symbols.py): bound from the inputs
            sizes = module.sizes([_arg_shape(args, i, order) for i, order in zip(tensor_pos, orders)])
            outs = [torch.empty(shape, dtype=FROM_STR[s.dtype])
                    for s, shape in zip(module.outputs, module.output_shapes(sizes))]
            module.run_prepared(array, [o.data_ptr() for o in outs], token, sizes)
        else:
            outs = [torch.empty(s.shape, dtype=FROM_STR[s.dtype]) for s in module.outputs]
            module.run_prepared(array, [o.data_ptr() for o in outs], token)
        if self.finite_only and not all(map(_finite, outs)):
            return self.gm(*args)
        res = [outs[k] if kind == "t" else torch.view_as_complex(outs[k]) if kind == "c" else k
               for kind, k in out_struct]
        return tuple(res) if len(res) != 1 or self._multi else res[0]

    __call__ = forward      # the fused graph's call, without nn.Module.__call__'s hooks (a partition has none)

    def _inputs(self, key, tensor_pos, orders, args, module):
        """(the tensors to keep alive while the module reads them, a ctypes array of the input addresses, the
        prepack token for Module.run_prepared), or None to run eagerly. While the weights are the same tensors at
        the same versions and addresses, their prepared forms, the address array and the token are reused from
        the previous call: only the activations are looked at. orders: each input's dimension order in memory
        (to_graph's `layouts`)."""
        held = self._held.get(key)
        if held is not None:
            wpos, objs, versions, addrs, prepared, acts, array, token, copied = held
            weights = wpos(args)
            if all(map(operator.is_, weights, objs)) and list(map(_VERSION, weights)) == versions \
                    and list(map(_DATA_PTR, weights)) == addrs and (copied is None or copied.unchanged()):
                array = type(array).from_buffer_copy(array)     # a private copy: concurrent callers
                ins = [prepared]
                for slot, i in acts:
                    t = _prepare(_arg(args, i), orders[slot])
                    if t is None:
                        return None
                    ins.append(t)
                    array[slot] = t.data_ptr()
                return ins, array, token
        ins = []
        for i, order in zip(tensor_pos, orders):
            t = _prepare(_arg(args, i), order)
            if t is None:
                return None
            ins.append(t)
        ptrs = [t.data_ptr() for t in ins]
        array = pointer_array(ptrs)       # read only: a later call copies it before writing
        wpos = [i for i in tensor_pos if i in self.weights]
        weights = [args[i] for i in wpos]
        prepack = _prepack_token(module, ins)
        token = None if prepack is None else (tuple(ptrs[i] for i in module.prepack_inputs), prepack)
        try:
            versions = list(map(_VERSION, weights))
        except RuntimeError:            # inference tensors have no version counter: prepare them every call
            _say_once("inference-tensor weights",
                      "fxc: the model's parameters are inference tensors (made under torch.inference_mode()), so "
                      "fxc cannot tell when they change and redoes its weight packing on every call; create the "
                      "model outside inference_mode, or pass options={'freeze': True} if the weights never change")
            return ins, array, token
        acts = [(slot, i) for slot, i in enumerate(tensor_pos) if i not in self.weights]
        fixed = {slot for slot, i in enumerate(tensor_pos) if i in self.weights}
        if token is not None and not set(module.prepack_inputs) <= fixed:   # an activation is packed: no reuse
            return ins, array, token
        copies = [args[i] for slot, i in enumerate(tensor_pos)
                  if slot in fixed and ins[slot].data_ptr() != args[i].data_ptr()]
        self._held[key] = (_picker(wpos), weights, versions, list(map(_DATA_PTR, weights)),
                           [ins[slot] for slot in sorted(fixed)], acts, array, token,
                           WeightSampler.of(copies, module._lib.fingerprint) if copies else None)
        return ins, array, token

    def compile(self, args, symbolic: bool = False):
        from ..build import gc_paused
        with gc_paused():       # converting and building: see gc_paused
            return self._compile(args, symbolic=True) if symbolic else self._compile(args)

    def _compile_symbolic(self, args):
        """The entry of one build for every size of the symbolic dims (every symbol, else the row symbol alone:
        self._tries), or None (then self._symbolic is None and each size builds on its own) when a part of the
        graph cannot be compiled with symbolic sizes."""
        if self.options.get("check") or self.options.get("profile"):
            self._symbolic, self._tries = None, []
            return None
        while self._symbolic is not None:
            try:
                return self.compile(args, symbolic=True)
            except Exception as e:      # noqa: BLE001 (never the user's problem: fewer symbols or static builds)
                if self._tries:
                    log.info("fxc: %s: no build with symbols %s (%s: %s); trying %s", self.name,
                             sorted(self._symbolic[1]), type(e).__name__, e, sorted(self._tries[0][1]))
                    self._symbolic = self._tries.pop(0)
                    continue
                log.info("fxc: %s: no symbolic build (%s: %s); building per size", self.name, type(e).__name__, e,
                         exc_info=log.isEnabledFor(logging.DEBUG))
                note = f"{self.name}: one build per size, not one for all sizes ({type(e).__name__}: {str(e)[:200]})"
                _record(lambda r: r.notes.append(note))
                self._symbolic = None
        return None

    def _compile(self, args, symbolic: bool = False):
        from ..build import build
        sym = self._symbolic if symbolic else None
        graph, tensor_pos, out_struct, multi = to_graph(self.gm, args, self.weights, self.options.get("freeze"),
                                                        layouts=True, random=True, symbolic=sym)
        orders = graph.input_orders
        self._multi = multi
        self.finite_only = self.finite_only or any(get_op(n.op).eager_unless_finite for n in graph.nodes)
        module = build(graph, weights_vary=self.training_step,
                       **{k: v for k, v in self.options.items()
                          if k in BUILD_OPTIONS or k == "target"})
        if self.training_step:      # its calls follow PyTorch's ops (optimizer, loss): share PyTorch's OpenMP team
            module.use_openmp()
        _record(lambda r: r.kernels.extend(module.kernels))
        if self.options.get("profile"):     # torch.compile(..., options={"profile": True}): table at exit
            module.print_profile_at_exit()
        if self.options.get("check"):   # differential check mode: kernels vs numpy references (fxc/check.py)
            from ..check import CheckError, check_graph
            fresh = to_graph(self.gm, args, self.weights, self.options.get("freeze"), layouts=True, random=True)[0]
            arrays = [_prepare(_arg(args, i).detach(), order).numpy() for i, order in zip(tensor_pos, orders)]
            report = check_graph(fresh, arrays, self.options.get("target", "llvm"))
            if not report.ok:
                raise CheckError(f"subgraph {self.name}: {report}")
        return module, tensor_pos, out_struct, orders


def _arg_shape(args, i, order) -> tuple:
    """The shape of tensor argument i as the module reads it (dims in `order`)."""
    if i == SEED:
        return (1,)
    shape = tuple(args[i].shape)
    if args[i].is_complex():
        shape += (2,)
    return shape if order is None else tuple(shape[d] for d in order)


SEED = -1      # in tensor_pos: the graph's seed input (fxc/ops/random.py), drawn from PyTorch's generator per call


def _arg(args, i):
    return torch.randint(0, 1 << 62, (1,), dtype=torch.int64) if i == SEED else args[i]


def _prepare(t, order=None):
    """A CPU tensor as the module reads it (contiguous, real [..., 2] for complex; with `order`, its dimensions in
    that order: a transposed tensor so ordered is its own memory), or None (not on the CPU)."""
    if t.device.type != "cpu":
        return None
    if t.is_neg() or t.is_conj():   # lazy negation/conjugation views: the raw memory is not the value
        t = t.resolve_neg().resolve_conj()
    if t.is_complex():
        t = torch.view_as_real(t)
    if order is not None:
        t = t.permute(order)
    return t if t.is_contiguous() else t.contiguous()


def _dense_order(t):
    """The order of t's dimensions in memory when t is a permutation of a dense tensor (a transposed weight, an
    attention head's view), else None (contiguous already, or gaps and overlaps: read through a copy)."""
    if t.is_contiguous() or t.is_complex() or t.dim() < 2:
        return None
    order = tuple(sorted(range(t.dim()), key=lambda d: (-t.stride(d), -t.shape[d])))
    return order if t.permute(order).is_contiguous() else None


def _picker(positions):
    """A function of the arguments that returns those at `positions` as a sequence (one C call: operator.itemgetter,
    whose result for a single position is the item itself)."""
    if len(positions) == 1:
        return lambda args, i=positions[0]: (args[i],)
    return operator.itemgetter(*positions) if positions else lambda args: ()


_VERSION = operator.attrgetter("_version")
_DATA_PTR = torch.Tensor.data_ptr


def _prepack_token(module, ins):
    """(tensor, version) of each input the module packs once (weights): packing is redone only when one
    is a different tensor or was updated in place (optimizer steps and load_state_dict bump `_version`)."""
    idx = getattr(module, "prepack_inputs", None)
    if not idx:
        return None
    objs = tuple(ins[i] for i in idx)
    try:
        return objs, tuple(t._version for t in objs)
    except RuntimeError:      # inference-mode tensors have no version counter: always repack
        return None


def _tensor_const(b: Builder, t: torch.Tensor, copy: bool = False):
    """A CPU tensor as a graph constant (complex ones as their real [..., 2] view); `copy` detaches it from
    the tensor's memory."""
    a = (torch.view_as_real(t) if t.is_complex() else t).numpy()
    c = b.const(a.copy() if copy else a)
    return Complex(c) if t.is_complex() else c


def to_graph(gm: torch.fx.GraphModule, args, weights=(), freeze: bool = False, layouts: bool = False,
             random: bool = False, symbolic=None):
    """_to_graph with the symbols' ranges known to the type rules (a slice [:s] of a 128-row table)."""
    from ..lowering.sym import facts
    with facts(symbolic[1] if symbolic is not None else {}):
        return _to_graph(gm, args, weights, freeze, layouts, random, symbolic)


def _to_graph(gm: torch.fx.GraphModule, args, weights=(), freeze: bool = False, layouts: bool = False,
              random: bool = False, symbolic=None):
    """Convert an ATen FX graph (one partition) to fxc's graph IR for these concrete arguments.
    weights: positions of the arguments that are parameters/buffers; with `freeze` they become constants
    (folded at compile time, later changes unseen), otherwise inputs marked in `Graph.weights`.
    layouts: an argument that is a permutation of a dense tensor (_dense_order) becomes an input in its memory's
    order and a permute in the graph, so the caller passes its memory as it is (`_prepare(t, order)`), not a
    contiguous copy; `graph.input_orders` lists each tensor input's order (None: as it is).
    random: random ops (dropout) convert, and their seed is the graph's last input, SEED in `tensor_pos` (a
    partition's placeholders can come after its first random op).
    symbolic: (per placeholder its shape or value with size symbols, {name: SymInfo}) from
    `symbolic_placeholders`: those dims (and scalars) stay symbolic in the graph."""
    b = Builder(random=random)
    shapes = symbolic[0] if symbolic is not None else None
    if symbolic is not None:
        b.graph.symbols = dict(symbolic[1])
    env: dict = {}
    tensor_pos, orders = [], []
    ph = 0
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            a = args[ph]
            if isinstance(a, torch.Tensor):
                dt = TORCH_DTYPES.get(a.dtype)
                if dt is None:
                    raise UnsupportedOpError(f"input dtype {a.dtype}")
                if freeze and ph in weights and dt not in ("bfloat16", "float16"):
                    env[node] = _tensor_const(b, a.detach(), copy=True)     # later writes are not seen
                    ph += 1
                    continue
                order = _dense_order(a) if layouts else None
                shape = a.shape if shapes is None else \
                    tuple(n if d is None else d for n, d in zip(a.shape, shapes[ph]))
                if order is None:
                    env[node] = _complex_input(b, shape, dt, node.name)
                    v = env[node].v if isinstance(env[node], Complex) else env[node]
                else:
                    v = b.graph.input(tuple(shape[d] for d in order), dt, node.name)
                    env[node] = b.call("permute", [v], dims=tuple(order.index(d) for d in range(len(order))))
                if ph in weights:
                    b.graph.weights.add(v.id)
                tensor_pos.append(ph)
                orders.append(order)
            else:
                env[node] = a if shapes is None or shapes[ph] is None else shapes[ph]
            ph += 1
        elif node.op == "get_attr":
            t = getattr(gm, node.target).detach().cpu()
            env[node] = _tensor_const(b, t)
        elif node.op == "call_function":
            a_ = torch.fx.node.map_arg(node.args, env.get)
            k_ = torch.fx.node.map_arg(node.kwargs, env.get)
            if node.target is operator.getitem:
                env[node] = a_[0][a_[1]]
            elif node.target in _SCALAR_FNS:
                env[node] = node.target(*a_)
            elif str(node.target) in _SYM_ATEN and _SYM_ATEN[str(node.target)] is not None:
                env[node] = _SYM_ATEN[str(node.target)](*a_)
            else:
                b.used_outputs = used_outputs(node)
                env[node] = _convert_call(b, str(node.target), a_, k_)
        elif node.op == "output":
            res = node.args[0]
            multi = isinstance(res, (list, tuple))
            res = res if multi else (res,)
            outs, struct = [], []
            for r in res:
                v = env[r] if isinstance(r, torch.fx.Node) else r
                if isinstance(v, Complex):      # returned as a complex view of the real [..., 2] result
                    struct.append(("c", len(outs)))
                    outs.append(v.v)
                elif isinstance(v, Value):
                    struct.append(("t", len(outs)))
                    outs.append(v)
                else:
                    struct.append(("s", v))
            b.graph.outputs = outs
            if b.seed is not None:      # made at the first random op: moved to the end, after every placeholder
                b.graph.inputs.remove(b.seed)
                b.graph.inputs.append(b.seed)
                tensor_pos.append(SEED)
                orders.append(None)
            b.graph.input_orders = orders
            return b.graph, tensor_pos, struct, multi
    raise FxcError("graph has no output node")
