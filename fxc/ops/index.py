"""Indexing with tensors: advanced indexing (`x[i, :, j]`), index_put (with accumulation), scatter and
scatter-reduce, and the ATen glue that composes them (slice_scatter, full_like, split_with_sizes...).

`index` is a gather (each output element reads one input element), so it is injective and fuses.
`index_put` and `scatter` write data-dependent positions: they are `te.extern` ops whose loop IR
(fxc/lowering/extern/scatter.py) copies the destination and then walks the index tensor serially, so duplicate
indices accumulate in a fixed order. Data-dependent indices are checked as eager PyTorch checks them
(te.check_index: index and index_put count negative ones from the end, scatter does not): an out-of-range one
fails the call with fxc.errors.IndexOutOfRangeError; none touches memory outside a buffer.
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import ShapeError, UnsupportedOpError
from ..lowering import te
from ..lowering.extern.scatter import index_put_loops, scatter_loops
from ..symbolic.expr import Const, cast, is_float
from ..types import TensorType
from .common import bcast, broadcast_shapes, norm_axis, np_dtype, rand
from .registry import Kind, OpDef, register, register_aten

ALL = ("float32", "float64", "int32", "int64", "int8", "uint8", "bool")
IDX = ("int32", "int64")


# -- index: x[idx_0, ..., idx_k] over the dims `dims` ------------------------------------------------------------------
def _index_layout(xshape, dims, ishapes):
    """(output shape, position of the broadcast index block, the un-indexed dims in order)."""
    bshape = broadcast_shapes(*ishapes)
    rest = [d for d in range(len(xshape)) if d not in dims]
    adjacent = list(dims) == list(range(dims[0], dims[0] + len(dims)))
    pos = dims[0] if adjacent else 0
    before = [d for d in rest if d < pos] if adjacent else []
    after = [d for d in rest if d not in before]
    shape = tuple(xshape[d] for d in before) + bshape + tuple(xshape[d] for d in after)
    return shape, len(before), bshape, before + after


def _index_infer(types, dims, in_range=False):
    x, idx = types[0], types[1:]
    if len(dims) != len(idx) or not dims or max(dims) >= x.ndim:
        raise ShapeError(f"index: {len(idx)} index tensors for dims {dims} of a rank-{x.ndim} tensor")
    return [TensorType(_index_layout(x.shape, dims, [t.shape for t in idx])[0], x.dtype)]


def _index(x, *idx, dims, in_range=False):
    """in_range: the indices are known to lie in [0, size) (constants checked at compile time, fold_constants), so
    they are loaded as they are instead of wrapped and checked."""
    shape, pos, bshape, rest = _index_layout(x.shape, dims, [t.shape for t in idx])
    nb = len(bshape)

    def body(*i):
        bi = i[pos:pos + nb]
        others = iter(i[:pos] + i[pos + nb:])
        coords = {d: next(others) for d in rest}
        for t, d in zip(idx, dims):
            coords[d] = cast("int64", bcast(t, bi)) if in_range \
                else te.check_index(bcast(t, bi), x.shape[d], "index", wrap=True)
        return x[tuple(coords[d] for d in range(x.ndim))]
    return te.compute(shape, body, "index")


def _index_ref(x, *idx, dims, in_range=False):
    key = [slice(None)] * x.ndim
    for t, d in zip(idx, dims):
        key[d] = t
    return np.ascontiguousarray(x[tuple(key)])


def _index_args(b, indices, what):
    """ATen's list of optional index tensors -> (dims, index Values)."""
    dims, vals = [], []
    for d, t in enumerate(indices):
        if t is None:
            continue
        if not hasattr(t, "dtype"):
            t = b.as_tensor(t, "int64")
        if t.dtype not in IDX:
            raise UnsupportedOpError(f"{what} with a {t.dtype} index (data-dependent shape)")
        dims.append(d)
        vals.append(t)
    if not dims:
        raise UnsupportedOpError(f"{what} without index tensors")
    return tuple(dims), vals


def _index_aten(b, x, indices):
    dims, vals = _index_args(b, indices, "index")
    return b.call("index", [x] + vals, dims=dims)


register(OpDef("index", Kind.INJECTIVE, _index_infer, _index_ref, _index,
               {"aten.index.Tensor": _index_aten, "aten._unsafe_index.Tensor": _index_aten}, None,
               lambda rng: [([rand(rng, (5, 6, 7)), np.array([[0, 4], [-1, 2]]), np.array([6, -7])], {"dims": (0, 2)}),
                            ([rand(rng, (4, 5, 3)), np.array([[1], [3]], dtype="int32"), np.array([0, 2, -2])],
                             {"dims": (1, 2)}),
                            ([rand(rng, (3, 4), "int64"), np.array([2, 0, 2, 1])], {"dims": (1,)})],
               ALL))


# -- index_put: out = x; out[idx] = values (or += values) --------------------------------------------------------------
def _index_put_infer(types, dims, accumulate=False, shape=None):
    """shape: x is a 0-d fill value of a tensor of that shape (index_put into zeros: an embedding's gradient)."""
    x, v, idx = types[0], types[1], types[2:]
    if shape is not None and x.ndim:
        raise ShapeError(f"index_put: a fill value of shape {tuple(shape)} is 0-d, got {x.shape}")
    xshape = tuple(shape) if shape is not None else x.shape
    ishape = _index_layout(xshape, dims, [t.shape for t in idx])[0]
    if broadcast_shapes(ishape, v.shape) != ishape:
        raise ShapeError(f"index_put: values {v.shape} do not broadcast to the indexed shape {ishape}")
    return [TensorType(xshape, x.dtype)]


def _index_put(x, v, *idx, dims, accumulate=False, shape=None):
    xshape = tuple(shape) if shape is not None else tuple(x.shape)
    ishape, pos, bshape, rest = _index_layout(xshape, dims, [t.shape for t in idx])
    nb = len(bshape)

    return te.extern([(xshape, x.dtype)], [x, v] + list(idx),
                     index_put_loops(xshape, v.shape, [t.shape for t in idx], dims, ishape, pos, nb, rest, accumulate,
                                     shape is not None), "index_put")[0]


def _index_put_ref(x, v, *idx, dims, accumulate=False, shape=None):
    out = np.broadcast_to(x, shape).copy() if shape is not None else x.copy()
    key = [slice(None)] * out.ndim
    for t, d in zip(idx, dims):
        key[d] = np.where(t < 0, t + out.shape[d], t)
    key = tuple(key)
    if accumulate:
        np.add.at(out, key, np.broadcast_to(v, out[key].shape).astype(x.dtype))
    else:
        out[key] = v
    return out


def _index_put_mask(b, x, indices, values, accumulate):
    """x[mask] = values with one bool mask: a `where`, when values do not run along the (data-dependent)
    count of true elements, i.e. they broadcast over it."""
    d = next(k for k, t in enumerate(indices) if t is not None)
    mask = indices[d]
    if any(t is not None for t in indices[d + 1:]) or mask.type.ndim == 0:
        raise UnsupportedOpError("index_put with a bool mask and other indices (data-dependent shape)")
    k, nd = mask.type.ndim, x.type.ndim
    if tuple(mask.shape) != tuple(x.shape[d:d + k]):
        raise ShapeError(f"index_put: mask {mask.shape} does not match the indexed dims {x.shape[d:d + k]}")
    trailing = nd - d - k
    v = b.as_tensor(values, x.dtype)
    vs = tuple(v.shape)
    if len(vs) > trailing:
        if vs[len(vs) - trailing - 1] != 1:
            raise UnsupportedOpError("index_put with a bool mask and one value per true element (data-dependent shape)")
        vs = vs[:len(vs) - trailing - 1] + (1,) * k + vs[len(vs) - trailing:]
        v = b.call("reshape", [v], shape=vs)
    m = b.call("reshape", [mask], shape=(1,) * d + tuple(mask.shape) + (1,) * trailing)
    new = b.call("add", [x, v]) if accumulate else v
    if accumulate and x.dtype == "bool":
        raise UnsupportedOpError("index_put with accumulate on a bool tensor")
    out = b.call("where", [m, new, x])
    return b.call("expand", [out], size=tuple(x.shape)) if tuple(out.shape) != tuple(x.shape) else out


def _index_put_aten(b, x, indices, values, accumulate=False):
    if any(t is not None and getattr(t, "dtype", None) == "bool" for t in indices):
        return _index_put_mask(b, x, indices, values, accumulate)
    dims, vals = _index_args(b, indices, "index_put")
    if accumulate and x.dtype == "bool":
        raise UnsupportedOpError("index_put with accumulate on a bool tensor")
    if x.is_const and x.data.ndim and x.data.size > 1 and (x.data == x.data.flat[0]).all():   # into zeros: a fill
        return b.call("index_put", [b.const(x.data.flat[0].copy()), b.as_tensor(values, x.dtype)] + vals, dims=dims,
                      accumulate=bool(accumulate), shape=tuple(x.shape))
    return b.call("index_put", [x, b.as_tensor(values, x.dtype)] + vals, dims=dims, accumulate=bool(accumulate))


register(OpDef("index_put", Kind.OPAQUE, _index_put_infer, _index_put_ref, _index_put,
               {"aten.index_put.default": _index_put_aten, "aten._unsafe_index_put.default": _index_put_aten}, None,
               lambda rng: [([rand(rng, (6, 3)), rand(rng, (4, 3)), np.array([0, 5, -1, 2])], {"dims": (0,)}),
                            ([rand(rng, (6, 3)), rand(rng, (5, 1)), np.array([1, 5, 1, -1, 1])],
                             {"dims": (0,), "accumulate": True}),
                            ([rand(rng, (4, 5, 2), "int64"), rand(rng, (2,), "int64"), np.array([[0, 3], [3, 3]]),
                              np.array([4, -1])],
                             {"dims": (0, 1), "accumulate": True}),
                            ([np.array(0.0, np.float32), rand(rng, (5, 19)), np.array([3, 40, 3, -1, 0])],  # into zeros
                             {"dims": (0,), "accumulate": True, "shape": (41, 19)}),
                            ([np.array(True), rand(rng, (2, 3)) > 0, np.array([1, 4])],
                             {"dims": (1,), "shape": (2, 5, 3)})],
               ALL))


# -- scatter / scatter_add / scatter_reduce along one dim --------------------------------------------------------------
_IDENTITY = {"sum": 0, "prod": 1, "amax": -math.inf, "amin": math.inf}


def _scatter_infer(types, dim, reduce=None, include_self=True):
    x, idx, src = types
    d = norm_axis(dim, x.ndim)
    if idx.ndim != x.ndim or src.ndim != x.ndim or any(
            i > s or (k != d and i > n) for k, (i, s, n) in enumerate(zip(idx.shape, src.shape, x.shape))):
        raise ShapeError(f"scatter: index {idx.shape} must fit src {src.shape} and self {x.shape} outside dim {d}")
    return [x]


def _identity(op, dtype):
    v = _IDENTITY[op]
    if is_float(dtype):
        return Const(float(v), dtype)
    return te.reduce_init({"amax": "max", "amin": "min"}.get(op, op), dtype)


def _scatter(x, idx, src, dim, reduce=None, include_self=True):
    d = norm_axis(dim, x.ndim)

    reset = _identity(reduce, x.dtype) if reduce is not None and not include_self else None
    lower = scatter_loops(x.shape, idx.shape, src.shape, d, reduce, reset)
    return te.extern([(x.shape, x.dtype)], [x, idx, src], lower, "scatter")[0]


def _scatter_ref(x, idx, src, dim, reduce=None, include_self=True):
    d = norm_axis(dim, x.ndim)
    out = x.copy()
    hit = np.zeros(x.shape, bool)
    fn = {"sum": np.add, "prod": np.multiply, "amax": np.maximum, "amin": np.minimum}
    for i in np.ndindex(*idx.shape):
        j = list(i)
        j[d] = idx[i] + x.shape[d] if idx[i] < 0 else idx[i]
        j = tuple(j)
        if reduce is None:
            out[j] = src[i]
        elif not include_self and not hit[j]:
            out[j] = src[i]
        else:
            out[j] = fn[reduce](out[j], src[i])
        hit[j] = True
    return out


def _scatter_aten(reduce=None):
    def conv(b, x, dim, index, src, reduce_=None, include_self=True, **kw):
        red = kw.get("reduce", reduce_) if reduce is None else reduce
        red = {"add": "sum", "multiply": "prod", "sum": "sum", "prod": "prod", "amax": "amax", "amin": "amin",
               "mean": "mean", None: None}.get(red, "?")
        if red == "?":
            raise UnsupportedOpError(f"scatter reduce {kw.get('reduce', reduce_)!r}")
        if not hasattr(src, "dtype"):      # scatter.value: a scalar source
            src = b.const(np.full(index.shape, src, dtype=np.dtype(x.dtype) if x.dtype != "bool" else bool))
        src = b.as_tensor(src, x.dtype)
        if x.dtype == "bool" and red is not None:
            raise UnsupportedOpError("scatter reduce on a bool tensor")
        if x.type.ndim == 0:   # a 0-d tensor stands for a 1-element 1-d one
            x1, i1, s1 = (b.call("reshape", [t], shape=(-1,)) for t in (x, index, src))
            return b.call("reshape", [conv(b, x1, 0, i1, s1, red, include_self)], shape=())
        if red == "mean":
            return _scatter_mean(b, x, dim, index, src, include_self)
        return b.call("scatter", [x, index, src], dim=dim, reduce=red, include_self=bool(include_self))
    return conv


def _scatter_mean(b, x, dim, index, src, include_self):
    if not is_float(x.dtype):
        raise UnsupportedOpError("scatter_reduce mean on an integer tensor")
    total = b.call("scatter", [x, index, src], dim=dim, reduce="sum", include_self=bool(include_self))
    ones = b.const(np.ones(index.shape, dtype=x.dtype))
    base = b.const(np.full(x.shape, 1.0 if include_self else 0.0, dtype=x.dtype))
    count = b.call("scatter", [base, index, ones], dim=dim, reduce="sum", include_self=True)
    return b.call("div", [total, b.call("maximum", [count, 1.0])])


register(OpDef("scatter", Kind.OPAQUE, _scatter_infer, _scatter_ref, _scatter,
               {"aten.scatter.src": _scatter_aten(), "aten.scatter.value": _scatter_aten(),
                "aten.scatter.reduce": _scatter_aten(), "aten.scatter.value_reduce": _scatter_aten(),
                "aten.scatter_add.default": _scatter_aten("sum"),
                "aten.scatter_reduce.two": lambda b, x, dim, index, src, reduce, include_self=True:
                    _scatter_aten()(b, x, dim, index, src, reduce, include_self)}, None,
               lambda rng: [([rand(rng, (4, 5)), np.array([[0, 3, 4], [2, 0, 1]]), rand(rng, (2, 4))], {"dim": 1}),
                            ([rand(rng, (4, 5)), np.array([[0, 3, 3], [3, 3, 0]]), rand(rng, (3, 3))],
                             {"dim": 0, "reduce": "sum"}),
                            ([rand(rng, (3, 4)), np.array([[1, 1], [0, 1]]), rand(rng, (2, 2))],
                             {"dim": 1, "reduce": "prod", "include_self": False}),
                            ([rand(rng, (3, 4), "int64"), np.array([[1, 1, 3], [0, 1, 1]]), rand(rng, (2, 3), "int64")],
                             {"dim": 1, "reduce": "amax", "include_self": False}),
                            ([rand(rng, (3, 4)), np.array([[2, 2, 1, 0]]), rand(rng, (1, 4))],
                             {"dim": 0, "reduce": "amin"})],
               ALL))


# -- ATen glue composed of registry ops --------------------------------------------------------------------------------
def _full_like(b, x, fill_value, dtype=None, **_):
    if not isinstance(fill_value, (int, float, bool)):
        raise UnsupportedOpError("full_like with a tensor fill value")
    return b.const(np.full(tuple(x.shape), fill_value, dtype=np_dtype(dtype or x.dtype)))


def _split_with_sizes(b, x, split_sizes, dim=0):
    d = norm_axis(dim, x.type.ndim)
    if sum(split_sizes) != x.shape[d]:
        raise ShapeError(f"split sizes {list(split_sizes)} do not add up to {x.shape[d]}")
    outs, start = [], 0
    for s in split_sizes:
        outs.append(b.call("slice", [x], dim=d, start=start, end=start + s, step=1))
        start += s
    return tuple(outs)


def _split(b, x, split_size, dim=0):
    n = x.shape[norm_axis(dim, x.type.ndim)]
    sizes = [min(split_size, n - s) for s in range(0, n, split_size)] if split_size else [n]
    return _split_with_sizes(b, x, sizes, dim)


def _slice_scatter(b, x, src, dim=0, start=None, end=None, step=1):
    """x with x[..., start:end:step, ...] = src: a gather that picks src where the slice covers."""
    d = norm_axis(dim, x.type.ndim)
    n = x.shape[d]
    start = 0 if start is None else (start + n if start < 0 else start)
    end = n if end is None else min(end + n if end < 0 else end, n)
    start = min(max(start, 0), n)
    pos = np.arange(n)
    covered = (pos >= start) & (pos < end) & ((pos - start) % step == 0)
    src_pos = np.where(covered, (pos - start) // step, 0).astype(np.int64)
    if src.shape[d] == 0:
        return b.call("copy", [x])
    shape = [1] * x.type.ndim
    shape[d] = n
    picked = b.call("index_select", [b.as_tensor(src, x.dtype), b.const(src_pos)], dim=d)
    mask = b.const(covered.reshape(shape))
    return b.call("where", [mask, picked, x])


def _copy(b, dst, src, non_blocking=False):
    src = b.as_tensor(src, dst.dtype)
    if tuple(src.shape) == tuple(dst.shape):
        return b.call("copy", [src])
    return b.call("expand", [src], size=tuple(dst.shape))


def _masked_fill(b, x, mask, value):
    return b.call("where", [b.as_tensor(mask, "bool"), b.as_tensor(value, x.dtype), x])


def _masked_scatter(b, x, mask, source):
    """x where mask is false; elsewhere source's elements in order: source.flatten()[cumsum(mask) - 1]."""
    shape = broadcast_shapes(tuple(x.shape), tuple(mask.shape))
    m = b.call("expand", [b.as_tensor(mask, "bool")], size=shape)
    x = b.call("expand", [x], size=shape)
    n = math.prod(shape)
    if n == 0 or source.type.numel == 0:
        return b.call("copy", [x])
    pos = b.call("cumsum", [b.call("reshape", [b.as_tensor(m, "int64")], shape=(n,))], dim=0)
    pos = b.call("clamp", [b.call("sub", [pos, 1])], lo=0, hi=source.type.numel - 1)
    picked = b.call("index", [b.call("reshape", [b.as_tensor(source, x.dtype)], shape=(-1,)), pos], dims=(0,))
    return b.call("where", [m, b.call("reshape", [picked], shape=shape), x])


register_aten("aten.full_like.default", _full_like)
register_aten("aten.zeros_like.default", lambda b, x, dtype=None, **_: _full_like(b, x, 0, dtype))
register_aten("aten.ones_like.default", lambda b, x, dtype=None, **_: _full_like(b, x, 1, dtype))
register_aten("aten.split_with_sizes.default", _split_with_sizes)
register_aten("aten.split.Tensor", _split)
register_aten("aten.slice_scatter.default", _slice_scatter)
register_aten("aten.copy.default", _copy)
register_aten("aten.masked_fill.Scalar", _masked_fill)
register_aten("aten.masked_scatter.default", _masked_scatter)
register_aten("aten.masked_fill.Tensor", _masked_fill)


def _new_empty(b, x, size, stride=None, dtype=None, **_):
    return b.const(np.zeros(tuple(size), dtype=np_dtype(dtype or x.dtype)))


def _pad_backward(mode):
    """Gradient of reflection/replication padding: the output gradient summed onto the input positions
    each padded position was read from (an accumulating index_put with constant indices)."""
    def conv(b, gy, x, padding):
        k = len(padding) // 2
        nd = x.type.ndim
        dims, idx = tuple(range(nd - k, nd)), []
        for a, d in enumerate(dims):
            before = padding[2 * (nd - 1 - d)]
            n, m = x.shape[d], gy.shape[d]
            j = np.arange(m) - before
            if mode == "replicate":
                j = np.clip(j, 0, n - 1)
            else:
                j = np.abs(j)
                j = np.where(j >= n, 2 * n - 2 - j, j)
            shape = [1] * k
            shape[a] = m
            idx.append(b.const(j.astype(np.int64).reshape(shape)))
        zeros = b.const(np.zeros(tuple(x.shape), dtype=np.dtype(gy.dtype)))
        return b.call("index_put", [zeros, gy] + idx, dims=dims, accumulate=True)
    return conv


register_aten("aten.new_empty_strided.default", _new_empty)
register_aten("aten.new_empty.default", lambda b, x, size, dtype=None, **_: _new_empty(b, x, size, dtype=dtype))
register_aten("aten.new_zeros.default", lambda b, x, size, dtype=None, **_: _new_empty(b, x, size, dtype=dtype))
for _k in (1, 2, 3):
    register_aten(f"aten.replication_pad{_k}d_backward.default", _pad_backward("replicate"))
    register_aten(f"aten.reflection_pad{_k}d_backward.default", _pad_backward("reflect"))
