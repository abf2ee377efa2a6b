"""use_blocked_layout: activations of the regions around depthwise convs in NCHW16c ([N, ceil(C/16), H, W, 16],
channel c at block c // 16, lane c % 16), converted only where such a region meets an op that needs NCHW. 16 here
stands for L, the target's vector width (Caps.lanes: 16 float32 lanes on AVX-512, 8 on AVX2, 4 on SSE).

    conv2d_packed(x, wp)                  -> conv2d_packed(x or x16, wp, blocked_in, blocked_out)
    conv2d(x, w[C, 1, KH, KW], groups C)  -> depthwise_blocked(x16,
                                                               permute(reshape(w, [C/16, 16, KH, KW]), (0, 2, 3, 1)))
    pad(x) on H, W                        -> pad(x16) on dims 2, 3
    f(x, b[1, C, 1, 1], scalar)           -> f(x16, reshape(b, [1, C/16, 1, 1, 16]), scalar)     (elementwise f)

A device's regions (every_region, use_channel_blocks) also take max pools (max_pool2d_blocked) and start at a zero
pad of a graph input: the input converted to NCHW16c with its lanes past C zero, so the conv after it reads whole
blocks over a weight padded with zero channels.

A channel count that is not a multiple of 16 is padded to whole blocks (the weight and per-channel operands with
zeros). The lanes past C never reach a channel: elementwise ops and the depthwise conv work lane by lane, a conv
reduces over its weight's C channels only, and the conversion back drops them.

Which values are blocked: the float32 4-d values of 16 channels or more that are made by one of the ops above (their
inputs blocked where they must be: the depthwise conv's, the pad's, an elementwise op's full-size ones), and that
some reader takes blocked (a value made by a conv or an elementwise op whose every reader needs NCHW is made in
NCHW instead: no conversion at a region's end); iterated to a fixed point, then kept in the regions (values joined
by those ops) that hold a depthwise conv. A conv reads NCHW16c unless it is a 1x1 conv over a large map writing
NCHW, which runs faster as the GEMM over NCHW positions (schedule_conv1x1).

Why: the depthwise conv runs one vector FMA per tap for 16 channels (in NCHW its lanes are output columns: strided
loads at stride 2, partly empty vectors on 7x7 maps), and a conv's tile of 16 output channels is one contiguous
vector store (in NCHW it is transposed on the way out). Winograd convs, pooling and the rest keep NCHW, so ResNet-18
and BERT (no depthwise conv) keep their kernels. The build option blocked_layout=False turns the pass off.
"""
from __future__ import annotations

from ...ops.registry import Kind, get_op
from ..graph import node_appender, with_inputs

WIDE_NV = 4     # channel blocks per register tile of a blocked conv that makes at least as many channels as it reads
                # (an expanding 1x1 conv): 7 rows x 4 blocks, 4 weight vectors and 7 broadcasts a step. MobileNetV2's
                # expand convs with pack_weights' 2 blocks x 14 rows: 0.23 ms (16 -> 96 channels at 112x112) and
                # 0.135 ms (24 -> 144 at 56x56), with 3-4 blocks: 0.19 and 0.108 ms
GEMM_POSITIONS = 512    # a 1x1 conv over this many positions writing NCHW reads NCHW (see _gemm_in_nchw)


def _blocks(c: int, lanes: int) -> int:
    return -(-c // lanes)


def _depthwise(n, lanes: int) -> bool:
    if n.op != "conv2d" or n.outputs[0].dtype != "float32":
        return False
    x, w = n.inputs
    return n.attrs.get("groups", 1) == x.shape[1] == w.shape[0] >= lanes and w.shape[1] == 1


def _elementwise(n) -> bool:
    """An op applied element by element (any layout), not one whose attrs name a shape (expand)."""
    return len(n.outputs) == 1 and n.op != "expand" and get_op(n.op).kind in (Kind.ELEMWISE, Kind.BROADCAST)


def _hw_pad(n) -> bool:
    return n.op == "pad" and n.attrs.get("mode", "constant") == "constant" and len(n.attrs["pad"]) == 4


def _pool(n, pools: bool) -> bool:
    """A float32 2-d max pool that runs on NCHW16c (max_pool2d_blocked) where `pools` (a device's channel blocks)."""
    return pools and n.op == "max_pool2d" and len(n.outputs) == 1 and n.outputs[0].dtype == "float32" \
        and n.inputs[0].type.ndim == 4


def _entry_pad(n, every_region: bool) -> bool:
    """A device region's entry (every_region): a float32 zero pad of H and W of a graph input (the image), made
    NCHWkc by a conversion of the input with its lanes past C zero, so the conv reading it unrolls its channels."""
    x = n.inputs[0] if n.inputs else None
    return every_region and _hw_pad(n) and x.node is None and x.dtype == "float32" and x.type.ndim == 4 \
        and isinstance(x.shape[1], int) and float(n.attrs.get("value", 0.0)) == 0.0


def _side_operand(u, shape):
    """The 4-d shape of a broadcast operand u of an elementwise op whose output is NCHW `shape` (a per-channel or
    per-sample value, a scalar), or None when u varies over H or W."""
    n, c = shape[0], shape[1]
    u4 = (1,) * (4 - u.type.ndim) + tuple(u.shape) if u.type.ndim <= 4 else None
    if u4 is None or u4[2:] != (1, 1) or u4[0] not in (1, n) or u4[1] not in (1, c):
        return None
    return u4


def blocked_side(u, shape, lanes: int, add, widen=lambda v: v):
    """A broadcast operand u (_side_operand) of an elementwise op whose output is NCHW `shape`, for the op in channel
    blocks: a per-sample value as (N, 1, 1, 1, 1), a per-channel one as (N, C/lanes, 1, 1, lanes) after widen (e.g.
    its channels padded to whole blocks)."""
    u4 = _side_operand(u, shape)
    if u4[1] == 1:
        return add("reshape", [u], {"shape": (u4[0], 1, 1, 1, 1)})
    u4 = widen(add("reshape", [u], {"shape": u4}) if tuple(u.shape) != u4 else u)
    return add("reshape", [u4], {"shape": (u4.shape[0], u4.shape[1] // lanes, 1, 1, lanes)})


def _gemm_in_nchw(conv) -> bool:
    """A 1x1 stride-1 conv over a large map: in NCHW it runs as the GEMM over positions (schedule_conv1x1), faster
    than the channel-lane kernel with an NCHW16c input and a transposed NCHW output (0.39 against 0.21 ms for
    MobileNetV2's 16 -> 96 channels at 112x112), so it reads NCHW unless it also writes NCHW16c."""
    _, wp = conv.inputs
    _, _, oh, ow = conv.outputs[0].shape
    return wp.shape[2:4] == (1, 1) and tuple(conv.attrs.get("stride", (1, 1))) == (1, 1) and oh * ow >= GEMM_POSITIONS


def layout_inputs(n, v, lanes: int, pools: bool = False) -> list:
    """The inputs of node n that share the layout of its output v: a depthwise conv's, a pad's or (pools) a max
    pool's data input, an elementwise op's full-size inputs; none for any other op (a conv reads either layout)."""
    if _depthwise(n, lanes) or _hw_pad(n) or _pool(n, pools):
        return [n.inputs[0]]
    if _elementwise(n):
        return [u for u in n.inputs if tuple(u.shape) == tuple(v.shape)]
    return []


def _candidate(v, lanes: int) -> bool:
    return v.type.ndim == 4 and v.dtype == "float32" and isinstance(v.shape[1], int) and v.shape[1] >= lanes \
        and v.node is not None


def blocked_values(g, lanes: int, every_region: bool = False) -> set:
    """Ids of the values the pass stores in NCHW16c (see the module's doc); lanes: the target's.
    every_region (a device's channel blocks, use_channel_blocks): every region is kept, depthwise conv or not, and a
    conv reads its input blocked wherever it is (no NCHW GEMM)."""
    gemm_in_nchw = (lambda conv: False) if every_region else _gemm_in_nchw
    users = g.users()
    outputs = {v.id for v in g.outputs}
    values = {o.id: o for n in g.nodes for o in n.outputs if _candidate(o, lanes) or _entry_pad(n, every_region)}
    S = set(values) - outputs

    def full_inputs(v) -> list:
        return layout_inputs(v.node, v, lanes, every_region)

    def made_ok(v) -> bool:
        p = v.node
        if _elementwise(p) and not all(tuple(u.shape) == tuple(v.shape) or _side_operand(u, v.shape) is not None
                                       for u in p.inputs):
            return False
        return (p.op == "conv2d_packed" or _depthwise(p, lanes) or _hw_pad(p) or _elementwise(p)
                or _pool(p, every_region)) \
            and (_entry_pad(p, every_region) or all(u.id in S for u in full_inputs(v)))

    def taken(v) -> bool:
        """Some reader takes v blocked."""
        for node, pos in users.get(v.id, ()):
            if node.op == "conv2d_packed" and pos == 0 and (node.outputs[0].id in S or not gemm_in_nchw(node)):
                return True
            if (_depthwise(node, lanes) or _hw_pad(node) or _elementwise(node) or _pool(node, every_region)) \
                    and node.outputs[0].id in S:
                return True
        return False

    changed = True
    while changed:
        keep = {vid for vid in S if made_ok(values[vid])
                and (taken(values[vid])
                     or not (values[vid].node.op == "conv2d_packed" or _elementwise(values[vid].node)))}
        changed, S = keep != S, keep
    region = {vid: vid for vid in S}            # union-find over the values joined by a blocked op

    def find(v):
        while region[v] != v:
            region[v] = region[region[v]]
            v = region[v]
        return v
    for vid in S:
        p = values[vid].node
        for u in full_inputs(values[vid]) + ([p.inputs[0]] if p.op == "conv2d_packed" else []):
            if u.id in S:
                region[find(u.id)] = find(vid)
    if every_region:
        return S
    with_dw = {find(vid) for vid in S if _depthwise(values[vid].node, lanes)}
    return {vid for vid in S if find(vid) in with_dw}


def _widen(attrs, wp, add, lanes: int):
    """(nv, packed weight) for a conv2d_packed that writes NCHW16c: when it expands, WIDE_NV blocks a tile, or fewer
    down to pack_weights' choice so that they divide the blocks (the weight packed again for that), else as
    pack_weights chose."""
    o, nv, pack = attrs["out_channels"], attrs["nv"], wp.node
    ob = _blocks(o, lanes)
    wide = next((k for k in range(WIDE_NV, nv, -1) if ob % k == 0), nv)     # no block of padding
    if o < wp.shape[1] or wide <= nv or pack is None or pack.op != "pack_lanes":
        return nv, wp
    return wide, add("pack_lanes", list(pack.inputs), dict(pack.attrs, blocks=ob))


def use_blocked_layout(g, ctx):
    """On a CPU target, unless the build option blocked_layout is False: blocks of the target's lanes (NCHW16c on
    AVX-512, NCHW8c on AVX2, NCHW4c on SSE) around its depthwise convs."""
    if not (ctx.target.is_cpu and ctx.blocked_layout):
        return g
    return to_blocked(g, ctx.caps.lanes)


def to_blocked(g, lanes: int, every_region: bool = False):
    """The graph with the values of blocked_values(g, lanes, every_region) in blocks of `lanes` channels; every_region:
    a device's channel blocks (use_channel_blocks: every region, no CPU register tiles)."""
    S = blocked_values(g, lanes, every_region)
    if not S:
        return g
    blocked: dict = {}                  # id of an NCHW value in S -> its NCHW16c Value
    zero_lanes: set = set()             # ids of values in S whose lanes past C are zero (a region entry's)
    nchw: dict = {}                     # id of a value in S -> its NCHW form, made for a reader that needs it
    new_nodes = []

    add = node_appender(new_nodes)

    def padded(v, dim: int):
        """v with zeros appended along its channel dim `dim` (0 or 1 of 4) up to whole blocks."""
        extra = _blocks(v.shape[dim], lanes) * lanes - v.shape[dim]
        if not extra:
            return v
        return add("pad", [v], {"pad": (0, 0) * (3 - dim) + (0, extra), "value": 0.0, "mode": "constant"})

    def as_nchw(v):
        if v.id not in S:
            return v
        if v.id not in nchw:
            n, c, h, w = v.shape
            t = add("reshape", [add("permute", [blocked[v.id]], {"dims": (0, 1, 4, 2, 3)})],
                    {"shape": (n, _blocks(c, lanes) * lanes, h, w)})
            nchw[v.id] = t if c % lanes == 0 else add("slice", [t], {"dim": 1, "start": 0, "end": c, "step": 1})
        return nchw[v.id]

    def keep(n, inputs, attrs=None):
        new_nodes.append(with_inputs(n, inputs, attrs))

    for n in g.nodes:
        out = n.outputs[0] if len(n.outputs) == 1 else None
        if n.op == "conv2d_packed" and (n.inputs[0].id in S or out.id in S):
            x, wp = n.inputs
            takes = x.id in S and (out.id in S or every_region or not _gemm_in_nchw(n))
            attrs = dict(n.attrs, blocked_in=takes, blocked_out=out.id in S)
            if takes and x.id in zero_lanes and wp.shape[1] % lanes and wp.node is not None \
                    and wp.node.op == "pack_lanes":     # its weight's channels padded to whole blocks, zeros
                pack = wp.node
                wp = add("pack_lanes", [padded(pack.inputs[0], 1)], dict(pack.attrs))
            x = blocked[x.id] if takes else as_nchw(x)
            if out.id in S and not every_region:
                attrs["nv"], wp = _widen(attrs, wp, add, lanes)
            if out.id in S:
                blocked[out.id] = add("conv2d_packed", [x, wp], attrs)
            else:
                keep(n, [x, wp], attrs)
        elif out is not None and out.id in S:
            x = n.inputs[0]
            if _depthwise(n, lanes):
                w = padded(n.inputs[1], 0)
                _, _, kh, kw = w.shape
                w = add("reshape", [w], {"shape": (w.shape[0] // lanes, lanes, kh, kw)})
                blocked[out.id] = add("depthwise_blocked", [blocked[x.id], add("permute", [w], {"dims": (0, 2, 3, 1)})],
                                      {"stride": tuple(n.attrs.get("stride", (1, 1))),
                                       "dilation": tuple(n.attrs.get("dilation", (1, 1)))})
            elif _hw_pad(n):
                if _entry_pad(n, every_region):         # the graph input to NCHWkc, its lanes past C zero
                    xp = padded(x, 1)
                    t = add("reshape", [xp], {"shape": (xp.shape[0], xp.shape[1] // lanes, lanes) + xp.shape[2:]})
                    blocked[x.id] = add("permute", [t], {"dims": (0, 1, 3, 4, 2)})
                    zero_lanes.add(out.id)
                blocked[out.id] = add("pad", [blocked[x.id]], dict(n.attrs, pad=(0, 0) + tuple(n.attrs["pad"])))
            elif _pool(n, every_region):
                blocked[out.id] = add("max_pool2d_blocked", [blocked[x.id]], dict(n.attrs))
            else:
                ins = []
                for u in n.inputs:
                    if u.id in S:
                        ins.append(blocked[u.id])
                        continue
                    ins.append(blocked_side(u, out.shape, lanes, add, lambda v: padded(v, 1)))
                blocked[out.id] = add(n.op, ins, dict(n.attrs))
        elif any(u.id in S for u in n.inputs):      # a reader of the NCHW layout: the conversion back
            keep(n, [as_nchw(u) for u in n.inputs])
        else:
            new_nodes.append(n)
    g.nodes = new_nodes
    return g
