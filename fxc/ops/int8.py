"""int8 compute on CPUs (relay_like/passes/use_int8.py): ops/quant.py's qconv2d / qmatmul over words of four bytes.

An int8 word is an int32 holding four 8-bit values adjacent along a reduction axis: byte k (bits 8k..8k+7) is element
4c + k (a length that is not a multiple of 4 is zero-padded). It is the operand layout of the 4-way byte dot
(symbolic.expr.DotI8: AVX-512 VNNI / AVX-VNNI vpdpbusd, aarch64 sdot, the exact vpmaddwd form on AVX2, a widening form
elsewhere), which adds four byte products to an int32 accumulator per lane; so a conv/matmul over words does a quarter
of the reduction steps, each four multiply-adds, accumulated exactly in int32.

Activation words hold x - shift: the instruction's byte type (Caps.int8_dot; unsigned on x86, signed on ARM) decides
the shift (u8 activations: 0 on x86, 128 on ARM; s8: -128 on x86, 0 on ARM). Weights (int8 with zero point 0) are
packed once, as pack_lanes packs float32 weights, with words along the reduction axis:

    pack_i8_words(x, axis, shift)          uint8/int8 [.., C, ..] -> int32 words [.., ceil(C/4), ..]
    pack_i8_weights(w, axis, blocks, lanes) int8 w -> pack_lanes(w, axis) as words along axis 1: a conv's [O, C, KH, KW]
                                           -> [O/L, C/4, KH, KW, L], a linear's [N, K] -> [N/L, K/4, L]
    conv2d_packed_i8(xw, ww, wsum, bias, x_scale, x_zp, w_scale, y_scale, y_zp)
                                           xw [N, C/4, H, W], ww [O/L, C/4, KH, KW, L] -> out_dtype [N, O, OH, OW]
                                           (blocked_in: xw the bytes [N, C/B, H, W, B] in channel blocks, B a
                                           multiple of 4, whose 4 adjacent bytes are the words; blocked_out: the
                                           output [N, O/L, OH, OW, L]; passes/use_int8_blocks.py)
    matmul_packed_i8(aw, bw, wsum, bias, a_scale, a_zp, b_scale, y_scale, y_zp)
                                           aw [.., M, K/4], bw [.., N/L, K/4, L] -> out_dtype [.., M, N]

wsum [O] int32 is each output's weight sum; the rest are qconv2d's / qmatmul's epilogue inputs and attrs (out_dtype,
relu, qmin, qmax, requant, inverse). The sum over the words is corrected by the shift's compensation,
acc = sum(bytes(xw) * bytes(ww)) - (x_zp - shift) * wsum[o] = sum((x - x_zp) * w) exactly (a conv's padding holds
x_zp - shift bytes, the real zero), then ends in quant.py's own epilogue: the same int32 and float32 operations in the
same order, so the outputs equal qconv2d's / qmatmul's bit for bit. The references compute the sums in int64 from
the words and call quant.py's epilogue reference.
"""
from __future__ import annotations

import numpy as np

from ..errors import ShapeError
from ..lowering import te
from ..symbolic.expr import Const, as_expr, binary, cast, compare, dot_i8_generic, minimum, select
from ..types import TensorType
from .linalg import _matmul_packed_infer, _pack, _pack_infer, _pack_ref, packed_matmul_compute, unpack_ref
from .nn import _conv2d_packed, _conv2d_packed_infer, _conv2d_ref, from_blocked_ref, to_blocked_ref
from .quant import _check_epilogue, _epilogue, _epilogue_ref, _param
from .registry import Kind, OpDef, register


# -- numpy: integers <-> int8 words -------------------------------------------------------------------------------
def i8_words_ref(x: np.ndarray, axis: int, shift: int = 0) -> np.ndarray:
    """Four adjacent elements along `axis` as int32 words of their bytes (x - shift) mod 256, zero-padded."""
    x = np.asarray(x).astype(np.int64) - shift
    axis %= x.ndim
    n = x.shape[axis]
    pad = [(0, 0)] * x.ndim
    pad[axis] = (0, -n % 4)
    b = (np.pad(x, pad) & 255).astype(np.uint8)
    b = np.moveaxis(b.reshape(b.shape[:axis] + (-1, 4) + b.shape[axis + 1:]), axis + 1, -1)
    return np.ascontiguousarray(np.ascontiguousarray(b).view("<i4")[..., 0])


def unword_ref(w: np.ndarray, axis: int, n: int, signed: bool) -> np.ndarray:
    """int8 words -> the n values (int64) they hold along `axis` (inverse of i8_words_ref with shift 0)."""
    axis %= w.ndim
    b = np.ascontiguousarray(w.astype("<i4")).view(np.int8 if signed else np.uint8).astype(np.int64)
    b = b.reshape(w.shape + (4,))
    b = np.moveaxis(b, -1, axis + 1).reshape(w.shape[:axis] + (-1,) + w.shape[axis + 1:])
    return np.take(b, np.arange(n), axis=axis)


# -- pack_i8_words ------------------------------------------------------------------------------------------------
def _words_infer(types, axis, shift=0):
    x = types[0]
    if x.dtype not in ("uint8", "int8") or not -x.ndim <= axis < x.ndim:
        raise ShapeError(f"pack_i8_words: needs uint8 or int8 and an axis of {list(x.shape)}, got {x.dtype}, "
                         f"axis {axis}")
    shape = list(x.shape)
    shape[axis] = -(-shape[axis] // 4)
    return [TensorType(tuple(shape), "int32")]


def word_of(get, n: int, axis: int, i: tuple, shift: int = 0):
    """The int8 word at index i of the words tensor: get(index) reads the 8-bit source, n = its length along `axis`
    (bytes past it are zero); bytes (x - shift) mod 256."""
    w = None
    for k in range(4):
        j = i[axis] * 4 + k
        idx = list(i)
        idx[axis] = j if n % 4 == 0 else minimum(j, as_expr(n - 1))
        mask = Const(255, "int32") if n % 4 == 0 else \
            select(compare("lt", j, as_expr(n)), Const(255, "int32"), Const(0, "int32"))   # bytes past n: zero
        b = binary("and", binary("sub", cast("int32", get(tuple(idx))), Const(shift, "int32")), mask)
        b = binary("shl", b, Const(8 * k, "int32")) if k else b
        w = b if w is None else binary("or", w, b)
    return w


def _words(x, axis, shift=0):
    shape = _words_infer([x], axis, shift)[0].shape
    axis %= x.ndim
    return te.compute(shape, lambda *i: word_of(lambda idx: x[idx], x.shape[axis], axis, i, shift), "pack_i8_words",
                      {"int8_words": True})      # (the CPU schedule's vector rows: schedules/cpu/default.py)


register(OpDef("pack_i8_words", Kind.INJECTIVE, _words_infer, i8_words_ref, _words, {}, None,
               lambda rng: [([rng.integers(0, 256, (1, 6, 3, 5)).astype(np.uint8)], {"axis": 1}),
                            ([rng.integers(-128, 128, (4, 8)).astype(np.int8)], {"axis": -1, "shift": -128}),
                            ([rng.integers(0, 256, (3, 9)).astype(np.uint8)], {"axis": 1, "shift": 128})],
               ("uint8", "int8"), doc="Four adjacent uint8/int8 elements along `axis` as the bytes (x - shift) of "
                                      "an int32 word (ops/int8.py; a length not a multiple of 4 zero-padded)."))


# -- pack_i8_weights ----------------------------------------------------------------------------------------------
def _weights_infer(types, axis, blocks, lanes=16):
    w = types[0]
    if w.dtype != "int8" or w.ndim < 2:
        raise ShapeError(f"pack_i8_weights: needs an int8 weight of 2 or more dims, got {w.dtype} {list(w.shape)}")
    t = _pack_infer(types, axis, 0, blocks, lanes)[0]
    shape = list(t.shape)
    shape[1] = -(-shape[1] // 4)
    return [TensorType(tuple(shape), "int32")]


def _weights(w, axis, blocks, lanes=16):
    packed = _pack(w, axis, 0, blocks, lanes)
    shape = _weights_infer([w], axis, blocks, lanes)[0].shape
    return te.compute(shape, lambda *i: word_of(lambda idx: packed[idx], packed.shape[1], 1, i), "pack_i8_weights")


def pack_weight_ref(w: np.ndarray, axis: int, blocks: int, lanes: int = 16) -> np.ndarray:
    """pack_lanes(w, axis, block_pos 0, blocks, lanes) with words of four along axis 1 of the result (the reduction
    axis after the blocks)."""
    return i8_words_ref(_pack_ref(np.asarray(w, np.int8), axis, 0, blocks, lanes), 1)


register(OpDef("pack_i8_weights", Kind.INJECTIVE, _weights_infer, pack_weight_ref, _weights, {}, None,
               lambda rng: [([rng.integers(-128, 128, (20, 6, 3, 3)).astype(np.int8)], {"axis": 0, "blocks": 2}),
                            ([rng.integers(-128, 128, (9, 33)).astype(np.int8)], {"axis": 1, "blocks": 3})],
               ("int8",), doc="An int8 weight packed for the 4-way byte dot once (ops/int8.py): pack_lanes(w, axis, "
                              "block_pos 0) with words of four along axis 1 of the result."))


# -- the requantisation epilogue: ops/quant.py's, after the shift's compensation ----------------------------------
_EPI = dict(out_dtype="uint8", relu=False, qmin=None, qmax=None, requant="float", inverse=False)


def _epi(attrs):
    return {k: attrs.get(k, v) for k, v in _EPI.items()}


def _check(name, t, ins, o, attrs):
    """The output type: the packed operands' shape in out_dtype, after quant.py's checks of the epilogue's inputs
    (wsum int32 [o], then qconv2d's bias, x_scale, x_zp, w_scale, y_scale, y_zp)."""
    wsum, bias, x_scale, x_zp, w_scale, y_scale, y_zp = ins
    if wsum.dtype != "int32" or tuple(wsum.shape) != (o,):
        raise ShapeError(f"{name}: wsum must be int32 [{o}] (each output's weight sum), got {wsum.dtype} "
                         f"{list(wsum.shape)}")
    e = _epi(attrs)
    _check_epilogue(name, e["out_dtype"], e["requant"], e["relu"], bias, (x_scale, w_scale), (x_zp, x_zp), y_scale,
                    y_zp, o, e["qmin"], e["qmax"])
    return [TensorType(t.shape, e["out_dtype"])]


def _output(acc, o, ins, shift, attrs):
    """quant.py's epilogue of the true sum: acc - (x_zp - shift) * wsum[o] (acc over the shifted bytes)."""
    wsum, bias, x_scale, x_zp, w_scale, y_scale, y_zp = ins
    true = acc - (_param(x_zp, None) - Const(shift, "int32")) * wsum[o]
    return _epilogue(true, o, bias, x_scale, w_scale, y_scale, y_zp, **_epi(attrs))


def _output_ref(acc, axis, ins, shift, attrs):
    wsum, bias, x_scale, x_zp, w_scale, y_scale, y_zp = ins
    shape = [-1 if d == axis else 1 for d in range(acc.ndim)]
    true = acc - (np.int64(np.asarray(x_zp).reshape(())) - shift) * wsum.astype(np.int64).reshape(shape)
    true = (true + 2 ** 31) % 2 ** 32 - 2 ** 31         # int32 arithmetic
    return _epilogue_ref(true.astype(np.int32), axis, bias, x_scale, w_scale, y_scale, y_zp, **_epi(attrs))


def _product(signed_a):
    return lambda a, b: dot_i8_generic(Const(0, "int32"), a, b, signed_a)


# -- conv2d over int8 words ---------------------------------------------------------------------------------------
def _conv_infer(types, out_channels, stride=(1, 1), dilation=(1, 1), nv=1, shift=0, signed_a=False,
                blocked_in=False, blocked_out=False, **epi):
    x, w = types[:2]
    blocks_ok = x.ndim == 5 and x.dtype in ("uint8", "int8") and x.shape[4] % 4 == 0 and w.ndim == 5 \
        and w.shape[1] == x.shape[1] * x.shape[4] // 4
    if (x.dtype != "int32" and not blocked_in) or (blocked_in and not blocks_ok) or w.dtype != "int32" \
            or w.ndim != 5 or len(types) != 9 or (blocked_out and out_channels % w.shape[4]):
        raise ShapeError("conv2d_packed_i8 takes int8 words (int32) [N, C/4, H, W] (blocked_in: the bytes [N, C/B, H, "
                         "W, B], B a multiple of 4) and [O/L, C/4, KH, KW, L] (blocked_out: O a multiple of L), then "
                         "wsum, bias, x_scale, x_zp, w_scale, y_scale, y_zp; got "
                         + ", ".join(f"{t.dtype} {list(t.shape)}" for t in types))
    if blocked_in:      # as the words [N, C/4, H, W] would be
        x = TensorType((x.shape[0], w.shape[1]) + tuple(x.shape[2:4]), "int32")
    t = _conv2d_packed_infer([x, w], out_channels, stride, dilation, nv, False, blocked_out)[0]
    return _check("conv2d_packed_i8", t, types[2:], out_channels, epi)


def _block_words(x, shift):
    """word(n, blk, j, h, w): word j of block blk at position (n, h, w) of channel blocks x [N, C/B, H, W, B], its
    bytes 4j..4j+3 as word_of makes them: word blk * B/4 + j of pack_i8_words of the NCHW activation."""
    return lambda n, blk, j, h, w: word_of(lambda idx: x[idx], x.shape[4], 4, (n, blk, h, w, j), shift)


def _blocks_acc(x, wp, out_channels, stride, dilation, nv, blocked_out, shift, signed_a):
    """The int32 sums of a conv over channel blocks of bytes x [N, C/B, H, W, B]: conv2d_packed's over the words
    _block_words makes (its schedule reads each as four adjacent bytes of x: attrs x_shift)."""
    _, c4, kh, kw, L = wp.shape
    word, product = _block_words(x, shift), _product(signed_a)
    rc, rh, rw = te.reduce_axis(c4, "rc"), te.reduce_axis(kh, "rh"), te.reduce_axis(kw, "rw")

    def body(n, o, h, wi, ol=None):
        ih, iw = h * stride[0] + rh[0] * dilation[0], wi * stride[1] + rw[0] * dilation[1]
        wv = wp[o, rc[0], rh[0], rw[0], ol] if blocked_out else \
            wp[binary("idiv", o, as_expr(L)), rc[0], rh[0], rw[0], binary("imod", o, as_expr(L))]
        per = as_expr(x.shape[4] // 4)
        return te.sum_(product(word(n, binary("idiv", rc[0], per), binary("imod", rc[0], per), ih, iw), wv),
                       [rc, rh, rw])
    words = TensorType((x.shape[0], c4) + tuple(x.shape[2:4]), "int32")
    shape = _conv2d_packed_infer([words, wp], out_channels, stride, dilation, nv, False, blocked_out)[0].shape
    return te.compute(shape, body, "conv2d_packed_i8_acc",
                      {"schedule": "conv2d_packed", "int8": True, "signed_a": signed_a, "x_shift": shift, "x": x,
                       "w": wp, "stride": tuple(stride), "dilation": tuple(dilation), "nv": nv, "blocked_in": True,
                       "blocked_out": blocked_out, "groups": 1})


def _conv(x, wp, *ins, out_channels, stride=(1, 1), dilation=(1, 1), nv=1, shift=0, signed_a=False,
          blocked_in=False, blocked_out=False, **epi):
    if blocked_in:
        acc = _blocks_acc(x, wp, out_channels, stride, dilation, nv, blocked_out, shift, signed_a)
    else:
        acc = _conv2d_packed(x, wp, out_channels, stride, dilation, nv, blocked_out=blocked_out,
                             product=_product(signed_a), name="conv2d_packed_i8_acc", int8=True, signed_a=signed_a)
    if blocked_out:     # [N, O/L, OH, OW, L]: channel ob * L + l (O a multiple of L: every lane a channel)
        L = wp.shape[4]
        return te.compute(acc.shape, lambda n, ob, h, w, ol: _output(acc[n, ob, h, w, ol], ob * L + ol, ins, shift,
                                                                     epi), "conv2d_packed_i8")
    return te.compute(acc.shape, lambda n, o, h, w: _output(acc[n, o, h, w], o, ins, shift, epi), "conv2d_packed_i8")


def _conv_ref(x, wp, *ins, out_channels, stride=(1, 1), dilation=(1, 1), nv=1, shift=0, signed_a=False,
              blocked_in=False, blocked_out=False, **epi):
    c4 = wp.shape[1]
    if blocked_in:
        x = i8_words_ref(from_blocked_ref(x), 1, shift)
    xs = unword_ref(x, 1, 4 * c4, signed_a)
    ws = unword_ref(unpack_ref(wp, 0, 0, out_channels), 1, 4 * c4, True)
    acc = _conv2d_ref(xs.astype(np.float64), ws.astype(np.float64), stride, dilation)   # exact: |acc| < 2^53
    out = _output_ref(np.rint(acc).astype(np.int64), 1, ins, shift, epi)
    return to_blocked_ref(out, wp.shape[4]) if blocked_out else out


# -- matmul over int8 words ---------------------------------------------------------------------------------------
def _matmul_infer(types, n, nv=1, shift=0, signed_a=False, **epi):
    a, b = types[:2]
    if a.dtype != "int32" or b.dtype != "int32" or len(types) != 9:
        raise ShapeError("matmul_packed_i8 takes int8 words (int32) [.., M, K/4] and [.., N/L, K/4, L], then wsum, "
                         "bias, x_scale, x_zp, w_scale, y_scale, y_zp; got "
                         + ", ".join(f"{t.dtype} {list(t.shape)}" for t in types))
    t = _matmul_packed_infer(types[:2], n, False, nv)[0]
    return _check("matmul_packed_i8", t, types[2:], n, epi)


def _matmul(a, bp, *ins, n, nv=1, shift=0, signed_a=False, **epi):
    acc = packed_matmul_compute(a, bp, n, False, nv, _product(signed_a), "matmul_packed_i8_acc",
                                {"int8": True, "signed_a": signed_a})
    return te.compute(acc.shape, lambda *i: _output(acc[i], i[-1], ins, shift, epi), "matmul_packed_i8")


def _matmul_ref(a, bp, *ins, n, nv=1, shift=0, signed_a=False, **epi):
    k4 = bp.shape[-2]
    av = unword_ref(a, a.ndim - 1, 4 * k4, signed_a)
    b = unword_ref(unpack_ref(bp, bp.ndim - 3, bp.ndim - 3, n), bp.ndim - 2, 4 * k4, True)     # [.., n, k]
    acc = np.matmul(av, np.swapaxes(b, -1, -2))
    return _output_ref(acc, acc.ndim - 1, ins, shift, epi)


# -- samples: random quantised operands and their epilogue inputs -------------------------------------------------
def _qparams(rng, o, out_dtype, bias):
    """bias, x_scale, x_zp placeholder (replaced), w_scale, y_scale, y_zp for o outputs."""
    b = rng.integers(-3000, 3000, o).astype(np.int32) if bias == "int32" else \
        rng.uniform(-1, 1, o).astype(np.float32) if bias == "float32" else np.zeros(o, np.int32)
    ys = np.float32(rng.uniform(0.05, 0.2)) if out_dtype in ("uint8", "int8") else np.float32(1)
    yzp = np.int32(rng.integers(-10, 10) + (128 if out_dtype == "uint8" else 0)) if out_dtype in ("uint8", "int8") \
        else np.int32(0)
    return b, np.float32(rng.uniform(0.01, 0.05)), rng.uniform(2 ** -9, 2 ** -6, o).astype(np.float32), ys, yzp


def packed_inputs(xw, wp, w, x_zp, bias, x_scale, w_scale, y_scale, y_zp):
    """The inputs of conv2d_packed_i8 / matmul_packed_i8 after the two word operands: wsum (each output's weight sum
    over its other axes, from the int8 weight w [O, ...]) and the qconv2d epilogue's."""
    wsum = w.reshape(w.shape[0], -1).astype(np.int64).sum(1).astype(np.int32)
    return [xw, wp, wsum, bias, np.float32(x_scale), np.int32(x_zp), w_scale, np.float32(y_scale), np.int32(y_zp)]


def _conv_sample(rng, n, c, h, w, o, k, blocks, x_zp=3, out_dtype="uint8", bias="", lanes=16, shift=0,
                 blocked_in=False, **attrs):
    x = rng.integers(0, 256, (n, c, h, w)).astype(np.uint8)
    wt = rng.integers(-128, 128, (o, c, k, k)).astype(np.int8)
    b, xs, ws, ys, yzp = _qparams(rng, o, out_dtype, bias)
    xw = to_blocked_ref(x, lanes) if blocked_in else i8_words_ref(x, 1, shift)
    return packed_inputs(xw, pack_weight_ref(wt, 0, blocks, lanes), wt, x_zp, b, xs, ws, ys, yzp), \
        dict(out_channels=o, out_dtype=out_dtype, shift=shift, blocked_in=blocked_in, **attrs)


register(OpDef("conv2d_packed_i8", Kind.OUT_FUSABLE, _conv_infer, _conv_ref, _conv, {}, None,
               lambda rng: [_conv_sample(rng, 1, 3, 9, 10, 4, 3, 1),
                            _conv_sample(rng, 2, 8, 11, 13, 40, 3, 3, stride=(2, 2), nv=3, bias="float32",
                                         relu=True, inverse=True),
                            _conv_sample(rng, 1, 16, 5, 6, 33, 1, 3, nv=3, out_dtype="float32", bias="float32"),
                            _conv_sample(rng, 1, 12, 7, 7, 20, 3, 2, nv=2, out_dtype="int8", bias="int32",
                                         requant="onnxruntime", dilation=(2, 1), relu=True),
                            _conv_sample(rng, 1, 5, 6, 7, 16, 3, 1, x_zp=200, shift=128, signed_a=True, qmin=0,
                                         qmax=127),
                            _conv_sample(rng, 1, 20, 4, 5, 24, 1, 2, out_dtype="int32", bias="int32", nv=2),
                            _conv_sample(rng, 1, 32, 7, 6, 32, 3, 2, nv=2, blocked_in=True, blocked_out=True,
                                         relu=True),
                            _conv_sample(rng, 2, 16, 9, 8, 20, 3, 2, stride=(2, 2), nv=2, blocked_in=True,
                                         out_dtype="int8", bias="int32", requant="onnxruntime"),
                            _conv_sample(rng, 1, 6, 5, 5, 16, 1, 1, blocked_out=True, out_dtype="float32",
                                         bias="float32")],
               ("int32", "uint8", "int8", "float32"),
               doc="Quantised conv2d over int8 words (ops/int8.py): x [N, C/4, H, W] (blocked_in: channel blocks of "
                   "bytes [N, C/B, H, W, B]), w [O/L, C/4, KH, KW, L], then wsum and qconv2d's epilogue inputs; the "
                   "int32 sum and qconv2d's requantisation fused; the output NCHW, or NCHWc [N, O/L, OH, OW, L] "
                   "(blocked_out)."))


def _matmul_sample(rng, a_shape, k, n, blocks, a_zp=5, out_dtype="uint8", bias="", lanes=16, shift=0, **attrs):
    a = rng.integers(0, 256, a_shape[:-1] + (k,)).astype(np.uint8)
    b = rng.integers(-128, 128, (n, k)).astype(np.int8)                   # [N, K] (a linear's weight)
    bb, xs, ws, ys, yzp = _qparams(rng, n, out_dtype, bias)
    return packed_inputs(i8_words_ref(a, -1, shift), pack_weight_ref(b, 0, blocks, lanes), b, a_zp, bb, xs, ws,
                         ys, yzp), dict(n=n, out_dtype=out_dtype, shift=shift, **attrs)


register(OpDef("matmul_packed_i8", Kind.OUT_FUSABLE, _matmul_infer, _matmul_ref, _matmul, {}, None,
               lambda rng: [_matmul_sample(rng, (5, 8), 8, 3, 1),
                            _matmul_sample(rng, (2, 17, 9), 9, 40, 3, nv=3, bias="float32", out_dtype="float32"),
                            _matmul_sample(rng, (9, 30), 30, 33, 3, nv=3, bias="int32", requant="onnxruntime",
                                           out_dtype="int8")],
               ("int32", "uint8", "int8", "float32"),
               doc="Quantised matmul over int8 words (ops/int8.py): a [.., M, K/4], b [.., N/L, K/4, L], then wsum and "
                   "qmatmul's epilogue inputs; the int32 sum and qmatmul's requantisation fused."))
