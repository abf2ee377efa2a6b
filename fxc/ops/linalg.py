"""Linear algebra: batched matmul with transpose flags (mm, bmm, addmm, matmul-style broadcasting).

A transpose feeding a matmul is folded into its flag by the ATen converter, so weights are read in
place rather than copied each call."""
from __future__ import annotations

import numpy as np

from ..errors import ShapeError, UnsupportedOpError
from ..lowering import te
from ..lowering.expr import as_expr
from ..relay_like.graph import TensorType
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
