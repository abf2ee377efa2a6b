"""Fused groups: what their code depends on (signatures, so equal groups share one kernel), their tensor
expressions, and their lowering to loop-IR kernels for each family (CPU kernels, GPU launches, in-page wasm entries).

Takes the groups fusion made (fxc.relay_like.fuse_ops: nodes, inputs, outputs); produces signatures, tensor
expressions (`group_tensors`) and kernels (`group_kernel` for a CPU, `group_launches` for a device).
"""
from __future__ import annotations

import collections
import contextlib
import math

from ..backends import backend_of
from ..errors import LoweringError
from ..lowering import te
from ..lowering.blocks import group_symbols, lower_rows
from ..lowering.loop_ir import Buffer
from ..lowering.lower import lower_group
from ..lowering.schedules.gpu import knob_space, knobs_of, lower_group_device
from ..lowering.schedules.knobs import Chooser, Space
from ..lowering.sym_loops import lower_symbolic
from ..ops.registry import get_op
from ..symbolic.sym import evaluate, substitute_attr
from ..target import Target
from .options import debug_level, log
from .plan import scratch_args

stats = collections.Counter()     # "builds": how many graphs went through the compiler (tests count them); symbolic
                                  # groups lowered as "row_block_kernels" or "symbolic_loop_kernels"


@contextlib.contextmanager
def naming(gr, symbolic: bool):
    """With size symbols, an error of lowering group gr becomes a LoweringError that names the group's ops and
    types first (the capture's warning of a dropped symbol then says which op kept it from staying symbolic)."""
    try:
        yield
    except Exception as e:
        if not symbolic:
            raise
        raise LoweringError(f"{gr.describe()}: {type(e).__name__}: {e}") from e


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


def served_without_input(groups, sigs, first: int) -> dict:
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


def group_kernel(gr, name: str, num_threads: int, target: Target | None = None, sym_index: dict | None = None,
                 knobs: Chooser | None = None):
    """Tensor expressions for one fused group, lowered to a loop-IR Kernel for a CPU. A group with symbolic rows
    becomes a row-block kernel (lowering/blocks.py), any other symbolic group loops over its symbolic extents
    (lowering/sym_loops.py); sym_index: symbol name -> its slot in the symbol header. knobs: the group's config
    (a static group's schedules read it and record the knobs they declare; None: the defaults)."""
    caps = Target.parse(target).caps
    if not group_symbols(gr):
        return lower_group(name, *group_tensors(gr), num_threads, knobs, caps=caps)

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
            log(f"[fxc] {name}: symbolic loops ({e})")
    stats["symbolic_loop_kernels"] += 1
    return lower_symbolic(name, *group_tensors(gr), caps, sym_index)


def group_launches(gr, name: str, caps, config: dict | None = None) -> list:
    """The device kernels (launches in order) of one fused group: the GPU schedules (fxc.lowering.schedules.gpu),
    with a config's knobs (None: the defaults from caps)."""
    return lower_group_device(name, *group_tensors(gr), caps, knobs_of(caps, config))


def group_space(gr, target: Target, num_threads: int) -> Space:
    """The search space of one static fused group on a target: the knobs its CPU schedules declare (found by
    lowering it with the defaults), or the GPU family's knobs on the target's device."""
    if not target.is_cpu:
        return knob_space(target.caps)
    chooser = Chooser()
    group_kernel(gr, "probe", num_threads, target, knobs=chooser)
    return chooser.space()


def wasm_group_entries(groups: list, target="wasm") -> tuple:
    """Fused groups another browser target cannot express (webgl, webgpu), compiled to one module of the `target`
    kind (wasm) with one entry per group, `fxc_group<i>(inputs, outputs, consts, work)`: the addresses of the group's
    inputs and outputs in the module's memory, consts unused, work a scratch area of scratch[i] bytes
    (fxc.backends.wasm.link.build_entries). Returns (the .wasm's bytes, [entry names], [scratch bytes per group])."""
    target = Target.parse(target)
    entries, scratch = [], []
    for i, gr in enumerate(groups):
        k = group_kernel(gr, f"k{i}_{gr.root.op}", 1, target)
        extra, at = scratch_args(k.params, 0)
        args = [("out", j) for j in range(len(gr.outputs))] + [("in", j) for j in range(len(gr.inputs))] + extra
        entries.append((f"fxc_group{i}", k, args))
        scratch.append(at)
    return backend_of(target).entries(entries, target), [name for name, _, _ in entries], scratch
