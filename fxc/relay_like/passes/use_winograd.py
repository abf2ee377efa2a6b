"""use_winograd: stride-1 3x3 float32 convolutions where Winograd F(4x4,3x3) is faster than the direct kernel.

    conv2d(pad(x, zeros (pw, pw, ph, ph)), w[K, C, 3, 3])  -> conv2d_winograd(x, winograd_weight(w), padding (ph, pw))
    conv2d(x, w[K, C, 3, 3])                                -> conv2d_winograd(x, winograd_weight(w), padding (0, 0))

The zero padding moves into the kernel (no padded copy). winograd_weight reads only the weight, so the build
runs it as a cached prepack step (redone when the weight changes) and fold_constants folds it for frozen
weights. FXC_WINOGRAD=0 turns the pass off (the direct conv2d_packed kernel everywhere); FXC_WINOGRAD=all uses
Winograd on every eligible conv, also where winograd_pays says the direct kernel is faster (for measuring).
"""
from __future__ import annotations

import os

from ..graph import Node

LANES = 16


BF16_MIN_SIDE = 28      # with a bf16 direct kernel at twice the FMA rate: Winograd (float32) only on maps this large


def winograd_pays(c: int, k: int, n: int, oh: int, ow: int, bf16_direct: bool = False) -> bool:
    """Where Winograd beat the direct kernel when measured per layer (benchmarks/winograd_layers.py, this
    machine): enough channels for the GEMMs, at least 3 tiles along a row (the input transform runs one
    vector lane per tile) and enough 4x4 tiles per pass over the transformed weight (4x the direct weight's
    bytes). 7x7 stays direct (1.7x slower at batch 1, 1.2x at batch 8).
    bf16_direct: the direct kernel would run in bf16 on a CPU whose vdpbf16ps does twice the multiply-adds of
    an FMA (precision="bf16", backends/llvm_probe.py). Measured on ResNet-18 (Zen 4): 256 channels at 14x14
    take 0.53 ms direct in bf16 against 0.78 ms in float32 Winograd, while 128 at 28x28 (0.54 vs 0.43 ms) and
    64 at 56x56 (0.58 vs 0.40-0.55 ms) still favour Winograd."""
    if bf16_direct and min(oh, ow) < BF16_MIN_SIDE:
        return False
    return c >= 32 and k >= 32 and min(oh, ow) >= 9 and n * -(-oh // 4) * -(-ow // 4) >= 8


def use_winograd(g, bf16_direct: bool = False):
    """bf16_direct: see winograd_pays."""
    mode = os.environ.get("FXC_WINOGRAD", "1")
    if mode == "0":
        return g
    from ...lowering.winograd import fits, lane_vectors, tiles
    from ...ops.registry import get_op
    new_nodes = []
    for n in g.nodes:
        x, w = n.inputs if n.op == "conv2d" else (None, None)
        if x is None or n.outputs[0].dtype != "float32" or w.shape[2:] != (3, 3) or n.attrs.get("groups", 1) != 1 \
                or tuple(n.attrs.get("stride", (1, 1))) != (1, 1) or tuple(n.attrs.get("dilation", (1, 1))) != (1, 1):
            new_nodes.append(n)
            continue
        padding = (0, 0)
        p = x.node
        if p is not None and p.op == "pad" and p.attrs.get("mode", "constant") == "constant" \
                and float(p.attrs.get("value", 0.0)) == 0.0 and len(p.attrs["pad"]) == 4:
            pl, pr, pt, pb = p.attrs["pad"]
            if pl == pr >= 0 and pt == pb >= 0:
                x, padding = p.inputs[0], (pt, pl)
        b, k, oh, ow = n.outputs[0].shape
        c = x.shape[1]
        if not (mode == "all" or winograd_pays(c, k, b, oh, ow, bf16_direct)) or not fits(c, ow):
            new_nodes.append(n)
            continue
        nv = lane_vectors(tiles(ow), -(-k // LANES))
        blocks = -(-(-(-k // LANES)) // nv) * nv
        attrs_u = dict(blocks=blocks, lanes=LANES)
        un = Node("winograd_weight", [w], attrs_u, get_op("winograd_weight").infer([w.type], **attrs_u))
        attrs = dict(out_channels=k, padding=padding, nv=nv)
        rep = Node("conv2d_winograd", [x, un.outputs[0]], attrs,
                   get_op("conv2d_winograd").infer([x.type, un.outputs[0].type], **attrs))
        new_nodes += [un, rep]
        # the replacement keeps the original output Value (its id, name and users stay valid)
        out = n.outputs[0]
        rep.outputs[0] = out
        out.node, out.index = rep, 0
    g.nodes = new_nodes
    return g
