"""fold_scale_axis: a per-output-channel scale of a conv's result moves into the conv's weight.

    mul(conv2d(x, w), s)            ->  conv2d(x, mul(w, reshape(s, [O, 1, 1, 1])))
    mul(add(conv2d(x, w), b), s)    ->  add(conv2d(x, mul(w, reshape(s, [O, 1, 1, 1]))), mul(b, s))

for s (and a conv bias b) of shape [O, 1, 1] or [1, O, 1, 1], when s, b and w depend on weights and constants only
(an inference batch norm's gamma / sqrt(var + eps), after a conv with or without bias) and each intermediate result
has no other reader. The scaled weight (and bias) are computed with the weight packing, once per weight version
(hoist.py), so every call saves one multiply per output element (the epilogue keeps only the shift). Runs before
use_winograd and pack_weights, which then transform and pack the scaled weight. Depthwise and grouped convs fold
the same way: the weight's first axis is the output channel in every case.
"""
from __future__ import annotations

from ...ops.registry import get_op
from ..graph import Node
from .hoist import weight_derived


def _channel_scale(s, channels: int) -> bool:
    return s.dtype == "float32" and s.shape in ((channels, 1, 1), (1, channels, 1, 1))


def fold_scale_axis(g, ctx):
    fixed = weight_derived(g)
    readers = {vid: len(us) for vid, us in g.users().items()}
    out_ids = {v.id for v in g.outputs}
    producer = {o.id: n for n in g.nodes for o in n.outputs}

    def only_reader(v) -> bool:        # v is read by one node and is not a graph output
        return readers.get(v.id) == 1 and v.id not in out_ids

    def weight_like(v) -> bool:
        return v.is_const or v.id in fixed

    def conv_of(c):
        """(conv node, bias or None) whose result, plus a per-channel bias, is c; or None."""
        node = producer.get(c.id)
        if node is not None and node.op == "add" and len(node.inputs) == 2 and only_reader(c):
            for r, b in (node.inputs, node.inputs[::-1]):
                conv = producer.get(r.id)
                if conv is not None and conv.op == "conv2d" and r.shape == c.shape and only_reader(r) \
                        and weight_like(b) and _channel_scale(b, c.shape[1]):
                    return conv, b
            return None
        return (node, None) if node is not None and node.op == "conv2d" and only_reader(c) else None

    dropped, kept = set(), []     # the nodes folded away (their results have no reader left); the nodes in order
    for n in g.nodes:
        if n.op == "mul" and len(n.inputs) == 2:
            for c, s in (n.inputs, n.inputs[::-1]):
                found = conv_of(c)
                if found is None or c.dtype != "float32" or n.outputs[0].shape != c.shape \
                        or not weight_like(s) or not _channel_scale(s, c.shape[1]):
                    continue
                conv, bias = found
                x, w = conv.inputs
                if not weight_like(w):
                    continue        # a weight computed per call: scaling it would cost more than it saves
                s4 = _node("reshape", [s], {"shape": (c.shape[1], 1, 1, 1)})
                w2 = _node("mul", [w, s4.outputs[0]], {})
                out = n.outputs[0]
                new = [s4, w2]      # here, where x, w, b and s are all defined
                folded = Node("conv2d", [x, w2.outputs[0]], conv.attrs, [out.type])
                new.append(folded)
                last = folded
                if bias is not None:
                    b2 = _node("mul", [bias, s], {})
                    last = _node("add", [folded.outputs[0], b2.outputs[0]], {})
                    new += [b2, last]
                    dropped.add(producer[c.id])
                last.outputs[0] = out                   # readers of the mul now read the folded result
                out.node, out.index = last, 0
                kept += new
                dropped.add(conv)
                n = None
                break
        if n is not None:
            kept.append(n)
    g.nodes = [n for n in kept if n not in dropped]
    return g


def _node(op: str, inputs: list, attrs: dict) -> Node:
    return Node(op, inputs, attrs, get_op(op).infer([v.type for v in inputs], **attrs))
