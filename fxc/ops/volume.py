"""3-d (volumetric) convolution and pooling: conv3d and conv_transpose3d as sums of 2-d (transposed)
convolutions over the depth taps, avg_pool3d and adaptive_avg_pool3d as window reductions over three spatial dims.

conv3d reuses conv2d (and so its packed schedules): for each depth tap kd, the input's depth slices that
tap reads are stacked into the batch, convolved with the weight's kd-th 2-d kernel, and the taps are added.
"""
from __future__ import annotations

import itertools
import math

import numpy as np

from ..errors import ShapeError, UnsupportedOpError
from ..lowering import te
from ..symbolic.expr import Const, as_expr, binary, cast, compare, is_float, maximum, minimum, select
from ..types import TensorType
from .common import rand
from .nn import _conv_out, _pair, avg_pool_count
from .registry import Kind, OpDef, register

FLT = ("float32", "float64")


# -- conv3d -------------------------------------------------------------------------------------------------------
def convolution3d(b, x, w, bias, stride, padding, dilation, groups):
    """ATen convolution (not transposed) of a 5-d input with a 5-d weight, built from conv2d."""
    x, w = b.promote(x, w)
    if not is_float(x.dtype):
        raise UnsupportedOpError("integer convolution")
    if x.type.ndim != 5 or 0 in tuple(x.shape) or 0 in tuple(w.shape):
        raise UnsupportedOpError("3-d convolution of an unbatched or empty input")
    (sd, sh, sw), (pd, ph, pw), (dd, dh, dw) = _pair(stride, 3), _pair(padding, 3), _pair(dilation, 3)
    if any((pd, ph, pw)):
        x = b.call("pad", [x], pad=(pw, pw, ph, ph, pd, pd), value=0.0, mode="constant")
    N, C, D, Hp, Wp = x.shape
    O, _, KD, KH, KW = w.shape
    OD = (D - dd * (KD - 1) - 1) // sd + 1
    if OD <= 0:
        raise ShapeError(f"conv3d: the kernel ({KD}) is larger than the padded depth ({D})")
    acc = None
    for kd in range(KD):
        xs = b.call("slice", [x], dim=2, start=kd * dd, end=kd * dd + sd * (OD - 1) + 1, step=sd)
        xs = b.call("reshape", [b.call("permute", [xs], dims=(0, 2, 1, 3, 4))], shape=(N * OD, C, Hp, Wp))
        wk = b.call("reshape", [b.call("slice", [w], dim=2, start=kd, end=kd + 1, step=1)],
                    shape=(O, w.shape[1], KH, KW))
        y = b.call("conv2d", [xs, wk], stride=(sh, sw), dilation=(dh, dw), groups=groups)
        acc = y if acc is None else b.call("add", [acc, y])
    out = b.call("permute", [b.call("reshape", [acc], shape=(N, OD) + tuple(acc.shape[1:]))], dims=(0, 2, 1, 3, 4))
    if bias is not None:
        out = b.call("add", [out, b.call("reshape", [bias], shape=(-1, 1, 1, 1))])
    return out


def transposed_convolution3d(b, x, w, bias, stride, padding, dilation, output_padding, groups):
    """ATen convolution(transposed=True) of a 5-d input, built from conv_transpose2d: each depth tap kd
    maps input depth q to output depth q * stride - padding + kd * dilation (spread, then shifted)."""
    x, w = b.promote(x, w)
    if not is_float(x.dtype):
        raise UnsupportedOpError("integer convolution")
    if x.type.ndim != 5 or 0 in tuple(x.shape) or 0 in tuple(w.shape):
        raise UnsupportedOpError("3-d transposed convolution of an unbatched or empty input")
    (sd, sh, sw), (pd, ph, pw) = _pair(stride, 3), _pair(padding, 3)
    (dd, dh, dw), (od_, oph, opw) = _pair(dilation, 3), _pair(output_padding, 3)
    N, C, D, H, W = x.shape
    KD = w.shape[2]
    OD = (D - 1) * sd - 2 * pd + dd * (KD - 1) + od_ + 1
    if OD <= 0:
        raise ShapeError("conv_transpose3d gives an empty depth")
    xs = b.call("reshape", [b.call("permute", [x], dims=(0, 2, 1, 3, 4))], shape=(N * D, C, H, W))
    acc = None
    for kd in range(KD):
        wk = b.call("reshape", [b.call("slice", [w], dim=2, start=kd, end=kd + 1, step=1)],
                    shape=tuple(w.shape[:2]) + tuple(w.shape[3:]))
        y = b.call("conv_transpose2d", [xs, wk], stride=(sh, sw), padding=(ph, pw), dilation=(dh, dw),
                   output_padding=(oph, opw), groups=groups)
        rest = tuple(y.shape[1:])
        y = b.call("reshape", [y], shape=(N, D, 1) + rest)
        if sd > 1:   # input depth q at q * sd: sd - 1 zero slices after each
            y = b.call("pad", [y], pad=(0, 0) * len(rest) + (0, sd - 1), value=0.0, mode="constant")
        y = b.call("reshape", [y], shape=(N, D * sd) + rest)
        shift = kd * dd - pd
        y = b.call("pad", [y], pad=(0, 0) * len(rest) + (shift, OD - D * sd - shift), value=0.0, mode="constant")
        acc = y if acc is None else b.call("add", [acc, y])
    out = b.call("permute", [acc], dims=(0, 2, 1, 3, 4))
    if bias is not None:
        out = b.call("add", [out, b.call("reshape", [bias], shape=(-1, 1, 1, 1))])
    return out


# -- avg_pool3d ------------------------------------------------------------------------------------------------------
def _pool3d_infer(types, kernel, stride, padding=(0, 0, 0), ceil_mode=False, **_):
    x = types[0]
    if x.ndim not in (4, 5):
        raise ShapeError(f"3-d pooling expects a 4-d or 5-d input, got {x.shape}")
    if any(p * 2 > k for p, k in zip(padding, kernel)):
        raise ShapeError("pooling padding must be at most half the kernel size")
    out = tuple(_conv_out(x.shape[x.ndim - 3 + d], kernel[d], stride[d], 1, padding[d], ceil_mode) for d in range(3))
    if any(o <= 0 for o in out):
        raise ShapeError(f"3-d pooling of {x.shape} gives an empty output")
    return [TensorType(x.shape[:-3] + out, x.dtype)]


def _avg_pool3d(x, kernel, stride, padding=(0, 0, 0), ceil_mode=False, count_include_pad=True, divisor_override=None):
    shape = _pool3d_infer([x], kernel, stride, padding, ceil_mode)[0].shape
    r = [te.reduce_axis(k, f"k{d}") for d, k in enumerate(kernel)]
    sizes = x.shape[-3:]

    def body(*i):
        idx, ok = [], None
        for d in range(3):
            p = i[len(i) - 3 + d] * stride[d] - padding[d] + r[d][0]
            inside = binary("and", compare("ge", p, as_expr(0)), compare("lt", p, as_expr(sizes[d])))
            ok = inside if ok is None else binary("and", ok, inside)
            idx.append(minimum(maximum(p, as_expr(0)), as_expr(sizes[d] - 1)))
        return te.sum_(select(ok, x[tuple(i[:-3]) + tuple(idx)], Const(0.0, x.dtype)), r)
    s = te.compute(shape, body, "avg_pool3d_sum")

    def scale(*i):
        if divisor_override:
            return s[i] * (1.0 / divisor_override)
        cnt = None
        for d in range(3):
            c = avg_pool_count(i[len(i) - 3 + d], d, sizes[d], kernel, stride, padding, count_include_pad)
            cnt = c if cnt is None else cnt * c
        return s[i] / cast(x.dtype, cnt)
    return te.compute(shape, scale, "avg_pool3d")


def _avg_pool3d_ref(x, kernel, stride, padding=(0, 0, 0), ceil_mode=False, count_include_pad=True,
                    divisor_override=None):
    out_shape = _pool3d_infer([TensorType(x.shape, str(x.dtype))], kernel, stride, padding, ceil_mode)[0].shape
    out = np.zeros(out_shape, dtype=np.float64)
    sizes = x.shape[-3:]
    for o in itertools.product(*(range(n) for n in out_shape[-3:])):
        lo = [o[d] * stride[d] - padding[d] for d in range(3)]
        hi = [min(lo[d] + kernel[d], sizes[d] + padding[d]) for d in range(3)]
        cnt = math.prod(hi[d] - lo[d] for d in range(3))
        lo_c = [max(v, 0) for v in lo]
        hi_c = [min(hi[d], sizes[d]) for d in range(3)]
        if not count_include_pad:
            cnt = math.prod(hi_c[d] - lo_c[d] for d in range(3))
        win = x[..., lo_c[0]:hi_c[0], lo_c[1]:hi_c[1], lo_c[2]:hi_c[2]].astype(np.float64)
        out[(...,) + o] = win.sum(axis=(-1, -2, -3)) / (divisor_override or cnt)
    return out.astype(x.dtype)


def _avg_pool3d_aten(b, x, kernel_size, stride=(), padding=0, ceil_mode=False, count_include_pad=True,
                     divisor_override=None):
    k = _pair(kernel_size, 3)
    return b.call("avg_pool3d", [x], kernel=k, stride=_pair(stride, 3) if stride else k, padding=_pair(padding, 3),
                  ceil_mode=ceil_mode, count_include_pad=count_include_pad, divisor_override=divisor_override)


register(OpDef("avg_pool3d", Kind.REDUCTION, _pool3d_infer, _avg_pool3d_ref, _avg_pool3d,
               {"aten.avg_pool3d.default": _avg_pool3d_aten}, None,
               lambda rng: [([rand(rng, (1, 2, 5, 6, 7))],
                             {"kernel": (3, 2, 3), "stride": (2, 2, 1), "padding": (1, 0, 1)}),
                            ([rand(rng, (2, 5, 5, 6))],
                             {"kernel": (2, 3, 2), "stride": (2, 2, 2), "padding": (1, 1, 0),
                              "count_include_pad": False, "ceil_mode": True})],
               FLT))


# -- adaptive_avg_pool3d ---------------------------------------------------------------------------------------------
def _bounds(i, n, o):
    return binary("idiv", i * n, as_expr(o)), binary("idiv", (i + 1) * n + (o - 1), as_expr(o))


def _adaptive_avg3d(x, output_size):
    sizes = x.shape[-3:]
    ks = [max(-(-((i + 1) * n) // o) - (i * n) // o for i in range(o)) for n, o in zip(sizes, output_size)]
    r = [te.reduce_axis(k, f"k{d}") for d, k in enumerate(ks)]
    shape = x.shape[:-3] + tuple(output_size)

    def body(*i):
        idx, ok = [], None
        for d in range(3):
            lo, hi = _bounds(i[len(i) - 3 + d], sizes[d], output_size[d])
            p = lo + r[d][0]
            inside = compare("lt", p, hi)
            ok = inside if ok is None else binary("and", ok, inside)
            idx.append(minimum(p, as_expr(sizes[d] - 1)))
        return te.sum_(select(ok, x[tuple(i[:-3]) + tuple(idx)], Const(0.0, x.dtype)), r)
    s = te.compute(shape, body, "adaptive_sum3d")

    def scale(*i):
        cnt = None
        for d in range(3):
            lo, hi = _bounds(i[len(i) - 3 + d], sizes[d], output_size[d])
            cnt = (hi - lo) if cnt is None else cnt * (hi - lo)
        return s[i] / cast(x.dtype, cnt)
    return te.compute(shape, scale, "adaptive_avg_pool3d")


def _adaptive_avg3d_ref(x, output_size):
    sizes = x.shape[-3:]
    out = np.zeros(x.shape[:-3] + tuple(output_size), dtype=np.float64)
    for o in itertools.product(*(range(n) for n in output_size)):
        sl = tuple(slice((o[d] * sizes[d]) // output_size[d], -(-((o[d] + 1) * sizes[d]) // output_size[d]))
                   for d in range(3))
        out[(...,) + o] = x[(...,) + sl].astype(np.float64).mean(axis=(-1, -2, -3))
    return out.astype(x.dtype)


def _adaptive_avg3d_infer(types, output_size):
    x = types[0]
    if x.ndim not in (4, 5) or 0 in x.shape[-3:]:
        raise ShapeError(f"adaptive_avg_pool3d expects a 4-d or 5-d non-empty input, got {x.shape}")
    return [TensorType(x.shape[:-3] + tuple(output_size), x.dtype)]


register(OpDef("adaptive_avg_pool3d", Kind.REDUCTION, _adaptive_avg3d_infer, _adaptive_avg3d_ref, _adaptive_avg3d,
               {"aten._adaptive_avg_pool3d.default": lambda b, x, output_size:
                   b.call("adaptive_avg_pool3d", [x], output_size=tuple(output_size))},
               None, lambda rng: [([rand(rng, (1, 2, 5, 7, 9))], {"output_size": (3, 2, 4)})], FLT))
