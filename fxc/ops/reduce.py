"""Reductions: sum, mean, amax, amin, prod, any/all, argmax/argmin, var; softmax and log-softmax
(one kernel per row: max, sum of exponentials, normalise)."""
from __future__ import annotations

import math

import numpy as np

from ..errors import UnsupportedOpError
from ..lowering import te
from ..lowering.extern.normalize import softmax_loops
from ..symbolic.expr import as_expr, binary, compare, is_float, minimum, select, unary
from ..symbolic.sym import reciprocal
from ..types import TensorType
from .common import norm_axes, norm_axis, rand
from .movement import _reshape, flat_of, unravel
from .registry import Kind, OpDef, register, register_aten

NUM = ("float32", "float64", "int32", "int64", "int8", "uint8", "bool")
FLT = ("float32", "float64")


def _out_shape(shape, axes, keepdim):
    return tuple(1 if d in axes else s for d, s in enumerate(shape) if keepdim or d not in axes)


def _reduce_infer(types, axes=None, keepdim=False):
    t = types[0]
    return [TensorType(_out_shape(t.shape, norm_axes(axes, t.ndim), keepdim), t.dtype)]


def _reduce_compute(kind, scale=False):
    def compute(x, axes=None, keepdim=False):
        ax = norm_axes(axes, x.ndim)
        shape = _out_shape(x.shape, ax, keepdim)
        r = [te.reduce_axis(x.shape[d]) for d in ax]

        def body(*i):
            idx, k, rk = [], 0, 0
            for d in range(x.ndim):
                if d in ax:
                    idx.append(r[rk][0])
                    rk += 1
                    k += keepdim
                else:
                    idx.append(i[k])
                    k += 1
            v = x[tuple(idx)]
            if kind in ("max", "min") and x.dtype == "bool":
                return te.reduce(kind, v, r)
            return te.reduce(kind, v, r)
        t = te.compute(shape, body, kind)
        if scale:
            n = math.prod(x.shape[d] for d in ax)
            return te.compute(shape, lambda *i: t[i] * (reciprocal(n, t.dtype) if n else math.nan), "mean")
        return t
    return compute


def _np_reduce(fn):
    def ref(x, axes=None, keepdim=False):
        ax = norm_axes(axes, x.ndim)
        return np.asarray(fn(x, axis=ax, keepdims=keepdim)).astype(x.dtype)
    return ref


def _sum_aten(name):
    def conv(b, x, dim=None, keepdim=False, dtype=None):
        dt = dtype or (x.dtype if is_float(x.dtype) else "int64")
        return b.call(name, [b.as_tensor(x, dt)], axes=_axes(dim), keepdim=keepdim)
    return conv


def _axes(dim):
    if dim is None:
        return None
    return (dim,) if isinstance(dim, int) else tuple(dim)


def _mean_aten(b, x, dim=None, keepdim=False, dtype=None):
    if not is_float(dtype or x.dtype):
        raise UnsupportedOpError("mean of an integer tensor")
    return b.call("mean", [b.as_tensor(x, dtype or x.dtype)], axes=_axes(dim), keepdim=keepdim)


def _minmax(name):
    def conv(b, x, dim=None, keepdim=False):
        return b.call(name, [x], axes=_axes(dim), keepdim=keepdim)
    return conv


def reduction(name, ref, compute, aten, dtypes=NUM, samples=None):
    return register(OpDef(name, Kind.REDUCTION, _reduce_infer, ref, compute, aten, None,
                          samples or (lambda rng: [([rand(rng, (3, 4, 5))], {"axes": (1,), "keepdim": False}),
                                                   ([rand(rng, (3, 4, 5))], {"axes": (0, 2), "keepdim": True}),
                                                   ([rand(rng, (6, 7))], {"axes": None})]), dtypes))


reduction("sum", _np_reduce(np.sum), _reduce_compute("sum"),
          {"aten.sum.dim_IntList": _sum_aten("sum"), "aten.sum.default": _sum_aten("sum")},
          dtypes=("float32", "float64", "int64"))
reduction("prod", _np_reduce(np.prod), _reduce_compute("prod"),
          {"aten.prod.dim_int":
               lambda b, x, dim, keepdim=False, dtype=None: _sum_aten("prod")(b, x, dim, keepdim, dtype),
           "aten.prod.default": lambda b, x, dtype=None: _sum_aten("prod")(b, x, None, False, dtype)},
          dtypes=("float32", "float64", "int64"))
reduction("mean", _np_reduce(np.mean), _reduce_compute("sum", scale=True),
          {"aten.mean.dim": _mean_aten, "aten.mean.default": _mean_aten}, dtypes=FLT)
reduction("amax", _np_reduce(np.max), _reduce_compute("max"),
          {"aten.amax.default": _minmax("amax"), "aten.max.default": lambda b, x: b.call("amax", [x], axes=None),
           "aten.any.dim": lambda b, x, dim, keepdim=False:
               b.call("amax", [b.as_tensor(x, "bool")], axes=(dim,), keepdim=keepdim),
           "aten.any.dims": lambda b, x, dim=None, keepdim=False:
               b.call("amax", [b.as_tensor(x, "bool")], axes=_axes(dim), keepdim=keepdim),
           "aten.any.default": lambda b, x: b.call("amax", [b.as_tensor(x, "bool")], axes=None)})
reduction("amin", _np_reduce(np.min), _reduce_compute("min"),
          {"aten.amin.default": _minmax("amin"), "aten.min.default": lambda b, x: b.call("amin", [x], axes=None),
           "aten.all.dim": lambda b, x, dim, keepdim=False:
               b.call("amin", [b.as_tensor(x, "bool")], axes=(dim,), keepdim=keepdim),
           "aten.all.dims": lambda b, x, dim=None, keepdim=False:
               b.call("amin", [b.as_tensor(x, "bool")], axes=_axes(dim), keepdim=keepdim),
           "aten.all.default": lambda b, x: b.call("amin", [b.as_tensor(x, "bool")], axes=None)})


# -- argmax / argmin: the first index reaching the extreme (two kernels: extreme, then first index) ----------
def _arg_infer(types, axis=None, keepdim=False):
    t = types[0]
    if axis is None:
        return [TensorType((1,) * t.ndim if keepdim else (), "int64")]
    return [TensorType(_out_shape(t.shape, (norm_axis(axis, t.ndim),), keepdim), "int64")]


def _arg_compute(kind):
    def compute(x, axis=None, keepdim=False):
        flat = axis is None or x.ndim == 0
        if flat:
            x = _reshape(x, (max(math.prod(x.shape), 1),)) if x.ndim != 1 else x
            d = 0
        else:
            d = norm_axis(axis, x.ndim)
        ext = _reduce_compute(kind)(x, (d,), True)
        n = x.shape[d]
        r = te.reduce_axis(n)

        def body(*i):
            idx = i[:d] + (r[0],) + i[d + 1:]
            v = x[idx]
            hit = compare("eq", v, ext[i])
            if is_float(x.dtype):
                hit = binary("or", hit, binary("and", unary("isnan", v), unary("isnan", ext[i])))
            return te.reduce("min", select(hit, r[0], as_expr(n)), [r])
        keep_shape = x.shape[:d] + (1,) + x.shape[d + 1:]
        t = te.compute(keep_shape, body, "argext")
        out_shape = _arg_infer([TensorType(x.shape, x.dtype)], None if flat else d, keepdim)[0].shape
        if flat and keepdim:
            out_shape = out_shape
        return te.compute(out_shape, lambda *i: minimum_n(t[_unflat(i, keep_shape, out_shape)], n), "arg")
    return compute


def minimum_n(v, n):
    return minimum(v, as_expr(max(n - 1, 0)))


def _unflat(i, keep_shape, out_shape):
    return unravel(flat_of(i, out_shape), keep_shape) if keep_shape else ()


def _argref(fn):
    def ref(x, axis=None, keepdim=False):
        r = fn(x, axis=axis, keepdims=keepdim) if axis is not None else fn(x.reshape(-1))
        if axis is None and keepdim:
            r = np.reshape(r, (1,) * x.ndim)
        return np.asarray(r, dtype=np.int64)
    return ref


for _name, _kind, _fn in (("argmax", "max", np.argmax), ("argmin", "min", np.argmin)):
    register(OpDef(_name, Kind.OPAQUE, _arg_infer, _argref(_fn), _arg_compute(_kind),
                   {f"aten.{_name}.default": (lambda nm: lambda b, x, dim=None, keepdim=False:
                                              b.call(nm, [x], axis=dim, keepdim=keepdim))(_name)},
                   None, lambda rng: [([rand(rng, (3, 6))], {"axis": 1}), ([rand(rng, (3, 6))], {"axis": None})],
                   ("float32", "float64", "int32", "int64")))


def _max_dim(name, arg):
    def conv(b, x, dim, keepdim=False):
        if x.dtype == "bool":   # extremes of a bool tensor: those of its 0/1 values
            v, i = conv(b, b.as_tensor(x, "int32"), dim, keepdim)
            return b.as_tensor(v, "bool"), i
        return b.call(name, [x], axes=(dim,), keepdim=keepdim), b.call(arg, [x], axis=dim, keepdim=keepdim)
    return conv


register_aten("aten.max.dim", _max_dim("amax", "argmax"))
register_aten("aten.min.dim", _max_dim("amin", "argmin"))


# -- var / std (composite) ------------------------------------------------------------------------------------------
def centre(b, x, axes):
    """(mean over `axes`, kept; x minus it), the mean corrected by the mean of the first residuals (the
    corrected two-pass algorithm): a row of equal values gets exactly that value as its mean and exact zeros
    as residuals (as eager's Welford moments do), where sum * (1/n) alone can be an ulp off."""
    m0 = b.call("mean", [x], axes=axes, keepdim=True)
    mean = b.call("add", [m0, b.call("mean", [b.call("sub", [x, m0])], axes=axes, keepdim=True)])
    return mean, b.call("sub", [x, mean])


def _var_mean(b, x, dim=None, correction=None, keepdim=False, unbiased=None):
    if not is_float(x.dtype):
        raise UnsupportedOpError("var of an integer tensor")
    corr = 1 if correction is None and unbiased in (None, True) else (0 if correction is None else correction)
    ax = norm_axes(_axes(dim), x.type.ndim)
    n = math.prod(x.shape[d] for d in ax)
    mean, xc = centre(b, x, ax)
    ssq = b.call("sum", [b.call("mul", [xc, xc])], axes=ax, keepdim=keepdim)
    var = b.call("mul", [ssq, (1.0 / (n - corr)) if n - corr > 0 else math.inf])
    return var, (mean if keepdim else b.call("reshape", [mean], shape=_out_shape(x.shape, ax, False)))


register_aten("aten.var.correction", lambda b, x, dim=None, **kw: _var_mean(b, x, dim, **kw)[0])
register_aten("aten.var_mean.correction", lambda b, x, dim=None, **kw: _var_mean(b, x, dim, **kw))
register_aten("aten.std.correction", lambda b, x, dim=None, **kw: b.call("sqrt", [_var_mean(b, x, dim, **kw)[0]]))


# -- softmax / log_softmax: one kernel, three passes over each row (log_softmax writes it in the last only) ------------
def _rows(shape, dim):
    d = norm_axis(dim, len(shape))
    return math.prod(shape[:d]), (shape[d] if shape else 1), math.prod(shape[d + 1:])


def _softmax_compute(log: bool):
    def compute(x, dim, safe=False):
        outer, n, inner = _rows(x.shape, dim)
        return te.extern([(x.shape, x.dtype)], [x], softmax_loops(outer, n, inner, x.dtype, log, safe), "softmax")[0]
    return compute


def _softmax_ref(log):
    def ref(x, dim, safe=False):
        x64 = x.astype(np.float64)
        m = np.max(x64, axis=dim, keepdims=True)
        with np.errstate(invalid="ignore"):
            e = np.exp(x64 - m)
            s = e.sum(axis=dim, keepdims=True)
            out = x64 - m - np.log(s) if log else e / s
        if safe:
            out = np.where(np.all(x64 == -np.inf, axis=dim, keepdims=True), 0.0, out)
        return out.astype(x.dtype)
    return ref


def _safe_softmax_aten(b, x, dim, dtype=None):
    """aten._safe_softmax (scaled_dot_product_attention's math path): softmax with rows of -inf only giving zeros,
    in the one softmax kernel (its decomposition took a pass for the -inf test and one for the where)."""
    if dtype is not None and dtype != x.dtype:
        x = b.call("cast", [x], dtype=dtype)
    return b.call("softmax", [x], dim=dim, safe=True)


for _name, _log in (("softmax", False), ("log_softmax", True)):
    register(OpDef(_name, Kind.OPAQUE, lambda t, dim, safe=False: [t[0]], _softmax_ref(_log), _softmax_compute(_log),
                   {f"aten._{_name}.default":
                        (lambda nm: lambda b, x, dim, half_to_float=False: b.call(nm, [x], dim=dim))(_name)},
                   None, lambda rng: [([rand(rng, (3, 17))], {"dim": 1}), ([rand(rng, (2, 5, 3))], {"dim": 1})], FLT))
register_aten("aten._safe_softmax.default", _safe_softmax_aten)
