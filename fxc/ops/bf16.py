"""bfloat16 compute (precision="bf16", see relay_like/passes/use_bf16.py): operands as bf16x2 words.

A bf16x2 word is an int32 holding two bfloat16 values rounded to nearest even from adjacent float32
elements along a reduction axis: bits(bf16(x[2c])) | bits(bf16(x[2c + 1])) << 16 (an odd length is
zero-padded). It is the operand layout of AVX-512 BF16's vdpbf16ps, which adds a.lo * b.lo + a.hi * b.hi
to a float32 accumulator per lane; so a conv/matmul over words does half the reduction steps of the
float32 kernel, each a bf16 pair, and still accumulates and returns float32. The words themselves (numpy
conversions, `pair_words`, the op pack_bf16_pairs) are bf16_words.py.

    conv2d_packed_bf16(x words, w words)      x [N, C/2, H, W], w = pack_lanes(w, axis 0, pair_axis 1)
                                              [O/L, C/2, KH, KW, L] -> float32 [N, O, OH, OW]; or NCHW16c
                                              (blocked_in / blocked_out): x = pack_bf16_pairs(x16, 4)
                                              [N, C/16, H, W, 8], the same bytes as x16 in bfloat16
    matmul_packed_bf16(a words, b words)      a [.., M, K/2] (or [.., K/2, M] with trans_a),
                                              b = pack_lanes(b, n axis, pair_axis k) [.., N/L, K/2, L] -> float32
The references compute in float32 on the bf16 values the words hold, so kernels match them to float32
rounding; the error against a float32 model is the bf16 rounding of the operands (relative 2^-9 each).
"""
from __future__ import annotations

import numpy as np

from ..errors import ShapeError
from ..symbolic.expr import Bf16Half
from ..types import TensorType
from .bf16_words import bf16_pairs_ref, unpair_ref
from .common import rand
from .linalg import _matmul_packed_infer, _matmul_ref as mm, _pack_ref, packed_matmul_compute, unpack_ref
from .nn import _conv2d_packed, _conv2d_packed_infer, _conv2d_ref, from_blocked_ref, to_blocked_ref
from .registry import Kind, OpDef, register


# -- conv2d over bf16x2 words -------------------------------------------------------------------------------------
def _dot_halves(a, b):
    return Bf16Half(a, 0) * Bf16Half(b, 0) + Bf16Half(a, 1) * Bf16Half(b, 1)


def _conv_infer(types, out_channels, stride=(1, 1), dilation=(1, 1), nv=1, blocked_in=False, blocked_out=False):
    x, w = types
    if x.dtype != "int32" or w.dtype != "int32":
        raise ShapeError(f"conv2d_packed_bf16 takes bf16x2 int32 words, got {x.dtype} and {w.dtype}")
    t = _conv2d_packed_infer(types, out_channels, stride, dilation, nv, blocked_in, blocked_out,
                             w.shape[4] // 2 if w.ndim == 5 else None)[0]
    return [TensorType(t.shape, "float32")]


def _conv(x, wp, out_channels, stride=(1, 1), dilation=(1, 1), nv=1, blocked_in=False, blocked_out=False):
    return _conv2d_packed(x, wp, out_channels, stride, dilation, nv, blocked_in, blocked_out, product=_dot_halves,
                          name="conv2d_packed_bf16", bf16=True)


def _conv_ref(x, wp, out_channels, stride=(1, 1), dilation=(1, 1), nv=1, blocked_in=False, blocked_out=False):
    c = 2 * wp.shape[1]
    xs = from_blocked_ref(unpair_ref(x, 4, 2 * x.shape[4]), c) if blocked_in else unpair_ref(x, 1, c)
    ws = unpair_ref(unpack_ref(wp, 0, 0, out_channels), 1, c)
    out = _conv2d_ref(xs, ws, stride, dilation).astype(np.float32)
    return to_blocked_ref(out, wp.shape[-1]) if blocked_out else out


def _conv_sample(rng, n, c, h, w, o, k, blocks, **attrs):
    x = rand(rng, (n, c, h, w))
    x = bf16_pairs_ref(to_blocked_ref(x, 16), 4) if attrs.get("blocked_in") else bf16_pairs_ref(x, 1)
    wp = _pack_ref(rand(rng, (o, c, k, k)), 0, 0, blocks)
    return [x, bf16_pairs_ref(wp, 1)], dict(out_channels=o, **attrs)


register(OpDef("conv2d_packed_bf16", Kind.OUT_FUSABLE, _conv_infer, _conv_ref, _conv, {}, None,
               lambda rng: [_conv_sample(rng, 1, 3, 9, 10, 4, 3, 1),
                            _conv_sample(rng, 2, 6, 11, 30, 40, 3, 4, stride=(2, 2), nv=2),
                            _conv_sample(rng, 1, 8, 5, 5, 33, 1, 3, nv=3),
                            _conv_sample(rng, 1, 7, 14, 14, 20, 1, 2, nv=2),
                            _conv_sample(rng, 1, 3, 9, 20, 48, 3, 4, stride=(2, 2), nv=2, blocked_out=True),
                            _conv_sample(rng, 2, 32, 7, 9, 24, 1, 2, nv=2, blocked_in=True),
                            _conv_sample(rng, 1, 32, 11, 11, 32, 3, 3, nv=3, blocked_in=True, blocked_out=True),
                            _conv_sample(rng, 1, 20, 6, 7, 24, 1, 3, nv=3, blocked_in=True, blocked_out=True)],
               ("int32",), doc="conv2d over bf16x2 words: x [N, C/2, H, W] (or NCHW16c words [N, C/16, H, W, 8] with "
                               "blocked_in), w [O/L, C/2, KH, KW, L]; float32 out, NCHW16c with blocked_out."))


# -- matmul over bf16x2 words -------------------------------------------------------------------------------------
def _matmul_infer(types, n, trans_a=False, nv=1):
    a, b = types
    if a.dtype != "int32" or b.dtype != "int32":
        raise ShapeError(f"matmul_packed_bf16 takes bf16x2 int32 words, got {a.dtype} and {b.dtype}")
    t = _matmul_packed_infer(types, n, trans_a, nv)[0]
    return [TensorType(t.shape, "float32")]


def _matmul(a, bp, n, trans_a=False, nv=1):
    return packed_matmul_compute(a, bp, n, trans_a, nv, _dot_halves, "matmul_packed_bf16", {"bf16": True})


def _matmul_ref(a, bp, n, trans_a=False, nv=1):
    k = 2 * bp.shape[-2]
    av = unpair_ref(a, a.ndim - 2 if trans_a else a.ndim - 1, k)
    b = unpair_ref(unpack_ref(bp, bp.ndim - 3, bp.ndim - 3, n), bp.ndim - 2, k)      # [.., n, k]
    return mm(av, np.swapaxes(b, -1, -2), trans_a, False).astype(np.float32)


def _matmul_sample(rng, a_shape, k, n, blocks, trans_a=False, nv=1):
    a = rand(rng, a_shape)
    bp = _pack_ref(rand(rng, (k, n)), 1, 0, blocks)
    return [bf16_pairs_ref(a, a.ndim - 2 if trans_a else a.ndim - 1), bf16_pairs_ref(bp, 1)], \
        dict(n=n, trans_a=trans_a, nv=nv)


register(OpDef("matmul_packed_bf16", Kind.OUT_FUSABLE, _matmul_infer, _matmul_ref, _matmul, {}, None,
               lambda rng: [_matmul_sample(rng, (5, 8), 8, 3, 1),
                            _matmul_sample(rng, (2, 17, 9), 9, 40, 4, nv=2),
                            _matmul_sample(rng, (9, 30), 9, 33, 3, trans_a=True, nv=3)],
               ("int32",), doc="matmul over bf16x2 words: a [.., M, K/2], b [.., N/L, K/2, L]; float32 out."))
