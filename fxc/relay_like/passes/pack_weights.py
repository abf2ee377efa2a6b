"""pack_weights: give conv2d and matmul the operand layout of the vector GEMM schedules.

    conv2d(x, w[O,C,KH,KW])        -> conv2d_packed(x, pack_lanes(w, axis 0))    (float32, groups == 1,
                                      not a 1-D conv over a reduction shorter than L: short_reduction)
    conv2d(x, w, groups g > 1)     -> conv2d_grouped_packed(x, pack_lanes(w, axis 0), g)
                                      (float32, not depthwise, O / g a multiple of L: a tile's blocks in one group)
    matmul(a, b[..,K,N] / [..,N,K]) -> matmul_packed(a, pack_lanes(b, n axis))   (float32, N >= 8)

pack_lanes puts the output-channel / column axis in blocks of L with the lanes innermost
([blocks, ..., L]) so a micro-kernel step loads whole vectors of it; L is the target's vector width (Caps.lanes:
16 float32 lanes on AVX-512, 8 on AVX2, 4 on SSE). When the packed operand is a
graph input (a live weight), the build runs its pack as a cached prepack step; constants (frozen
weights) are packed by fold_constants at compile time.
"""
from __future__ import annotations

from ...lowering.schedules import rule
from ...ops.registry import get_op
from ..graph import Node


def _blocks(n: int, nv: int, lanes: int) -> int:
    return -(-(-(-n // lanes)) // nv) * nv


def _lane_vectors(n: int, rows: int, caps) -> int:
    """Vectors of Caps.lanes columns per register tile: 2 where the width allows it, 3 when the tile has
    few rows (a 7-wide output row) so the accumulators still fill the registers; on a target with fewer
    accumulator registers one vector per 4 of them (AVX-512's 28: 3; AVX2's 12: 3, tiles of 4 rows)."""
    most = rule("cpu", "acc_vectors")(caps) // 4
    return max(1, min(3 if rows < 10 else 2, -(-n // caps.lanes), most))


def _grouped(n, lanes: int) -> bool:
    """A grouped conv2d that is not depthwise (one input channel a group: the depthwise schedules) whose groups
    each have a whole number of `lanes` output channels."""
    g, w = n.attrs.get("groups", 1), n.inputs[1]
    return g > 1 and w.shape[1] > 1 and (w.shape[0] // g) % lanes == 0


def short_reduction(w_shape, out_shape, lanes: int) -> bool:
    """A 1-D conv (output rows of one pixel's height, at least `lanes` long) whose reduction (C x KH x KW) is shorter
    than one vector of lanes, e.g. an audio stem over one channel (kernel 10 stride 5: 1.21 -> 0.79 ms at 1 thread):
    channel-lane tiles would spend more on scattering their NCHW stores than on multiply-adds, so it keeps conv2d,
    whose row tiles (schedules/cpu/grouped_conv.py) put the lanes along the output row. (2-D maps keep
    conv2d_packed: use_blocked_layout builds its NCHW16c regions from it.)"""
    _, c, kh, kw = w_shape
    return c * kh * kw < lanes and out_shape[2] == 1 and out_shape[3] >= lanes


def pack_weights(g, ctx):
    """On a CPU target: its Caps give the register tile's width and the lanes."""
    if not ctx.target.is_cpu:
        return g
    caps = ctx.caps
    lanes = caps.lanes
    new_nodes = []

    def add(op, inputs, attrs, like=None):
        types = get_op(op).infer([v.type for v in inputs], **attrs)
        n = Node(op, inputs, attrs, types)
        new_nodes.append(n)
        return n

    for n in g.nodes:
        if n.op == "conv2d" and n.attrs.get("groups", 1) == 1 and n.outputs[0].dtype == "float32" \
                and not short_reduction(n.inputs[1].shape, n.outputs[0].shape, lanes):
            x, w = n.inputs
            o = w.shape[0]
            nv = _lane_vectors(o, n.outputs[0].shape[3], caps)
            wp = add("pack_lanes", [w], dict(axis=0, block_pos=0, blocks=_blocks(o, nv, lanes), lanes=lanes)).outputs[0]
            rep = add("conv2d_packed", [x, wp], dict(out_channels=o, stride=n.attrs.get("stride", (1, 1)),
                                                     dilation=n.attrs.get("dilation", (1, 1)), nv=nv))
        elif n.op == "conv2d" and _grouped(n, lanes) and n.outputs[0].dtype == "float32":
            x, w = n.inputs
            o, groups = w.shape[0], n.attrs["groups"]
            most = _lane_vectors(o // groups, n.outputs[0].shape[3], caps)
            nv = max(v for v in range(1, most + 1) if (o // groups // lanes) % v == 0)
            wp = add("pack_lanes", [w], dict(axis=0, block_pos=0, blocks=o // lanes, lanes=lanes)).outputs[0]
            rep = add("conv2d_grouped_packed", [x, wp], dict(out_channels=o, groups=groups, nv=nv,
                                                             stride=n.attrs.get("stride", (1, 1)),
                                                             dilation=n.attrs.get("dilation", (1, 1))))
        elif n.op == "matmul" and n.outputs[0].dtype == "float32" and isinstance(n.outputs[0].shape[-1], int) \
                and n.outputs[0].shape[-1] >= 8:        # (symbolic columns: the plain matmul, sym_loops.py)
            a, b = n.inputs
            nd = b.type.ndim
            cols = n.outputs[0].shape[-1]
            nv = _lane_vectors(cols, 14, caps)
            axis = nd - 2 if n.attrs.get("trans_b") else nd - 1
            bp = add("pack_lanes", [b],
                     dict(axis=axis, block_pos=nd - 2, blocks=_blocks(cols, nv, lanes), lanes=lanes)).outputs[0]
            rep = add("matmul_packed", [a, bp], dict(n=cols, trans_a=n.attrs.get("trans_a", False), nv=nv))
        else:
            new_nodes.append(n)
            continue
        # the replacement keeps the original output Value (its id, name and users stay valid)
        out = n.outputs[0]
        rep.outputs[0] = out
        out.node, out.index = rep, 0
    g.nodes = new_nodes
    return g
