"""Lowering: tensor expressions of one fused group -> one loop-IR Kernel.

Accepts the root Tensors of a group (compute/extern Tensors whose TRefs reach placeholders, inlinable
computes, or one reduction). Produces a Kernel whose params are the output buffers then the input
buffers. Injective work is inlined at each use; a reduction referenced by an elementwise epilogue
becomes an accumulation statement in the epilogue's loop nest. Schedules live in schedules/cpu (default.py).
"""
from __future__ import annotations

import math
from types import SimpleNamespace

from ..errors import LoweringError
from ..symbolic.expr import Const, Expr, Lane, Load, Var, VecLoad, as_expr, binary, rebuild, substitute, vec, walk
from ..target import Target
from . import te
from .loop_ir import Buffer, For, Kernel, Seq, Store, seq
from .schedules import lookup
from .schedules.knobs import Chooser
from .vectorize import linear_stride, vectorize_expr, vectorize_loops


def strides_of(shape) -> list:
    st, acc = [], 1
    for s in reversed(shape):
        st.append(acc)
        acc *= s
    return list(reversed(st))


def flat_index(indices, shape) -> Expr:
    idx = as_expr(0)
    for i, s in zip(indices, strides_of(shape)):
        idx = idx + as_expr(i) * s
    return idx


COMBINE = {"sum": "add", "prod": "mul", "max": "max", "min": "min"}


class Hole:
    """A reference to a reduction inside an epilogue: filled by the schedule's accumulator."""

    def __init__(self, var: Var, tensor: te.Tensor, indices: tuple):
        self.var, self.tensor, self.indices = var, tensor, indices


class Converter:
    """TE expression -> loop-IR expression. TRefs to buffers become Loads; computes are inlined;
    reductions become holes (collected) or, in `pre` mode, accumulation statements."""

    def __init__(self, bufs: dict, caps=None, knob: Chooser | None = None):
        self.bufs = bufs
        self.caps = caps or Target.parse("llvm").caps      # the target's capabilities the schedules read
        self.knob = knob or Chooser()       # knob(name, default, choices, doc): the group's config (schedules/knobs)
        self.locals: list = []
        self.scratches: list = []

    def local(self, dtype: str, size: int = 1, name: str = "acc") -> Buffer:
        b = Buffer(f"{name}{len(self.locals)}", dtype, size, "private")
        self.locals.append(b)
        return b

    def scratch(self, dtype: str, size: int, name: str = "scratch") -> Buffer:
        """Memory the kernel's parallel tasks share during one call (a local is private to its task): the kernel
        takes it as a parameter after its inputs, and the build points it at the workspace."""
        b = Buffer(f"{name}{len(self.scratches)}", dtype, size, "scratch")
        self.scratches.append(b)
        return b

    def convert(self, e: Expr, pre: list | None, holes: list | None = None) -> Expr:
        """pre: statements to emit before use (reductions computed in place); holes: collect instead."""
        memo: dict = {}

        def go(x: Expr) -> Expr:
            r = memo.get(x)
            if r is not None:
                return r
            if isinstance(x, te.TRef):
                r = self._ref(x.tensor, tuple(go(i) for i in x.indices), go, pre, holes)
            elif isinstance(x, te.Reduce):
                raise LoweringError("a reduction must be the whole body of a compute")
            elif isinstance(x, (Const, Var)):
                r = x
            else:
                r = rebuild(x, tuple(go(a) if isinstance(a, Expr) else a for a in x.args))
            memo[x] = r
            return r

        return go(e)

    def _ref(self, t: te.Tensor, idx: tuple, go, pre, holes) -> Expr:
        buf = self.bufs.get(t)
        if buf is not None:
            return Load(buf, flat_index(idx, t.shape))
        if t.extern is not None or t.body is None:
            raise LoweringError(f"tensor {t.name} must be materialized before it is read: it is loop IR written "
                                f"whole (te.extern), which only an op that stands_alone may compute "
                                f"(fxc/ops/registry.py; fuse_ops never joins such an op to another node)")
        body = t.body
        if isinstance(body, te.Reduce):
            if holes is not None:
                for h in holes:
                    if h.tensor is t and h.indices == idx:
                        return h.var
                h = Hole(Var("red", t.dtype), t, idx)
                holes.append(h)
                return h.var
            if pre is None:
                raise LoweringError(f"reduction {t.name} read where no statement can be placed")
            acc = self.local(t.dtype)
            pre.append(self.reduction(t, idx, acc, Const(0, "int64")))
            return Load(acc, Const(0, "int64"))
        return go(substitute(body, dict(zip(t.axes, idx))))

    def _vector_reduction(self, red, rvars, val, acc, slot):
        merged = _merge_inner_axes(red, rvars, val)
        if merged is not None:
            red, rvars, val = merged
        return _vector_reduction_impl(self, red, rvars, val, acc, slot)

    def reduction(self, t: te.Tensor, idx: tuple, acc: Buffer, slot: Expr, inner=None) -> Seq:
        """acc[slot] = init; for r...: acc[slot] = acc[slot] (+) body   (inner: wraps the update loop)."""
        red: te.Reduce = t.body
        rvars = [Var("r") for _ in red.axes]
        sub = dict(zip(t.axes, idx))
        sub.update({v: nv for (v, _), nv in zip(red.axes, rvars)})
        body_pre: list = []
        val = self.convert(substitute(red.body, sub), body_pre)
        if inner is None and not body_pre:
            vector = self._vector_reduction(red, rvars, val, acc, slot)
            if vector is not None:
                return vector
        update = seq(*body_pre, Store(acc, slot, binary(COMBINE[red.op], Load(acc, slot), val)))
        if inner is not None:
            update = inner(update)
        for v, (_, extent) in reversed(list(zip(rvars, red.axes))):
            update = For(v, extent, update)
        init = Store(acc, slot, red.init)
        if inner is not None:
            init = inner(init)
        return seq(init, update)


VECTOR_REDUCE_MIN = 16     # innermost reduction length from which it runs on a vector accumulator
SHORT_ROW = 8              # ... and from which it does when outer reduce loops run it SHORT_ROWS_MIN times or more:
SHORT_ROWS_MIN = 4         # one narrower vector a row (a depthwise weight gradient over 14 x 14: 422 -> 64 us)


def _merge_inner_axes(red, rvars, val):
    """The last two reduce loops as one when every read walks them as one contiguous run (index stride of the
    outer = extent x stride of the inner) and nothing else uses them: a global average pool of a 7 x 7 map is one
    row of 49, which the vector accumulator takes (7 is too short for it); None otherwise."""
    if len(rvars) < 2 or not all(isinstance(e, int) for _, e in red.axes[-2:]) or red.axes[-1][1] >= VECTOR_REDUCE_MIN:
        return None
    a, b = rvars[-2], rvars[-1]
    na, nb = red.axes[-2][1], red.axes[-1][1]
    r = Var("rm")
    mapping = {}
    for x in walk(val):
        if isinstance(x, Load):
            sa, sb = linear_stride(x.args[1], a), linear_stride(x.args[1], b)
            if sa is None or sb is None or sa != nb * sb:
                return None
            mapping[x] = Load(x.args[0], substitute(x.args[1], {a: as_expr(0), b: r}))
    merged = substitute(val, mapping)
    if any(x is a or x is b for x in walk(merged)):
        return None
    axes = list(red.axes[:-2]) + [(r, na * nb)]
    return SimpleNamespace(op=red.op, init=red.init, axes=axes), rvars[:-2] + [r], merged


def _vector_reduction_impl(conv, red, rvars, val, acc, slot):
    """acc[slot] = reduce(val) with the innermost reduce loop on a vector accumulator (float32 rows
    such as softmax and layer-norm sums): lanes are folded into acc[slot] at the end; None if val
    does not vectorize along that loop."""
    lanes = conv.caps.lanes     # the target's vector width
    if not all(isinstance(e, int) for _, e in red.axes):    # a symbolic extent: the scalar loop (sym_loops.py)
        return None
    n = red.axes[-1][1]
    outer = math.prod(e for _, e in red.axes[:-1])
    if val.dtype != "float32" or red.op not in ("sum", "max", "min") \
            or n < (VECTOR_REDUCE_MIN if outer < SHORT_ROWS_MIN else SHORT_ROW):
        return None
    last = rvars[-1]
    vs = vectorize_expr(val, last, lanes)
    if vs is None:
        return None
    comb = COMBINE[red.op]
    zero = Const(0, "int64")
    ro, rt = Var("ro"), Var("rt")
    full = n // lanes
    body, init, fold = None, Store(acc, slot, red.init), []
    if full:                                # whole vectors (none for a row shorter than lanes: the tail alone)
        vacc = conv.local("float32", lanes, "racc")
        body = For(ro, full, Store(vacc, zero, binary(comb, VecLoad(vacc, zero, lanes),
                                                      substitute(vs, {last: ro * lanes}))))
        init = seq(init, Store(vacc, zero, Const(red.init.value, vec("float32", lanes))))
        fold = [Store(acc, slot, binary(comb, Load(acc, slot), Lane(VecLoad(vacc, zero, lanes), k)))
                for k in range(lanes)]
    tail = n % lanes
    tv = vectorize_expr(val, last, tail) if tail >= 4 else None      # a narrower vector (a conv weight gradient's
    if tv is not None:                                                # rows of 28: one of 16 and one of 12 lanes)
        tacc = conv.local("float32", tail, "racc")
        at = Const(full * lanes, "int64")
        body = seq(body, Store(tacc, zero, binary(comb, VecLoad(tacc, zero, tail), substitute(tv, {last: at}))))
    elif tail:
        body = seq(body, For(rt, tail, Store(acc, slot, binary(comb, Load(acc, slot),
                                                              substitute(val, {last: rt + full * lanes})))))
    for v, (_, extent) in reversed(list(zip(rvars[:-1], red.axes[:-1]))):
        body = For(v, extent, body)
    if tv is not None:
        init = seq(init, Store(tacc, zero, Const(red.init.value, vec("float32", tail))))
        fold += [Store(acc, slot, binary(comb, Load(acc, slot), Lane(VecLoad(tacc, zero, tail), k)))
                 for k in range(tail)]
    return seq(init, body, *fold)


def lower_group(name: str, roots: list, out_bufs: list, in_bufs: dict, num_threads: int = 1,
                knobs: Chooser | None = None, caps=None) -> Kernel:
    """roots[i] is stored into out_bufs[i]; in_bufs maps placeholder Tensors to Buffers; caps: the target's
    capabilities (None: this host's); knobs: the group's config, which records the knobs its schedules declare
    (schedules/knobs.py; None: every knob at its default)."""
    schedule_root = lookup("cpu")          # the CPU family's default schedule (it dispatches on the root's kind)
    bufs = dict(in_bufs)
    stmts, flops = [], 0
    conv = Converter(bufs, caps, knobs)
    done = set()
    for t, ob in zip(roots, out_bufs):
        if t.extern is not None:
            if t.extern not in done:
                done.add(t.extern)
                outs = sorted((r.index, b) for r, b in zip(roots, out_bufs) if r.extern is t.extern)
                stmts.append(t.extern([b for _, b in outs], [bufs[x] for x in t.inputs]))
            continue
        if t.is_placeholder:   # an alias of an input: copy it
            src = t
            t = te.compute(src.shape, lambda *i: src[i], "copy")
        s, f = schedule_root(conv, t, ob, num_threads)
        stmts.append(s)
        flops += f
    body = vectorize_loops(seq(*stmts), conv.caps.lanes)
    params = list(out_bufs) + [b for b in dict.fromkeys(in_bufs.values())] + conv.scratches
    return Kernel(name, params, body, flops)
