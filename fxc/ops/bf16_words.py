"""bf16x2 words: two bfloat16 values rounded to nearest even from adjacent float32 elements along an axis, in one
int32 (bits(bf16(x[2c])) | bits(bf16(x[2c + 1])) << 16; an odd length is zero-padded), the operand layout of the
bf16 kernels (bf16.py, Winograd's bf16 form).

Numpy conversions both ways (`bf16_pairs_ref`, `unpair_ref`), the word at an index as an expression
(`pair_words`, which pack_lanes also uses), and the op

    pack_bf16_pairs(x, axis)                  float32 [.., C, ..] -> int32 words [.., ceil(C/2), ..]
"""
from __future__ import annotations

import numpy as np

from ..errors import ShapeError
from ..lowering import te
from ..symbolic.expr import Const, PackBf16, as_expr, compare, minimum, select
from ..types import TensorType
from .common import rand
from .registry import Kind, OpDef, register


# -- numpy: float32 <-> bf16x2 words ------------------------------------------------------------------------------
def bf16_bits(x: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bits (uint32), round to nearest even; NaN -> 0x7FC0 (as c10::BFloat16)."""
    b = np.ascontiguousarray(x, np.float32).view(np.uint32).astype(np.uint64)
    r = ((b + 0x7FFF + ((b >> 16) & 1)) >> 16).astype(np.uint32)
    return np.where(np.isnan(x), np.uint32(0x7FC0), r)


def bf16_pairs_ref(x: np.ndarray, axis: int) -> np.ndarray:
    """Adjacent elements along `axis` as bf16x2 words (int32; odd lengths zero-padded)."""
    x = np.asarray(x, np.float32)
    if x.shape[axis] % 2:
        w = [(0, 0)] * x.ndim
        w[axis] = (0, 1)
        x = np.pad(x, w)
    lo = np.take(x, np.arange(0, x.shape[axis], 2), axis=axis)
    hi = np.take(x, np.arange(1, x.shape[axis], 2), axis=axis)
    return (bf16_bits(lo) | (bf16_bits(hi) << 16)).view(np.int32)


def unpair_ref(w: np.ndarray, axis: int, n: int) -> np.ndarray:
    """bf16x2 words -> the float32 values they hold, `n` along `axis` (inverse of bf16_pairs_ref up to rounding)."""
    u = np.ascontiguousarray(w).view(np.uint32)
    lo, hi = (u << 16).view(np.float32), (u & 0xFFFF0000).view(np.float32)
    x = np.stack([lo, hi], axis=axis + 1)
    x = x.reshape(w.shape[:axis] + (-1,) + w.shape[axis + 1:])
    return np.take(x, np.arange(n), axis=axis)


# -- pack_bf16_pairs ----------------------------------------------------------------------------------------------
def _pairs_infer(types, axis):
    x = types[0]
    if x.dtype != "float32" or not -x.ndim <= axis < x.ndim:
        raise ShapeError(f"pack_bf16_pairs: needs float32 and an axis of {list(x.shape)}, got {x.dtype}, axis {axis}")
    shape = list(x.shape)
    shape[axis] = -(-shape[axis] // 2)
    return [TensorType(tuple(shape), "int32")]


def pair_words(get, n: int, axis: int, i: tuple):
    """The bf16x2 word at index i of the paired tensor: get(index) reads the float32 source, n = its length
    along `axis` (an odd last pair gets a zero high half)."""
    def at(j):
        idx = list(i)
        idx[axis] = j
        return get(tuple(idx))
    lo = at(i[axis] * 2)
    if n % 2 == 0:
        return PackBf16(lo, at(i[axis] * 2 + 1))
    j = i[axis] * 2 + 1
    hi = select(compare("lt", j, as_expr(n)), at(minimum(j, as_expr(n - 1))), Const(0.0, "float32"))
    return PackBf16(lo, hi)


def _pairs(x, axis):
    shape = _pairs_infer([x], axis)[0].shape
    axis %= x.ndim
    return te.compute(shape, lambda *i: pair_words(lambda idx: x[idx], x.shape[axis], axis, i), "pack_bf16_pairs")


register(OpDef("pack_bf16_pairs", Kind.INJECTIVE, _pairs_infer, bf16_pairs_ref, _pairs, {}, None,
               lambda rng: [([rand(rng, (1, 5, 3, 17))], {"axis": 1}),
                            ([rand(rng, (4, 6))], {"axis": -1})],
               ("float32",), doc="Adjacent float32 elements along `axis` as bf16x2 int32 words (odd: zero-padded)."))
