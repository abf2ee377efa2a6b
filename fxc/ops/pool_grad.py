"""Gradients of 2-D pooling, written as gathers: each input pixel sums the output gradients of the
windows that contain it (max pooling: only where the saved index points at the pixel; average
pooling: divided by each window's element count). No scatter, so both parallelise like a pooling."""
from __future__ import annotations

import numpy as np

from ..errors import ShapeError, UnsupportedOpError
from ..lowering import te
from ..symbolic.expr import Const, as_expr, binary, cast, compare, is_float, maximum, minimum, select
from ..types import TensorType
from .common import rand
from .nn import _max_pool_indices_ref, _max_pool_ref, avg_pool_count
from .registry import Kind, OpDef, register, register_aten

FLT = ("float32", "float64")


def _pair(v):
    v = tuple(v) if isinstance(v, (list, tuple)) else (v, v)
    return v * 2 if len(v) == 1 else v


def _windows(gy, i, r, input_hw, kernel, stride, padding, dilation):
    """Output position (clamped) whose window reaches input pixel i[-2:] through tap r, and whether it exists."""
    out, ok = [], None
    for a in range(2):
        t = i[-2 + a] + padding[a] - r[a][0] * dilation[a]
        tc = maximum(t, as_expr(0))
        o = tc if stride[a] == 1 else binary("idiv", tc, as_expr(stride[a]))
        c = binary("and", compare("ge", t, as_expr(0)), compare("lt", o, as_expr(gy.shape[-2 + a])))
        if stride[a] != 1:
            c = binary("and", c, compare("eq", binary("imod", tc, as_expr(stride[a])), as_expr(0)))
        ok = c if ok is None else binary("and", ok, c)
        out.append(minimum(o, as_expr(gy.shape[-2 + a] - 1)))
    return out, ok


def _grad_infer(types, input_hw, **_):
    gy = types[0]
    if not all(isinstance(d, int) for d in gy.shape[-2:]):     # (input_hw, a static attribute, sets them)
        raise ShapeError(f"pool gradient: symbolic window positions {list(gy.shape[-2:])} for a static input_hw")
    return [TensorType(gy.shape[:-2] + tuple(input_hw), gy.dtype)]


def _covering(gy, i, r, kernel, stride, padding):
    """Undilated windows: the r-th last of the (at most ceil(k / s)) output positions whose window holds input pixel
    i[-2:], as (clamped position, whether it exists): fewer steps than one per kernel tap, and no division in them."""
    out, ok = [], None
    for a in range(2):
        t = i[-2 + a] + padding[a]
        o = (t if stride[a] == 1 else binary("idiv", t, as_expr(stride[a]))) - r[a][0]
        c = binary("and", binary("and", compare("ge", o, as_expr(0)), compare("lt", o, as_expr(gy.shape[-2 + a]))),
                   compare("lt", t - o * stride[a], as_expr(kernel[a])))
        ok = c if ok is None else binary("and", ok, c)
        out.append(minimum(maximum(o, as_expr(0)), as_expr(gy.shape[-2 + a] - 1)))
    return out, ok


def _max_grad(gy, idx, input_hw, kernel, stride, padding, dilation):
    undilated = tuple(dilation) == (1, 1)
    ext = [-(-kernel[a] // stride[a]) if undilated else kernel[a] for a in range(2)]
    r = [te.reduce_axis(ext[0], "kh"), te.reduce_axis(ext[1], "kw")]
    W = input_hw[1]

    def body(*i):
        (oh, ow), ok = _covering(gy, i, r, kernel, stride, padding) if undilated else \
            _windows(gy, i, r, input_hw, kernel, stride, padding, dilation)
        at = tuple(i[:-2]) + (oh, ow)
        hit = binary("and", ok, compare("eq", idx[at], i[-2] * W + i[-1]))
        return te.sum_(select(hit, gy[at], Const(0.0, gy.dtype)), r)
    return te.compute(gy.shape[:-2] + tuple(input_hw), body, "max_pool2d_grad")


def _max_grad_ref(gy, idx, input_hw, kernel, stride, padding, dilation):
    H, W = input_hw
    lead = gy.shape[:-2]
    out = np.zeros(lead + (H * W,), dtype=np.float64)
    g2 = gy.reshape(-1, gy.shape[-2] * gy.shape[-1]).astype(np.float64)
    i2 = idx.reshape(g2.shape)
    o2 = out.reshape(-1, H * W)
    for row in range(g2.shape[0]):
        np.add.at(o2[row], i2[row], g2[row])
    return o2.reshape(lead + (H, W)).astype(gy.dtype)


def _argmax_of_windows(rng, shape, kernel, stride, padding, dilation=(1, 1)):
    """Saved indices of a real max pooling (sample input; ties make windows share a pixel)."""
    x = rng.integers(0, 4, shape).astype("float32")
    return _max_pool_indices_ref(x, _max_pool_ref(x, kernel, stride, padding, dilation), kernel, stride, padding,
                                 dilation)


def _max_grad_aten(b, gy, x, kernel_size, stride, padding, dilation, ceil_mode, indices):
    if not is_float(gy.dtype):
        raise UnsupportedOpError("max pooling gradient of a non-float tensor")
    k = _pair(kernel_size)
    return b.call("max_pool2d_grad", [gy, indices], input_hw=tuple(x.shape[-2:]), kernel=k,
                  stride=_pair(stride) if stride else k, padding=_pair(padding), dilation=_pair(dilation))


register(OpDef("max_pool2d_grad", Kind.REDUCTION, _grad_infer, _max_grad_ref, _max_grad,
               {"aten.max_pool2d_with_indices_backward.default": _max_grad_aten}, None,
               lambda rng: [([rand(rng, (1, 2, 5, 5)), _argmax_of_windows(rng, (1, 2, 9, 9), (3, 3), (2, 2), (1, 1))],
                             {"input_hw": (9, 9), "kernel": (3, 3), "stride": (2, 2), "padding": (1, 1),
                              "dilation": (1, 1)}),
                            ([rand(rng, (1, 2, 3, 6)), _argmax_of_windows(rng, (1, 2, 8, 11), (2, 3), (3, 2), (0, 1))],
                             {"input_hw": (8, 11), "kernel": (2, 3), "stride": (3, 2), "padding": (0, 1),
                              "dilation": (1, 1)}),
                            ([rand(rng, (2, 3, 2)), _argmax_of_windows(rng, (2, 7, 7), (3, 3), (2, 2), (0, 0), (1, 2))],
                             {"input_hw": (7, 7), "kernel": (3, 3), "stride": (2, 2), "padding": (0, 0),
                              "dilation": (1, 2)})],
               FLT + ("int64",)))


def _avg_grad(gy, input_hw, kernel, stride, padding, ceil_mode=False, count_include_pad=True, divisor_override=None):
    r = [te.reduce_axis(kernel[0], "kh"), te.reduce_axis(kernel[1], "kw")]
    H, W = input_hw

    def count(o, a, n):
        return avg_pool_count(o, a, n, kernel, stride, padding, count_include_pad)

    def body(*i):
        (oh, ow), ok = _windows(gy, i, r, input_hw, kernel, stride, padding, (1, 1))
        v = gy[tuple(i[:-2]) + (oh, ow)]
        if divisor_override:
            v = v * (1.0 / divisor_override)
        else:
            v = v / cast(gy.dtype, maximum(count(oh, 0, H) * count(ow, 1, W), as_expr(1)))
        return te.sum_(select(ok, v, Const(0.0, gy.dtype)), r)
    return te.compute(gy.shape[:-2] + tuple(input_hw), body, "avg_pool2d_grad")


def _avg_grad_ref(gy, input_hw, kernel, stride, padding, ceil_mode=False, count_include_pad=True,
                  divisor_override=None):
    H, W = input_hw
    out = np.zeros(gy.shape[:-2] + (H, W))
    oh, ow = gy.shape[-2:]
    for a in range(oh):
        for c in range(ow):
            h0, w0 = a * stride[0] - padding[0], c * stride[1] - padding[1]
            h1, w1 = min(h0 + kernel[0], H + padding[0]), min(w0 + kernel[1], W + padding[1])
            cnt = (h1 - h0) * (w1 - w0)
            hc0, wc0, hc1, wc1 = max(h0, 0), max(w0, 0), min(h1, H), min(w1, W)
            if not count_include_pad:
                cnt = (hc1 - hc0) * (wc1 - wc0)
            cnt = divisor_override or cnt
            out[..., hc0:hc1, wc0:wc1] += gy[..., a:a + 1, c:c + 1].astype(np.float64) / cnt
    return out.astype(gy.dtype)


def _avg_grad_aten(b, gy, x, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override=None):
    k = _pair(kernel_size)
    return b.call("avg_pool2d_grad", [gy], input_hw=tuple(x.shape[-2:]), kernel=k,
                  stride=_pair(stride) if stride else k,
                  padding=_pair(padding), ceil_mode=ceil_mode, count_include_pad=count_include_pad,
                  divisor_override=divisor_override)


register(OpDef("avg_pool2d_grad", Kind.REDUCTION, _grad_infer, _avg_grad_ref, _avg_grad,
               {"aten.avg_pool2d_backward.default": _avg_grad_aten}, None,
               lambda rng: [([rand(rng, (1, 2, 5, 5))],
                             {"input_hw": (9, 9), "kernel": (3, 3), "stride": (2, 2), "padding": (1, 1)}),
                            ([rand(rng, (1, 2, 5, 5))],
                             {"input_hw": (9, 9), "kernel": (3, 3), "stride": (2, 2), "padding": (1, 1),
                              "count_include_pad": False, "ceil_mode": True}),
                            ([rand(rng, (2, 3, 4))],
                             {"input_hw": (7, 9), "kernel": (2, 3), "stride": (2, 2), "padding": (0, 1),
                              "divisor_override": 4})],
               FLT))


# -- adaptive average pooling's gradient: gi = A_h^T gy A_w with constant window-averaging matrices --------------------
def _window_matrix(n, o, dtype):
    a = np.zeros((o, n), dtype=dtype)
    for i in range(o):
        s, e = (i * n) // o, -(-((i + 1) * n) // o)
        a[i, s:e] = 1.0 / (e - s)
    return a


def _adaptive_avg_grad_aten(b, gy, x):
    if not is_float(gy.dtype) or gy.type.ndim not in (3, 4):
        raise UnsupportedOpError("adaptive average pooling gradient of a non-float or non-2-d tensor")
    (H, W), (oh, ow) = x.shape[-2:], gy.shape[-2:]
    ah = b.const(_window_matrix(H, oh, np.dtype(gy.dtype)))
    aw = b.const(_window_matrix(W, ow, np.dtype(gy.dtype)))
    t = b.call("matmul", [ah, gy], trans_a=True)
    return b.call("matmul", [t, aw])


register_aten("aten._adaptive_avg_pool2d_backward.default", _adaptive_avg_grad_aten)
