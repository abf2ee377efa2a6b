"""use_bf16: float32 conv2d/matmul over weights computed with bfloat16 operands (precision="bf16"; and, in any
precision, those whose operands are exactly bfloat16 values: a bfloat16 graph's).

    conv2d(x, w[O,C,KH,KW])         -> conv2d_packed_bf16(pack_bf16_pairs(x, 1), pack_lanes(w, axis 0, pair_axis 1))
    conv2d(pad(x, zeros on H, W), w) -> conv2d_packed_bf16(pad(pack_bf16_pairs(x, 1)), ...)
    matmul(a, b[..,K,N] / [..,N,K])  -> matmul_packed_bf16(pack_bf16_pairs(a, k axis),
                                                           pack_lanes(b, n axis, pair_axis k))

Only ops whose weight operand is a weight or a constant (or computed from them) change; depthwise/grouped
convs, matmuls of two activations (attention), Winograd convs (use_winograd runs first) and everything else stay
float32. Convs next to a depthwise conv are left to use_blocked_layout, which places them in its NCHW16c regions;
use_bf16_blocked then gives them bf16 operands in that layout. Accumulation, epilogues and outputs stay float32: only
the operands are rounded to bf16.
In a bfloat16 graph (autocast, model.bfloat16(): relay_like/builder.py widens each op to float32) a conv/matmul's
operands are bfloat16 values held in float32 (round_to / a cast from bfloat16, through pads and movement ops): the
packed bf16 ops then compute the same products, summed in float32 (the numbers of the float32 op up to the order
of the sums), on CPUs with AVX-512 BF16 (Caps.bf16_dot). A graph without such ops is left as it is, and asks no
measurement (ctx.bf16_exact).
An activation read by several convs is paired once. A zero pad of other axes moves after the pairing
(pad(pack_bf16_pairs(x)): one kernel, as the pack is injective, and the row-wise pad lowering copies half the
bytes: 64x56x56 -> 52 us vs 198 us for pack(pad(x))). The weight side is packed in the prepack step (hoist.py).
"""
from __future__ import annotations

from ...ops.registry import get_op
from ..graph import Node
from .hoist import weight_derived
from .pack_weights import _blocks, _lane_vectors
from .use_blocked_layout import _depthwise, layout_inputs

BANDWIDTH_ROWS = 8      # output rows per weight column at most: the op streams its weight (a GEMV), bf16 halves it


class _Rewrite:
    """The new node list of a graph being rewritten, with the bf16 words of each activation made once."""

    def __init__(self):
        self.nodes: list = []
        self.words: dict = {}           # (activation id, axis) -> its bf16x2 words

    def add(self, op, inputs, attrs):
        n = Node(op, inputs, attrs, get_op(op).infer([v.type for v in inputs], **attrs))
        self.nodes.append(n)
        return n.outputs[0]

    def pairs(self, x, axis):
        key = (x.id, axis)
        if key not in self.words:
            p = x.node
            if p is not None and p.op == "pad" and axis not in _padded_axes(p):
                # pad the words: zero words are bf16 zeros, and the copy is half the bytes
                self.words[key] = self.add("pad", [self.pairs(p.inputs[0], axis)], dict(p.attrs))
            else:
                self.words[key] = self.add("pack_bf16_pairs", [x], dict(axis=axis))
        return self.words[key]

    def replace(self, n, rep):
        """rep's node takes n's place: it keeps n's output Value (its id, name and users stay valid)."""
        out, node = n.outputs[0], rep.node
        node.outputs[0] = out
        out.node, out.index = node, 0


def use_bf16(g, ctx):
    """On a CPU target with precision "bf16"; in any precision on one with AVX-512 BF16 (Caps.bf16_dot), the convs
    and matmuls of a bfloat16 graph whose operands are exactly bfloat16 values. ctx.bf16_everywhere (precision
    "bf16") and ctx.bf16_exact() (those exact ops; asked only when there is one) False (a CPU whose vdpbf16ps is
    slower per multiply-add than its FMAs, see backends/llvm/probe.py): only the ops bound by reading their weight
    (<= BANDWIDTH_ROWS rows) change. The target's Caps give the lanes and register tiles of the packed weights;
    ctx.blocked_layout: whether use_blocked_layout runs (the build option of that name)."""
    caps = ctx.caps
    chosen = ctx.target.is_cpu and ctx.precision == "bf16"
    if not (chosen or ctx.target.is_cpu and caps.bf16_dot and has_half_float_ops(g)):
        return g
    lanes = caps.lanes
    fixed = weight_derived(g)       # a weight folded with constants (fold_scale_axis) is one too
    blocked = _next_to_depthwise(g, lanes) if ctx.blocked_layout else set()
    exact = exact_bf16(g) if not chosen else set()
    r = _Rewrite()
    for n in g.nodes:
        if not n.outputs or n.outputs[0].dtype != "float32" or len(n.inputs) != 2 \
                or not (n.inputs[1].is_const or n.inputs[1].id in fixed) or n in blocked \
                or not (chosen or n.op in ("conv2d", "matmul") and all(v.id in exact for v in n.inputs)) \
                or not (_streams_weight(n) or (ctx.bf16_everywhere if chosen else ctx.bf16_exact())):
            r.nodes.append(n)
            continue
        if n.op == "conv2d" and n.attrs.get("groups", 1) == 1:
            x, w = n.inputs
            o = w.shape[0]
            nv = _lane_vectors(o, n.outputs[0].shape[3], caps)
            wp = r.add("pack_lanes", [w], dict(axis=0, block_pos=0, blocks=_blocks(o, nv, lanes), lanes=lanes,
                                               pair_axis=1))
            rep = r.add("conv2d_packed_bf16", [r.pairs(x, 1), wp],
                        dict(out_channels=o, stride=n.attrs.get("stride", (1, 1)),
                             dilation=n.attrs.get("dilation", (1, 1)), nv=nv))
        elif n.op == "matmul" and n.outputs[0].shape[-1] >= 8:
            a, b = n.inputs
            nd = b.type.ndim
            cols = n.outputs[0].shape[-1]
            nv = _lane_vectors(cols, 14, caps)
            trans_a = n.attrs.get("trans_a", False)
            axis = nd - 2 if n.attrs.get("trans_b") else nd - 1
            bp = r.add("pack_lanes", [b], dict(axis=axis, block_pos=nd - 2, blocks=_blocks(cols, nv, lanes),
                                               lanes=lanes, pair_axis=nd - 1))
            rep = r.add("matmul_packed_bf16", [r.pairs(a, a.type.ndim - (2 if trans_a else 1)), bp],
                        dict(n=cols, trans_a=trans_a, nv=nv))
        else:
            r.nodes.append(n)
            continue
        r.replace(n, rep)
    g.nodes = r.nodes
    return g


def use_bf16_blocked(g, ctx):
    """On a CPU target with precision "bf16" (ctx.bf16_everywhere as for use_bf16): the convs use_bf16 leaves to
    use_blocked_layout (those next to a depthwise conv), once it has placed them:

        conv2d_packed(x16, pack_lanes(w), blocked_in, ..) -> conv2d_packed_bf16(pack_bf16_pairs(x16, 4),
                                                                                pack_lanes(w, pair_axis 1), ..)
        conv2d_packed(x, pack_lanes(w), ..) (NCHW input)  -> conv2d_packed_bf16(pack_bf16_pairs(x, 1), ..)

    The words of an NCHW16c activation are its bytes in bfloat16: block b's 16 channels as 8 words. The conv reads
    them through (fuse_ops), packing each row tile's input columns once into a local panel (schedules/cpu/gemm), so no
    words tensor goes through memory. A conv over an odd number of channels from NCHW16c stays float32 (a pair
    would join a channel to a padding lane)."""
    if not (ctx.target.is_cpu and ctx.precision == "bf16"):
        return g
    everywhere = ctx.bf16_everywhere
    fixed = weight_derived(g)
    r = _Rewrite()
    for n in g.nodes:
        pack = n.inputs[1].node if n.op == "conv2d_packed" else None
        if pack is None or pack.op != "pack_lanes" or pack.attrs.get("pair_axis") is not None \
                or not (pack.inputs[0].is_const or pack.inputs[0].id in fixed) \
                or n.outputs[0].dtype != "float32" or not (everywhere or _streams_weight(n)) \
                or (n.attrs.get("blocked_in") and pack.inputs[0].shape[1] % 2):
            r.nodes.append(n)
            continue
        wp = r.add("pack_lanes", list(pack.inputs), dict(pack.attrs, pair_axis=1))
        rep = r.add("conv2d_packed_bf16", [r.pairs(n.inputs[0], 4 if n.attrs.get("blocked_in") else 1), wp],
                    dict(n.attrs))
        r.replace(n, rep)
    g.nodes = r.nodes
    return g


def has_half_float_ops(g) -> bool:
    """Whether g has a bfloat16 value (a cast to or from it, or a round_to): a float32 graph has none."""
    return any(n.op == "round_to" and n.attrs.get("dtype") == "bfloat16"
               or any(v.dtype == "bfloat16" for v in n.inputs) for n in g.nodes)


EXACT_THROUGH = ("reshape", "permute")     # ops that move values without changing them


def exact_bf16(g) -> set:
    """The ids of the float32 values that are exactly bfloat16 values: round_to(x, bfloat16), cast(bfloat16 x),
    and those moved (EXACT_THROUGH) or zero-padded."""
    exact = set()
    for n in g.nodes:
        if len(n.outputs) != 1 or n.outputs[0].dtype != "float32" or not n.inputs:
            continue
        x = n.inputs[0]
        if n.op == "round_to" and n.attrs.get("dtype") == "bfloat16" or n.op == "cast" and x.dtype == "bfloat16" \
                or x.id in exact and (n.op in EXACT_THROUGH or n.op == "pad" and _zero_pad(n)):
            exact.add(n.outputs[0].id)
    return exact


def _next_to_depthwise(g, lanes: int) -> set:
    """The convs whose input comes from a depthwise conv, or whose output goes to one, through elementwise ops and
    pads (use_blocked_layout's regions)."""
    users = g.users()
    up: dict = {}
    down: dict = {}

    def through(n, v) -> list:
        """The inputs that n, an elementwise op or a pad, passes its layout through to v."""
        return [] if _depthwise(n, lanes) else layout_inputs(n, v, lanes)

    def from_dw(v) -> bool:
        if v.id not in up:
            p = v.node
            up[v.id] = p is not None and (_depthwise(p, lanes) or any(from_dw(u) for u in through(p, v)))
        return up[v.id]

    def to_dw(v) -> bool:
        if v.id not in down:
            down[v.id] = False
            down[v.id] = any(_depthwise(n, lanes) and pos == 0 or (through(n, n.outputs[0]) and to_dw(n.outputs[0]))
                             for n, pos in users.get(v.id, ()))
        return down[v.id]
    return {n for n in g.nodes if n.op == "conv2d" and n.attrs.get("groups", 1) == 1
            and (from_dw(n.inputs[0]) or to_dw(n.outputs[0]))}


def _streams_weight(n) -> bool:
    """At most BANDWIDTH_ROWS output rows per output channel/column (conv: N*OH*OW, matmul: the rows)."""
    out = n.outputs[0].type
    cols = out.shape[1] if n.op == "conv2d" else n.attrs["out_channels"] if n.op == "conv2d_packed" else out.shape[-1]
    return out.numel <= BANDWIDTH_ROWS * cols


def _zero_pad(p) -> bool:
    return p.attrs.get("mode", "constant") == "constant" and float(p.attrs.get("value", 0.0)) == 0.0


def _padded_axes(p) -> set:
    """Axes a constant zero pad changes (all axes when it is not one: then the pad stays before the pairing)."""
    pad = tuple(p.attrs.get("pad", ()))
    nd = p.inputs[0].type.ndim
    if p.attrs.get("mode", "constant") != "constant" or float(p.attrs.get("value", 0.0)) != 0.0 or len(pad) % 2:
        return set(range(nd))
    return {nd - 1 - k // 2 for k in range(len(pad)) if pad[k]}
