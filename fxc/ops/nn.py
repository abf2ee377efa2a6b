"""Neural-network ops: 2-D convolution (grouped, dilated, strided; padding is a separate `pad`),
max/avg/adaptive pooling, batch norm (inference) and layer norm as compositions of simpler ops."""
from __future__ import annotations

import math

import numpy as np

from ..errors import ShapeError
from ..lowering import te
from ..lowering.extern.pool import max_pool2d_loops
from ..symbolic.expr import Const, as_expr, binary, cast, compare, is_float, maximum, minimum, select
from ..types import TensorType
from .common import rand
from .linalg import _pack_ref, unpack_ref
from .registry import Kind, OpDef, register, register_aten

FLT = ("float32", "float64")


def _pair(v, n=2):
    v = tuple(v) if isinstance(v, (list, tuple)) else (v,) * n
    return v * n if len(v) == 1 else v


# -- conv2d ------------------------------------------------------------------------------------------------------
def _conv_out(h, k, s, d, p=0, ceil=False):
    span = h + 2 * p - d * (k - 1) - 1
    if span < 0:
        raise ShapeError(f"kernel {k} (dilation {d}) does not fit an input of size {h} with padding {p}")
    o = (-(-span // s) if ceil else span // s) + 1
    if ceil and (o - 1) * s >= h + p:
        o -= 1
    return o


def _conv2d_infer(types, stride=(1, 1), dilation=(1, 1), groups=1):
    x, w = types
    if x.ndim != 4 or w.ndim != 4:
        raise ShapeError(f"conv2d expects 4-d input and weight, got {x.shape} and {w.shape}")
    if x.shape[1] != w.shape[1] * groups or w.shape[0] % groups:
        raise ShapeError(f"conv2d: input channels {x.shape[1]} != weight {w.shape[1]} x groups {groups}")
    oh = _conv_out(x.shape[2], w.shape[2], stride[0], dilation[0])
    ow = _conv_out(x.shape[3], w.shape[3], stride[1], dilation[1])
    return [TensorType((x.shape[0], w.shape[0], oh, ow), x.dtype)]


def _conv2d(x, w, stride=(1, 1), dilation=(1, 1), groups=1):
    (_, _, oh, ow) = _conv2d_infer([x, w], stride, dilation, groups)[0].shape
    o_, cg, kh, kw = w.shape
    og = o_ // groups
    rc, rh, rw = te.reduce_axis(cg, "rc"), te.reduce_axis(kh, "rh"), te.reduce_axis(kw, "rw")

    def body(n, o, h, wi):
        c = rc[0] if groups == 1 else binary("idiv", o, og) * cg + rc[0]
        xv = x[n, c, h * stride[0] + rh[0] * dilation[0], wi * stride[1] + rw[0] * dilation[1]]
        return te.sum_(xv * w[o, rc[0], rh[0], rw[0]], [rc, rh, rw])
    depthwise = groups > 1 and cg == 1 and groups == x.shape[1]
    attrs = {"schedule": "depthwise_conv2d", "x": x, "w": w, "stride": stride, "dilation": dilation} if depthwise \
        else {"schedule": "grouped_conv2d", "x": x, "w": w, "stride": tuple(stride), "dilation": tuple(dilation),
              "groups": groups}
    return te.compute((x.shape[0], o_, oh, ow), body, "conv2d", attrs)


def _conv2d_ref(x, w, stride=(1, 1), dilation=(1, 1), groups=1):
    n, c, h, wd = x.shape
    o_, cg, kh, kw = w.shape
    (_, _, oh, ow) = _conv2d_infer([x, w], stride, dilation, groups)[0].shape
    out = np.zeros((n, o_, oh, ow), dtype=np.float64)
    og = o_ // groups
    for g in range(groups):
        xs = x[:, g * cg:(g + 1) * cg].astype(np.float64)
        ws = w[g * og:(g + 1) * og].astype(np.float64)
        for i in range(kh):
            for j in range(kw):
                patch = xs[:, :, i * dilation[0]: i * dilation[0] + stride[0] * (oh - 1) + 1: stride[0],
                           j * dilation[1]: j * dilation[1] + stride[1] * (ow - 1) + 1: stride[1]]
                out[:, g * og:(g + 1) * og] += np.einsum("nchw,oc->nohw", patch, ws[:, :, i, j])
    return out.astype(x.dtype)


register(OpDef("conv2d", Kind.OUT_FUSABLE, _conv2d_infer, _conv2d_ref, _conv2d,
               {}, None,
               lambda rng: [([rand(rng, (1, 3, 9, 10)), rand(rng, (4, 3, 3, 3))], {}),
                            ([rand(rng, (2, 4, 9, 9)), rand(rng, (6, 2, 3, 3))], {"stride": (2, 2), "groups": 2}),
                            ([rand(rng, (1, 4, 11, 11)), rand(rng, (4, 1, 3, 3))], {"dilation": (2, 2), "groups": 4}),
                            ([rand(rng, (1, 8, 5, 5)), rand(rng, (16, 8, 1, 1))], {})],
               FLT))


def to_blocked_ref(x, lanes: int):
    """NCHW -> NCHW16c (numpy; 16: `lanes`, the target's vector width): [N, C, H, W] as [N, ceil(C/16), H, W, 16],
    channel c at block c // 16, lane c % 16, the lanes past C zero."""
    n, c, h, w = x.shape
    cb = -(-c // lanes)
    x = np.pad(x, [(0, 0), (0, cb * lanes - c), (0, 0), (0, 0)])
    return np.ascontiguousarray(x.reshape(n, cb, lanes, h, w).transpose(0, 1, 3, 4, 2))


def from_blocked_ref(x, channels=None):
    n, cb, h, w, lanes = x.shape
    return np.ascontiguousarray(x.transpose(0, 1, 4, 2, 3).reshape(n, cb * lanes, h, w)[:, :channels])


def _conv2d_packed_infer(types, out_channels, stride=(1, 1), dilation=(1, 1), nv=1, blocked_in=False,
                         blocked_out=False, in_lanes=None, groups=1, inner_lanes=False):
    """in_lanes: the elements of one NCHW16c block (None: the weight's L float32 values; bf16: L/2 bf16x2 words of L
    channels). The weight's L (its lanes, the target's vector width) is the output block's too."""
    x, w = types
    in_lanes = in_lanes or (w.shape[4] if w.ndim == 5 else 1)
    # NCHW16c: the blocks holding the weight's channels; NCHW: the weight's channels in each group
    c = -(-w.shape[1] // in_lanes) if blocked_in else w.shape[1] * groups
    if x.ndim != (5 if blocked_in else 4) or (blocked_in and x.shape[4] != in_lanes) or w.ndim != 5 \
            or x.shape[1] != c or w.shape[0] * w.shape[4] < out_channels:
        raise ShapeError(f"conv2d_packed expects {'NCHW16c' if blocked_in else 'NCHW'} input and [O/L, C, KH, KW, L] "
                         f"weight, got {x.shape} and {w.shape}")
    oh = _conv_out(x.shape[2], w.shape[2], stride[0], dilation[0])
    ow = _conv_out(x.shape[3], w.shape[3], stride[1], dilation[1])
    shape = (x.shape[0], -(-out_channels // w.shape[4]), oh, ow, w.shape[4]) if blocked_out \
        else (x.shape[0], out_channels, oh, ow)
    return [TensorType(shape, x.dtype)]


def _conv2d_packed(x, wp, out_channels, stride=(1, 1), dilation=(1, 1), nv=1, blocked_in=False, blocked_out=False,
                   product=None, name="conv2d_packed", groups=1, inner_lanes=False, **facts):
    """conv2d over a weight packed by pack_lanes (output channels in blocks of L, lanes innermost). product(x, w)
    is what is summed (default x * w; bf16 words use their own); facts go to the schedule with the attrs.
    blocked_in / blocked_out: the input / output is NCHW16c ([N, ceil(C/16), H, W, 16], use_blocked_layout); the
    reduction reads the weight's C channels only, and an output's lanes past out_channels hold the packing's zero
    weights' sums (the epilogue of 0), which no reader takes for a channel.
    inner_lanes (blocked_in, C a multiple of the input block): the reduction runs over the input's blocks, the window,
    then a block's channels innermost, so a device fragment reads each input block once for all of them (webgl:
    one RGBA texel of four channels, use_channel_blocks); the sum is the same."""
    _, c_, kh, kw, L = wp.shape
    li = x.shape[4] if blocked_in else L       # the elements of an input block: 16 channels (8 bf16x2 words)
    product = product or (lambda a, b: a * b)
    if inner_lanes and blocked_in and groups == 1 and c_ % li == 0:
        return _conv2d_packed_inner(x, wp, out_channels, stride, dilation, nv, blocked_out, product, name, facts)
    rc, rh, rw = te.reduce_axis(c_, "rc"), te.reduce_axis(kh, "rh"), te.reduce_axis(kw, "rw")

    def body(n, o, h, wi, ol=None):
        ih, iw = h * stride[0] + rh[0] * dilation[0], wi * stride[1] + rw[0] * dilation[1]
        c = rc[0] if groups == 1 else binary("idiv", o, as_expr(out_channels // groups)) * c_ + rc[0]
        xv = x[n, binary("idiv", rc[0], as_expr(li)), ih, iw, binary("imod", rc[0], as_expr(li))] if blocked_in \
            else x[n, c, ih, iw]
        wv = wp[o, rc[0], rh[0], rw[0], ol] if blocked_out else \
            wp[binary("idiv", o, as_expr(L)), rc[0], rh[0], rw[0], binary("imod", o, as_expr(L))]
        return te.sum_(product(xv, wv), [rc, rh, rw])
    shape = _conv2d_packed_infer([x, wp], out_channels, stride, dilation, nv, blocked_in, blocked_out, li,
                                 groups)[0].shape
    return te.compute(shape, body, name,
                      {"schedule": "conv2d_packed", **facts, "x": x, "w": wp, "stride": tuple(stride),
                       "dilation": tuple(dilation), "nv": nv, "blocked_in": blocked_in, "blocked_out": blocked_out,
                       "groups": groups})


def _conv2d_packed_inner(x, wp, out_channels, stride, dilation, nv, blocked_out, product, name, facts):
    """conv2d_packed over an NCHWc input with the reduction order (input block, KH, KW, block channel)."""
    _, c_, kh, kw, L = wp.shape
    li = x.shape[4]
    rb, rh, rw, rl = (te.reduce_axis(c_ // li, "rb"), te.reduce_axis(kh, "rh"), te.reduce_axis(kw, "rw"),
                      te.reduce_axis(li, "rl"))

    def body(n, o, h, wi, ol=None):
        ih, iw = h * stride[0] + rh[0] * dilation[0], wi * stride[1] + rw[0] * dilation[1]
        xv = x[n, rb[0], ih, iw, rl[0]]
        c = rb[0] * li + rl[0]
        wv = wp[o, c, rh[0], rw[0], ol] if blocked_out else \
            wp[binary("idiv", o, as_expr(L)), c, rh[0], rw[0], binary("imod", o, as_expr(L))]
        return te.sum_(product(xv, wv), [rb, rh, rw, rl])
    shape = _conv2d_packed_infer([x, wp], out_channels, stride, dilation, nv, True, blocked_out, li)[0].shape
    return te.compute(shape, body, name,
                      {"schedule": "conv2d_packed", **facts, "x": x, "w": wp, "stride": tuple(stride),
                       "dilation": tuple(dilation), "nv": nv, "blocked_in": True, "blocked_out": blocked_out,
                       "groups": 1, "inner_lanes": True})


def _conv2d_packed_ref(x, wp, out_channels, stride=(1, 1), dilation=(1, 1), nv=1, blocked_in=False, blocked_out=False,
                       inner_lanes=False):
    out = _conv2d_ref(from_blocked_ref(x, wp.shape[1]) if blocked_in else x, unpack_ref(wp, 0, 0, out_channels), stride,
                      dilation)
    return to_blocked_ref(out, wp.shape[-1]) if blocked_out else out


def _packed_w(rng, o, c, k, blocks):
    return _pack_ref(rand(rng, (o, c) + (k if isinstance(k, tuple) else (k, k))), 0, 0, blocks)


register(OpDef("conv2d_packed", Kind.OUT_FUSABLE, _conv2d_packed_infer, _conv2d_packed_ref, _conv2d_packed, {}, None,
               lambda rng: [([rand(rng, (1, 3, 9, 10)), _packed_w(rng, 4, 3, 3, 1)], {"out_channels": 4}),
                            ([rand(rng, (2, 5, 11, 30)), _packed_w(rng, 40, 5, 3, 4)],
                             {"out_channels": 40, "stride": (2, 2), "nv": 2}),
                            ([rand(rng, (1, 4, 13, 13)), _packed_w(rng, 20, 4, 3, 2)],
                             {"out_channels": 20, "dilation": (2, 2), "nv": 2}),
                            ([rand(rng, (1, 8, 5, 5)), _packed_w(rng, 33, 8, 1, 3)], {"out_channels": 33, "nv": 3}),
                            ([rand(rng, (1, 3, 9, 20)), _packed_w(rng, 48, 3, 3, 4)],
                             {"out_channels": 48, "stride": (2, 2), "nv": 2, "blocked_out": True}),
                            ([rand(rng, (2, 2, 7, 9, 16)), _packed_w(rng, 24, 32, 1, 2)],
                             {"out_channels": 24, "nv": 2, "blocked_in": True}),
                            ([rand(rng, (1, 2, 11, 11, 16)), _packed_w(rng, 32, 32, 3, 3)],
                             {"out_channels": 32, "nv": 3, "blocked_in": True, "blocked_out": True}),
                            ([rand(rng, (1, 2, 6, 7, 16)), _packed_w(rng, 24, 20, 1, 3)],
                             {"out_channels": 24, "nv": 3, "blocked_in": True, "blocked_out": True})],
               FLT, doc="conv2d whose weight is pack_lanes(w, axis 0): [O/L, C, KH, KW, L]; its input and output NCHW, "
                        "or NCHW16c where blocked_in / blocked_out say so."))


# -- grouped conv2d over packed weights -------------------------------------------------------------------------------
def _grouped_packed_infer(types, out_channels, groups, stride=(1, 1), dilation=(1, 1), nv=1):
    x, w = types
    og = out_channels // groups
    if w.ndim != 5 or x.ndim != 4 or groups < 1 or out_channels % groups or og % (w.shape[4] * nv) \
            or x.shape[1] != w.shape[1] * groups or w.shape[0] * w.shape[4] != out_channels:
        raise ShapeError(f"conv2d_grouped_packed expects NCHW input of groups x C channels, a [O/L, C, KH, KW, L] "
                         f"weight and out_channels / groups a multiple of L x nv, got {x.shape}, {w.shape}, "
                         f"out_channels {out_channels}, groups {groups}, nv {nv}")
    return _conv2d_packed_infer(types, out_channels, stride, dilation, nv, groups=groups)


def _grouped_packed(x, wp, out_channels, groups, stride=(1, 1), dilation=(1, 1), nv=1):
    """conv2d with `groups` > 1 (not depthwise) over pack_lanes(w, axis 0): each group's out_channels / groups
    channels (a whole number of nv-block tiles) read that group's slice of the input; conv2d_packed's schedule."""
    _grouped_packed_infer([x, wp], out_channels, groups, stride, dilation, nv)
    return _conv2d_packed(x, wp, out_channels, stride, dilation, nv, groups=groups)


def _grouped_packed_ref(x, wp, out_channels, groups, stride=(1, 1), dilation=(1, 1), nv=1):
    return _conv2d_ref(x, unpack_ref(wp, 0, 0, out_channels), stride, dilation, groups)


register(OpDef("conv2d_grouped_packed", Kind.OUT_FUSABLE, _grouped_packed_infer, _grouped_packed_ref, _grouped_packed,
               {}, None,
               lambda rng: [([rand(rng, (1, 6, 5, 19)), _packed_w(rng, 32, 3, 3, 2)],
                             {"out_channels": 32, "groups": 2}),
                            ([rand(rng, (2, 8, 1, 40)), _packed_w(rng, 128, 2, (1, 5), 8)],
                             {"out_channels": 128, "groups": 4, "nv": 2}),
                            ([rand(rng, (1, 12, 9, 11)), _packed_w(rng, 96, 4, 3, 6)],
                             {"out_channels": 96, "groups": 3, "stride": (2, 1), "dilation": (1, 2), "nv": 2})],
               FLT, doc="grouped conv2d (not depthwise) over pack_lanes(w, axis 0): [O/L, C/groups, KH, KW, L], "
                        "each group out_channels / groups channels, a multiple of L x nv; NCHW in and out."))


def _depthwise_blocked_infer(types, stride=(1, 1), dilation=(1, 1)):
    x, w = types
    if x.ndim != 5 or w.ndim != 4 or x.shape[1] != w.shape[0] or x.shape[4] != w.shape[3]:
        raise ShapeError(f"depthwise_blocked expects an NCHW16c input and a [C/16, KH, KW, 16] weight, got {x.shape} "
                         f"and {w.shape}")
    oh = _conv_out(x.shape[2], w.shape[1], stride[0], dilation[0])
    ow = _conv_out(x.shape[3], w.shape[2], stride[1], dilation[1])
    return [TensorType((x.shape[0], x.shape[1], oh, ow, x.shape[4]), x.dtype)]


def _depthwise_blocked(x, w, stride=(1, 1), dilation=(1, 1)):
    """Depthwise conv2d on NCHW16c: out[n, cb, h, w, l] = sum over taps of x[n, cb, h*s + kh*d, w*s + kw*d, l] *
    w[cb, kh, kw, l] (w: the [C, 1, KH, KW] weight as [C/16, KH, KW, 16])."""
    shape = _depthwise_blocked_infer([x, w], stride, dilation)[0].shape
    rh, rw = te.reduce_axis(w.shape[1], "rh"), te.reduce_axis(w.shape[2], "rw")

    def body(n, cb, h, wi, lane):
        xv = x[n, cb, h * stride[0] + rh[0] * dilation[0], wi * stride[1] + rw[0] * dilation[1], lane]
        return te.sum_(xv * w[cb, rh[0], rw[0], lane], [rh, rw])
    return te.compute(shape, body, "depthwise_blocked",
                      {"schedule": "depthwise_blocked", "x": x, "w": w, "stride": tuple(stride),
                       "dilation": tuple(dilation)})


def _depthwise_blocked_ref(x, w, stride=(1, 1), dilation=(1, 1)):
    cb, kh, kw, lanes = w.shape
    wt = w.transpose(0, 3, 1, 2).reshape(cb * lanes, 1, kh, kw)
    return to_blocked_ref(_conv2d_ref(from_blocked_ref(x), wt, stride, dilation, groups=cb * lanes), lanes)


register(OpDef("depthwise_blocked", Kind.OUT_FUSABLE, _depthwise_blocked_infer, _depthwise_blocked_ref,
               _depthwise_blocked, {}, None,
               lambda rng: [([rand(rng, (1, 2, 9, 10, 16)), rand(rng, (2, 3, 3, 16))], {}),
                            ([rand(rng, (2, 1, 12, 11, 16)), rand(rng, (1, 3, 3, 16))], {"stride": (2, 2)}),
                            ([rand(rng, (1, 1, 13, 13, 16)), rand(rng, (1, 5, 5, 16))], {"dilation": (2, 2)})],
               FLT, doc="depthwise conv2d on NCHW16c activations (use_blocked_layout)."))


# -- pooling --------------------------------------------------------------------------------------------------------
def _pool_out(x, kernel, stride, padding, dilation, ceil_mode):
    return tuple(_conv_out(x.shape[2 + d], kernel[d], stride[d], dilation[d], padding[d], ceil_mode) for d in range(2))


def _pool_infer(types, kernel, stride, padding=(0, 0), dilation=(1, 1), ceil_mode=False, **_):
    x = types[0]
    if x.ndim not in (3, 4):
        raise ShapeError(f"2-d pooling expects a 3-d or 4-d input, got {x.shape}")
    if any(p * 2 > k for p, k in zip(padding, kernel)):
        raise ShapeError("pooling padding must be at most half the kernel size")
    return [TensorType(x.shape[:-2] + _pool_out(TensorType((1, 1) + x.shape[-2:], x.dtype), kernel, stride, padding,
                                                dilation, ceil_mode), x.dtype)]


def _window(x, i, r, stride, padding, dilation, hw: int = -2):
    """Input index of window element r at output i, its in-bounds flag, and the clamped index (hw: the H dim, W
    the next: the last two, or 2 and 3 of NCHW16c)."""
    hw = hw % len(i)
    h = i[hw] * stride[0] - padding[0] + r[0][0] * dilation[0]
    w = i[hw + 1] * stride[1] - padding[1] + r[1][0] * dilation[1]
    H, W = x.shape[hw:hw + 2]
    ok = binary("and", binary("and", compare("ge", h, as_expr(0)), compare("lt", h, as_expr(H))),
                binary("and", compare("ge", w, as_expr(0)), compare("lt", w, as_expr(W))))
    hc = minimum(maximum(h, as_expr(0)), as_expr(H - 1))
    wc = minimum(maximum(w, as_expr(0)), as_expr(W - 1))
    return h, w, ok, x[tuple(i[:hw]) + (hc, wc) + tuple(i[hw + 2:])]


def _max_pool(x, kernel, stride, padding=(0, 0), dilation=(1, 1), ceil_mode=False):
    """The CPU's loop IR (fxc/lowering/extern/pool.py), and the same op as a compute for the GPU schedules."""
    shape = _pool_infer([x], kernel, stride, padding, dilation, ceil_mode)[0].shape
    lo = Const(-math.inf, x.dtype) if is_float(x.dtype) else te.reduce_init("max", x.dtype)
    out = te.extern([(shape, x.dtype)], [x], max_pool2d_loops(x.shape, shape, kernel, stride, padding, dilation, lo),
                    "max_pool2d")[0]
    KH, KW = kernel
    r = [te.reduce_axis(KH, "kh"), te.reduce_axis(KW, "kw")]

    def body(*i):
        _, _, ok, v = _window(x, i, r, stride, padding, dilation)
        return te.max_(select(ok, v, lo), r)
    out.attrs["compute"] = te.compute(shape, body, "max_pool2d")   # the same op as a compute (the GPU schedules')
    return out


def _max_pool_indices(x, vals, kernel, stride, padding=(0, 0), dilation=(1, 1), ceil_mode=False):
    r = [te.reduce_axis(kernel[0], "kh"), te.reduce_axis(kernel[1], "kw")]
    W = x.shape[-1]
    big = as_expr(x.shape[-1] * x.shape[-2])

    def body(*i):
        h, w, ok, v = _window(x, i, r, stride, padding, dilation)
        hit = binary("and", ok, compare("eq", v, vals[i]))
        return te.min_(select(hit, h * W + w, big), r)
    return te.compute(vals.shape, body, "max_pool2d_indices")


def _pool_ref_windows(x, kernel, stride, padding, dilation, ceil_mode, fill):
    oh, ow = _pool_infer([TensorType(x.shape, str(x.dtype))], kernel, stride, padding, dilation,
                         ceil_mode)[0].shape[-2:]
    H, W = x.shape[-2:]
    pad_h = max((oh - 1) * stride[0] + dilation[0] * (kernel[0] - 1) + 1 - H - padding[0], 0)
    pad_w = max((ow - 1) * stride[1] + dilation[1] * (kernel[1] - 1) + 1 - W - padding[1], 0)
    widths = [(0, 0)] * (x.ndim - 2) + [(padding[0], pad_h), (padding[1], pad_w)]
    xp = np.pad(x.astype(np.float64), widths, constant_values=fill)
    wins = np.empty(x.shape[:-2] + (oh, ow, kernel[0] * kernel[1]))
    for a in range(kernel[0]):
        for c in range(kernel[1]):
            wins[..., a * kernel[1] + c] = xp[...,
                                              a * dilation[0]: a * dilation[0] + stride[0] * (oh - 1) + 1: stride[0],
                                              c * dilation[1]: c * dilation[1] + stride[1] * (ow - 1) + 1: stride[1]]
    return wins


def _max_pool_ref(x, kernel, stride, padding=(0, 0), dilation=(1, 1), ceil_mode=False):
    return _pool_ref_windows(x, kernel, stride, padding, dilation, ceil_mode, -np.inf).max(-1).astype(x.dtype)


def _max_pool_indices_ref(x, vals, kernel, stride, padding=(0, 0), dilation=(1, 1), ceil_mode=False):
    H, W = x.shape[-2:]
    idx = np.arange(H * W, dtype=np.float64).reshape(H, W)
    xi = _pool_ref_windows(np.broadcast_to(idx, x.shape), kernel, stride, padding, dilation, ceil_mode, -1)
    xv = _pool_ref_windows(x, kernel, stride, padding, dilation, ceil_mode, -np.inf)
    first = np.argmax(xv == vals[..., None], axis=-1)
    return np.take_along_axis(xi, first[..., None], -1)[..., 0].astype(np.int64)


def _max_pool_aten(b, x, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    k = _pair(kernel_size)
    attrs = dict(kernel=k, stride=_pair(stride) if stride else k, padding=_pair(padding), dilation=_pair(dilation),
                 ceil_mode=ceil_mode)
    vals = b.call("max_pool2d", [x], **attrs)
    return vals, b.call("max_pool2d_indices", [x, vals], **attrs)


_pool_samples = lambda rng: [([rand(rng, (1, 2, 9, 9))], {"kernel": (3, 3), "stride": (2, 2), "padding": (1, 1)}),
                             ([rand(rng, (2, 3, 8, 7))], {"kernel": (2, 2), "stride": (2, 2), "ceil_mode": True})]
register(OpDef("max_pool2d", Kind.OPAQUE, _pool_infer, _max_pool_ref, _max_pool,
               {"aten.max_pool2d_with_indices.default": _max_pool_aten,
                "aten.max_pool2d.default": lambda b, x, *a, **k: _max_pool_aten(b, x, *a, **k)[0]},
               None, lambda rng: _pool_samples(rng) + [   # rows wide enough for whole and overlapping vectors
                   ([rand(rng, (1, 2, 5, 70))], {"kernel": (3, 3), "stride": (2, 2), "padding": (1, 1)}),
                   ([rand(rng, (1, 1, 7, 53))], {"kernel": (3, 2), "stride": (1, 3), "padding": (1, 1),
                                                 "dilation": (2, 2), "ceil_mode": True}),
                   ([rng.integers(0, 256, (1, 3, 9, 40)).astype(np.uint8)],     # int8 maps (passes/quantize.py)
                    {"kernel": (3, 3), "stride": (2, 2), "padding": (1, 1)})],
               ("float32", "float64", "int32", "int64", "int8", "uint8")))
def _max_pool_blocked_infer(types, kernel, stride, padding=(0, 0), dilation=(1, 1), ceil_mode=False):
    x = types[0]
    if x.ndim != 5:
        raise ShapeError(f"max_pool2d_blocked expects an NCHW16c input [N, C/16, H, W, 16], got {x.shape}")
    oh, ow = _pool_infer([TensorType((1, 1) + x.shape[2:4], x.dtype)], kernel, stride, padding, dilation,
                         ceil_mode)[0].shape[2:]
    return [TensorType(x.shape[:2] + (oh, ow) + x.shape[4:], x.dtype)]


def _max_pool_blocked(x, kernel, stride, padding=(0, 0), dilation=(1, 1), ceil_mode=False):
    """2-d max pooling on NCHW16c: out[n, cb, h, w, l] = max over the window of x[n, cb, ., ., l] (the taps outside
    the input skipped, as max_pool2d's)."""
    shape = _max_pool_blocked_infer([x], kernel, stride, padding, dilation, ceil_mode)[0].shape
    r = [te.reduce_axis(kernel[0], "kh"), te.reduce_axis(kernel[1], "kw")]
    lo = Const(-math.inf, x.dtype)

    def body(*i):
        _, _, ok, v = _window(x, i, r, stride, padding, dilation, hw=2)
        return te.max_(select(ok, v, lo), r)
    return te.compute(shape, body, "max_pool2d_blocked")


def _max_pool_blocked_ref(x, kernel, stride, padding=(0, 0), dilation=(1, 1), ceil_mode=False):
    return to_blocked_ref(_max_pool_ref(from_blocked_ref(x), kernel, stride, padding, dilation, ceil_mode), x.shape[4])


register(OpDef("max_pool2d_blocked", Kind.OPAQUE, _max_pool_blocked_infer, _max_pool_blocked_ref, _max_pool_blocked,
               {}, None,
               lambda rng: [([rand(rng, (1, 2, 9, 9, 4))], {"kernel": (3, 3), "stride": (2, 2), "padding": (1, 1)}),
                            ([rand(rng, (2, 1, 8, 7, 16))], {"kernel": (2, 2), "stride": (2, 2), "ceil_mode": True})],
               FLT, doc="2-d max pooling on NCHW16c activations (use_blocked_layout's device regions)."))
register(OpDef("max_pool2d_indices", Kind.REDUCTION,
               lambda t, **a: [TensorType(_pool_infer(t[:1], **a)[0].shape, "int64")],
               _max_pool_indices_ref, _max_pool_indices, {}, None,
               lambda rng: [([x := rand(rng, (1, 2, 9, 9)), _max_pool_ref(x, (3, 3), (2, 2), (1, 1))],
                             {"kernel": (3, 3), "stride": (2, 2), "padding": (1, 1)})],
               ("float32", "float64", "int32", "int64")))


def avg_pool_count(i, d, n, kernel, stride, padding, count_include_pad):
    """How many elements average-pooling window i along dim d (input size n) divides by."""
    start = i * stride[d] - padding[d]
    end = minimum(start + kernel[d], as_expr(n + padding[d]))
    if not count_include_pad:
        return minimum(end, as_expr(n)) - maximum(start, as_expr(0))
    return end - start


def _avg_pool(x, kernel, stride, padding=(0, 0), ceil_mode=False, count_include_pad=True, divisor_override=None):
    shape = _pool_infer([x], kernel, stride, padding, (1, 1), ceil_mode)[0].shape
    r = [te.reduce_axis(kernel[0], "kh"), te.reduce_axis(kernel[1], "kw")]

    def body(*i):
        _, _, ok, v = _window(x, i, r, stride, padding, (1, 1))
        return te.sum_(select(ok, v, Const(0.0, x.dtype)), r)
    s = te.compute(shape, body, "avg_pool_sum")
    H, W = x.shape[-2:]

    def count(i, d, n):
        return avg_pool_count(i, d, n, kernel, stride, padding, count_include_pad)

    def scale(*i):
        if divisor_override:
            return s[i] * (1.0 / divisor_override)
        cnt = count(i[-2], 0, H) * count(i[-1], 1, W)
        return s[i] / cast(x.dtype, cnt)
    return te.compute(shape, scale, "avg_pool2d")


def _avg_pool_ref(x, kernel, stride, padding=(0, 0), ceil_mode=False, count_include_pad=True, divisor_override=None):
    wins = _pool_ref_windows(x, kernel, stride, padding, (1, 1), ceil_mode, np.nan)
    s = np.nansum(wins, -1)
    if divisor_override:
        return (s / divisor_override).astype(x.dtype)
    H, W = x.shape[-2:]
    oh, ow = s.shape[-2:]
    cnt = np.zeros((oh, ow))
    for a in range(oh):
        for c in range(ow):
            h0, w0 = a * stride[0] - padding[0], c * stride[1] - padding[1]
            h1, w1 = min(h0 + kernel[0], H + padding[0]), min(w0 + kernel[1], W + padding[1])
            if not count_include_pad:
                h0, w0, h1, w1 = max(h0, 0), max(w0, 0), min(h1, H), min(w1, W)
            cnt[a, c] = (h1 - h0) * (w1 - w0)
    return (s / cnt).astype(x.dtype)


def _avg_pool_aten(b, x, kernel_size, stride=(), padding=0, ceil_mode=False, count_include_pad=True,
                   divisor_override=None):
    k = _pair(kernel_size)
    return b.call("avg_pool2d", [x], kernel=k, stride=_pair(stride) if stride else k, padding=_pair(padding),
                  ceil_mode=ceil_mode, count_include_pad=count_include_pad, divisor_override=divisor_override)


register(OpDef("avg_pool2d", Kind.REDUCTION, _pool_infer, _avg_pool_ref, _avg_pool,
               {"aten.avg_pool2d.default": _avg_pool_aten}, None,
               lambda rng: [([rand(rng, (1, 2, 9, 9))], {"kernel": (3, 3), "stride": (2, 2), "padding": (1, 1)}),
                            ([rand(rng, (1, 2, 9, 9))], {"kernel": (3, 3), "stride": (2, 2), "padding": (1, 1),
                                                         "count_include_pad": False, "ceil_mode": True})],
               FLT))


def _adaptive_infer(types, output_size):
    x = types[0]
    return [TensorType(x.shape[:-2] + tuple(output_size), x.dtype)]


def _adaptive_avg(x, output_size):
    H, W = x.shape[-2:]
    oh, ow = output_size
    kh = max(-(-((i + 1) * H) // oh) - (i * H) // oh for i in range(oh))
    kw = max(-(-((j + 1) * W) // ow) - (j * W) // ow for j in range(ow))
    r = [te.reduce_axis(kh, "kh"), te.reduce_axis(kw, "kw")]
    shape = x.shape[:-2] + (oh, ow)

    def bounds(i, n, o):
        return binary("idiv", i * n, as_expr(o)), binary("idiv", (i + 1) * n + (o - 1), as_expr(o))

    def body(*i):
        h0, h1 = bounds(i[-2], H, oh)
        w0, w1 = bounds(i[-1], W, ow)
        h, w = h0 + r[0][0], w0 + r[1][0]
        ok = binary("and", compare("lt", h, h1), compare("lt", w, w1))
        v = x[tuple(i[:-2]) + (minimum(h, as_expr(H - 1)), minimum(w, as_expr(W - 1)))]
        return te.sum_(select(ok, v, Const(0.0, x.dtype)), r)
    s = te.compute(shape, body, "adaptive_sum")

    def scale(*i):
        h0, h1 = bounds(i[-2], H, oh)
        w0, w1 = bounds(i[-1], W, ow)
        return s[i] / cast(x.dtype, (h1 - h0) * (w1 - w0))
    return te.compute(shape, scale, "adaptive_avg_pool2d")


def _adaptive_ref(x, output_size):
    H, W = x.shape[-2:]
    oh, ow = output_size
    out = np.zeros(x.shape[:-2] + (oh, ow), dtype=np.float64)
    for i in range(oh):
        for j in range(ow):
            h0, h1 = (i * H) // oh, -(-((i + 1) * H) // oh)
            w0, w1 = (j * W) // ow, -(-((j + 1) * W) // ow)
            out[..., i, j] = x[..., h0:h1, w0:w1].astype(np.float64).mean(axis=(-1, -2))
    return out.astype(x.dtype)


def _adaptive_aten(b, x, output_size):
    H, W = x.shape[-2:]
    if tuple(output_size) == (1, 1):
        return b.call("mean", [x], axes=(-2, -1), keepdim=True)
    return b.call("adaptive_avg_pool2d", [x], output_size=tuple(output_size))


register(OpDef("adaptive_avg_pool2d", Kind.REDUCTION, _adaptive_infer, _adaptive_ref, _adaptive_avg,
               {"aten._adaptive_avg_pool2d.default": _adaptive_aten,
                "aten.adaptive_avg_pool2d.default": _adaptive_aten},
               None, lambda rng: [([rand(rng, (1, 2, 7, 9))], {"output_size": (3, 4)})], FLT))


# -- normalisation (compositions of registry ops) ----------------------------------------------------------------------
def _channel(b, v, nd):
    return b.call("reshape", [v], shape=(-1,) + (1,) * (nd - 2))


def _batch_norm_inference(b, x, weight, bias, mean, var, momentum, eps):
    nd = x.type.ndim
    scale = b.call("rsqrt", [b.call("add", [var, float(eps)])])
    if weight is not None:
        scale = b.call("mul", [scale, weight])
    shift = b.call("neg", [b.call("mul", [mean, scale])])
    if bias is not None:
        shift = b.call("add", [shift, bias])
    out = b.call("add", [b.call("mul", [x, _channel(b, scale, nd)]), _channel(b, shift, nd)])
    empty = b.const(np.zeros((0,), dtype=x.dtype))
    return out, empty, empty


register_aten("aten._native_batch_norm_legit_no_training.default", _batch_norm_inference)
