"""Which values depend only on weights: they are computed once, in the cached prepack step, not per call.

A weight is a graph input that changes rarely (the parameters and buffers torch.compile lifts into the
graph: `Graph.weights`). A node is hoisted when every input is a constant, a weight or a hoisted value,
and its result is no bigger than its largest input (a broadcast of a bias to activation size stays
inlined in its consumer instead of becoming a stored copy). Weight packing (pack_lanes, winograd_weight)
of any graph input is hoisted as well, growth included: that is what the prepack step is for; so is a pad of a
hoisted value (use_blocked_layout's zero channels up to whole blocks: inlined, its bounds test would keep the
conv epilogue that reads it from vectorizing).

The plan step hoist_weights records them on the Planned graph (relay_like/planned.py).

The runtime redoes the prepack step when one of its graph inputs is another tensor or was written in
place (module.run_pointers' token), so hoisting never changes results, only when they are computed.
"""
from __future__ import annotations

from dataclasses import replace

PACK_OPS = ("pack_lanes", "winograd_weight")


def weight_derived(g) -> set:
    """Ids of the weights and of the values computed from weights and constants only (at any size; constants
    themselves are told by Value.is_const)."""
    fixed = set(g.weights)
    for n in g.nodes:
        if n.inputs and all(v.is_const or v.id in fixed for v in n.inputs):
            fixed.update(o.id for o in n.outputs)
    return fixed


def hoisted_values(g) -> set:
    """Ids of the values of `g` that are computed from weights and constants only."""
    inputs = {v.id for v in g.inputs}
    fixed = set(g.weights)

    def ready(v):
        return v.is_const or v.id in fixed

    for n in g.nodes:
        if not n.inputs or not all(ready(v) or (n.op in PACK_OPS and v.id in inputs) for v in n.inputs):
            continue
        if all(v.is_const for v in n.inputs) and n.op not in PACK_OPS:
            continue        # fold_constants' business (or too big to fold: inlined where it is read)
        if any(o.type.symbolic for o in n.outputs):
            continue        # a size known at call time (a slice [:s] of a table): computed in the call
        biggest = max(v.type.numel for v in n.inputs)
        if n.op in PACK_OPS or n.op == "pad" or all(o.type.numel <= biggest for o in n.outputs):
            fixed.update(o.id for o in n.outputs)
    return fixed - inputs


def hoist_weights(p, ctx):
    """The plan step: p.hoisted, the values of hoisted_values(p.graph) — none on a target without scatter (WebGL:
    its host checks the indices a kernel reads before the call, so they must be inputs or constants; such values
    stay fused into their readers)."""
    if not ctx.caps.scatter:
        return p
    return replace(p, hoisted=frozenset(hoisted_values(p.graph)))
