"""PyTorch capture, FX to graph IR: converts one ATen FX graph (a partition) to fxc's graph IR.

Takes an ATen FX GraphModule and its concrete (or symbolic) arguments; produces the graph IR, the positions of the
arguments that are its tensor inputs, the outputs' structure and their dimension orders (`to_graph`). Also says which
FX nodes fxc can convert (`_Support`, the partitioner's test). Used by the torch.compile backend (torch.py,
partition.py) and fxc.from_torch (aot.py).
"""
from __future__ import annotations

import operator

import torch
import torch.fx

from ...errors import FxcError, UnsupportedOpError
from ...ops.complex import REAL_OF, Complex, complex_table, is_complex_call
from ...ops.registry import aten_table
from ...relay_like.builder import Builder
from ...relay_like.graph import Value
from ...symbolic.expr import facts
from .quant import QUANT_TABLE

TORCH_DTYPES = {torch.float32: "float32", torch.float64: "float64", torch.int64: "int64", torch.int32: "int32",
                torch.int16: "int16", torch.int8: "int8", torch.uint8: "uint8", torch.bool: "bool",
                torch.float16: "float16", torch.bfloat16: "bfloat16",
                torch.complex32: "complex32", torch.complex64: "complex64", torch.complex128: "complex128"}
FROM_STR = {v: k for k, v in TORCH_DTYPES.items()}
SUPPORTED_DTYPES = {"float32", "float64", "int64", "int32", "int16", "int8", "uint8", "bool", "float16", "bfloat16",
                    "complex32", "complex64", "complex128"}   # complex: real [..., 2] tensors (fxc/ops/complex.py)

# python-level ops on sizes that may appear in graphs with dynamic shapes; evaluated during conversion
_SCALAR_FNS = {operator.add, operator.sub, operator.mul, operator.floordiv, operator.truediv, operator.mod,
               operator.neg, operator.pow, operator.eq, operator.ne, operator.lt, operator.le, operator.gt,
               operator.ge}
_SYM_ATEN = {"aten.sym_size.int": lambda x, d: x.shape[d], "aten.sym_numel.default": lambda x: x.type.numel,
             "aten.sym_stride.int": None}



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


def _out_dtypes(meta):
    """The dtypes torch gives a node's results (its meta value): a dtype, a tuple of them, None for a non-tensor."""
    if isinstance(meta, torch.Tensor):
        return TORCH_DTYPES.get(meta.dtype)
    if isinstance(meta, (list, tuple)):
        return tuple(_out_dtypes(m) for m in meta)
    return None


def _convert_call(b: Builder, target: str, args, kwargs, meta=None):
    """The graph of one ATen call. An op over float16/bfloat16 tensors (or making one) computes in float32, its
    results rounded to the 16-bit dtypes torch gives them (`meta`, the node's value): PyTorch's CPU kernels round at
    the same boundary (autocast's own casts are `_to_copy` calls of the graph)."""
    args, kwargs = _norm_arg(tuple(args)), {k: _norm_arg(v) for k, v in kwargs.items()}
    if is_complex_call(args, kwargs):    # complex values: only converters that know the [..., 2] form
        conv = complex_table().get(target)
        if conv is None:
            raise UnsupportedOpError(f"{target} on complex values")
        return conv(b, *args, **kwargs)
    if target in QUANT_TABLE:       # PT2E's quantized_decomposed ops (quant.py)
        return QUANT_TABLE[target](b, *args, **kwargs)
    if b.half_floats((args, kwargs)):
        return b.narrow(_convert_call(b, target, b.widen(args), b.widen(kwargs)), _out_dtypes(meta))
    entry = aten_table().get(target)
    if entry is None:
        raise UnsupportedOpError(f"no fxc op for {target}")
    op, conv = entry
    if conv is None:   # the default: every argument is an input of the op
        return b.call(op.name, list(args), **kwargs)
    return conv(b, *args, **kwargs)


def _converts(target: str) -> bool:
    """fxc has a converter for this op overload (ATen, complex values, PT2E's quantized_decomposed)."""
    return target in aten_table() or target in complex_table() or target in QUANT_TABLE


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
            return (src.op == "call_function" and src not in self.reasons and _converts(str(src.target))), "getitem"
        if node.target in _SCALAR_FNS or str(node.target) in _SYM_ATEN:
            return False, "size arithmetic"
        if str(node.target) == "with_effects" and str(node.args[1]) == "aten._linalg_check_errors.default":
            return False, "error check"     # raises torch's own error on a bad `info` (compiled by fxc); stays eager
        if node in self.keep_views:
            return False, "view output"
        target = str(node.target)
        if not _converts(target):
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
                                torch.fx.node.map_arg(node.kwargs, env.get), _meta(node))
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



SEED = -1      # in tensor_pos: the graph's seed input (fxc/ops/random.py), drawn from PyTorch's generator per call



def _dense_order(t):
    """The order of t's dimensions in memory when t is a permutation of a dense tensor (a transposed weight, an
    attention head's view), else None (contiguous already, or gaps and overlaps: read through a copy)."""
    if t.is_contiguous() or t.is_complex() or t.dim() < 2:
        return None
    order = tuple(sorted(range(t.dim()), key=lambda d: (-t.stride(d), -t.shape[d])))
    return order if t.permute(order).is_contiguous() else None



def _tensor_const(b: Builder, t: torch.Tensor, copy: bool = False):
    """A CPU tensor as a graph constant (complex ones as their real [..., 2] view); `copy` detaches it from
    the tensor's memory. A float16 / bfloat16 one is its float32 value (exact) cast back to its dtype, as graph
    constants have numpy's dtypes."""
    if t.dtype in (torch.float16, torch.bfloat16):
        return b.as_tensor(b.const(t.float().numpy()), TORCH_DTYPES[t.dtype])
    a = (torch.view_as_real(t) if t.is_complex() else t).numpy()
    c = b.const(a.copy() if copy else a)
    return Complex(c) if t.is_complex() else c


def to_graph(gm: torch.fx.GraphModule, args, weights=(), freeze: bool = False, layouts: bool = False,
             random: bool = False, symbolic=None, constants=frozenset()):
    """_to_graph with the symbols' ranges known to the type rules (a slice [:s] of a 128-row table)."""
    with facts(symbolic[1] if symbolic is not None else {}):
        return _to_graph(gm, args, weights, freeze, layouts, random, symbolic, constants)


def _to_graph(gm: torch.fx.GraphModule, args, weights=(), freeze: bool = False, layouts: bool = False,
              random: bool = False, symbolic=None, constants=frozenset()):
    """Convert an ATen FX graph (one partition) to fxc's graph IR for these concrete arguments.
    weights: positions of the arguments that are parameters/buffers; with `freeze` they become constants
    (folded at compile time, later changes unseen), otherwise inputs marked in `Graph.weights`.
    layouts: an argument that is a permutation of a dense tensor (_dense_order) becomes an input in its memory's
    order and a permute in the graph, so the caller passes its memory as it is (`_prepare(t, order)`), not a
    contiguous copy; `graph.input_orders` lists each tensor input's order (None: as it is).
    random: random ops (dropout) convert, and their seed is the graph's last input, SEED in `tensor_pos` (a
    partition's placeholders can come after its first random op).
    symbolic: (per placeholder its shape or value with size symbols, {name: SymInfo}) from
    `symbolic_placeholders`: those dims (and scalars) stay symbolic in the graph.
    constants: positions of arguments that become constants as with `freeze` (the caller checks that they stay)."""
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
                if (freeze and ph in weights or ph in constants) and dt not in ("bfloat16", "float16"):
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
                env[node] = _convert_call(b, str(node.target), a_, k_, _meta(node))
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

