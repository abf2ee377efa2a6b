"""Normalisation in training form, as compositions of registry ops: batch norm with batch statistics
(`_native_batch_norm_legit_functional` updates the running statistics functionally, `.no_stats` is
instance norm's form), and group norm (`native_group_norm`). Each returns what ATen returns: the
output, the saved mean and inverse standard deviation (for the backward graph), and new running stats.
"""
from __future__ import annotations

import math

from ..errors import UnsupportedOpError
from ..lowering.expr import is_float
from .reduce import centre
from .registry import register_aten


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
        from .nn import _batch_norm_inference
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


# -- vector norms -------------------------------------------------------------------------------------------------------------
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
