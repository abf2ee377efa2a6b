"""Grouped conv2d whose groups are not whole lane blocks of output channels (ResNeXt's 4-32 channels a group, a
wav2vec2-style positional conv of 24 a group), and convs whose reduction is shorter than a vector (an audio stem over
one channel, pack_weights.short_reduction): register tiles with the lanes along the output row.

conv2d_grouped_packed (pack_weights) puts the lanes along output channels, which needs each group to fill whole
vectors; here the lanes run along ow instead, so any group size fills them:

    out[n, o, oh, ow0 + j] = sum_{c, kh, kw} w[o, c, kh, kw] * x[n, g(o) * Cg + c, oh*sh + kh*dh, (ow0 + j)*sw + kw*dw]

A tile is `mr` output channels of one group (rows: one broadcast weight each) x `nv` vectors of lanes (Caps.lanes)
output columns (one vector load of the input each, strided by sw, shared by the rows), mr * nv accumulators; the
reduction runs over (c, kh, kw) of the group. A row past its whole vectors takes narrower vectors (no read past the
row's end).
The group's epilogue is applied to each accumulator vector as it is stored (contiguous along ow in NCHW).
Parallel over (image, output row, channel tile). Takes the float32 conv2d's reduction Tensor (attrs
schedule="grouped_conv2d", from fxc/ops/nn.py) over an NCHW input buffer and its [O, Cg, KH, KW] weight; None
(the generic loops) for anything else, e.g. an input computed in the group.
"""
from __future__ import annotations

from ....symbolic.expr import Bin, Broadcast, Const, Fma, Load, Var, VecLoad, as_expr, substitute, vec
from ...loop_ir import Allocate, For, IfThen, Store, seq
from ...lower import flat_index
from ...vectorize import vectorize_expr
from .default import parallel_over
from .gemm import acc_vectors

MAX_VECTORS = 4     # vectors along ow per tile: more leaves too few rows for the weights' broadcasts to pay


def tile_shape(group_channels: int, ow: int, caps) -> tuple:
    """(rows mr, vectors nv) of a register tile: nv vectors along ow (fewer for a short row), as many rows of the
    group's channels as the target's accumulator registers hold beside them (at most the group's channels)."""
    nv = max(1, min(MAX_VECTORS, -(-ow // caps.lanes)))
    mr = max(1, min(group_channels, acc_vectors(caps) // nv))
    while group_channels % mr and mr > 1 and group_channels % mr < mr // 2:    # prefer tiles that divide the group
        mr -= 1
    return mr, nv


def schedule_grouped_conv2d(conv, rt, out, red, value, axes, shape, num_threads):
    a = rt.attrs
    x, w = a["x"], a["w"]
    xbuf, wbuf = conv.bufs.get(x), conv.bufs.get(w)
    if xbuf is None or wbuf is None or len(shape) != 4 or x.dtype != "float32" or w.dtype != "float32":
        return None
    N, O, OH, OW = shape
    n, o, oh, ow = axes
    _, CG, KH, KW = w.shape
    groups = a["groups"]
    OG = O // groups
    _, CX, IH, IW = x.shape
    sh, sw = a["stride"]
    dh, dw = a["dilation"]
    index = flat_index(axes, shape)
    mr, nv = tile_shape(OG, OW, conv.caps)
    nv = conv.knob("grouped_conv.vectors", nv, range(1, max(1, min(MAX_VECTORS, -(-OW // conv.caps.lanes))) + 1),
                   "vectors along the output row per register tile")
    mr = conv.knob("grouped_conv.rows", mr, range(1, max(1, min(OG, acc_vectors(conv.caps) // nv)) + 1),
                   f"output channels per register tile (registers: rows x vectors <= {acc_vectors(conv.caps)})")
    L = conv.caps.lanes
    block = nv * L
    nb_full, rest = OW // block, OW % block
    c, kh, kw = Var("c"), Var("kh"), Var("kw")
    ot, ob, gi = Var("ot"), Var("ob"), Var("gi")
    tiles_per_group = -(-OG // mr)

    def tile(widths, ow0, o0, rows):
        """rows channels from o0 (one group) x the vectors of `widths` lanes from column ow0."""
        total, offs = sum(widths), [sum(widths[:v]) for v in range(len(widths))]
        acc = conv.local(rt.dtype, rows * total, "gacc")
        slot = lambda i, v: as_expr(i * total + offs[v])
        accv = lambda i, v: VecLoad(acc, slot(i, v), widths[v]) if widths[v] > 1 else Load(acc, slot(i, v))
        ch = gi * CG + c
        row = ((n * CX + ch) * IH + oh * sh + kh * dh) * IW + kw * dw
        bvec = [VecLoad(xbuf, row + (ow0 + offs[v]) * sw, widths[v], sw) if widths[v] > 1
                else Load(xbuf, row + (ow0 + offs[v]) * sw) for v in range(len(widths))]
        upd = []
        for i in range(rows):
            wv = Load(wbuf, (((o0 + i) * CG + c) * KH + kh) * KW + kw)
            for v in range(len(widths)):
                wb = Broadcast(wv, widths[v]) if widths[v] > 1 else wv
                upd.append(Store(acc, slot(i, v), Fma(wb, bvec[v], accv(i, v))))
        init = [Store(acc, slot(i, v), Const(0.0, vec(rt.dtype, widths[v]) if widths[v] > 1 else rt.dtype))
                for i in range(rows) for v in range(len(widths))]
        stores = []
        for i in range(rows):
            for v in range(len(widths)):
                sub = {o: o0 + i, ow: ow0 + offs[v]}
                if widths[v] > 1:
                    vs = vectorize_expr(value, ow, widths[v], {red.var: accv(i, v)})
                    if vs is None:
                        return None
                else:
                    vs = substitute(value, {red.var: accv(i, v)})
                stores.append(Store(out, substitute(index, sub), substitute(vs, sub)))
        body = For(c, CG, For(kh, KH, For(kw, KW, seq(*upd))))
        return Allocate(acc, seq(*init, body, *stores))

    def row(o0, rows):
        """The whole output row for `rows` channels from o0: its whole blocks, then the tail's narrower vectors."""
        parts = []
        if nb_full:
            main = tile([L] * nv, ob * block, o0, rows)
            if main is None:
                return None
            parts.append(For(ob, nb_full, main))
        if rest:
            tail = tile([L] * (rest // L) + ([rest % L] if rest % L else []),
                        as_expr(nb_full * block), o0, rows)
            if tail is None:
                return None
            parts.append(tail)
        return seq(*parts)

    o0 = gi * OG + ot * mr
    last = OG - (tiles_per_group - 1) * mr
    full = row(o0, mr)
    if full is None:
        return None
    if last != mr:
        tail = row(o0, last)
        if tail is None:
            return None
        full = IfThen(Bin("lt", ot, as_expr(tiles_per_group - 1)), full, tail)
    work = N * O * OH * OW * CG * KH * KW
    return parallel_over([(n, N), (oh, OH), (gi, groups), (ot, tiles_per_group)], full, work, num_threads)
