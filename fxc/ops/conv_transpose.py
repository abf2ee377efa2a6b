"""Transposed 2-D convolution and the gradients of convolution (`aten.convolution_backward`).

A transposed conv runs as stride-1 conv2ds on fxc's conv schedules, one per output phase (the output pixels at
the same position modulo the stride: `conv_transpose_as_convs`), interleaved into the output. The op
conv_transpose2d, a gather (each output pixel sums the input pixels whose stride-spaced footprint covers it), is
left for outputs smaller than the stride. conv2d_weight_grad is the correlation of the (padded) input with the
output gradient. 1-d convolutions reuse both through a height of 1; `convolution._convolution` calls
`transposed_convolution` for `transposed=True`.

A conv2d's own backward avoids both loops where it can: its input gradient (a transposed conv) becomes the
phases' conv2ds, or for a strided 3x3 conv one stride-1 conv2d over the output gradient spread with zeros (which
can run as Winograd), and, with groups 1, its weight gradient one GEMM over `im2col`. im2col is opaque to fusion:
a zero pad fused into it would make its rows clamped scalar gathers.
"""
from __future__ import annotations

import numpy as np

from ..errors import ShapeError, UnsupportedOpError
from ..lowering import te
from ..symbolic.expr import Const, as_expr, binary, compare, is_float, maximum, minimum, select
from ..types import TensorType
from .common import np_dtype, rand
from .registry import Kind, OpDef, register, register_aten
from .volume import transposed_convolution3d

FLT = ("float32", "float64")


def _tuple(v, n):
    v = tuple(v) if isinstance(v, (list, tuple)) else (v,) * n
    return v * n if len(v) == 1 else v


def _and(*cs):
    out = cs[0]
    for c in cs[1:]:
        out = binary("and", out, c)
    return out


# -- conv_transpose2d --------------------------------------------------------------------------------------------------
def _ct_size(h, k, s, p, d, op):
    return (h - 1) * s - 2 * p + d * (k - 1) + op + 1


def _ct_infer(types, stride=(1, 1), padding=(0, 0), dilation=(1, 1), output_padding=(0, 0), groups=1):
    x, w = types
    if x.ndim != 4 or w.ndim != 4 or x.shape[1] != w.shape[0] or w.shape[0] % groups:
        raise ShapeError(f"conv_transpose2d: input {x.shape} and weight {w.shape} (groups {groups}) do not match")
    size = [_ct_size(x.shape[2 + a], w.shape[2 + a], stride[a], padding[a], dilation[a], output_padding[a])
            for a in range(2)]
    if min(size) <= 0:
        raise ShapeError(f"conv_transpose2d: output size {size} is not positive")
    return [TensorType((x.shape[0], w.shape[1] * groups) + tuple(size), x.dtype)]


def _ct(x, w, stride=(1, 1), padding=(0, 0), dilation=(1, 1), output_padding=(0, 0), groups=1):
    shape = _ct_infer([x, w], stride, padding, dilation, output_padding, groups)[0].shape
    cin, og, kh, kw = w.shape
    cg = cin // groups
    rc, rh, rw = te.reduce_axis(cg, "rc"), te.reduce_axis(kh, "rh"), te.reduce_axis(kw, "rw")

    def src(o, k, a):
        """input position reaching output o through kernel tap k along axis a, and whether it exists."""
        t = o + padding[a] - k * dilation[a]
        tc = maximum(t, as_expr(0))
        i = tc if stride[a] == 1 else binary("idiv", tc, as_expr(stride[a]))
        ok = [compare("ge", t, as_expr(0)), compare("lt", i, as_expr(x.shape[2 + a]))]
        if stride[a] != 1:
            ok.append(compare("eq", binary("imod", tc, as_expr(stride[a])), as_expr(0)))
        return minimum(i, as_expr(x.shape[2 + a] - 1)), _and(*ok)

    def body(n, o, h, wi):
        c = rc[0] if groups == 1 else binary("idiv", o, as_expr(og)) * cg + rc[0]
        oc = o if groups == 1 else binary("imod", o, as_expr(og))
        ih, okh = src(h, rh[0], 0)
        iw, okw = src(wi, rw[0], 1)
        v = x[n, c, ih, iw] * w[c, oc, rh[0], rw[0]]
        return te.sum_(select(binary("and", okh, okw), v, Const(0.0, x.dtype)), [rc, rh, rw])
    return te.compute(shape, body, "conv_transpose2d")


def _ct_ref(x, w, stride=(1, 1), padding=(0, 0), dilation=(1, 1), output_padding=(0, 0), groups=1):
    n, cin, h, wd = x.shape
    _, og, kh, kw = w.shape
    cg = cin // groups
    full = (n, og * groups, (h - 1) * stride[0] + dilation[0] * (kh - 1) + 1 + output_padding[0],
            (wd - 1) * stride[1] + dilation[1] * (kw - 1) + 1 + output_padding[1])
    out = np.zeros(full)
    for g in range(groups):
        xs = x[:, g * cg:(g + 1) * cg].astype(np.float64)
        for i in range(kh):
            for j in range(kw):
                contrib = np.einsum("nchw,co->nohw", xs, w[g * cg:(g + 1) * cg, :, i, j].astype(np.float64))
                out[:, g * og:(g + 1) * og, i * dilation[0]: i * dilation[0] + stride[0] * (h - 1) + 1: stride[0],
                    j * dilation[1]: j * dilation[1] + stride[1] * (wd - 1) + 1: stride[1]] += contrib
    oh, ow = _ct_infer([TensorType(x.shape, "float32"), TensorType(w.shape, "float32")], stride, padding, dilation,
                       output_padding, groups)[0].shape[2:]
    return out[:, :, padding[0]:padding[0] + oh, padding[1]:padding[1] + ow].astype(x.dtype)


register(OpDef("conv_transpose2d", Kind.OUT_FUSABLE, _ct_infer, _ct_ref, _ct, {}, None,
               lambda rng: [([rand(rng, (1, 3, 5, 6)), rand(rng, (3, 2, 3, 3))], {}),
                            ([rand(rng, (2, 4, 4, 5)), rand(rng, (4, 3, 3, 2))],
                             {"stride": (2, 3), "padding": (1, 0), "output_padding": (1, 2), "groups": 2}),
                            ([rand(rng, (1, 2, 5, 5)), rand(rng, (2, 2, 3, 3))],
                             {"stride": (2, 2), "dilation": (2, 1), "padding": (2, 1)})],
               FLT))


def _phase(k, s, p, d, r):
    """One axis of one output phase of a transposed conv (the outputs o = q*s + r): (first tap, tap step, taps J,
    input offset, input dilation) with out_r[q] = sum over j < J of x[q + offset + j*dilation] *
    w[first + (J-1-j)*step], a stride-1 correlation; None when no tap reaches this phase."""
    taps = [t for t in range(k) if (r + p - t * d) % s == 0]
    if not taps:
        return None
    step = taps[1] - taps[0] if len(taps) > 1 else 1
    dil = step * d // s if len(taps) > 1 else 1
    return taps[0], step, len(taps), (r + p - taps[0] * d) // s - (len(taps) - 1) * dil, dil


def _ct_weight_as_conv(b, w, groups):
    """A transposed conv's weight [in, out/groups, kh, kw] as the weight of the conv2d that gathers the same sums:
    flipped in space, in and out swapped within each group ([out, in/groups, kh, kw])."""
    w = b.call("flip", [w], dims=(2, 3))
    cin, og = w.shape[:2]
    cg = cin // groups
    if groups == 1:
        return b.call("permute", [w], dims=(1, 0, 2, 3))
    if og > 1 and cg > 1:
        w = b.call("reshape", [w], shape=(groups, cg, og) + tuple(w.shape[2:]))
        w = b.call("permute", [w], dims=(0, 2, 1, 3, 4))
    return b.call("reshape", [w], shape=(groups * og, cg) + tuple(w.shape[-2:]))


def conv_transpose_as_convs(b, x, w, stride, padding, dilation, output_padding, groups):
    """conv_transpose2d as stride-1 conv2ds, one per output phase (the outputs whose position is r modulo the stride
    along each axis): each phase is a correlation of the input with the taps that reach it, so the convs do exactly
    the transposed conv's multiply-adds (no zeros spread between the input's pixels) on fxc's conv2d schedules; the
    phases are then interleaved into the output. None where a phase would be empty (output smaller than the
    stride)."""
    n, cin, h, wd = x.shape
    k = w.shape[2:]
    size = [_ct_size((h, wd)[a], k[a], stride[a], padding[a], dilation[a], output_padding[a]) for a in range(2)]
    if min(size[a] - stride[a] for a in range(2)) < 0:
        return None
    o = w.shape[1] * groups
    qs = [[(size[a] - r + stride[a] - 1) // stride[a] for r in range(stride[a])] for a in range(2)]
    full = (n, o, qs[0][0], qs[1][0])       # every phase padded to the first's (the largest) size
    rows = []
    for rh in range(stride[0]):
        row = []
        for rw in range(stride[1]):
            ph, pw = (_phase(k[a], stride[a], padding[a], dilation[a], r) for a, r in ((0, rh), (1, rw)))
            if ph is None or pw is None:
                row.append(b.call("expand", [b.const(np.zeros((), dtype=np_dtype(x.dtype)))], size=full))
                continue
            xs, pad = x, []
            for a, (t0, step, taps, base, dil), q in ((0, ph, qs[0][rh]), (1, pw, qs[1][rw])):
                right = q + (taps - 1) * dil - (h, wd)[a] + base     # input positions needed past the end
                if base > 0 or right < 0:
                    xs = b.call("slice", [xs], dim=2 + a, start=max(base, 0), end=(h, wd)[a] + min(right, 0), step=1)
                pad.append((max(-base, 0), max(right, 0)))
            if any(v for pr in pad for v in pr):
                xs = b.call("pad", [xs], pad=pad[1] + pad[0], value=0.0, mode="constant")
            ws = w
            for a, (t0, step, taps, _, _) in ((2, ph), (3, pw)):
                if (t0, step, taps) != (0, 1, k[a - 2]):
                    ws = b.call("slice", [ws], dim=a, start=t0, end=t0 + (taps - 1) * step + 1, step=step)
            y = b.call("conv2d", [xs, _ct_weight_as_conv(b, ws, groups)], stride=(1, 1), dilation=(ph[4], pw[4]),
                       groups=groups)
            if tuple(y.shape) != full:
                y = b.call("pad", [y], pad=(0, full[3] - y.shape[3], 0, full[2] - y.shape[2]), value=0.0,
                           mode="constant")
            row.append(y)
        rows.append(row)
    if stride == (1, 1):
        return rows[0][0]
    qh, qw = full[2:]
    cols = [b.call("cat", [b.call("reshape", [y], shape=(n, o, qh, 1, qw, 1)) for y in row], dim=5)
            if len(row) > 1 else b.call("reshape", [row[0]], shape=(n, o, qh, 1, qw, 1)) for row in rows]
    out = b.call("cat", cols, dim=3) if len(cols) > 1 else cols[0]
    out = b.call("reshape", [out], shape=(n, o, qh * stride[0], qw * stride[1]))
    for a in range(2):
        if out.shape[2 + a] != size[a]:
            out = b.call("slice", [out], dim=2 + a, start=0, end=size[a], step=1)
    return out


def _as_2d(b, x, w, stride, padding, dilation, output_padding):
    """Lift a 1-d convolution's operands and attributes to 2-d over a height of 1."""
    x = b.call("reshape", [x], shape=x.shape[:2] + (1, x.shape[2]))
    w = b.call("reshape", [w], shape=w.shape[:2] + (1, w.shape[2]))
    return x, w, (1,) + stride, (0,) + padding, (1,) + dilation, (0,) + output_padding


def transposed_convolution(b, x, w, bias, stride, padding, dilation, output_padding, groups):
    """ATen convolution(transposed=True) for 1-d and 2-d inputs (called from convolution._convolution)."""
    nd = w.type.ndim - 2
    if nd == 3:
        return transposed_convolution3d(b, x, w, bias, stride, padding, dilation, output_padding, groups)
    if nd not in (1, 2) or x.type.ndim != nd + 2:
        raise UnsupportedOpError(f"{nd}-d transposed convolution")
    x, w = b.promote(x, w)
    if not is_float(x.dtype):
        raise UnsupportedOpError("integer convolution")
    attrs = [_tuple(v, nd) for v in (stride, padding, dilation, output_padding)]
    if nd == 1:
        x, w, *attrs = _as_2d(b, x, w, *attrs)
    out = conv_transpose_as_convs(b, x, w, *attrs, groups)
    if out is None:
        out = b.call("conv_transpose2d", [x, w], stride=attrs[0], padding=attrs[1], dilation=attrs[2],
                     output_padding=attrs[3], groups=groups)
    if bias is not None:
        out = b.call("add", [out, b.call("reshape", [bias], shape=(-1, 1, 1))])
    if nd == 1:
        out = b.call("reshape", [out], shape=(out.shape[0], out.shape[1], out.shape[3]))
    return out


# -- gradients of conv2d -----------------------------------------------------------------------------------------------
def _wg_infer(types, kernel, stride=(1, 1), dilation=(1, 1), groups=1):
    x, gy = types
    return [TensorType((gy.shape[1], x.shape[1] // groups) + tuple(kernel), x.dtype)]


def _wg(x, gy, kernel, stride=(1, 1), dilation=(1, 1), groups=1):
    """dW[o, c, i, j] = sum over n, oh, ow of x[n, g*cg + c, oh*s + i*d, ow*s + j*d] * gy[n, o, oh, ow]."""
    shape = _wg_infer([x, gy], kernel, stride, dilation, groups)[0].shape
    n, o_, oh, ow = gy.shape
    cg, og = x.shape[1] // groups, o_ // groups
    rn, rh, rw = te.reduce_axis(n, "rn"), te.reduce_axis(oh, "rh"), te.reduce_axis(ow, "rw")

    def body(o, c, i, j):
        ch = c if groups == 1 else binary("idiv", o, as_expr(og)) * cg + c
        xv = x[rn[0], ch, rh[0] * stride[0] + i * dilation[0], rw[0] * stride[1] + j * dilation[1]]
        return te.sum_(xv * gy[rn[0], o, rh[0], rw[0]], [rn, rh, rw])
    return te.compute(shape, body, "conv2d_weight_grad")


def _wg_ref(x, gy, kernel, stride=(1, 1), dilation=(1, 1), groups=1):
    n, o_, oh, ow = gy.shape
    cg, og = x.shape[1] // groups, o_ // groups
    out = np.zeros((o_, cg) + tuple(kernel))
    for g in range(groups):
        xs = x[:, g * cg:(g + 1) * cg].astype(np.float64)
        gs = gy[:, g * og:(g + 1) * og].astype(np.float64)
        for i in range(kernel[0]):
            for j in range(kernel[1]):
                patch = xs[:, :, i * dilation[0]: i * dilation[0] + stride[0] * (oh - 1) + 1: stride[0],
                           j * dilation[1]: j * dilation[1] + stride[1] * (ow - 1) + 1: stride[1]]
                out[g * og:(g + 1) * og, :, i, j] = np.einsum("nchw,nohw->oc", patch, gs)
    return out.astype(x.dtype)


register(OpDef("conv2d_weight_grad", Kind.REDUCTION, _wg_infer, _wg_ref, _wg, {}, None,
               lambda rng: [([rand(rng, (2, 3, 7, 8)), rand(rng, (2, 4, 5, 6))], {"kernel": (3, 3)}),
                            ([rand(rng, (2, 4, 9, 9)), rand(rng, (2, 6, 4, 3))],
                             {"kernel": (3, 2), "stride": (2, 3), "dilation": (1, 2), "groups": 2})],
               FLT))


def _convolution_backward(b, gy, x, w, bias_sizes, stride, padding, dilation, transposed, output_padding, groups,
                          output_mask):
    nd = w.type.ndim - 2
    if nd not in (1, 2):
        raise UnsupportedOpError(f"backward of a {nd}-d convolution")
    gy, x, w = b.promote(gy, x, w)
    if not is_float(x.dtype):
        raise UnsupportedOpError("integer convolution")
    stride, padding, dilation = (_tuple(v, nd) for v in (stride, padding, dilation))
    x4, w4, gy4 = x, w, gy
    if nd == 1:
        x4, w4, stride, padding, dilation, _ = _as_2d(b, x, w, stride, padding, dilation, (0,))
        gy4 = b.call("reshape", [gy], shape=gy.shape[:2] + (1, gy.shape[2]))
    if transposed:
        gx, gw = _transposed_grads(b, gy4, x4, w4, stride, padding, dilation, groups, output_mask)
        if nd == 1:
            gx = gx if gx is None else b.call("reshape", [gx], shape=x.shape)
            gw = gw if gw is None else b.call("reshape", [gw], shape=w.shape)
        gb = b.call("sum", [gy], axes=(0,) + tuple(range(2, gy.type.ndim)), keepdim=False) if output_mask[2] else None
        return gx, gw, gb
    gx = gw = gb = None
    if output_mask[0]:
        size = [_ct_size(gy4.shape[2 + a], w4.shape[2 + a], stride[a], padding[a], dilation[a], 0) for a in range(2)]
        extra = tuple(x4.shape[2 + a] - size[a] for a in range(2))
        if min(extra) < 0:
            raise ShapeError("convolution_backward: output gradient larger than the input allows")
        gx = None
        if stride != (1, 1) and not (tuple(w4.shape[2:]) == (3, 3) and dilation == (1, 1) and groups == 1):
            gx = conv_transpose_as_convs(b, gy4, w4, stride, padding, dilation, extra, groups)
        if gx is None:
            gx = _input_grad_as_conv(b, gy4, w4, stride, padding, dilation, extra, groups)
        if gx is None:      # conv_transpose's weight layout is (in, out/groups): here "in" are the forward's outputs
            gx = b.call("conv_transpose2d", [gy4, w4], stride=stride, padding=padding, dilation=dilation,
                        output_padding=extra, groups=groups)
        if nd == 1:
            gx = b.call("reshape", [gx], shape=x.shape)
    if output_mask[1]:
        xp = x4
        if any(padding):
            xp = b.call("pad", [x4], pad=(padding[1], padding[1], padding[0], padding[0]), value=0.0, mode="constant")
        if groups == 1:
            gw = _weight_grad_as_gemm(b, xp, gy4, tuple(w4.shape[2:]), stride, dilation)
        else:
            gw = b.call("conv2d_weight_grad", [xp, gy4], kernel=tuple(w4.shape[2:]), stride=stride, dilation=dilation,
                        groups=groups)
        if nd == 1:
            gw = b.call("reshape", [gw], shape=w.shape)
    if output_mask[2]:
        gb = b.call("sum", [gy], axes=(0,) + tuple(range(2, gy.type.ndim)), keepdim=False)
    return gx, gw, gb


def _input_grad_as_conv(b, gy, w, stride, padding, dilation, extra, groups=1):
    """The input gradient of a conv2d as a stride-1 conv2d, which fxc runs on its packed, Winograd and depthwise
    schedules: the output gradient, spread to every stride-th position (zeros between) and padded by
    (k - 1) * dilation - padding (plus `extra` rows and columns the forward's stride left out at the end), convolved
    with the weight flipped in space and with in and out swapped within each group. None when a side would need
    negative padding."""
    n, o, oh, ow = gy.shape
    k = w.shape[2:]
    lo = [(k[a] - 1) * dilation[a] - padding[a] for a in range(2)]
    if min(lo) < 0 or min(lo[a] + extra[a] for a in range(2)) < 0:
        return None
    if stride != (1, 1):
        sh, sw = stride
        spread = b.call("reshape", [gy], shape=(n, o, oh, 1, ow, 1))
        spread = b.call("pad", [spread], pad=(0, sw - 1, 0, 0, 0, sh - 1), value=0.0, mode="constant")
        spread = b.call("reshape", [spread], shape=(n, o, oh * sh, ow * sw))
        gy = b.call("slice", [b.call("slice", [spread], dim=2, start=0, end=(oh - 1) * sh + 1, step=1)],
                    dim=3, start=0, end=(ow - 1) * sw + 1, step=1)
    gyp = b.call("pad", [gy], pad=(lo[1], lo[1] + extra[1], lo[0], lo[0] + extra[0]), value=0.0, mode="constant")
    return b.call("conv2d", [gyp, _ct_weight_as_conv(b, w, groups)], stride=(1, 1), dilation=tuple(dilation),
                  groups=groups)


def _weight_grad_as_gemm(b, xp, gy, kernel, stride, dilation):
    """conv2d_weight_grad (groups 1) as one GEMM over the N*OH*OW output positions: the input's patches
    (im2col, [C*KH*KW, positions]) against the output gradient ([O, positions]). With more positions than output
    channels the patches are the row operand (a streamed copy) and the small gradient the packed one, the product
    [C*KH*KW, O] then transposed; else the gradient is the row operand and the patches are packed."""
    n, o, oh, ow = gy.shape
    c = xp.shape[1]
    kk = kernel[0] * kernel[1]
    if kk == 1 and tuple(xp.shape[2:]) == (oh, ow):     # a 1x1 conv over every pixel: the input is its own patches
        cols = b.call("permute", [xp], dims=(1, 0, 2, 3)) if n > 1 else xp
    else:
        cols = b.call("im2col", [xp], kernel=tuple(kernel), stride=tuple(stride), dilation=tuple(dilation),
                      out=(oh, ow))
    cols = b.call("reshape", [cols], shape=(c * kk, n * oh * ow))
    if n > 1:
        gy = b.call("permute", [gy], dims=(1, 0, 2, 3))
    gy = b.call("reshape", [gy], shape=(o, n * oh * ow))
    if n * oh * ow > o:
        gwt = b.call("matmul", [cols, gy], trans_b=True)
        return b.call("permute", [b.call("reshape", [gwt], shape=(c,) + tuple(kernel) + (o,))], dims=(3, 0, 1, 2))
    return b.call("reshape", [b.call("matmul", [gy, cols], trans_b=True)], shape=(o, c) + tuple(kernel))


def _im2col_infer(types, kernel, stride, dilation, out):
    x = types[0]
    if x.ndim != 4 or any((out[a] - 1) * stride[a] + (kernel[a] - 1) * dilation[a] >= x.shape[2 + a] for a in range(2)):
        raise ShapeError(f"im2col: {kernel} patches every {stride} over {list(x.shape)} do not give {out} positions")
    return [TensorType((x.shape[1],) + tuple(kernel) + (x.shape[0],) + tuple(out), x.dtype)]


def _im2col(x, kernel, stride, dilation, out):
    shape = _im2col_infer([x], kernel, stride, dilation, out)[0].shape
    return te.compute(shape, lambda c, i, j, n, h, w: x[n, c, h * stride[0] + i * dilation[0],
                                                         w * stride[1] + j * dilation[1]], "im2col")


def _im2col_ref(x, kernel, stride, dilation, out):
    n, c = x.shape[:2]
    r = np.empty((c,) + tuple(kernel) + (n,) + tuple(out), x.dtype)
    for i in range(kernel[0]):
        for j in range(kernel[1]):
            r[:, i, j] = x[:, :,
                           i * dilation[0]: i * dilation[0] + stride[0] * (out[0] - 1) + 1: stride[0],
                           j * dilation[1]: j * dilation[1] + stride[1] * (out[1] - 1) + 1: stride[1]
                           ].transpose(1, 0, 2, 3)
    return r


register(OpDef("im2col", Kind.OPAQUE, _im2col_infer, _im2col_ref, _im2col, {}, None,
               lambda rng: [([rand(rng, (2, 3, 7, 8))],
                             {"kernel": (3, 3), "stride": (1, 1), "dilation": (1, 1), "out": (5, 6)}),
                            ([rand(rng, (1, 4, 9, 9))],
                             {"kernel": (3, 2), "stride": (2, 3), "dilation": (1, 2), "out": (4, 2)})],
               FLT, doc="The patches of a (padded) NCHW input: [C, KH, KW, N, OH, OW], the input pixel under tap "
                        "(i, j) of output position (oh, ow)."))


def _transposed_grads(b, gy, x, w, stride, padding, dilation, groups, output_mask):
    """conv_transpose is the adjoint of conv2d: its input gradient is a conv2d of the output gradient,
    its weight gradient the correlation of the output gradient (padded) with the input."""
    gx = gw = None
    gyp = gy
    if any(padding):
        gyp = b.call("pad", [gy], pad=(padding[1], padding[1], padding[0], padding[0]), value=0.0, mode="constant")
    if output_mask[0]:
        gx = b.call("conv2d", [gyp, w], stride=stride, dilation=dilation, groups=groups)
        if tuple(gx.shape) != tuple(x.shape):
            raise ShapeError(f"transposed convolution backward: input gradient {gx.shape} != input {x.shape}")
    if output_mask[1]:
        gw = b.call("conv2d_weight_grad", [gyp, x], kernel=tuple(w.shape[2:]), stride=stride, dilation=dilation,
                    groups=groups)
    return gx, gw


register_aten("aten.convolution_backward.default", _convolution_backward)
