"""use_channel_blocks: on a device target whose Caps name a channel block k (Caps.channel_block; webgl: 4, one RGBA
texel), the convolutions' activations in NCHWkc ([N, ceil(C/k), H, W, k]: four channels of one pixel a texel).

    conv2d(x, w[O, C, KH, KW]) (groups 1, float32) -> conv2d_packed(x, pack_lanes(w, axis 0, lanes k), inner_lanes)

then use_blocked_layout with that block over every region (not only the CPU's depthwise ones): the convs, depthwise
convs, zero pads of H and W, max pools (max_pool2d_blocked: expand_opaque leaves them to this pass, which expands
those it does not block) and elementwise epilogues between them (bias, relu, hardtanh, residual adds) read and
write NCHWkc, and a value is converted back to NCHW only where a reader needs it (average pooling, a flatten, the
graph's outputs). A graph input (the image) that reaches a conv through a zero pad is converted to NCHWkc there, its
lanes past C zero, and that conv's weight padded with zero channels to whole blocks (use_blocked_layout's region
entry): ResNet-18's 3-channel stem reads a texel a step instead of a component. Takes and returns a Graph; an
unchanged graph where the Caps name no block.

Why (webgl): a fragment computes k consecutive output elements. In NCHW they run along an output row and wrap it
on 14x14 and 7x7 maps (each output then reads its own input: 5/4 to 2 texel fetches a multiply-add); in NCHWkc
they are k channels of one pixel, the weight is one texel of k output channels ([O/k, C, KH, KW, k]), and with the
reduction's block channel innermost (inner_lanes) one input texel serves k x k multiply-adds: 5 fetches for 16.
"""
from __future__ import annotations

from ...ops.registry import get_op
from ..graph import Node, node_appender
from .expand_opaque import expand_ops
from .use_blocked_layout import to_blocked


def _blocks(n: int, k: int) -> int:
    return -(-n // k)


def use_channel_blocks(g, ctx):
    """Only where the target's Caps.channel_block > 1 does anything change."""
    caps = ctx.caps
    k = caps.channel_block
    if k <= 1:
        return g
    if not any(n.op == "conv2d" for n in g.nodes):
        return expand_ops(g, caps, pools_for_blocks=False)
    new_nodes = []
    for n in g.nodes:
        if n.op != "conv2d" or n.attrs.get("groups", 1) != 1 or n.outputs[0].dtype != "float32" \
                or n.outputs[0].type.ndim != 4:
            new_nodes.append(n)
            continue
        x, w = n.inputs
        o = w.shape[0]
        pattrs = dict(axis=0, block_pos=0, blocks=_blocks(o, k), lanes=k)
        pack = Node("pack_lanes", [w], pattrs, get_op("pack_lanes").infer([w.type], **pattrs))
        cattrs = dict(out_channels=o, stride=tuple(n.attrs.get("stride", (1, 1))),
                      dilation=tuple(n.attrs.get("dilation", (1, 1))), nv=1, inner_lanes=True)
        rep = Node("conv2d_packed", [x, pack.outputs[0]], cattrs,
                   get_op("conv2d_packed").infer([x.type, pack.outputs[0].type], **cattrs))
        out = n.outputs[0]          # the replacement keeps the original output Value (its id, name and users)
        rep.outputs[0] = out
        out.node, out.index = rep, 0
        new_nodes += [pack, rep]
    g.nodes = new_nodes
    g = _blocked_outputs(to_blocked(g, k, every_region=True), k)
    return expand_ops(g, caps, pools_for_blocks=False)      # the max pools left in NCHW: as expand_opaque's


def _blocked_outputs(g, k: int):
    """Every conv2d_packed writes NCHWkc (a fragment's k outputs are k channels of one pixel, its weight texel one
    read), converted to NCHW after it where its reader needs that layout."""
    new_nodes = []

    add = node_appender(new_nodes)

    for n in g.nodes:
        if n.op != "conv2d_packed" or n.attrs.get("blocked_out"):
            new_nodes.append(n)
            continue
        out = n.outputs[0]
        b, c, h, w = out.shape
        y = add("conv2d_packed", list(n.inputs), dict(n.attrs, blocked_out=True))
        t = add("permute", [y], {"dims": (0, 1, 4, 2, 3)})
        last = Node("reshape", [t], {"shape": (b, _blocks(c, k) * k, h, w)},
                    get_op("reshape").infer([t.type], shape=(b, _blocks(c, k) * k, h, w)))
        if c % k:
            new_nodes.append(last)
            last = Node("slice", [last.outputs[0]], {"dim": 1, "start": 0, "end": c, "step": 1}, [out.type])
        last.outputs[0] = out       # the conversion writes the conv's own output Value (its id, name and users)
        out.node, out.index = last, 0
        new_nodes.append(last)
    g.nodes = new_nodes
    return g
