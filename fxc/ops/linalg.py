"""Linear algebra: batched matmul with transpose flags (mm, bmm, addmm, matmul-style broadcasting).

A transpose feeding a matmul is folded into its flag by the ATen converter, so weights are read in
place rather than copied each call."""
from __future__ import annotations

import numpy as np

from ..errors import ShapeError
from ..lowering import te
from ..symbolic.expr import Const, as_expr, binary, compare, minimum, select
from ..types import TensorType
from .bf16_words import bf16_pairs_ref, pair_words
from .common import broadcast_shapes, rand
from .registry import Kind, OpDef, register

NUM = ("float32", "float64", "int32", "int64")


def _dims(ta, tb, trans_a, trans_b):
    m, k = (ta.shape[-1], ta.shape[-2]) if trans_a else (ta.shape[-2], ta.shape[-1])
    k2, n = (tb.shape[-1], tb.shape[-2]) if trans_b else (tb.shape[-2], tb.shape[-1])
    if k != k2:
        raise ShapeError(f"matmul: inner sizes differ ({list(ta.shape)} x {list(tb.shape)}, "
                         f"trans_a={trans_a}, trans_b={trans_b})")
    return m, k, n


def _matmul_infer(types, trans_a=False, trans_b=False):
    a, b = types
    if a.ndim < 2 or b.ndim < 2:
        raise ShapeError("matmul operands must have at least 2 dims (vectors are reshaped by the importer)")
    m, _, n = _dims(a, b, trans_a, trans_b)
    batch = broadcast_shapes(a.shape[:-2], b.shape[:-2])
    return [TensorType(batch + (m, n), a.dtype)]


def _matmul(a, b, trans_a=False, trans_b=False):
    m, k, n = _dims(a, b, trans_a, trans_b)
    batch = broadcast_shapes(a.shape[:-2], b.shape[:-2])
    r = te.reduce_axis(k, "k")

    def bidx(t, i):
        off = len(batch) - (t.ndim - 2)
        return tuple(as_expr(0) if t.shape[d] == 1 else i[d + off] for d in range(t.ndim - 2))

    def body(*i):
        bi, ii, jj = i[:-2], i[-2], i[-1]
        av = a[bidx(a, bi) + ((r[0], ii) if trans_a else (ii, r[0]))]
        bv = b[bidx(b, bi) + ((jj, r[0]) if trans_b else (r[0], jj))]
        return te.sum_(av * bv, [r])
    return te.compute(batch + (m, n), body, "matmul")


def _matmul_ref(a, b, trans_a=False, trans_b=False):
    if trans_a:
        a = np.swapaxes(a, -1, -2)
    if trans_b:
        b = np.swapaxes(b, -1, -2)
    return np.matmul(a, b).astype(a.dtype)


def _unwrap_transpose(v):
    """If v is permute(x) swapping the last two dims, return (x, True)."""
    n = v.node
    if n is not None and n.op == "permute":
        dims = n.attrs["dims"]
        nd = len(dims)
        if nd >= 2 and tuple(dims) == tuple(range(nd - 2)) + (nd - 1, nd - 2):
            return n.inputs[0], True
    return v, False


def _mm(b, x, y):
    x, y = b.promote(x, y)
    x, ta = _unwrap_transpose(x)
    y, tb = _unwrap_transpose(y)
    return b.call("matmul", [x, y], trans_a=ta, trans_b=tb)


def _addmm(b, bias, x, y, beta=1, alpha=1):
    out = _mm(b, x, y)
    if alpha != 1:
        out = b.call("mul", [out, alpha])
    if beta == 0:
        return out
    if beta != 1:
        bias = b.call("mul", [bias, beta])
    return b.call("add", [out, bias])


def _dot(b, x, y):
    out = _mm(b, b.call("reshape", [x], shape=(1, -1)), b.call("reshape", [y], shape=(-1, 1)))
    return b.call("reshape", [out], shape=())


def _mv(b, x, y):
    out = _mm(b, x, b.call("reshape", [y], shape=(-1, 1)))
    return b.call("reshape", [out], shape=(x.shape[0],))


register(OpDef("matmul", Kind.OUT_FUSABLE, _matmul_infer, _matmul_ref, _matmul,
               {"aten.mm.default": _mm, "aten.bmm.default": _mm, "aten.addmm.default": _addmm,
                "aten.dot.default": _dot, "aten.mv.default": _mv},
               None,
               lambda rng: [([rand(rng, (5, 7)), rand(rng, (7, 3))], {}),
                            ([rand(rng, (2, 5, 7)), rand(rng, (2, 3, 7))], {"trans_b": True}),
                            ([rand(rng, (7, 5)), rand(rng, (2, 7, 3))], {"trans_a": True}),
                            ([rand(rng, (4, 33)), rand(rng, (33, 70))], {})],
               NUM))


# -- packed operands for the vector GEMM schedules (made by the pack_weights pass) ------------------------------------
def _pack_infer(types, axis, block_pos, blocks, lanes=16, pair_axis=None):
    x = types[0]
    if not 0 <= axis < x.ndim or blocks * lanes < x.shape[axis] or (
            pair_axis is not None and (x.dtype != "float32" or not 0 <= pair_axis < x.ndim)):
        raise ShapeError(f"pack_lanes: cannot pack axis {axis} of {list(x.shape)} ({x.dtype}) into {blocks} x {lanes}"
                         + (f" with bf16 pairs along axis {pair_axis}" if pair_axis is not None else ""))
    shape = list(x.shape)
    del shape[axis]
    shape.insert(block_pos, blocks)
    if pair_axis is None:
        return [TensorType(tuple(shape) + (lanes,), x.dtype)]
    shape[pair_axis] = -(-shape[pair_axis] // 2)
    return [TensorType(tuple(shape) + (lanes,), "int32")]


def _pack(x, axis, block_pos, blocks, lanes=16, pair_axis=None):
    shape = _pack_infer([x], axis, block_pos, blocks, lanes, pair_axis)[0].shape
    n = x.shape[axis]

    def packed(i, exact=False):
        rest = list(i[:-1])
        b = rest.pop(block_pos)
        src = b * lanes + i[-1]
        if exact or blocks * lanes == n:     # no padding lanes: an affine read, which vectorizes
            rest.insert(axis, src)
            return x[tuple(rest)]
        rest.insert(axis, minimum(src, as_expr(n - 1)))
        return select(compare("lt", src, as_expr(n)), x[tuple(rest)], Const(0, x.dtype))
    if pair_axis is None:       # attrs: the schedules of packs (schedule._transposed_pack, _whole_blocks_first)
        return te.compute(shape, lambda *i: packed(i), "pack_lanes",
                          {"pack_of": x, "pack_axis": axis, "pack_block_pos": block_pos, "pack_whole": n // lanes,
                           "pack_exact": lambda *i: packed(i, exact=True)})
    n_pair = _pack_infer([x], axis, block_pos, blocks, lanes)[0].shape[pair_axis]
    return te.compute(shape, lambda *i: pair_words(packed, n_pair, pair_axis, i), "pack_lanes")


def _pack_ref(x, axis, block_pos, blocks, lanes=16, pair_axis=None):
    if pair_axis is not None:
        return bf16_pairs_ref(_pack_ref(x, axis, block_pos, blocks, lanes), pair_axis)
    widths = [(0, 0)] * x.ndim
    widths[axis] = (0, blocks * lanes - x.shape[axis])
    xp = np.pad(x, widths)
    xp = xp.reshape(x.shape[:axis] + (blocks, lanes) + x.shape[axis + 1:])
    xp = np.moveaxis(xp, axis + 1, -1)             # lanes last
    return np.ascontiguousarray(np.moveaxis(xp, axis, block_pos))


def unpack_ref(xp, axis, block_pos, n):
    """Inverse of pack_lanes' reference (drops the zero padding)."""
    x = np.moveaxis(np.moveaxis(xp, block_pos, axis), -1, axis + 1)
    x = x.reshape(x.shape[:axis] + (-1,) + x.shape[axis + 2:])
    return np.take(x, np.arange(n), axis=axis)


register(OpDef("pack_lanes", Kind.INJECTIVE, _pack_infer, _pack_ref, _pack, {}, None,
               lambda rng: [([rand(rng, (5, 3, 2))], {"axis": 0, "block_pos": 0, "blocks": 1, "lanes": 16}),
                            ([rand(rng, (2, 7, 20))], {"axis": 2, "block_pos": 1, "blocks": 2, "lanes": 16}),
                            ([rand(rng, (20, 7))], {"axis": 0, "block_pos": 0, "blocks": 4, "lanes": 16}),
                            # transposed 16 x 16 tiles: 2 whole blocks and a part, 2 whole tiles of m and a tail
                            ([rand(rng, (37, 3, 15))], {"axis": 0, "block_pos": 0, "blocks": 4, "lanes": 16}),
                            ([rand(rng, (32, 16), "int32")], {"axis": 0, "block_pos": 0, "blocks": 2, "lanes": 16}),
                            ([rand(rng, (3, 32))], {"axis": 1, "block_pos": 0, "blocks": 2, "lanes": 16}),
                            ([rand(rng, (20, 5, 3, 3))], {"axis": 0, "block_pos": 0, "blocks": 2, "lanes": 16,
                                                          "pair_axis": 1})],
               NUM, doc="Split `axis` into blocks of `lanes` (zero padded), blocks at block_pos, lanes last; with "
                        "pair_axis (float32), adjacent elements along that axis of the result as bf16x2 int32 words "
                        "(see ops/bf16_words.py)."))


def _mmp_dims(ta, tb, trans_a):
    m, k = (ta.shape[-1], ta.shape[-2]) if trans_a else (ta.shape[-2], ta.shape[-1])
    if tb.ndim < 3 or tb.shape[-2] != k:
        raise ShapeError(f"matmul_packed: {list(ta.shape)} (trans_a={trans_a}) x packed {list(tb.shape)}")
    return m, k


def _matmul_packed_infer(types, n, trans_a=False, nv=1):
    a, b = types
    m, _ = _mmp_dims(a, b, trans_a)
    if b.shape[-3] * b.shape[-1] < n:
        raise ShapeError(f"matmul_packed: packed operand {list(b.shape)} has fewer than {n} columns")
    return [TensorType(broadcast_shapes(a.shape[:-2], b.shape[:-3]) + (m, n), a.dtype)]


def _matmul_packed(a, bp, n, trans_a=False, nv=1):
    return packed_matmul_compute(a, bp, n, trans_a, nv, lambda x, y: x * y, "matmul_packed", {})


def packed_matmul_compute(a, bp, n, trans_a, nv, product, name: str, attrs: dict):
    """sum_k product(a[.., m, k], b[.., n/L, k, n%L]): the loops of matmul_packed (and of its bf16 form)."""
    m, k = _mmp_dims(a, bp, trans_a)
    L = bp.shape[-1]
    batch = broadcast_shapes(a.shape[:-2], bp.shape[:-3])
    r = te.reduce_axis(k, "k")

    def bidx(t, i, core):
        off = len(batch) - (t.ndim - core)
        return tuple(as_expr(0) if t.shape[d] == 1 else i[d + off] for d in range(t.ndim - core))

    def body(*i):
        bi, ii, jj = i[:-2], i[-2], i[-1]
        av = a[bidx(a, bi, 2) + ((r[0], ii) if trans_a else (ii, r[0]))]
        bv = bp[bidx(bp, bi, 3) + (binary("idiv", jj, as_expr(L)), r[0], binary("imod", jj, as_expr(L)))]
        return te.sum_(product(av, bv), [r])
    return te.compute(batch + (m, n), body, name,
                      {"schedule": "matmul_packed", "a": a, "b": bp, "trans_a": trans_a, "nv": nv, **attrs})


def _matmul_packed_ref(a, bp, n, trans_a=False, nv=1):
    b = np.swapaxes(unpack_ref(bp, bp.ndim - 3, bp.ndim - 3, n), -1, -2)     # [..., n, k] -> [..., k, n]
    return _matmul_ref(a, b, trans_a, False)


def _packed_b(rng, k, n, nb):
    return _pack_ref(rand(rng, (k, n)), 1, 0, nb)


register(OpDef("matmul_packed", Kind.OUT_FUSABLE, _matmul_packed_infer, _matmul_packed_ref, _matmul_packed, {}, None,
               lambda rng: [([rand(rng, (5, 7)), _packed_b(rng, 7, 3, 1)], {"n": 3}),
                            ([rand(rng, (2, 17, 9)), _packed_b(rng, 9, 40, 4)], {"n": 40, "nv": 2}),
                            ([rand(rng, (9, 30)), _packed_b(rng, 9, 33, 3)], {"n": 33, "trans_a": True, "nv": 3})],
               ("float32", "float64"), doc="matmul whose B is pack_lanes(B, n axis) ([..., n/L, k, L])."))

