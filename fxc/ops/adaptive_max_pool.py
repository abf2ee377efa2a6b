"""Adaptive 2-D max pooling (values and saved flat indices) and its gradient.

Output cell (i, j) pools rows floor(i*H/oh) .. ceil((i+1)*H/oh) and the matching columns. The index is the
first position in the window holding the maximum (a NaN counts as the maximum, as in PyTorch). The
gradient adds each output gradient at its saved index: a scatter-add over the flattened image.
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import UnsupportedOpError
from ..lowering import te
from ..symbolic.expr import Const, as_expr, binary, compare, is_float, minimum, select, unary
from ..types import TensorType
from .registry import Kind, OpDef, register, register_aten

FLT = ("float32", "float64")


def _bounds(i, n, o):
    return binary("idiv", i * n, as_expr(o)), binary("idiv", (i + 1) * n + (o - 1), as_expr(o))


def _span(n, o):
    return max(-(-((i + 1) * n) // o) - (i * n) // o for i in range(o))


def _window(x, i, r, output_size):
    """In-window flag, clamped element and flat position of window tap r at output cell i."""
    (H, W), (oh, ow) = x.shape[-2:], output_size
    h0, h1 = _bounds(i[-2], H, oh)
    w0, w1 = _bounds(i[-1], W, ow)
    h, w = h0 + r[0][0], w0 + r[1][0]
    ok = binary("and", compare("lt", h, h1), compare("lt", w, w1))
    hc, wc = minimum(h, as_expr(H - 1)), minimum(w, as_expr(W - 1))
    return ok, x[tuple(i[:-2]) + (hc, wc)], hc * W + wc


def _infer(types, output_size):
    x = types[0]
    return [TensorType(x.shape[:-2] + tuple(output_size), x.dtype)]


def _taps(x, output_size):
    (H, W) = x.shape[-2:]
    return [te.reduce_axis(_span(H, output_size[0]), "kh"), te.reduce_axis(_span(W, output_size[1]), "kw")]


def _values(x, output_size):
    lo = Const(-math.inf, x.dtype)

    def body(*i):
        r = _taps(x, output_size)
        ok, v, _ = _window(x, i, r, output_size)
        return te.max_(select(ok, v, lo), r)
    return te.compute(x.shape[:-2] + tuple(output_size), body, "adaptive_max")


def _indices(x, vals, output_size):
    H, W = x.shape[-2:]

    def body(*i):
        r = _taps(x, output_size)
        ok, v, at = _window(x, i, r, output_size)
        m = vals[i]
        same = binary("or", compare("eq", v, m), binary("and", unary("isnan", v), unary("isnan", m)))
        return te.min_(select(binary("and", ok, same), at, as_expr(H * W - 1)), r)
    return te.compute(vals.shape, body, "adaptive_argmax")


def _ref(x, output_size):
    (H, W), (oh, ow) = x.shape[-2:], output_size
    vals = np.empty(x.shape[:-2] + (oh, ow), x.dtype)
    idx = np.empty(vals.shape, np.int64)
    for i in range(oh):
        for j in range(ow):
            h0, h1 = (i * H) // oh, -(-((i + 1) * H) // oh)
            w0, w1 = (j * W) // ow, -(-((j + 1) * W) // ow)
            win = x[..., h0:h1, w0:w1].reshape(x.shape[:-2] + (-1,))
            key = np.where(np.isnan(win), np.inf, win) if x.dtype.kind == "f" else win
            first = np.argmax(np.where(np.isnan(win), True, win == key.max(-1, keepdims=True)) if x.dtype.kind == "f"
                              else win == win.max(-1, keepdims=True), axis=-1)
            vals[..., i, j] = np.take_along_axis(win, first[..., None], -1)[..., 0]
            idx[..., i, j] = (h0 + first // (w1 - w0)) * W + w0 + first % (w1 - w0)
    return vals, idx


def _values_ref(x, output_size):
    return _ref(x, output_size)[0]


def _indices_ref(x, vals, output_size):
    return _ref(x, output_size)[1]


def _aten(b, x, output_size):
    if not is_float(x.dtype) or x.type.ndim not in (3, 4):
        raise UnsupportedOpError("adaptive max pooling of a non-float or non-2-d tensor")
    vals = b.call("adaptive_max_pool2d", [x], output_size=tuple(output_size))
    return vals, b.call("adaptive_max_pool2d_indices", [x, vals], output_size=tuple(output_size))


def _grad(b, gy, x, indices):
    if not is_float(gy.dtype):
        raise UnsupportedOpError("adaptive max pooling gradient of a non-float tensor")
    lead = math.prod(x.shape[:-2])
    hw, o = x.shape[-2] * x.shape[-1], gy.shape[-2] * gy.shape[-1]
    zeros = b.const(np.zeros((lead, hw), np.dtype(gy.dtype)))
    g = b.call("scatter",
               [zeros, b.call("reshape", [indices], shape=(lead, o)), b.call("reshape", [gy], shape=(lead, o))],
               dim=1, reduce="sum", include_self=True)
    return b.call("reshape", [g], shape=tuple(x.shape))


_SAMPLES = [((2, 3, 7, 9), (3, 4)), ((1, 3, 3), (2, 2))]


def _sample_x(rng, shape):
    x = rng.integers(0, 4, shape).astype("float32")   # ties inside windows
    x.reshape(-1)[1] = np.nan
    return x


register(OpDef("adaptive_max_pool2d", Kind.REDUCTION, _infer, _values_ref, _values,
               {"aten.adaptive_max_pool2d.default": _aten}, None,
               lambda rng: [([_sample_x(rng, s)], {"output_size": o}) for s, o in _SAMPLES], FLT))
register(OpDef("adaptive_max_pool2d_indices", Kind.REDUCTION, lambda t, output_size: [TensorType(t[1].shape, "int64")],
               _indices_ref, _indices, {}, None,
               lambda rng: [([x := _sample_x(rng, s), _values_ref(x, o)], {"output_size": o}) for s, o in _SAMPLES],
               FLT))
register_aten("aten.adaptive_max_pool2d_backward.default", _grad)
