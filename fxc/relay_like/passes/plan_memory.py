"""Static memory planning: intermediate buffers whose lifetimes do not overlap share storage, and a reshape
that is a kernel of its own is no kernel at all: its output is a view of its input's storage.

Accepts fused groups (in execution order) and the graph's outputs; returns byte offsets into one
workspace for every intermediate Value, the workspace size, and the sum of all intermediate sizes.

Two plan steps on the Planned graph (relay_like/planned.py): split_prepack (which groups run once per weight version,
which are views, which write into an output) and plan_buffers (the per-call groups' MemoryPlan)."""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from ...errors import ShapeError
from ...symbolic.expr import ITEMSIZE, Expr, poly
from ...symbolic.sym import canonical

ALIGN = 64


@dataclass
class MemoryPlan:
    offsets: dict          # Value id -> byte offset in the workspace
    workspace_bytes: int
    total_bytes: int       # what it would take without sharing (static buffers)
    row_offsets: dict = field(default_factory=dict)   # Value id -> offset per unit of `symbol` (symbolic sizes)
    row_bytes: int = 0     # the symbolic region's bytes per unit of `symbol`
    symbol: str | None = None
    sym_offsets: dict = field(default_factory=dict)   # Value id -> offset in the symbolic region: a polynomial of
    sym_bytes: object = 0  # the symbols (an int64 size expression, symbolic/sym.py), and the region's size


def reshape_views(groups: list, out_ids: set) -> dict:
    """Value id -> the Value whose storage it reads, for every group that is only a reshape (buffers are
    contiguous, so a reshape copies nothing) and not a graph output (outputs are the caller's own buffers)."""
    views = {}
    for gr in groups:
        out = gr.outputs[0]
        if len(gr.nodes) == 1 and gr.root.op == "reshape" and out.id not in out_ids:
            src = gr.root.inputs[0]
            views[out.id] = views.get(src.id, src)
    return views


def output_sources(groups: list, graph_outputs: list, views: dict) -> dict:
    """Value id -> output index, for each intermediate that a graph output only reshapes (a group that is a lone
    reshape of it, the output listed once): the intermediate is written straight into that output's buffer, and
    the reshape, a copy otherwise, disappears."""
    made = {v.id for gr in groups for v in gr.outputs}
    ids = [v.id for v in graph_outputs]
    taken, out = set(ids) | set(views), {}
    for gr in groups:
        o = gr.outputs[0]
        if len(gr.nodes) == 1 and gr.root.op == "reshape" and ids.count(o.id) == 1:
            src = gr.root.inputs[0]
            if src.id in made and src.id not in taken and src.dtype == o.dtype:
                out[src.id] = ids.index(o.id)
                taken.add(src.id)
    return out


def plan_memory(groups: list, graph_outputs: list, views: dict | None = None, in_outputs=frozenset()) -> MemoryPlan:
    """views: Value id -> Value whose storage it shares (reshape_views); a read of a view keeps its source live.
    in_outputs: ids of values written into an output's buffer (output_sources), not planned either.
    Values of a symbolic size c x m bytes (m a product of size symbols: s, s * s, b * s) are planned apart, per
    unit of m, in one region per m (the regions one after the other in the symbolic area the build puts after
    everything static): `sym_offsets` are their offsets from that area's start (polynomials of the symbols),
    `sym_bytes` its size. A value whose size is another polynomial (c x (s + 1): a KV cache one longer than its past)
    gets a place of its own after those regions, shared with no other. With one symbol s and sizes c x s only (a
    batch), the same plan is also `row_offsets` (x s) and `row_bytes` (x s)."""
    views = views or {}
    out_ids = {v.id for v in graph_outputs} | set(in_outputs)
    first, last, size, per, alone = {}, {}, {}, {}, {}
    for i, gr in enumerate(groups):
        for v in gr.outputs:
            if v.id not in out_ids:
                first[v.id] = i
                last[v.id] = i
                nbytes = v.type.numel * ITEMSIZE[v.dtype]
                if not isinstance(nbytes, Expr):
                    size[v.id] = max(nbytes, 1)
                    continue
                try:
                    terms = poly(nbytes)
                except ValueError:
                    terms = {}
                if len(terms) == 1 and next(iter(terms)) and next(iter(terms.values())) > 0:
                    (m, c), = terms.items()
                    per.setdefault(m, {})[v.id] = c
                elif terms and any(c > 0 and m for m, c in terms.items()):
                    alone[v.id] = _aligned_bound(terms)
                else:
                    raise ShapeError(f"cannot plan a buffer of {nbytes!r} bytes: not a polynomial of size symbols")
        for v in gr.inputs:
            v = views.get(v.id, v)
            if v.id in first:
                last[v.id] = i
    offsets, ws = _place(size, first, last)
    sym_offsets, start = {}, 0
    for m in sorted(per, key=lambda m: (len(m), repr(m))):
        unit = 1
        for x in m:
            unit = x * unit
        offs, region = _place(per[m], first, last)
        sym_offsets.update({vid: canonical(start + off * unit) for vid, off in offs.items()})
        start = canonical(start + region * unit)
    for vid, nbytes in alone.items():
        sym_offsets[vid] = start
        start = canonical(start + nbytes)
    plan = MemoryPlan(offsets, ws, sum(size.values()), sym_offsets=sym_offsets, sym_bytes=start)
    if len(per) == 1 and len(next(iter(per))) == 1 and not alone:          # c x s only: also the one-symbol form
        (m, _), = per.items()
        plan.row_offsets, plan.row_bytes = _place(per[m], first, last)
        plan.symbol = m[0].name
    return plan


def _aligned_bound(terms: dict):
    """A byte size at least the polynomial {monomial: coefficient} of size symbols (>= 1) and a multiple of ALIGN at
    every size: its positive terms, each coefficient rounded up to ALIGN."""
    out = 0
    for m, c in terms.items():
        if c > 0:
            term = (c + ALIGN - 1) // ALIGN * ALIGN
            for x in m:
                term = x * term
            out = canonical(out + term)
    return out


def _place(size: dict, first: dict, last: dict) -> tuple:
    """({id: offset}, end): each buffer (aligned) at the lowest offset free during its lifetime, largest first.
    The buffers placed are indexed by the steps they are live at, so that a buffer meets only those that overlap
    its lifetime (a scan of every placed buffer made a chain of 10,000 MatMuls quadratic: 21 of its 38 s)."""
    live: dict = {}     # group step -> (offset, end) of the buffers placed that are live at it
    offsets, top = {}, 0
    for vid in sorted(size, key=lambda k: (-size[k], first[k])):
        nbytes = (size[vid] + ALIGN - 1) // ALIGN * ALIGN
        steps = range(first[vid], last[vid] + 1)
        conflicts = sorted({b for i in steps for b in live.get(i, ())})
        off = 0
        for o, e in conflicts:
            if off + nbytes <= o:
                break
            off = max(off, e)
        offsets[vid] = off
        for i in steps:
            live.setdefault(i, []).append((off, off + nbytes))
        top = max(top, off + nbytes)
    return offsets, top


def split_prepack(p, ctx):
    """The plan step after fusion: p.prepack, the groups that make hoisted values only (none a graph output: run once
    per weight version, their results stored after the planned workspace), and p.main, the groups run on every call;
    a lone reshape group of either is a view of its input (p.packed_views, p.views: no kernel), and an intermediate
    that a graph output only reshapes is written into that output (p.into_out), its reshape dropped."""
    out_ids = {v.id for v in p.graph.outputs}
    prepack = [gr for gr in p.groups if all(o.id in p.hoisted and o.id not in out_ids for o in gr.outputs)]
    main = [gr for gr in p.groups if all(gr is not q for q in prepack)]
    packed_views = reshape_views(prepack, out_ids)
    prepack = [gr for gr in prepack if gr.outputs[0].id not in packed_views]
    views = reshape_views(main, out_ids)
    main = [gr for gr in main if gr.outputs[0].id not in views]
    into_out = output_sources(main, p.graph.outputs, views)
    main = [gr for gr in main
            if not (gr.root.op == "reshape" and len(gr.nodes) == 1 and gr.root.inputs[0].id in into_out)]
    return replace(p, prepack=prepack, main=main, packed_views=packed_views, views=views, into_out=into_out)


def plan_buffers(p, ctx):
    """The plan step: p.memory, the MemoryPlan of the per-call groups (p.main) over the views and output sources."""
    return replace(p, memory=plan_memory(p.main, p.graph.outputs, p.views, set(p.into_out)))
