"""ATen overloads that fxc runs as compositions of registry ops (no op of their own): round with
decimals, addbmm, _trilinear (nn.functional.bilinear), embedding_renorm (embedding with max_norm).

Where rounding decides the result (round with decimals, the renorm scale) the converter does the
operations of ATen's CPU kernel in the same order and dtype; sums (addbmm, _trilinear) may add in
another order, within the usual tolerance.
"""
from __future__ import annotations

import numpy as np

from ..errors import UnsupportedOpError
from .registry import register_aten


def _round_decimals(b, x, decimals=0):
    """ATen: nearbyint(x * 10^d) / 10^d, or nearbyint(x / 10^-d) * 10^-d for d < 0, in x's dtype."""
    if not x.dtype.startswith("float"):
        raise UnsupportedOpError("round with decimals of an integer tensor")
    if decimals == 0:
        return b.call("round", [x])
    scale = float(10.0 ** abs(decimals))
    if decimals > 0:
        return b.call("div", [b.call("round", [b.call("mul", [x, scale])]), scale])
    return b.call("mul", [b.call("round", [b.call("div", [x, scale])]), scale])


def _addbmm(b, x, b1, b2, beta=1, alpha=1):
    """beta * x + alpha * sum_i b1[i] @ b2[i]."""
    if b1.shape[0] == 0:
        raise UnsupportedOpError("addbmm of an empty batch")
    prod = b.call("sum", [b.call("matmul", [b1, b2])], axes=(0,), keepdim=False)
    if alpha != 1:
        prod = b.call("mul", [prod, alpha])
    if beta == 0:     # ATen ignores x then (its NaNs too)
        return prod
    if beta != 1:
        x = b.call("mul", [x, beta])
    return b.call("add", [x, prod])


register_aten("aten.round.decimals", _round_decimals)
register_aten("aten.addbmm.default", _addbmm)



def _trilinear(b, i1, i2, i3, expand1, expand2, expand3, sumdim, unroll_dim=1):
    """ATen's _trilinear (nn.functional.bilinear): each input gets size-1 dims at its `expand` positions,
    the three multiply (broadcasting) and the `sumdim` dims are summed away."""
    xs = []
    for t, expand in ((i1, expand1), (i2, expand2), (i3, expand3)):
        shape = list(t.shape)
        for d in sorted(expand):
            shape.insert(d, 1)
        xs.append(b.call("reshape", [t], shape=tuple(shape)))
    out = b.call("mul", [b.call("mul", [xs[0], xs[1]]), xs[2]])
    if sumdim:
        out = b.call("sum", [out], axes=tuple(sumdim), keepdim=False)
    return out
register_aten("aten._trilinear.default", _trilinear)


def _embedding_renorm(b, w, indices, max_norm, norm_type):
    """The rows of `w` that `indices` names, scaled down to norm `max_norm` where their norm is larger
    (ATen: row * max_norm / (norm + 1e-7)); the other rows unchanged."""
    from .norm import _vector_norm
    if w.type.ndim != 2 or not w.dtype.startswith("float"):
        raise UnsupportedOpError("embedding_renorm of a non-float or non-2-d weight")
    if indices.type.numel == 0:
        return w
    rows = b.const(np.arange(w.shape[0], dtype=np.int64).reshape(-1, 1))
    named = b.call("amax", [b.call("eq", [rows, b.call("reshape", [b.as_tensor(indices, "int64")], shape=(1, -1))])],
                   axes=(1,), keepdim=True)
    norm = _vector_norm(b, w, norm_type, dim=1, keepdim=True)
    limit = b.const(np.array(max_norm, dtype=w.dtype))
    scale = b.call("div", [limit, b.call("add", [norm, 1e-7])])
    shrink = b.call("logical_and", [named, b.call("gt", [norm, limit])])
    return b.call("where", [shrink, b.call("mul", [w, scale]), w])


register_aten("aten.embedding_renorm.default", _embedding_renorm)
