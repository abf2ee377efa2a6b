"""Strided views and their scatter inverses as copies: diagonal, diagonal_scatter, unfold (sliding windows).

ATen's view ops that core-ATen keeps (diagonal) or that reach fxc as `*_copy` ops become injective
copies here: each output element reads one computed input position, so they fuse like reshape/slice.
"""
from __future__ import annotations

import numpy as np

from ..errors import ShapeError
from ..lowering import te
from ..symbolic.expr import as_expr, compare, maximum, minimum, select
from ..types import TensorType
from .common import norm_axis, rand
from .registry import Kind, OpDef, register

ALL = ("float32", "float64", "int32", "int64", "int8", "uint8", "bool")


def op(name, kind, infer, ref, compute, aten=None, samples=None, **kw):
    return register(OpDef(name, kind, infer, ref, compute, aten or {}, None, samples, ALL, **kw))


# -- diagonal: out[..., k] = x[.., k - min(offset, 0) at dim1, .., k + max(offset, 0) at dim2, ..] ---------------
def _diag_geometry(shape, offset, dim1, dim2):
    nd = len(shape)
    d1, d2 = norm_axis(dim1, nd), norm_axis(dim2, nd)
    if d1 == d2:
        raise ShapeError(f"diagonal: dim1 and dim2 are both {d1}")
    n = max(min(shape[d1] + min(offset, 0), shape[d2] - max(offset, 0)), 0)
    rest = tuple(s for d, s in enumerate(shape) if d not in (d1, d2))
    return d1, d2, rest + (n,)


def _diagonal_infer(types, offset=0, dim1=0, dim2=1):
    t = types[0]
    return [TensorType(_diag_geometry(t.shape, offset, dim1, dim2)[2], t.dtype)]


def _diagonal(x, offset=0, dim1=0, dim2=1):
    d1, d2, shape = _diag_geometry(x.shape, offset, dim1, dim2)
    others = [d for d in range(x.ndim) if d not in (d1, d2)]

    def body(*i):
        idx = [None] * x.ndim
        for d, e in zip(others, i[:-1]):
            idx[d] = e
        idx[d1] = i[-1] - min(offset, 0)
        idx[d2] = i[-1] + max(offset, 0)
        return x[tuple(idx)]
    return te.compute(shape, body, "diagonal")


def _diagonal_ref(x, offset=0, dim1=0, dim2=1):
    return np.ascontiguousarray(np.diagonal(x, offset, norm_axis(dim1, x.ndim), norm_axis(dim2, x.ndim)))


def _diagonal_aten(b, x, offset=0, dim1=0, dim2=1):
    return b.call("diagonal", [x], offset=offset, dim1=dim1, dim2=dim2)


op("diagonal", Kind.INJECTIVE, _diagonal_infer, _diagonal_ref, _diagonal,
   {"aten.diagonal.default": _diagonal_aten, "aten.diagonal_copy.default": _diagonal_aten},
   lambda rng: [([rand(rng, (3, 4))], {"offset": 1}), ([rand(rng, (2, 5, 3))], {"offset": -2, "dim1": 1, "dim2": 0}),
                ([rand(rng, (2, 3, 4))], {"offset": 7, "dim1": -1, "dim2": 1})])


# -- diagonal_scatter: x with its diagonal replaced by src ----------------------------------------------------------
def _diagonal_scatter_infer(types, offset=0, dim1=0, dim2=1):
    x, src = types
    shape = _diag_geometry(x.shape, offset, dim1, dim2)[2]
    if tuple(src.shape) != shape:
        raise ShapeError(f"diagonal_scatter: src has shape {src.shape}, the diagonal has shape {shape}")
    return [x]


def _diagonal_scatter(x, src, offset=0, dim1=0, dim2=1):
    d1, d2, shape = _diag_geometry(x.shape, offset, dim1, dim2)
    others = [d for d in range(x.ndim) if d not in (d1, d2)]
    if shape[-1] == 0:
        return te.compute(x.shape, lambda *i: x[i], "diagonal_scatter")

    def body(*i):
        on = compare("eq", i[d2] - i[d1], as_expr(offset))
        k = minimum(maximum(i[d1] + min(offset, 0), as_expr(0)), as_expr(shape[-1] - 1))
        v = src[tuple(i[d] for d in others) + (k,)]
        return select(on, v, x[i])
    return te.compute(x.shape, body, "diagonal_scatter")


def _diagonal_scatter_ref(x, src, offset=0, dim1=0, dim2=1):
    out = x.copy()
    d1, d2 = norm_axis(dim1, x.ndim), norm_axis(dim2, x.ndim)
    view = np.diagonal(out, offset, d1, d2)
    view.setflags(write=True)
    view[...] = src
    return out


op("diagonal_scatter", Kind.INJECTIVE, _diagonal_scatter_infer, _diagonal_scatter_ref, _diagonal_scatter,
   {"aten.diagonal_scatter.default": lambda b, x, src, offset=0, dim1=0, dim2=1:
       b.call("diagonal_scatter", list(b.promote(x, src)),
              offset=offset, dim1=dim1, dim2=dim2)},
   lambda rng: [([rand(rng, (3, 4)), rand(rng, (3,))], {"offset": 1}),
                ([rand(rng, (2, 5, 3)), rand(rng, (3, 2))], {"offset": -2, "dim1": 1, "dim2": 0})])


# -- unfold: sliding windows of `size` every `step` along `dim`, the window as a new last dim ---------------------
def _unfold_shape(shape, dim, size, step):
    nd = len(shape)
    d = norm_axis(dim, nd)
    n = shape[d] if nd else 1
    if size > n or step <= 0:
        raise ShapeError(f"unfold: size {size} is larger than the dim ({n}) or step {step} is not positive")
    out = list(shape)
    if nd:
        out[d] = (n - size) // step + 1
    return d, tuple(out) + (size,)


def _unfold(x, dim, size, step):
    d, shape = _unfold_shape(x.shape, dim, size, step)
    if x.ndim == 0:
        return te.compute(shape, lambda i: x[()], "unfold")
    return te.compute(shape, lambda *i: x[i[:d] + (i[d] * step + i[-1],) + i[d + 1:-1]], "unfold")


def _unfold_ref(x, dim, size, step):
    if x.ndim == 0:
        return x.reshape(1)
    d, shape = _unfold_shape(x.shape, dim, size, step)
    w = np.lib.stride_tricks.sliding_window_view(x, size, axis=d)
    return np.ascontiguousarray(np.take(w, np.arange(shape[d]) * step, axis=d))


op("unfold", Kind.INJECTIVE,
   lambda t, dim, size, step: [TensorType(_unfold_shape(t[0].shape, dim, size, step)[1], t[0].dtype)],
   _unfold_ref, _unfold,
   {"aten.unfold.default": lambda b, x, dim, size, step: b.call("unfold", [x], dim=dim, size=size, step=step),
    "aten.unfold_copy.default": lambda b, x, dim, size, step: b.call("unfold", [x], dim=dim, size=size, step=step)},
   lambda rng: [([rand(rng, (3, 7))], {"dim": 1, "size": 3, "step": 2}),
                ([rand(rng, (5, 2))], {"dim": 0, "size": 2, "step": 1})])
