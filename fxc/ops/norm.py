"""Normalisation: batch norm with batch statistics (`_native_batch_norm_legit_functional` updates the running
statistics functionally, `.no_stats` is instance norm's form) and group norm (`native_group_norm`) as compositions
of registry ops; layer norm (`native_layer_norm`) as one `layer_norm` kernel per row. Each returns what ATen
returns: the output, the saved mean and inverse standard deviation (for the backward graph), and new running stats.
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import UnsupportedOpError
from ..lowering import te
from ..lowering.extern.normalize import layer_norm_loops
from ..symbolic.expr import is_float
from ..types import TensorType
from .common import rand
from .nn import _batch_norm_inference
from .reduce import centre
from .registry import Kind, OpDef, register, register_aten


def _stats(b, x, axes, eps):
    """mean and 1/sqrt(biased var + eps) over axes (kept), and the centred input."""
    mean, xc = centre(b, x, axes)
    var = b.call("mean", [b.call("mul", [xc, xc])], axes=axes, keepdim=True)
    rstd = b.call("rsqrt", [b.call("add", [var, float(eps)])])
    return mean, var, rstd, xc


def _affine(b, y, weight, bias, nd):
    shape = (-1,) + (1,) * (nd - 2)
    if weight is not None:
        y = b.call("mul", [y, b.call("reshape", [weight], shape=shape)])
    if bias is not None:
        y = b.call("add", [y, b.call("reshape", [bias], shape=shape)])
    return y


def _batch_norm_train(b, x, weight, bias, eps):
    if not is_float(x.dtype) or x.type.ndim < 2:
        raise UnsupportedOpError("batch norm of a non-float or 1-d tensor")
    nd = x.type.ndim
    axes = (0,) + tuple(range(2, nd))
    mean, var, rstd, xc = _stats(b, x, axes, eps)
    out = _affine(b, b.call("mul", [xc, rstd]), weight, bias, nd)
    c = (x.shape[1],)
    n = math.prod(x.shape[d] for d in axes)
    return out, *(b.call("reshape", [v], shape=c) for v in (mean, var, rstd)), n


def _bn_functional(b, x, weight, bias, running_mean, running_var, training, momentum, eps):
    if not training:   # the running statistics normalise and come back unchanged
        out, empty, _ = _batch_norm_inference(b, x, weight, bias, running_mean, running_var, momentum, eps)
        return out, empty, empty, running_mean, running_var
    out, mean, var, rstd, n = _batch_norm_train(b, x, weight, bias, eps)
    m = float(momentum)
    unbiased = b.call("mul", [var, n / (n - 1) if n > 1 else math.inf])

    def update(run, stat):
        stat = b.as_tensor(stat, run.dtype)
        return b.call("add", [b.call("mul", [run, 1.0 - m]), b.call("mul", [stat, m])])
    return out, mean, rstd, update(running_mean, mean), update(running_var, unbiased)


def _bn_no_stats(b, x, weight, bias, training, momentum, eps):
    if not training:
        raise UnsupportedOpError("_native_batch_norm_legit.no_stats with training=False")
    out, mean, _, rstd, _ = _batch_norm_train(b, x, weight, bias, eps)
    return out, mean, rstd


def _group_norm(b, x, weight, bias, N, C, HxW, group, eps):
    if not is_float(x.dtype):
        raise UnsupportedOpError("group norm of a non-float tensor")
    g = b.call("reshape", [x], shape=(N, group, -1))
    mean, _, rstd, xc = _stats(b, g, (2,), eps)
    y = b.call("reshape", [b.call("mul", [xc, rstd])], shape=tuple(x.shape))
    out = _affine(b, y, weight, bias, x.type.ndim)
    return out, b.call("reshape", [mean], shape=(N, group)), b.call("reshape", [rstd], shape=(N, group))


register_aten("aten._native_batch_norm_legit_functional.default", _bn_functional)
register_aten("aten._native_batch_norm_legit.no_stats", _bn_no_stats)
register_aten("aten.native_group_norm.default", _group_norm)


# -- vector norms ------------------------------------------------------------------------------------------------------
def _vector_norm(b, x, ord=2, dim=None, keepdim=False, dtype=None):
    dt = dtype or x.dtype
    if not is_float(dt):
        raise UnsupportedOpError("vector norm of an integer tensor")
    x = b.as_tensor(x, dt)
    axes = None if dim is None else ((dim,) if isinstance(dim, int) else tuple(dim))
    if x.type.ndim == 0:
        axes = None
    if ord == math.inf or ord == -math.inf:
        return b.call("amax" if ord > 0 else "amin", [b.call("abs", [x])], axes=axes, keepdim=keepdim)
    if ord == 0:
        return b.call("sum", [b.call("cast", [b.call("ne", [x, 0.0])], dtype=dt)], axes=axes, keepdim=keepdim)
    if ord == 1:
        return b.call("sum", [b.call("abs", [x])], axes=axes, keepdim=keepdim)
    if ord == 2:
        return b.call("sqrt", [b.call("sum", [b.call("mul", [x, x])], axes=axes, keepdim=keepdim)])
    if not isinstance(ord, (int, float)) or isinstance(ord, bool):
        raise UnsupportedOpError(f"vector norm of order {ord}")
    s = b.call("sum", [b.call("pow", [b.call("abs", [x]), float(ord)])], axes=axes, keepdim=keepdim)
    return b.call("pow", [s, 1.0 / ord])


register_aten("aten.linalg_vector_norm.default", _vector_norm)


# -- layer norm: one kernel, four passes over each row -----------------------------------------------------------------
def _layer_norm_infer(types, ndims, eps, weight, bias):
    x = types[0]
    stat = TensorType(x.shape[:x.ndim - ndims] + (1,) * ndims, x.dtype)
    return [x, stat, stat]


def _layer_norm_compute(x, *affine, ndims, eps, weight, bias):
    """Per row: the corrected two-pass mean (as `centre`), the biased variance of the residuals, then
    (x - mean) * rstd * weight + bias (fxc/lowering/extern/normalize.py); outputs (out, mean, rstd) as
    aten.native_layer_norm."""
    n = math.prod(x.shape[x.ndim - ndims:])
    rows = math.prod(x.shape[:x.ndim - ndims])
    dt = x.dtype
    stat = x.shape[:x.ndim - ndims] + (1,) * ndims
    return tuple(te.extern([(x.shape, dt), (stat, dt), (stat, dt)], [x, *affine],
                           layer_norm_loops(rows, n, dt, eps, weight, bias), "layer_norm"))


def _layer_norm_ref(x, *affine, ndims, eps, weight, bias):
    axes = tuple(range(x.ndim - ndims, x.ndim))
    x64 = x.astype(np.float64)
    mean = x64.mean(axis=axes, keepdims=True)
    rstd = 1.0 / np.sqrt(((x64 - mean) ** 2).mean(axis=axes, keepdims=True) + eps)
    y = (x64 - mean) * rstd
    if weight:
        y = y * affine[0].astype(np.float64)
    if bias:
        y = y + affine[-1].astype(np.float64)
    return y.astype(x.dtype), mean.astype(x.dtype), rstd.astype(x.dtype)


def layer_norm(b, x, normalized_shape, weight=None, bias=None, eps=1e-5):
    """aten.native_layer_norm as one `layer_norm` kernel (float32/float64 with matching affine dtypes), else as a
    composition of registry ops."""
    k = len(normalized_shape)
    affine = [v for v in (weight, bias) if v is not None]
    if x.dtype in ("float32", "float64") and all(getattr(v, "dtype", None) == x.dtype for v in affine):
        return b.call("layer_norm", [x, *affine], ndims=k, eps=float(eps), weight=weight is not None,
                      bias=bias is not None)
    axes = tuple(range(x.type.ndim - k, x.type.ndim))
    mean, _, rstd, xc = _stats(b, x, axes, eps)
    out = b.call("mul", [xc, rstd])
    if weight is not None:
        out = b.call("mul", [out, weight])
    if bias is not None:
        out = b.call("add", [out, bias])
    return out, mean, rstd


def _layer_norm_samples(rng):
    x = rand(rng, (3, 5, 40))
    return [([x, rand(rng, (40,)), rand(rng, (40,))], {"ndims": 1, "eps": 1e-5, "weight": True, "bias": True}),
            ([x], {"ndims": 2, "eps": 1e-3, "weight": False, "bias": False}),
            ([rand(rng, (7, 16)) + 3.0, rand(rng, (16,))], {"ndims": 1, "eps": 1e-5, "weight": True, "bias": False}),
            ([np.full((2, 33), 0.1, "float32"), rand(rng, (33,))],
             {"ndims": 1, "eps": 1e-5, "weight": False, "bias": True})]


register(OpDef("layer_norm", Kind.OPAQUE, _layer_norm_infer, _layer_norm_ref, _layer_norm_compute, {}, None,
               _layer_norm_samples, ("float32", "float64"),
               doc="Layer norm over the trailing `ndims` axes with optional weight/bias: (out, mean, rstd)."))
register_aten("aten.native_layer_norm.default", layer_norm)
