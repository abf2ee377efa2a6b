"""ATen overloads that fxc runs as compositions of registry ops (no op of their own): round with
decimals, addbmm, _trilinear (nn.functional.bilinear), embedding_renorm (embedding with max_norm), put,
searchsorted and bucketize (counts of the entries below each value), index_reduce (a scatter_reduce),
nonzero_static (ranks from a cumsum, then a scatter), embedding_bag (each position counts its bag).

Where rounding decides the result (round with decimals, the renorm scale) the converter does the
operations of ATen's CPU kernel in the same order and dtype; sums (addbmm, _trilinear) may add in
another order, within the usual tolerance.
"""
from __future__ import annotations

import numpy as np

from ..errors import UnsupportedOpError
from .common import norm_axis
from .index import _index_put_aten
from .norm import _vector_norm
from .registry import aten_table, register_aten


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


def _put(b, x, index, source, accumulate=False):
    """x.flatten()[index] = source (or +=), as an index_put on the flattened tensor."""
    if index.type.numel == 0:
        return x
    flat = b.call("reshape", [x], shape=(-1,))
    idx = b.call("reshape", [index], shape=(-1,))
    src = b.call("reshape", [b.as_tensor(source, x.dtype)], shape=(-1,))
    return b.call("reshape", [_index_put_aten(b, flat, [idx], src, accumulate)], shape=tuple(x.shape))


def _count_below(b, seq, values, right, out_int32):
    """Lower (upper, `right`) bound of each value in the sorted last dim of `seq`: how many entries e
    have not(e >= v) (not(e > v)), the predicate of ATen's binary search (so a NaN value goes last)."""
    if not seq.dtype.startswith("float") and seq.dtype not in ("int32", "int64", "int8", "uint8"):
        raise UnsupportedOpError(f"searchsorted of a {seq.dtype} sequence")
    seq, values = b.promote(seq, values)
    s = b.call("reshape", [seq], shape=tuple(seq.shape[:-1]) + (1, seq.shape[-1]))
    v = b.call("reshape", [values], shape=tuple(values.shape) + (1,))
    below = b.call("logical_not", [b.call("gt" if right else "ge", [s, v])])
    if seq.shape[-1] == 0:
        return b.const(np.zeros(tuple(values.shape), dtype=np.int32 if out_int32 else np.int64))
    n = b.call("sum", [b.call("cast", [below], dtype="int64")], axes=(-1,), keepdim=False)
    if tuple(n.shape) != tuple(values.shape):   # a 0-d value
        n = b.call("reshape", [n], shape=tuple(values.shape))
    return b.call("cast", [n], dtype="int32") if out_int32 else n


def _searchsorted(b, seq, values, out_int32=False, right=False, side=None, sorter=None):
    if sorter is not None:   # the sequence in sorted order
        seq = b.call("gather", [seq, sorter], dim=seq.type.ndim - 1)
    if seq.type.ndim > 1 and tuple(seq.shape[:-1]) != tuple(values.shape[:-1]):
        raise UnsupportedOpError("searchsorted: sequence and values differ in their leading dims")
    if not hasattr(values, "dtype"):
        values = b.as_tensor(values, seq.dtype if isinstance(values, int) or seq.dtype.startswith("float")
                             else "float32")
    return _count_below(b, seq, values, right or side == "right", out_int32)


def _bucketize(b, values, boundaries, out_int32=False, right=False):
    if boundaries.type.ndim != 1:
        raise UnsupportedOpError("bucketize with boundaries that are not 1-d")
    return _count_below(b, boundaries, values, right, out_int32)


register_aten("aten.put.default", _put)
register_aten("aten.searchsorted.Tensor", _searchsorted)
register_aten("aten.searchsorted.Scalar", _searchsorted)
register_aten("aten.bucketize.Tensor", _bucketize)


def _index_reduce(b, x, dim, index, source, reduce, include_self=True):
    """index_reduce along `dim` with a 1-d index: a scatter_reduce whose index is broadcast over source."""
    if x.type.ndim == 0:   # a 0-d tensor stands for a 1-element 1-d one
        one = _index_reduce(b, b.call("reshape", [x], shape=(1,)), 0, b.call("reshape", [index], shape=(-1,)),
                            b.call("reshape", [source], shape=(-1,)), reduce, include_self)
        return b.call("reshape", [one], shape=())
    if source.type.ndim != x.type.ndim:
        raise UnsupportedOpError("index_reduce with a source of another rank")
    d = norm_axis(dim, x.type.ndim)
    shape = [1] * source.type.ndim
    shape[d] = index.type.numel
    idx = b.call("expand", [b.call("reshape", [index], shape=tuple(shape))], size=tuple(source.shape))
    scatter_reduce = aten_table()["aten.scatter_reduce.two"][1]
    return scatter_reduce(b, x, d, idx, source, reduce, include_self=include_self)


register_aten("aten.index_reduce.default", _index_reduce)


def _nonzero_static(b, x, size, fill_value=-1):
    """The coordinates of the first `size` nonzero elements (row-major), rows past them `fill_value`:
    each nonzero element's rank (a cumsum) picks its output row; the rest land in a spare row dropped after."""
    n, nd = x.type.numel, x.type.ndim
    base = b.const(np.full((size + 1, nd), fill_value, dtype=np.int64))
    if n == 0 or nd == 0:   # no coordinates (0-d: rows of width 0) or no element: only fill rows
        return b.const(np.full((size, nd), fill_value, dtype=np.int64))
    mask = b.call("ne", [b.call("reshape", [x], shape=(-1,)), False if x.dtype == "bool" else 0])
    rank = b.call("sub", [aten_table()["aten.cumsum.default"][1](b, b.call("cast", [mask], dtype="int64"), 0), 1])
    keep = b.call("logical_and", [mask, b.call("lt", [rank, size])])
    row = b.call("where", [keep, rank, b.const(np.array(size, dtype=np.int64))])
    coords = b.const(np.stack(np.unravel_index(np.arange(n), tuple(x.shape)), axis=1).astype(np.int64))
    rows = b.call("expand", [b.call("reshape", [row], shape=(n, 1))], size=(n, nd))
    out = b.call("scatter", [base, rows, coords], dim=0, reduce=None, include_self=True)
    return b.call("slice", [out], dim=0, start=0, end=size, step=1)


register_aten("aten.nonzero_static.default", _nonzero_static)


def _embedding_bag(b, weight, indices, offsets, scale_grad_by_freq=False, mode=0, sparse=False,
                   per_sample_weights=None, include_last_offset=False, padding_idx=-1):
    """Bags of embedding rows reduced by sum / mean / max (only the first output; the graph must not read
    the bookkeeping ones). Each index position finds its bag by counting the offsets at or before it, and
    its row is accumulated into that bag in order (positions in no bag, or at padding_idx, go to a spare row)."""
    used = getattr(b, "used_outputs", None)
    if used is None or not used <= {0}:
        raise UnsupportedOpError("embedding_bag: the graph reads its offset2bag / bag_size / max_indices outputs")
    if indices.type.ndim != 1 or offsets is None or offsets.type.ndim != 1 or not weight.dtype.startswith("float"):
        raise UnsupportedOpError("embedding_bag with 2-d indices, no offsets or a non-float weight")
    n, nb, dim = indices.type.numel, offsets.type.numel - (1 if include_last_offset else 0), weight.shape[1]
    if n == 0 or nb <= 0:
        raise UnsupportedOpError("embedding_bag with no indices or no bags")
    pos = b.const(np.arange(n, dtype=np.int64).reshape(-1, 1))
    offs = b.call("reshape", [b.as_tensor(offsets, "int64")], shape=(1, -1))
    starts = b.call("slice", [offs], dim=1, start=0, end=nb, step=1)
    bag = b.call("sub", [b.call("sum", [b.call("cast", [b.call("le", [starts, pos])], dtype="int64")],
                                axes=(1,), keepdim=False), 1])
    valid = b.call("ge", [bag, 0])
    idx = b.as_tensor(indices, "int64")
    if include_last_offset:
        end = b.call("reshape", [b.call("slice", [offs], dim=1, start=nb, end=nb + 1, step=1)], shape=(1,))
        valid = b.call("logical_and", [valid, b.call("lt", [b.call("reshape", [pos], shape=(-1,)), end])])
    if padding_idx is not None and padding_idx >= 0:
        valid = b.call("logical_and", [valid, b.call("ne", [idx, padding_idx])])
    rows = b.call("where", [valid, bag, b.const(np.array(nb, dtype=np.int64))])
    vals = b.call("embedding", [weight, idx])
    if per_sample_weights is not None:
        if mode != 0:
            raise UnsupportedOpError("embedding_bag per_sample_weights outside mode sum")
        vals = b.call("mul", [vals, b.call("reshape", [b.as_tensor(per_sample_weights, weight.dtype)], shape=(-1, 1))])
    zeros = b.const(np.zeros((nb + 1, dim), dtype=weight.dtype))
    if mode == 2:
        index = b.call("expand", [b.call("reshape", [rows], shape=(-1, 1))], size=(n, dim))
        out = b.call("scatter", [zeros, index, vals], dim=0, reduce="amax", include_self=False)
    else:
        out = _index_put_aten(b, zeros, [rows], vals, True)
        if mode == 1:
            ones = b.const(np.ones((n,), dtype=weight.dtype))
            cnt = _index_put_aten(b, b.const(np.zeros((nb + 1,), dtype=weight.dtype)), [rows], ones, True)
            out = b.call("div", [out, b.call("reshape", [b.call("maximum", [cnt, 1.0])], shape=(-1, 1))])
    out = b.call("slice", [out], dim=0, start=0, end=nb, step=1)
    return out, None, None, None


register_aten("aten._embedding_bag_forward_only.default", _embedding_bag)
register_aten("aten._embedding_bag.default", _embedding_bag)
