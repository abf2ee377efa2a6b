"""int8 compute on CPUs (relay_like/passes/use_int8.py): quantized conv2d/matmul over words of four bytes.

An int8 word is an int32 holding four 8-bit values adjacent along a reduction axis: byte k (bits 8k..8k+7) is element
4c + k (a length that is not a multiple of 4 is zero-padded). It is the operand layout of the 4-way byte dot
(symbolic.expr.DotI8: AVX-512 VNNI / AVX-VNNI vpdpbusd, aarch64 sdot, the exact vpmaddwd form on AVX2, a widening form
elsewhere), which adds four byte products to an int32 accumulator per lane; so a conv/matmul over words does a quarter
of the reduction steps, each four multiply-adds, accumulated exactly in int32.

Activation words hold x - shift: the instruction's byte type (Caps.int8_dot; unsigned on x86, signed on ARM) decides
the shift (u8 activations: 0 on x86, 128 on ARM; s8: -128 on x86, 0 on ARM). Weights (signed int8, symmetric:
zero point 0) are packed once, as pack_lanes packs float32 weights, with words along the reduction axis:

    pack_i8_words(x, axis, shift)          uint8/int8 [.., C, ..] -> int32 words [.., ceil(C/4), ..]
    conv2d_packed_i8(xw, ww, wsum, x_zp, x_scale, w_scale[, bias][, y_scale, y_zp])
                                           xw [N, C/4, H, W] words, ww [O/L, C/4, KH, KW, L] words (i8_words_ref of
                                           pack_lanes(w, axis 0) along axis 1), wsum [O] int32 (each output's weight
                                           sum) -> out_dtype [N, O, OH, OW]
    matmul_packed_i8(aw, bw, wsum, a_zp, a_scale, b_scale[, bias][, y_scale, y_zp])
                                           aw [.., M, K/4], bw [.., N/L, K/4, L] -> out_dtype [.., M, N]

Each is the int32 accumulation with its requantisation epilogue fused (`requant`, as ops/quant.py's qconv2d /
qmatmul define it): acc = sum(xw bytes x ww bytes) - (x_zp - shift) * wsum[o] is sum((x - x_zp) * w) exactly (a
conv's padding holds x_zp - shift bytes, the real zero); then (bias) int32 onnxruntime-style or float32 PyTorch-style,
the float32 scale, relu, and for uint8/int8 outputs round half to even and saturation to [qmin, qmax].
The references compute the integer sums in int64 from the words and the epilogue in float32, as the kernels do.
"""
from __future__ import annotations

import numpy as np

from ..errors import ShapeError
from ..lowering import te
from ..symbolic.expr import Const, as_expr, binary, cast, compare, dot_i8_generic, maximum, minimum, select, unary
from ..types import TensorType
from .linalg import _matmul_packed_infer, _pack_ref, packed_matmul_compute, unpack_ref
from .nn import _conv2d_packed, _conv2d_packed_infer, _conv2d_ref
from .registry import Kind, OpDef, register

OUT_DTYPES = ("uint8", "int8", "float32", "int32")
REQUANT = ("float", "onnxruntime")


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


def pack_weight_ref(w: np.ndarray, axis: int, red_axis: int, blocks: int, lanes: int) -> np.ndarray:
    """A constant int8 weight packed for the byte dot: pack_lanes(w, axis, block_pos 0, blocks, lanes) with words of
    four along red_axis of the result (the pass packs weights with this, once)."""
    return i8_words_ref(_pack_ref(np.asarray(w, np.int8), axis, 0, blocks, lanes), red_axis)


# -- pack_i8_words ------------------------------------------------------------------------------------------------
def _words_infer(types, axis, shift=0):
    x = types[0]
    if x.dtype not in ("uint8", "int8") or not -x.ndim <= axis < x.ndim:
        raise ShapeError(f"pack_i8_words: needs uint8 or int8 and an axis of {list(x.shape)}, got {x.dtype}, "
                         f"axis {axis}")
    shape = list(x.shape)
    shape[axis] = -(-shape[axis] // 4)
    return [TensorType(tuple(shape), "int32")]


def _words(x, axis, shift=0):
    shape = _words_infer([x], axis, shift)[0].shape
    axis %= x.ndim
    n = x.shape[axis]

    def word(*i):
        w = None
        for k in range(4):
            j = i[axis] * 4 + k
            idx = list(i)
            idx[axis] = j if n % 4 == 0 else minimum(j, as_expr(n - 1))
            b = binary("and", binary("sub", cast("int32", x[tuple(idx)]), Const(shift, "int32")), Const(255, "int32"))
            if n % 4:
                b = select(compare("lt", j, as_expr(n)), b, Const(0, "int32"))
            b = binary("shl", b, Const(8 * k, "int32")) if k else b
            w = b if w is None else binary("or", w, b)
        return w
    return te.compute(shape, word, "pack_i8_words")


register(OpDef("pack_i8_words", Kind.INJECTIVE, _words_infer, i8_words_ref, _words, {}, None,
               lambda rng: [([rng.integers(0, 256, (1, 6, 3, 5)).astype(np.uint8)], {"axis": 1}),
                            ([rng.integers(-128, 128, (4, 8)).astype(np.int8)], {"axis": -1, "shift": -128}),
                            ([rng.integers(0, 256, (3, 9)).astype(np.uint8)], {"axis": 1, "shift": 128})],
               ("uint8", "int8"), doc="Four adjacent uint8/int8 elements along `axis` as the bytes (x - shift) of "
                                      "an int32 word (ops/int8.py; a length not a multiple of 4 zero-padded)."))


# -- the requantisation epilogue ----------------------------------------------------------------------------------
def _epilogue_infer(name, t, rest, out_dtype, requant, bias, o):
    """Checks the epilogue's inputs (wsum, x_zp, x_scale, w_scale[, bias][, y_scale, y_zp]) for o outputs."""
    quant = out_dtype in ("uint8", "int8")
    want = [("int32", [(o,)]), ("int32", [()]), ("float32", [()]), ("float32", [(o,), ()])] \
        + ([(bias, [(o,)])] if bias else []) + ([("float32", [()]), ("int32", [()])] if quant else [])
    if out_dtype not in OUT_DTYPES or requant not in REQUANT or bias not in ("", "int32", "float32") \
            or len(rest) != len(want) or any(r.dtype != d or tuple(r.shape) not in s for r, (d, s) in zip(rest, want)):
        raise ShapeError(f"{name}: expects wsum int32 [{o}], x_zp int32 [], x_scale float32 [], w_scale float32 "
                         f"[{o}] or [], " + (f"bias {bias} [{o}], " if bias else "")
                         + ("y_scale float32 [], y_zp int32 [] " if quant else "")
                         + f"(out_dtype {out_dtype!r}, requant {requant!r}); got "
                         + ", ".join(f"{r.dtype} {list(r.shape)}" for r in rest))
    return [TensorType(t.shape, out_dtype)]


def requant(acc, o, ins, shift, out_dtype, relu, qmin, qmax, requant, bias):
    """The epilogue over the int32 sum `acc` of output channel `o` (expressions); ins: the op's tensors after the
    two operands (wsum, x_zp, x_scale, w_scale[, bias][, y_scale, y_zp])."""
    wsum, xzp, xs, ws = ins[:4]
    b = ins[4] if bias else None
    ys, yzp = (ins[-2], ins[-1]) if out_dtype in ("uint8", "int8") else (None, None)
    wso = ws[o] if len(ws.shape) else ws[()]
    a = acc - (xzp[()] - Const(shift, "int32")) * wsum[o]
    if bias == "int32":
        a = a + b[o]
    if out_dtype == "int32":
        return a
    scale = xs[()] * wso
    if requant == "onnxruntime" and ys is not None:
        v = cast("float32", a) * (scale / ys[()])
    else:
        v = cast("float32", a) * scale
        if bias == "float32":
            v = v + b[o]
        if relu:
            v = maximum(v, Const(0.0, "float32"))
        if ys is None:
            return v
        v = v / ys[()]
    q = unary("round", v) + cast("float32", yzp[()])
    q = minimum(maximum(q, Const(float(qmin), "float32")), Const(float(qmax), "float32"))
    return cast(out_dtype, q)


def requant_ref(acc, o_axis, ins, shift, out_dtype, relu, qmin, qmax, requant, bias):
    """numpy form of `requant` (float32 operations in the same order) over an int64 sum array acc."""
    wsum, xzp, xs, ws = ins[:4]
    shape = [1] * acc.ndim
    shape[o_axis] = -1
    per = lambda v: np.asarray(v).reshape(shape) if np.ndim(v) else np.asarray(v)
    a = acc - (np.int64(xzp) - shift) * per(wsum).astype(np.int64)
    if bias == "int32":
        a = a + per(ins[4]).astype(np.int64)
    a = ((a + 2 ** 31) % 2 ** 32 - 2 ** 31)       # int32 arithmetic
    if out_dtype == "int32":
        return a.astype(np.int32)
    scale = np.float32(xs) * per(ws).astype(np.float32)
    ys = np.float32(ins[-2]) if out_dtype in ("uint8", "int8") else None
    if requant == "onnxruntime" and ys is not None:
        v = a.astype(np.float32) * (scale / ys).astype(np.float32)
    else:
        v = a.astype(np.float32) * scale
        if bias == "float32":
            v = v + per(ins[4]).astype(np.float32)
        if relu:
            v = np.maximum(v, np.float32(0))
        if ys is None:
            return v.astype(np.float32)
        v = v / ys
    q = np.rint(v).astype(np.float32) + np.float32(ins[-1])
    return np.clip(q, qmin, qmax).astype(out_dtype)


def _product(signed_a):
    return lambda a, b: dot_i8_generic(Const(0, "int32"), a, b, signed_a)


_EPI = dict(shift=0, signed_a=False, out_dtype="uint8", relu=False, qmin=0, qmax=255, requant="float", bias="")


def _epi(attrs):
    return {k: attrs.get(k, v) for k, v in _EPI.items() if k != "signed_a"}


# -- conv2d over int8 words ---------------------------------------------------------------------------------------
def _conv_infer(types, out_channels, stride=(1, 1), dilation=(1, 1), nv=1, **epi):
    x, w = types[:2]
    if x.dtype != "int32" or w.dtype != "int32" or w.ndim != 5:
        raise ShapeError(f"conv2d_packed_i8 takes int8 words (int32) [N, C/4, H, W] and [O/L, C/4, KH, KW, L], got "
                         f"{x.dtype} {list(x.shape)} and {w.dtype} {list(w.shape)}")
    t = _conv2d_packed_infer(types[:2], out_channels, stride, dilation, nv)[0]
    e = {**_EPI, **epi}
    return _epilogue_infer("conv2d_packed_i8", t, types[2:], e["out_dtype"], e["requant"], e["bias"], out_channels)


def _conv(x, wp, *ins, out_channels, stride=(1, 1), dilation=(1, 1), nv=1, **epi):
    e = {**_EPI, **epi}
    acc = _conv2d_packed(x, wp, out_channels, stride, dilation, nv, product=_product(e["signed_a"]),
                         name="conv2d_packed_i8_acc", int8=True, signed_a=e["signed_a"])
    return te.compute(acc.shape, lambda n, o, h, w: requant(acc[n, o, h, w], o, ins, **_epi(e)), "conv2d_packed_i8")


def _conv_ref(x, wp, *ins, out_channels, stride=(1, 1), dilation=(1, 1), nv=1, **epi):
    e = {**_EPI, **epi}
    c4 = wp.shape[1]
    xs = unword_ref(x, 1, 4 * c4, e["signed_a"])
    ws = unword_ref(unpack_ref(wp, 0, 0, out_channels), 1, 4 * c4, True)
    acc = _conv2d_ref(xs.astype(np.float64), ws.astype(np.float64), stride, dilation)
    return requant_ref(np.rint(acc).astype(np.int64), 1, ins, **_epi(e))


# -- matmul over int8 words ---------------------------------------------------------------------------------------
def _matmul_infer(types, n, nv=1, **epi):
    a, b = types[:2]
    if a.dtype != "int32" or b.dtype != "int32":
        raise ShapeError(f"matmul_packed_i8 takes int8 words (int32), got {a.dtype} and {b.dtype}")
    t = _matmul_packed_infer(types[:2], n, False, nv)[0]
    e = {**_EPI, **epi}
    return _epilogue_infer("matmul_packed_i8", t, types[2:], e["out_dtype"], e["requant"], e["bias"], n)


def _matmul(a, bp, *ins, n, nv=1, **epi):
    e = {**_EPI, **epi}
    acc = packed_matmul_compute(a, bp, n, False, nv, _product(e["signed_a"]), "matmul_packed_i8_acc",
                                {"int8": True, "signed_a": e["signed_a"]})
    return te.compute(acc.shape, lambda *i: requant(acc[i], i[-1], ins, **_epi(e)), "matmul_packed_i8")


def _matmul_ref(a, bp, *ins, n, nv=1, **epi):
    e = {**_EPI, **epi}
    k4 = bp.shape[-2]
    av = unword_ref(a, a.ndim - 1, 4 * k4, e["signed_a"])
    b = unword_ref(unpack_ref(bp, bp.ndim - 3, bp.ndim - 3, n), bp.ndim - 2, 4 * k4, True)     # [.., n, k]
    acc = np.matmul(av, np.swapaxes(b, -1, -2))
    return requant_ref(acc, acc.ndim - 1, ins, **_epi(e))


# -- samples: random quantised operands and their epilogue inputs -------------------------------------------------
def _qparams(rng, o, out_dtype, bias, per_channel=True):
    ws = rng.uniform(2 ** -9, 2 ** -6, o if per_channel else ()).astype(np.float32)
    ins = [np.float32(rng.uniform(0.01, 0.05)), ws]
    if bias == "int32":
        ins.append(rng.integers(-3000, 3000, o).astype(np.int32))
    elif bias == "float32":
        ins.append(rng.uniform(-1, 1, o).astype(np.float32))
    if out_dtype in ("uint8", "int8"):
        ins += [np.float32(rng.uniform(0.05, 0.2)), np.int32(rng.integers(-10, 10) + (128 if out_dtype == "uint8"
                                                                                         else 0))]
    return ins


def conv_operands(x, w, blocks, lanes, x_zp, shift=0):
    """(x words, packed weight words, wsum, x_zp) of a uint8/int8 NCHW input and an int8 [O, C, KH, KW] weight."""
    return [i8_words_ref(x, 1, shift), pack_weight_ref(w, 0, 1, blocks, lanes),
            w.reshape(w.shape[0], -1).astype(np.int64).sum(1).astype(np.int32), np.int32(x_zp)]


def _conv_sample(rng, n, c, h, w, o, k, blocks, x_zp=3, out_dtype="uint8", bias="", lanes=16, shift=0, **attrs):
    x = rng.integers(0, 256, (n, c, h, w)).astype(np.uint8)
    wt = rng.integers(-128, 128, (o, c, k, k)).astype(np.int8)
    qmin, qmax = (0, 255) if out_dtype == "uint8" else (-128, 127)
    return conv_operands(x, wt, blocks, lanes, x_zp, shift) + _qparams(rng, o, out_dtype, bias), \
        dict(out_channels=o, out_dtype=out_dtype, bias=bias, qmin=qmin, qmax=qmax, shift=shift, **attrs)


register(OpDef("conv2d_packed_i8", Kind.OUT_FUSABLE, _conv_infer, _conv_ref, _conv, {}, None,
               lambda rng: [_conv_sample(rng, 1, 3, 9, 10, 4, 3, 1),
                            _conv_sample(rng, 2, 8, 11, 13, 40, 3, 3, stride=(2, 2), nv=3, bias="float32",
                                         relu=True),
                            _conv_sample(rng, 1, 16, 5, 6, 33, 1, 3, nv=3, out_dtype="float32", bias="float32"),
                            _conv_sample(rng, 1, 12, 7, 7, 20, 3, 2, nv=2, out_dtype="int8", bias="int32",
                                         requant="onnxruntime", dilation=(2, 1)),
                            _conv_sample(rng, 1, 5, 6, 7, 16, 3, 1, x_zp=200, shift=128, signed_a=True)],
               ("int32", "uint8", "int8", "float32"),
               doc="Quantised conv2d over int8 words (ops/int8.py): x [N, C/4, H, W], w [O/L, C/4, KH, KW, L], the "
                   "int32 sum and the requantisation epilogue fused; NCHW out (uint8, int8, float32 or int32)."))


def _matmul_sample(rng, a_shape, k, n, blocks, a_zp=5, out_dtype="uint8", bias="", lanes=16, shift=0, **attrs):
    a = rng.integers(0, 256, a_shape[:-1] + (k,)).astype(np.uint8)
    b = rng.integers(-128, 128, (n, k)).astype(np.int8)                   # [N, K] (a linear's weight)
    qmin, qmax = (0, 255) if out_dtype == "uint8" else (-128, 127)
    ins = [i8_words_ref(a, -1, shift), pack_weight_ref(b, 0, 1, blocks, lanes),
           b.astype(np.int64).sum(1).astype(np.int32), np.int32(a_zp)] + _qparams(rng, n, out_dtype, bias)
    return ins, dict(n=n, out_dtype=out_dtype, bias=bias, qmin=qmin, qmax=qmax, shift=shift, **attrs)


register(OpDef("matmul_packed_i8", Kind.OUT_FUSABLE, _matmul_infer, _matmul_ref, _matmul, {}, None,
               lambda rng: [_matmul_sample(rng, (5, 8), 8, 3, 1),
                            _matmul_sample(rng, (2, 17, 9), 9, 40, 3, nv=3, bias="float32", out_dtype="float32"),
                            _matmul_sample(rng, (9, 30), 30, 33, 3, nv=3, bias="int32", requant="onnxruntime",
                                           out_dtype="int8")],
               ("int32", "uint8", "int8", "float32"),
               doc="Quantised matmul over int8 words (ops/int8.py): a [.., M, K/4], b [.., N/L, K/4, L], the int32 "
                   "sum and the requantisation epilogue fused (uint8, int8, float32 or int32 out)."))
