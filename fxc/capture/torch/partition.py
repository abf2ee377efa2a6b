"""PyTorch capture, the partition runner: one partition of the ATen graph, compiled by fxc and called per call.

Takes a partition's FX GraphModule, the backend's options and the positions of its weight arguments; produces
`FxcSubgraph`, a callable that builds a module per input signature (early builds, symbolic sizes, eager fallback)
and runs it on torch tensors: torch tensors in, torch tensors out. The per-call checks that the weights are
unchanged (same tensors, versions and addresses) live in `FxcSubgraph._inputs`.
"""
from __future__ import annotations

import collections
import logging
import operator
import threading

import torch

from ...driver.build import build, gc_paused
from ...driver.check import CheckError, check_graph
from ...driver.options import BUILD_OPTIONS
from ...errors import InputError
from ...ops.registry import get_op
from ...runtime.cpu.library import pointer_array
from ...runtime.weights import token_of
from .graph import FROM_STR, SEED, to_graph
from .recorder import DroppedSymbol, Failure, _record, _say_once
from .symbolic import symbolic_tries
from .weights import WeightCheck

log = logging.getLogger("fxc")


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
        self.baked = frozenset() if options.get("freeze") else _qparams(gm, weights)   # weight positions
                                        # built in as constants, checked when a weight changes (_baked_values)
        self._baked_values: dict = {}   # id(module) -> [(position, the value it was built with)]
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
                failure = Failure(self.name, f"{type(e).__name__}: {str(e)[:300]}", self._ops())
                _record(lambda r: r.fail(failure))
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
        if got is _STALE:       # a zero point built in as a constant changed: build again
            self._baked_values.pop(id(module))
            self.cache.pop(key, None)
            self._held.pop(key, None)
            return self.forward(*args)
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

    def _ops(self) -> tuple:
        """((op, count), ...) of this partition: what runs eagerly when it cannot compile."""
        n = collections.Counter(str(x.target) for x in self.gm.graph.nodes
                                if x.op == "call_function" and x.target is not operator.getitem)
        return tuple(n.items())

    __call__ = forward      # the fused graph's call, without nn.Module.__call__'s hooks (a partition has none)

    def _inputs(self, key, tensor_pos, orders, args, module):
        """(the tensors to keep alive while the module reads them, a ctypes array of the input addresses, the
        weights' token for Module.run_prepared: fxc/runtime/weights.py), or None to run eagerly. While the weights
        are the same tensors at the same versions and addresses (WeightCheck: one C pass over them), their prepared
        forms, the address array and the token are reused from the previous call: only the activations are looked
        at. orders: each input's dimension order in memory (to_graph's `layouts`)."""
        held = self._held.get(key)
        if held is not None:
            same, prepared, acts, array, token, copied = held
            if same(args) and (copied is None or copied.unchanged()):
                array = type(array).from_buffer_copy(array)     # a private copy: concurrent callers
                ins = [prepared]
                for slot, i in acts:
                    t = _prepare(_arg(args, i), orders[slot])
                    if t is None:
                        return None
                    ins.append(t)
                    array[slot] = t.data_ptr()
                return ins, array, token
        if not all(torch.equal(args[i], v) for i, v in self._baked_values.get(id(module), ())):
            return _STALE
        ins = []
        for i, order in zip(tensor_pos, orders):
            t = _prepare(_arg(args, i), order)
            if t is None:
                return None
            ins.append(t)
        ptrs = [t.data_ptr() for t in ins]
        array = pointer_array(ptrs)       # read only: a later call copies it before writing
        wpos = [i for i in tensor_pos if i in self.weights] + sorted(self.baked)     # (baked: checked, not read)
        weights = [args[i] for i in wpos]
        token = token_of((ptrs[i] for i in module.prepack_inputs), _weight_versions(module, ins))
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
        views = [(t.data_ptr(), tuple(t.shape), t.stride(), t.element_size()) for t in copies]
        self._held[key] = (WeightCheck(wpos, weights, versions, list(map(_DATA_PTR, weights))),
                           [ins[slot] for slot in sorted(fixed)], acts, array, token,
                           module.weights.sample(views) if copies else None)
        return ins, array, token

    def compile(self, args, symbolic: bool = False):
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
                names = tuple(sorted(self._symbolic[1]))
                drop = DroppedSymbol(self.name, names, f"{type(e).__name__}: {str(e)[:300]}")
                log.warning("fxc: %s: the size symbol(s) %s cannot stay symbolic (%s); it builds once per size "
                            "(fxc.explain lists it)", self.name, ", ".join(names), drop.reason,
                            exc_info=log.isEnabledFor(logging.DEBUG))
                _record(lambda r: r.dropped_symbols.append(drop))
                self._symbolic = None
        return None

    def _compile(self, args, symbolic: bool = False):
        sym = self._symbolic if symbolic else None
        graph, tensor_pos, out_struct, multi = to_graph(self.gm, args, self.weights, self.options.get("freeze"),
                                                        layouts=True, random=True, symbolic=sym,
                                                        constants=self.baked)
        orders = graph.input_orders
        self._multi = multi
        self.finite_only = self.finite_only or any(get_op(n.op).eager_unless_finite for n in graph.nodes)
        module = build(graph, weights_vary=self.training_step,
                       **{k: v for k, v in self.options.items()
                          if k in BUILD_OPTIONS or k == "target"})
        self._baked_values[id(module)] = [(i, args[i].detach().clone()) for i in sorted(self.baked)]
        if self.training_step:      # its calls follow PyTorch's ops (optimizer, loss): share PyTorch's OpenMP team
            module.use_openmp()
        _record(lambda r: (r.kernels.extend(module.kernels), r.offload.extend(module.offload)))
        if self.options.get("profile"):     # torch.compile(..., options={"profile": True}): table at exit
            module.print_profile_at_exit()
        if self.options.get("check"):   # differential check mode: kernels vs numpy references (fxc/driver/check.py)
            fresh = to_graph(self.gm, args, self.weights, self.options.get("freeze"), layouts=True, random=True,
                             constants=self.baked)[0]
            arrays = [_prepare(_arg(args, i).detach(), order).numpy() for i, order in zip(tensor_pos, orders)]
            report = check_graph(fresh, arrays, self.options.get("target", "llvm"))
            if not report.ok:
                raise CheckError(f"subgraph {self.name}: {report}")
        return module, tensor_pos, out_struct, orders



_STALE = object()       # _inputs: a constant the module was built with is no longer the argument's value
_QPARAMS = ("quantize_per_tensor", "dequantize_per_tensor", "quantize_per_channel", "dequantize_per_channel")


def _qparams(gm, weights) -> frozenset:
    """Positions of the weight arguments that are scales or zero points of PyTorch's quantize / dequantize ops (PT2E's
    int8 weights: plain tensor attributes of the converted model, graph inputs here). The quantization pass takes the
    fast integer form (packed VNNI dot products) only with a weight zero point known at build time, and the depthwise
    form only with known scales, so they are built in as constants (a few numbers per channel); a call whose weights
    changed checks them, and a changed one builds again."""
    where = {n: i for i, n in enumerate(gm.graph.find_nodes(op="placeholder"))}
    out = set()
    for node in gm.graph.nodes:
        if node.op == "call_function" and getattr(node.target, "namespace", None) == "quantized_decomposed" and \
                node.target._overloadpacket.__name__ in _QPARAMS and len(node.args) > 2:
            for arg in node.args[1:3]:
                if isinstance(arg, torch.fx.Node) and where.get(arg) in weights:
                    out.add(where[arg])
    return frozenset(out)


def _finite(t: torch.Tensor) -> bool:
    return not t.is_floating_point() or bool(torch.isfinite(t).all())



def _arg_shape(args, i, order) -> tuple:
    """The shape of tensor argument i as the module reads it (dims in `order`)."""
    if i == SEED:
        return (1,)
    shape = tuple(args[i].shape)
    if args[i].is_complex():
        shape += (2,)
    return shape if order is None else tuple(shape[d] for d in order)



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



_VERSION = operator.attrgetter("_version")
_DATA_PTR = torch.Tensor.data_ptr


def _weight_versions(module, ins):
    """(tensors, versions) of the module's weights (what torch knows of them; fxc/runtime/weights.py decides with
    it): what the module holds of them is redone only when one is a different tensor or was updated in place
    (optimizer steps and load_state_dict bump `_version`)."""
    idx = getattr(module, "prepack_inputs", None)
    if not idx:
        return None
    objs = tuple(ins[i] for i in idx)
    try:
        return objs, tuple(t._version for t in objs)
    except RuntimeError:      # inference-mode tensors have no version counter: always repack
        return None

