"""fold_scale_axis: a per-output-channel scale of a conv's result moves into the conv's weight.

    mul(conv2d(x, w), s)   ->   conv2d(x, mul(w, reshape(s, [O, 1, 1, 1])))      s: [O, 1, 1] or [1, O, 1, 1]

when s and w depend on weights and constants only (an inference batch norm's gamma / sqrt(var + eps)) and the conv's
result has no other reader. The scaled weight is computed with the weight packing, once per weight version
(hoist.py), so every call saves one multiply per output element (the epilogue keeps only the shift). Runs before
use_winograd and pack_weights, which then transform and pack the scaled weight. Depthwise and grouped convs fold
the same way: the weight's first axis is the output channel in every case.
"""
from __future__ import annotations

from ...ops.registry import get_op
from ..graph import Node
from ..hoist import weight_derived


def _channel_scale(s, channels: int) -> bool:
    return s.dtype == "float32" and s.shape in ((channels, 1, 1), (1, channels, 1, 1))


def fold_scale_axis(g):
    fixed = weight_derived(g)
    readers = {vid: len(us) for vid, us in g.users().items()}
    out_ids = {v.id for v in g.outputs}
    producer = {o.id: n for n in g.nodes for o in n.outputs}
    dropped, kept = set(), []     # the convs folded (their results have no reader left); the nodes in order
    for n in g.nodes:
        if n.op == "mul" and len(n.inputs) == 2:
            for c, s in (n.inputs, n.inputs[::-1]):
                conv = producer.get(c.id)
                if (conv is None or conv.op != "conv2d" or readers.get(c.id) != 1 or c.id in out_ids
                        or c.dtype != "float32" or n.outputs[0].shape != c.shape
                        or not (s.is_const or s.id in fixed) or not _channel_scale(s, c.shape[1])):
                    continue
                x, w = conv.inputs
                if not (w.is_const or w.id in fixed):
                    continue        # a weight computed per call: scaling it would cost more than it saves
                s4 = _node("reshape", [s], {"shape": (c.shape[1], 1, 1, 1)})
                w2 = _node("mul", [w, s4.outputs[0]], {})
                new = Node("conv2d", [x, w2.outputs[0]], conv.attrs, [n.outputs[0].type])
                new.outputs[0] = n.outputs[0]           # readers of the mul now read the folded conv
                n.outputs[0].node, n.outputs[0].index = new, 0
                kept += [s4, w2, new]   # here, where x, w and s are all defined
                dropped.add(conv)
                n = None
                break
        if n is not None:
            kept.append(n)
    g.nodes = [n for n in kept if n not in dropped]
    return g


def _node(op: str, inputs: list, attrs: dict) -> Node:
    return Node(op, inputs, attrs, get_op(op).infer([v.type for v in inputs], **attrs))
