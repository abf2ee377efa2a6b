"""Movement / injective ops: reshape, permute, expand, slice, select, cat, pad, flip, repeat, gather,
index_select, embedding-style indexing, full/arange constants.

Data-dependent indices are checked as eager PyTorch checks them (te.check_index): an out-of-range one fails the call
with fxc.errors.IndexOutOfRangeError, naming the op and the index; none is clamped, none reads outside a buffer.
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import ShapeError, UnsupportedOpError
from ..lowering import te
from ..symbolic.expr import as_expr, binary, compare, maximum, minimum, poly, select
from ..symbolic.sym import canonical  # sizes may be symbolic (int64 expressions of size symbols)
from ..types import TensorType
from .common import const_like, contiguous_strides, norm_axis, np_dtype, rand
from .registry import Kind, OpDef, register

ALL = ("float32", "float64", "int32", "int64", "int8", "uint8", "bool")


def op(name, kind, infer, ref, compute, aten=None, samples=None, promote=None, **kw):
    return register(OpDef(name, kind, infer, ref, compute, aten or {}, promote, samples, ALL, **kw))


def unravel(flat, shape):
    """Multi-index of a flat (row-major) index."""
    idx = []
    for s, st in zip(shape, contiguous_strides(shape)):
        e = flat if st == 1 else binary("idiv", flat, st)
        idx.append(as_expr(0) if s == 1 else (e if st * s == math.prod(shape) else binary("imod", e, s)))
    return tuple(idx)


def flat_of(idx, shape):
    f = as_expr(0)
    for i, st in zip(idx, contiguous_strides(shape)):
        f = f + i * st
    return f


# -- reshape ------------------------------------------------------------------------------------------
def resolve_shape(shape, numel):
    shape = [canonical(s) for s in shape]
    if shape.count(-1) > 1:
        raise ShapeError(f"reshape to {shape}: only one dimension may be -1")
    if -1 in shape:
        rest = canonical(math.prod(s for s in shape if s != -1))
        shape[shape.index(-1)] = canonical(numel // rest) if rest != 0 else 0
    if canonical(math.prod(shape)) != canonical(numel):
        raise ShapeError(f"cannot reshape {numel} elements to {shape}")
    return tuple(shape)


def _reshape_infer(types, shape):
    return [TensorType(resolve_shape(shape, types[0].numel), types[0].dtype)]


def reshape_groups(out_shape, in_shape):
    """[(output dims, input dims)]: the runs of dims of the two shapes with equal products, shortest first (a
    reshape splits or merges dims within each run, never across); None when a shape has a zero."""
    if 0 in out_shape or 0 in in_shape:
        return None
    groups, j, k = [], 0, 0
    while j < len(out_shape) or k < len(in_shape):
        gj, gk, pj, pk = [], [], 1, 1
        while True:
            if j < len(out_shape) and (_smaller(pj, pk) or k == len(in_shape) or (pj == pk and not gj)):
                pj = canonical(pj * out_shape[j])
                gj.append(j)
                j += 1
            elif k < len(in_shape):
                pk = canonical(pk * in_shape[k])
                gk.append(k)
                k += 1
            if pj == pk and gj and gk or (j == len(out_shape) and k == len(in_shape)):
                break
        while j < len(out_shape) and out_shape[j] == 1 and k == len(in_shape):   # trailing size-1 dims
            gj.append(j)
            j += 1
        groups.append((gj, gk))
    return groups


def _smaller(a, b) -> bool:
    """a < b for every size; where the order of symbolic products depends on the sizes (b < b*s fails at s = 1),
    the proper divisor is the smaller run ([b, s] against [b*s]: the batch run grows first); TypeError otherwise."""
    try:
        return a < b
    except TypeError:
        if a != b and _divides(a, b):
            return True
        if a != b and _divides(b, a):
            return False
        raise


def _divides(a, b) -> bool:
    """Whether b is a polynomial multiple of the monomial a (b*s of b, 4*b*s of 2*s)."""
    try:
        poly(binary("idiv", as_expr(b), as_expr(a)))
        return True
    except ValueError:
        return False


def reshape_index(i, out_shape, in_shape):
    """The input index of output index i: per run of reshape_groups, the run's flat index unravelled into its input
    dims, so an unchanged dim reads its own index (no division across the whole flat index)."""
    try:
        groups = reshape_groups(out_shape, in_shape)
    except TypeError:       # symbolic dims whose order depends on the sizes: one run over the whole flat index
        groups = None
    if groups is None:
        return unravel(flat_of(i, out_shape), in_shape)
    idx = [None] * len(in_shape)
    for gj, gk in groups:
        flat = flat_of([i[j] for j in gj], [out_shape[j] for j in gj])
        for k, e in zip(gk, unravel(flat, [in_shape[k] for k in gk])):
            idx[k] = e
    return tuple(idx)


def _reshape(x, shape):
    shape = resolve_shape(shape, math.prod(x.shape))
    return te.compute(shape, lambda *i: x[reshape_index(i, shape, x.shape)] if x.shape else x[()], "reshape")


def _view(b, x, shape):
    return b.call("reshape", [x], shape=tuple(shape))


def _squeeze(b, x, dims=None):
    dims = range(x.type.ndim) if dims is None else \
        [norm_axis(d, x.type.ndim) for d in (dims if isinstance(dims, (list, tuple)) else [dims])]
    return b.call("reshape", [x], shape=tuple(s for d, s in enumerate(x.shape) if not (d in dims and s == 1)))


def _unsqueeze(b, x, dim):
    shape = list(x.shape)
    shape.insert(norm_axis(dim, x.type.ndim + 1), 1)
    return b.call("reshape", [x], shape=tuple(shape))


op("reshape", Kind.INJECTIVE, _reshape_infer, lambda x, shape: x.reshape(resolve_shape(shape, x.size)), _reshape,
   {"aten.view.default": _view, "aten._unsafe_view.default": _view, "aten.reshape.default": _view,
    "aten.squeeze.dim": _squeeze, "aten.squeeze.dims": _squeeze, "aten.squeeze.default": _squeeze,
    "aten.unsqueeze.default": _unsqueeze},
   lambda rng: [([rand(rng, (2, 3, 4))], {"shape": (4, -1)}), ([rand(rng, (6,))], {"shape": (1, 2, 3)})])


# -- permute --------------------------------------------------------------------------------------------
def _perm(dims, nd):
    return tuple(norm_axis(d, nd) for d in dims)


def _permute_infer(types, dims):
    t = types[0]
    return [TensorType(tuple(t.shape[d] for d in _perm(dims, t.ndim)), t.dtype)]


def _permute(x, dims):
    dims = _perm(dims, x.ndim)
    inv = [dims.index(d) for d in range(x.ndim)]
    return te.compute(tuple(x.shape[d] for d in dims), lambda *i: x[tuple(i[inv[d]] for d in range(x.ndim))], "permute")


def _transpose(b, x, d0, d1):
    nd = x.type.ndim
    dims = list(range(nd))
    if nd:
        a, c = norm_axis(d0, nd), norm_axis(d1, nd)
        dims[a], dims[c] = dims[c], dims[a]
    return b.call("permute", [x], dims=tuple(dims))


op("permute", Kind.INJECTIVE, _permute_infer,
   lambda x, dims: np.ascontiguousarray(np.transpose(x, _perm(dims, x.ndim))), _permute,
   {"aten.permute.default": lambda b, x, dims: b.call("permute", [x], dims=tuple(dims)),
    "aten.t.default": lambda b, x: _transpose(b, x, 0, 1) if x.type.ndim == 2 else x,
    "aten.transpose.int": _transpose},
   lambda rng: [([rand(rng, (2, 3, 4))], {"dims": (2, 0, 1)})])


# -- expand -----------------------------------------------------------------------------------------------
def _expand_shape(shape, size):
    size = list(size)
    off = len(size) - len(shape)
    if off < 0:
        raise ShapeError(f"cannot expand {list(shape)} to {size}")
    out = []
    for d, s in enumerate(size):
        src = shape[d - off] if d >= off else 1
        s = src if s == -1 else s
        if src != 1 and src != s:
            raise ShapeError(f"cannot expand {list(shape)} to {size}")
        out.append(s)
    return tuple(out)


def _expand(x, size):
    shape = _expand_shape(x.shape, size)
    off = len(shape) - x.ndim
    return te.compute(shape, lambda *i: x[tuple(as_expr(0) if x.shape[d] == 1 else i[d + off] for d in range(x.ndim))],
                      "expand")


op("expand", Kind.BROADCAST, lambda t, size: [TensorType(_expand_shape(t[0].shape, size), t[0].dtype)],
   lambda x, size: np.ascontiguousarray(np.broadcast_to(x, _expand_shape(x.shape, size))), _expand,
   {"aten.expand.default": lambda b, x, size, implicit=False: b.call("expand", [x], size=tuple(size))},
   lambda rng: [([rand(rng, (3, 1))], {"size": (2, 3, 4)})])


# -- slice / select ---------------------------------------------------------------------------------------
def _slice_params(n, start, end, step):
    start = 0 if start is None else start
    end = n if end is None else end
    start = start + n if start < 0 else start
    end = end + n if end < 0 else end
    start, end = min(max(start, 0), n), min(max(end, 0), n)
    return start, max((end - start + step - 1) // step, 0)


def _slice_infer(types, dim, start, end, step):
    t = types[0]
    d = norm_axis(dim, t.ndim)
    shape = list(t.shape)
    shape[d] = _slice_params(t.shape[d], start, end, step)[1]
    return [TensorType(tuple(shape), t.dtype)]


def _slice(x, dim, start, end, step):
    d = norm_axis(dim, x.ndim)
    s0, n = _slice_params(x.shape[d], start, end, step)
    shape = list(x.shape)
    shape[d] = n
    return te.compute(shape, lambda *i: x[i[:d] + (i[d] * step + s0,) + i[d + 1:]], "slice")


def _slice_ref(x, dim, start, end, step):
    d = norm_axis(dim, x.ndim)
    s0, n = _slice_params(x.shape[d], start, end, step)
    sl = [slice(None)] * x.ndim
    sl[d] = slice(s0, s0 + n * step, step)
    return np.ascontiguousarray(x[tuple(sl)])


def _slice_aten(b, x, dim=0, start=None, end=None, step=1):
    if step <= 0:
        raise UnsupportedOpError("slice step must be positive")
    big = 1 << 62
    return b.call("slice", [x], dim=dim,
                  start=start if start is None or abs(start) < big else (0 if start < 0 else big),
                  end=None if end is None or end >= big else end, step=step)


def _select_aten(b, x, dim, index):
    d = norm_axis(dim, x.type.ndim)
    index = index + x.shape[d] if index < 0 else index
    if not 0 <= index < x.shape[d]:
        raise ShapeError(f"select index {index} out of range for dim {d} of size {x.shape[d]}")
    s = b.call("slice", [x], dim=d, start=index, end=index + 1, step=1)
    return b.call("reshape", [s], shape=tuple(x.shape[:d] + x.shape[d + 1:]))


op("slice", Kind.INJECTIVE, _slice_infer, _slice_ref, _slice,
   {"aten.slice.Tensor": _slice_aten, "aten.select.int": _select_aten},
   lambda rng: [([rand(rng, (4, 9))], {"dim": 1, "start": 1, "end": -2, "step": 2})])


# -- cat ----------------------------------------------------------------------------------------------------
def _cat_infer(types, dim):
    t0 = types[0]
    d = norm_axis(dim, t0.ndim)
    for t in types:
        if t.ndim != t0.ndim or any(a != b for k, (a, b) in enumerate(zip(t.shape, t0.shape)) if k != d):
            raise ShapeError(f"cat: shapes {[t.shape for t in types]} differ outside dim {d}")
    shape = list(t0.shape)
    shape[d] = sum(t.shape[d] for t in types)
    return [TensorType(tuple(shape), t0.dtype)]


def _cat(*xs, dim):
    d = norm_axis(dim, xs[0].ndim)
    shape = list(xs[0].shape)
    shape[d] = sum(x.shape[d] for x in xs)

    def body(*i):
        offs = [0]      # where each input starts along `dim` (ints, or sizes of symbols: a growing KV cache)
        for x in xs:
            offs.append(canonical(offs[-1] + x.shape[d]))
        val = None
        for k in reversed(range(len(xs))):
            x = xs[k]
            if x.shape[d] == 0:
                continue
            j = minimum(maximum(i[d] - as_expr(offs[k]), as_expr(0)), as_expr(canonical(x.shape[d] - 1)))
            v = x[i[:d] + (j,) + i[d + 1:]]
            val = v if val is None else select(compare("lt", i[d], as_expr(offs[k + 1])), v, val)
        if val is None:   # every input is empty along `dim`: so is the output (never read)
            dt = xs[0].dtype
            return as_expr(False if dt == "bool" else 0.0 if dt.startswith("float") else 0, dt)
        return val
    return te.compute(shape, body, "cat")


def _cat_aten(b, tensors, dim=0):
    tensors = b.promote(*tensors)   # empty 1-d inputs take part in the dtype, not in the shape (legacy ATen)
    tensors = [t for t in tensors if not (t.type.ndim == 1 and t.shape[0] == 0)] or tensors[:1]
    return tensors[0] if len(tensors) == 1 else b.call("cat", list(tensors), dim=dim)


op("cat", Kind.INJECTIVE, _cat_infer, lambda *xs, dim: np.concatenate(xs, axis=dim), _cat,
   {"aten.cat.default": _cat_aten},
   lambda rng: [([rand(rng, (2, 3)), rand(rng, (2, 1)), rand(rng, (2, 4))], {"dim": 1})])


# -- pad ------------------------------------------------------------------------------------------------------
def _pad_widths(nd, pad):
    """ATen pad list (last dim first: l, r, t, b...) -> [(before, after)] per dim."""
    w = [(0, 0)] * nd
    for k in range(len(pad) // 2):
        w[nd - 1 - k] = (pad[2 * k], pad[2 * k + 1])
    return w


def _pad_infer(types, pad, value=0.0, mode="constant"):
    t = types[0]
    w = _pad_widths(t.ndim, pad)
    shape = tuple(s + a + b for s, (a, b) in zip(t.shape, w))
    if any(s < 0 for s in shape):
        raise ShapeError(f"pad {pad} makes a negative size")
    if mode != "constant" and any(a > s or b > s or (mode == "reflect" and (a >= s or b >= s))
                                  for s, (a, b) in zip(t.shape, w)):
        raise ShapeError(f"{mode} padding {pad} is larger than the input {t.shape}")
    return [TensorType(shape, t.dtype)]


def _pad(x, pad, value=0.0, mode="constant"):
    w = _pad_widths(x.ndim, pad)
    shape = tuple(s + a + b for s, (a, b) in zip(x.shape, w))

    def body(*i):
        idx, inside = [], None
        for d, (a, _) in enumerate(w):
            n = x.shape[d]
            j = i[d] - a
            if mode == "constant":
                if w[d] != (0, 0):
                    ok = binary("and", compare("ge", j, as_expr(0)), compare("lt", j, as_expr(n)))
                    inside = ok if inside is None else binary("and", inside, ok)
                    j = minimum(maximum(j, as_expr(0)), as_expr(max(n - 1, 0)))
            elif mode == "reflect":
                j = select(compare("lt", j, as_expr(0)), -j, j)
                j = select(compare("ge", j, as_expr(n)), as_expr(2 * n - 2) - j, j)
            elif mode == "replicate":
                j = minimum(maximum(j, as_expr(0)), as_expr(n - 1))
            elif mode == "circular":
                j = binary("imod", j + n, as_expr(n))
            idx.append(j)
        v = x[tuple(idx)]
        if inside is not None:
            v = select(inside, v, const_like(value, x.dtype))
        return v
    # a consumer's schedule may read x directly and skip the padded taps (depthwise conv fuses its pad)
    attrs = {"pad_of": x, "pad_widths": tuple(w), "pad_value": value} if mode == "constant" else None
    return te.compute(shape, body, "pad", attrs)


def _pad_ref(x, pad, value=0.0, mode="constant"):
    w = _pad_widths(x.ndim, pad)
    neg = [(max(-a, 0), max(-b, 0)) for a, b in w]
    pos = [(max(a, 0), max(b, 0)) for a, b in w]
    x = x[tuple(slice(a, x.shape[d] - b) for d, (a, b) in enumerate(neg))]
    np_mode = {"constant": "constant", "reflect": "reflect", "replicate": "edge", "circular": "wrap"}[mode]
    return np.pad(x, pos, mode=np_mode, **({"constant_values": value} if mode == "constant" else {})).astype(x.dtype)


op("pad", Kind.INJECTIVE, _pad_infer, _pad_ref, _pad,
   {"aten.constant_pad_nd.default": lambda b, x, pad, value=0:
        b.call("pad", [x], pad=tuple(pad), value=value, mode="constant"),
    "aten.reflection_pad1d.default": lambda b, x, pad: b.call("pad", [x], pad=tuple(pad), mode="reflect"),
    "aten.reflection_pad2d.default": lambda b, x, pad: b.call("pad", [x], pad=tuple(pad), mode="reflect"),
    "aten.reflection_pad3d.default": lambda b, x, pad: b.call("pad", [x], pad=tuple(pad), mode="reflect"),
    "aten.replication_pad1d.default": lambda b, x, pad: b.call("pad", [x], pad=tuple(pad), mode="replicate"),
    "aten.replication_pad2d.default": lambda b, x, pad: b.call("pad", [x], pad=tuple(pad), mode="replicate"),
    "aten.replication_pad3d.default": lambda b, x, pad: b.call("pad", [x], pad=tuple(pad), mode="replicate")},
   lambda rng: [([rand(rng, (2, 3, 4))], {"pad": (1, 2, 0, 1), "value": 0.5}),
                ([rand(rng, (2, 5))], {"pad": (2, 1), "mode": "reflect"}),
                ([rand(rng, (2, 5))], {"pad": (2, 3), "mode": "replicate"}),
                ([rand(rng, (2, 5))], {"pad": (2, 3), "mode": "circular"})])


# -- flip / repeat -----------------------------------------------------------------------------------------------
def _flip(x, dims):
    dims = {norm_axis(d, x.ndim) for d in dims}
    return te.compute(x.shape,
                      lambda *i: x[tuple((x.shape[d] - 1) - i[d] if d in dims else i[d] for d in range(x.ndim))],
                      "flip")


op("flip", Kind.INJECTIVE, lambda t, dims: [t[0]], lambda x, dims: np.ascontiguousarray(np.flip(x, dims)), _flip,
   {"aten.flip.default": lambda b, x, dims: b.call("flip", [x], dims=tuple(dims))},
   lambda rng: [([rand(rng, (3, 4))], {"dims": (0, 1)})])


def _repeat_shape(shape, repeats):
    shape = (1,) * (len(repeats) - len(shape)) + tuple(shape)
    return tuple(s * r for s, r in zip(shape, repeats))


def _repeat(x, repeats):
    shape = _repeat_shape(x.shape, repeats)
    off = len(shape) - x.ndim
    return te.compute(shape,
                      lambda *i: x[tuple(binary("imod", i[d + off], as_expr(x.shape[d])) for d in range(x.ndim))],
                      "repeat")


op("repeat", Kind.INJECTIVE, lambda t, repeats: [TensorType(_repeat_shape(t[0].shape, repeats), t[0].dtype)],
   lambda x, repeats: np.tile(x, repeats), _repeat,
   {"aten.repeat.default": lambda b, x, repeats: b.call("repeat", [x], repeats=tuple(repeats))},
   lambda rng: [([rand(rng, (2, 3))], {"repeats": (2, 1, 2)})])


# -- gather-style indexing ---------------------------------------------------------------------------------------
def _on_1d(b, op, x, dim, idx, scalar_shape):
    """ATen lets a 0-d tensor stand for a 1-element 1-d one: such calls run on 1-d and are reshaped back."""
    if op == "gather" and idx.type.numel == 0:   # ATen skips the rank check for an empty index
        return b.const(np.zeros(tuple(idx.shape), dtype=np_dtype(x.dtype)))
    if x.type.ndim:
        if op == "gather" and idx.type.ndim != x.type.ndim:
            raise UnsupportedOpError(f"gather of a rank-{x.type.ndim} tensor with a rank-{idx.type.ndim} index")
        return b.call(op, [x, idx], dim=dim)
    one = b.call(op, [b.call("reshape", [x], shape=(1,)), b.call("reshape", [idx], shape=(-1,))], dim=0)
    return b.call("reshape", [one], shape=scalar_shape)


def _index_select(x, idx, dim):
    d = norm_axis(dim, x.ndim)
    shape = x.shape[:d] + (idx.shape[0],) + x.shape[d + 1:]
    return te.compute(shape, lambda *i: x[i[:d] + (te.check_index(idx[i[d]], x.shape[d], "index_select"),) + i[d + 1:]],
                      "index_select")


def _index_select_ref(x, idx, dim):
    return np.take(x, idx, axis=dim)


op("index_select", Kind.INJECTIVE,
   lambda t, dim: [TensorType(t[0].shape[:norm_axis(dim, t[0].ndim)] + (t[1].shape[0],)
                              + t[0].shape[norm_axis(dim, t[0].ndim) + 1:], t[0].dtype)],
   _index_select_ref, _index_select,
   {"aten.index_select.default": lambda b, x, dim, idx: _on_1d(b, "index_select", x, dim, idx, ())},
   lambda rng: [([rand(rng, (5, 3)), np.array([4, 0, 2, 2], dtype="int64")], {"dim": 0})])


def _embedding(w, idx):
    shape = idx.shape + (w.shape[1],)
    return te.compute(shape, lambda *i: w[te.check_index(idx[i[:-1]], w.shape[0], "embedding"), i[-1]], "embedding")


op("embedding", Kind.INJECTIVE, lambda t: [TensorType(t[1].shape + (t[0].shape[1],), t[0].dtype)],
   lambda w, idx: w[idx], _embedding,
   {"aten.embedding.default": lambda b, w, idx, padding_idx=-1, scale_grad_by_freq=False, sparse=False:
        b.call("embedding", [w, idx])},
   lambda rng: [([rand(rng, (10, 4)), np.array([[1, 9, 0], [3, 3, 2]], dtype="int64")], {})])


def _gather_infer(types, dim):
    return [TensorType(types[1].shape, types[0].dtype)]


def _gather(x, idx, dim):
    d = norm_axis(dim, x.ndim)
    return te.compute(idx.shape, lambda *i: x[i[:d] + (te.check_index(idx[i], x.shape[d], "gather"),) + i[d + 1:]],
                      "gather")


op("gather", Kind.INJECTIVE, _gather_infer, lambda x, idx, dim: np.take_along_axis(x, idx, axis=dim), _gather,
   {"aten.gather.default": lambda b, x, dim, idx, sparse_grad=False:
        _on_1d(b, "gather", x, dim, idx, tuple(idx.shape))},
   lambda rng: [([rand(rng, (3, 5)), np.array([[0, 4], [1, 1], [3, 2]], dtype="int64")], {"dim": 1})])


# -- constants made by ATen factories (folded at compile time) --------------------------------------------------------
def _full(b, size, fill_value, dtype=None, **_):
    dtype = dtype or ("float32" if isinstance(fill_value, float) else "bool" if isinstance(fill_value, bool)
                      else "int64")
    if not isinstance(fill_value, (int, float, bool)):
        raise UnsupportedOpError("full with a tensor fill value")
    return b.const(np.full(tuple(size), fill_value, dtype=np_dtype(dtype)))


def _arange(b, start, end=None, step=1, dtype=None, **_):
    if end is None:
        start, end = 0, start
    dtype = dtype or ("float32" if any(isinstance(v, float) for v in (start, end, step)) else "int64")
    return b.const(np.arange(start, end, step).astype(np_dtype(dtype)))


def _scalar_tensor(b, s, dtype=None, **_):
    return b.const(np.array(s, dtype=np_dtype(dtype or "float32")))


def _empty(b, size, dtype=None, **_):
    return b.const(np.zeros(tuple(size), dtype=np_dtype(dtype or "float32")))


op("constant", Kind.OPAQUE, lambda t, **_: [], lambda: None, None,
   {"aten.full.default": _full, "aten.arange.start_step": _arange, "aten.arange.default": _arange,
    "aten.arange.start": _arange, "aten.scalar_tensor.default": _scalar_tensor,
    "aten.zeros.default": lambda b, size, dtype=None, **_: _full(b, size, 0, dtype or "float32"),
    "aten.ones.default": lambda b, size, dtype=None, **_: _full(b, size, 1, dtype or "float32"),
    "aten.empty.memory_format": _empty,
    "aten.empty_permuted.default": lambda b, size, physical_layout, dtype=None, **_: _empty(b, size, dtype),
    "aten.empty_strided.default": lambda b, size, stride, dtype=None, **_: _empty(b, size, dtype)},
   None, doc="ATen factory functions become graph constants (folded); this op itself never appears in a graph")
