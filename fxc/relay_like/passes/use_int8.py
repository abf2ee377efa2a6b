"""use_int8: quantised convs and matmuls over constant int8 weights -> the CPU's packed int8 kernels (ops/int8.py).

    qconv2d(x_q, w, bias, sx, zx, sw, 0, sy, zy; padding)  -> conv2d_packed_i8(pad(pack_i8_words(x_q, 1, shift), zx),
                                                              pack_i8_weights(w, 0), sum(int32(w), [1, 2, 3]),
                                                              bias, sx, zx, sw, sy, zy)
    qmatmul(a_q, b [K, N] / [N, K], ...)                    -> matmul_packed_i8(pack_i8_words(a_q, -1, shift),
                                                              pack_i8_weights(b, n axis), sum(int32(b), k axis), ...)

On CPU targets, after quantize_chains (which makes qconv2d / qmatmul, ops/quant.py); the outputs are the same bit for
bit (the packed ops end in quant.py's epilogue). A rewrite needs an int8 weight that is a constant or computed from
weights (fold_constants / the prepack step pack it once), its zero point a constant 0, groups 1, a 2-d matmul weight,
and, for a padded conv, a constant input zero point (the pad value). A depthwise conv (an int8 weight of zero point
0, a constant input zero point) becomes depthwise_conv2d_i8 (ops/int8_depthwise.py: bit for bit, the sum exact in
float32 on the bytes, the requantisation fused; _depthwise). Others keep the generic integer compute, except a
grouped conv with the float requantisation and constant scales: it becomes the float chain it is defined as,
dequantize -> pad -> float conv2d -> bias, relu -> quantize (_grouped: the same up to float summation order, within
one quantisation step; the generic integer form is 10x slower on CPU).
The activation's shift (ops/int8.py) follows the byte type of the target's dot product, Caps.int8_dot: unsigned on
x86 (vpdpbusd, or the exact vpmaddwd form), signed on ARM (sdot; smull in the widening form). An activation read by
several convs (a ResNet block's conv and its downsample) is packed once; a conv's padding pads the words, with words
of four (x_zp - shift) bytes (the pack a vector row that fuses into the op making x, the pad a row-wise copy: 54 ->
6 us at 64 x 56 x 56). A conv over fewer than 4 input channels (the RGB stem) runs as the 1 x 1 conv over its
patches, words of (c, kh, kw) taps (_patches: 37 words an output of a 7 x 7 RGB stem, not 49 of 3 bytes and a zero).
"""
from __future__ import annotations

import numpy as np

from ...ops.int8_depthwise import EPILOGUE, exact_taps
from ...ops.registry import get_op
from ..graph import Graph, Node
from .hoist import weight_derived
from .pack_weights import _blocks, _lane_vectors

SIGNED_FORMS = ("neon_dot", "neon")     # Caps.int8_dot forms whose activation bytes are signed (ARM)
ROWS = 14                               # output rows per register tile a matmul's lane vectors are chosen for


def int8_shift(int8_dot: str, dtype: str) -> tuple:
    """(shift, signed_a) of a uint8 / int8 activation for a Caps.int8_dot form: its bytes x - shift are the
    instruction's byte type."""
    signed = int8_dot in SIGNED_FORMS
    if dtype == "uint8":
        return (128 if signed else 0), signed
    return (0 if signed else -128), signed


def use_int8(g: Graph, ctx):
    if not ctx.target.is_cpu or not any(n.op in ("qconv2d", "qmatmul") for n in g.nodes):
        return g
    caps = ctx.caps
    fixed = weight_derived(g)
    nodes, words = [], {}

    def add(op, inputs, **attrs):
        n = Node(op, inputs, attrs, get_op(op).infer([v.type for v in inputs], **attrs))
        nodes.append(n)
        return n.outputs[0]

    def activation_words(x, axis, pads, zp):
        shift, _ = int8_shift(caps.int8_dot, x.dtype)
        key = (x.id, axis, pads, shift)
        if key not in words:
            w = add("pack_i8_words", [x], axis=axis, shift=shift)
            if any(pads):       # pad the words with words of x_zp bytes: a vector row pack, then a row-wise pad
                top, left, bottom, right = pads
                byte = (int(zp) - shift) & 255
                fill = byte * 0x01010101 - (1 << 32 if byte >= 128 else 0)
                w = add("pad", [w], pad=(left, right, top, bottom), value=float(fill), mode="constant")
            words[key] = w
        return words[key]

    def weight(w):
        return w.dtype == "int8" and (w.is_const or w.id in fixed)

    for n in g.nodes:
        rep = None
        if n.op == "qconv2d":
            rep = _conv(n, caps, weight, activation_words, add) or _depthwise(n, add) or _grouped(n, weight, add)
        elif n.op == "qmatmul":
            rep = _matmul(n, caps, weight, activation_words, add)
        if rep is None:
            nodes.append(n)
            continue
        out, node = n.outputs[0], rep.node          # rep's node takes n's place and keeps its output Value
        node.outputs[0] = out
        out.node, out.index = node, 0
    g.nodes = nodes
    return g


def _lanes(outputs: int, caps) -> int:
    """Lanes of the packed weight: the target's (Caps.lanes), half of them for at most that many outputs (a narrow
    layer's weights and tiles not padded to twice its width; the byte dot takes 4, 8 and 16 lanes)."""
    half = caps.lanes // 2
    return half if outputs <= half and half >= 4 else caps.lanes


def _zero(v) -> bool:
    return v.is_const and not v.data.any()


def _epilogue_attrs(n, caps, x) -> dict:
    shift, signed = int8_shift(caps.int8_dot, x.dtype)
    return dict(shift=shift, signed_a=signed, **{k: n.attrs[k] for k in EPILOGUE if k in n.attrs})


def _conv(n, caps, weight, activation_words, add):
    x, w, bias, sx, zx, sw, zw, sy, zy = n.inputs
    padding = tuple(n.attrs.get("padding", (0, 0)))
    pads = padding + padding if len(padding) == 2 else padding
    if n.attrs.get("groups", 1) != 1 or not weight(w) or not _zero(zw) or (any(pads) and not zx.is_const):
        return None
    stride = tuple(n.attrs.get("stride", (1, 1)))
    dilation = tuple(n.attrs.get("dilation", (1, 1)))
    o = w.shape[0]
    lanes = _lanes(o, caps)
    nv = _lane_vectors(o, n.outputs[0].shape[3], caps)
    c, kh, kw = w.shape[1:]
    if c < 4 and dilation[0] == 1 and -(-c * kh * kw // 4) < kh * kw:    # few channels: words of (c, kh, kw) taps
        x, w = _patches(x, w, pads, zx, stride, dilation, n.outputs[0].shape[2:], add)
        pads, stride, dilation = (0, 0, 0, 0), (1, 1), (1, 1)
    xw = activation_words(x, 1, pads, zx.data.reshape(()) if any(pads) else 0)
    ww = add("pack_i8_weights", [w], axis=0, blocks=_blocks(o, nv, lanes), lanes=lanes)
    wsum = add("sum", [add("cast", [w], dtype="int32")], axes=(1, 2, 3), keepdim=False)
    return add("conv2d_packed_i8", [xw, ww, wsum, bias, sx, zx, sw, sy, zy], out_channels=o, stride=stride,
               dilation=dilation, nv=nv, **_epilogue_attrs(n, caps, x))


def _depthwise(n, add):
    """A depthwise qconv2d (one input channel a group) with an int8 weight of zero point 0 and a constant per-tensor
    input zero point -> depthwise_conv2d_i8 (ops/int8_depthwise.py): the same outputs bit for bit, the sum exact in
    float32 on fxc's vectorised depthwise schedule reading the bytes. Scales, bias and weight may be per call (a
    torch.compile graph's inputs). None where the kernel's sum would not be exact (exact_taps)."""
    x, w, bias, sx, zx, sw, zw, sy, zy = n.inputs
    a = n.attrs
    if a.get("groups", 1) != x.shape[1] or w.shape[1] != 1 or w.dtype != "int8" or not _zero(zw) \
            or not (zx.is_const and zx.data.size == 1):
        return None
    x_zp = int(zx.data.reshape(()))
    if not exact_taps(x.dtype, x_zp, w.shape[2] * w.shape[3]):
        return None
    epi = {k: a[k] for k in EPILOGUE if a.get(k) is not None}
    return add("depthwise_conv2d_i8", [x, w, bias, sx, sw, sy, zy], x_zp=x_zp, stride=tuple(a.get("stride", (1, 1))),
               padding=tuple(a.get("padding", (0, 0))), dilation=tuple(a.get("dilation", (1, 1))), **epi)


def _grouped(n, weight, add):
    """qconv2d with groups > 1 and requant "float" -> dequantize(x) -> pad by 0.0 -> conv2d(., dequantize(w))
    (+ bias * sx * sw) (relu) (quantize): the op's definition with the int32 sum taken in float, so the result is
    the integer one up to float summation order (within one quantisation step of the output). None where the scales
    are not constants, or the output is the int32 accumulator."""
    x, w, bias, sx, zx, sw, zw, sy, zy = n.inputs
    a = n.attrs
    if (a.get("groups", 1) == 1 or a.get("requant", "float") != "float" or a.get("out_dtype") == "int32"
            or not weight(w) or not (sx.is_const and sw.is_const)):
        return None
    o = w.shape[0]
    f = add("dequantize", [x, sx, zx], axis=1)
    pads = tuple(a.get("padding", (0, 0)))
    top, left, bottom, right = pads + pads if len(pads) == 2 else pads
    if any((top, left, bottom, right)):
        f = add("pad", [f], pad=(left, right, top, bottom), value=0.0, mode="constant")
    f = add("conv2d", [f, add("dequantize", [w, sw, zw], axis=0)], stride=tuple(a.get("stride", (1, 1))),
            dilation=tuple(a.get("dilation", (1, 1))), groups=a["groups"])
    scale = (sx.data.astype(np.float32).reshape(()) * np.broadcast_to(sw.data.reshape(-1), (o,))).astype(np.float32)
    if bias.is_const:
        b = np.broadcast_to(bias.data.reshape(-1), (o,)).astype(np.float32)
        b = b * scale if bias.dtype == "int32" else b
        if b.any():
            f = add("add", [f, Graph.const(b.reshape(1, o, 1, 1))])
    else:       # a weight input (from_torch's parameters): the same terms as graph ops
        b = bias if bias.dtype == "float32" else add("mul", [add("cast", [bias], dtype="float32"), Graph.const(scale)])
        f = add("add", [f, add("reshape", [b], shape=(1, b.shape[0] if b.type.ndim else 1, 1, 1))])
    if a.get("relu"):
        f = add("relu", [f])
    if a.get("out_dtype") == "float32":
        return f
    q = {k: a[k] for k in ("qmin", "qmax") if a.get(k) is not None}
    return add("quantize", [f, sy, zy], dtype=a["out_dtype"], inverse=bool(a.get("inverse", False)), **q)


def _patches(x, w, pads, zx, stride, dilation, out, add):
    """A conv over few input channels (an RGB stem: 3 bytes and a zero a word) as the 1 x 1 conv over its patches:
    x [N, C, H, W] -> pad by x_zp -> x' [N, C * KH * KW, OH, OW], w' [O, C * KH * KW, 1, 1]: words of four
    (c, kh, kw) taps (37 a 7 x 7 RGB output, not 49), the same products summed in another order (exact in int32).
    The row taps (im2col over KW: C * KW rows a row, 0.5 MB for the stem) are a kernel of their own, so the
    quantised input is made once, not once a tap; the pack of the words reads KH of those rows (unfold), so the
    whole patch matrix (1.8 MB) is only ever made as words."""
    top, left, bottom, right = pads
    c, kh, kw = w.shape[1:]
    if any(pads):
        x = add("pad", [x], pad=(left, right, top, bottom), value=float(zx.data.reshape(())), mode="constant")
    rows = add("im2col", [x], kernel=(1, kw), stride=(1, stride[1]), dilation=(1, dilation[1]),
               out=(x.shape[2], out[1]))                                        # [C, 1, KW, N, H', OW]
    taps = add("unfold", [rows], dim=4, size=kh, step=stride[0])                # [C, 1, KW, N, OH, OW, KH]
    taps = add("permute", [taps], dims=(3, 0, 6, 2, 4, 5, 1))
    taps = add("reshape", [taps], shape=(x.shape[0], c * kh * kw) + tuple(out))
    return taps, add("reshape", [w], shape=(w.shape[0], c * kh * kw, 1, 1))


def _matmul(n, caps, weight, activation_words, add):
    a, b, bias, sa, za, sb, zb, sy, zy = n.inputs
    if b.type.ndim != 2 or not weight(b) or not _zero(zb):
        return None
    trans_b = n.attrs.get("trans_b", False)
    cols = b.shape[0] if trans_b else b.shape[1]
    lanes = _lanes(cols, caps)
    nv = _lane_vectors(cols, ROWS, caps)
    bw = add("pack_i8_weights", [b], axis=0 if trans_b else 1, blocks=_blocks(cols, nv, lanes), lanes=lanes)
    wsum = add("sum", [add("cast", [b], dtype="int32")], axes=(1 if trans_b else 0,), keepdim=False)
    return add("matmul_packed_i8", [activation_words(a, -1, (0, 0, 0, 0), 0), bw, wsum, bias, sa, za, sb, sy, zy],
               n=cols, nv=nv, **_epilogue_attrs(n, caps, a))
