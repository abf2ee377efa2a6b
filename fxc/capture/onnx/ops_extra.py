"""ONNX converters: sampling grids, rotary embeddings, DFT, windows, cropping and a few math ops (see table.py).

DFT multiplies by constant cosine and sine matrices along its axis (exact to float32 rounding, fine for the
signal lengths models use); window functions of a constant size are constants.
"""
from __future__ import annotations

import numpy as np

from ...errors import ShapeError
from .ops_tensor import fxc_dtype, pad_nd, slice_axis
from .table import converter


@converter("GridSample", since=16)
def grid_sample(cx, ins, at):
    x, grid = ins
    mode = {"bilinear": 0, "linear": 0, "nearest": 1}.get(at.get("mode", "linear" if cx.opset >= 20 else "bilinear"))
    if x.type.ndim != 4 or mode is None or at.get("padding_mode", "zeros") != "zeros":
        raise cx.unsupported(f"GridSample {x.type.ndim - 2}-d, mode {at.get('mode')!r}, padding "
                             f"{at.get('padding_mode', 'zeros')!r}")
    return cx.aten("aten.grid_sampler_2d.default", x, grid, mode, 0, bool(at.get("align_corners", 0)))


@converter("AffineGrid", since=20)
def affine_grid(cx, ins, at):
    theta, size = ins[0], cx.ints(ins[1], "size")
    n, spatial = size[0], size[2:]
    align = bool(at.get("align_corners", 0))

    def lin(k):
        if align:
            return np.linspace(-1, 1, k) if k > 1 else np.zeros(1)
        return (np.arange(k) * 2 + 1) / k - 1
    mesh = np.meshgrid(*[lin(k) for k in spatial], indexing="ij")[::-1]    # x (the width) first, then y (, z)
    base = np.stack(mesh + [np.ones_like(mesh[0])], -1).reshape(-1, len(spatial) + 1).astype(theta.dtype)
    flat = cx.op("matmul", [cx.op("expand", [cx.b.const(base[None])], size=(n,) + base.shape), theta], trans_b=True)
    return cx.op("reshape", [flat], shape=(n,) + tuple(spatial) + (len(spatial),))


@converter("CenterCropPad", since=18)
def center_crop_pad(cx, ins, at):
    x, shape = ins[0], cx.ints(ins[1], "shape")
    axes = cx.axes(at.get("axes") or range(x.type.ndim), x.type.ndim)
    for a, want in zip(axes, shape):
        n = x.shape[a]
        if want < n:
            start = (n - want) // 2
            x = cx.op("slice", [x], dim=a, start=start, end=start + want, step=1)
        elif want > n:
            pads = [0] * (2 * x.type.ndim)
            pads[a], pads[x.type.ndim + a] = (want - n) // 2, want - n - (want - n) // 2
            x = pad_nd(cx, x, pads)
    return x if x is not ins[0] else cx.op("copy", [x])


@converter("RotaryEmbedding", since=23)
def rotary_embedding(cx, ins, at):
    x, cos, sin = ins[:3]
    pos = ins[3] if len(ins) > 3 else None
    shape = x.shape
    if x.type.ndim == 4:
        x = cx.op("permute", [x], dims=(0, 2, 1, 3))
    else:
        b, s, hidden = shape
        nh = int(at["num_heads"])
        x = cx.op("reshape", [x], shape=(b, s, nh, hidden // nh))
    head = x.shape[3]
    rot = int(at.get("rotary_embedding_dim", 0)) or head
    if pos is not None:
        cos, sin = cx.op("index", [cos, pos], dims=(0,)), cx.op("index", [sin, pos], dims=(0,))
    cos = cx.op("reshape", [cos], shape=cos.shape[:-1] + (1, cos.shape[-1]))
    sin = cx.op("reshape", [sin], shape=sin.shape[:-1] + (1, sin.shape[-1]))
    xr = cx.op("slice", [x], dim=3, start=0, end=rot, step=1)
    if at.get("interleaved", 0):
        x1 = cx.op("slice", [xr], dim=3, start=0, end=rot, step=2)
        x2 = cx.op("slice", [xr], dim=3, start=1, end=rot, step=2)
    else:
        x1 = cx.op("slice", [xr], dim=3, start=0, end=rot // 2, step=1)
        x2 = cx.op("slice", [xr], dim=3, start=rot // 2, end=rot, step=1)
    real = cx.op("sub", [cx.op("mul", [cos, x1]), cx.op("mul", [sin, x2])])
    imag = cx.op("add", [cx.op("mul", [sin, x1]), cx.op("mul", [cos, x2])])
    if at.get("interleaved", 0):
        pair = cx.op("cat", [cx.op("reshape", [t], shape=t.shape + (1,)) for t in (real, imag)], dim=4)
        xr = cx.op("reshape", [pair], shape=xr.shape)
    else:
        xr = cx.op("cat", [real, imag], dim=3)
    out = xr if rot == head else cx.op("cat", [xr, cx.op("slice", [x], dim=3, start=rot, end=head, step=1)], dim=3)
    if len(shape) == 3:
        return cx.op("reshape", [out], shape=shape)
    return cx.op("permute", [out], dims=(0, 2, 1, 3))


@converter("SwiGLU", since=28)
def swiglu(cx, ins, at):
    a, b = ins
    alpha = float(at.get("alpha", 1.0))
    return cx.op("mul", [cx.op("mul", [a, cx.op("sigmoid", [cx.op("mul", [a, alpha])])]), b])


@converter("CumProd", since=26)
def cumprod(cx, ins, at):
    x = ins[0]
    axis = cx.axis(cx.one_int(ins[1], "axis"), x.type.ndim)
    rev = at.get("reverse", 0)
    if rev:
        x = cx.op("flip", [x], dims=(axis,))
    y = cx.op("cumprod", [x], dim=axis)
    if at.get("exclusive", 0):
        y = slice_axis(cx, y, axis, 0, x.shape[axis] - 1, 1)
        ones = np.ones(tuple(1 if d == axis else s for d, s in enumerate(x.shape)), dtype=y.data.dtype
                       if y.is_const else np.dtype(y.dtype))
        y = cx.op("cat", [cx.b.const(ones), y], dim=axis)
    return cx.op("flip", [y], dims=(axis,)) if rev else y


@converter("Det", since=11)
def det(cx, ins, at):
    return cx.aten("aten._linalg_det.default", ins[0])[0]


def _window(kind):
    coeffs = {"HannWindow": (0.5, 0.5, 0.0), "HammingWindow": (25 / 46, 21 / 46, 0.0),
              "BlackmanWindow": (0.42, 0.5, 0.08)}[kind]

    def conv(cx, ins, at):
        size = cx.ints(ins[0], "size")[0]
        dt = fxc_dtype(cx, at.get("output_datatype", 1))
        n = np.arange(size, dtype=np.float64)
        length = size if at.get("periodic", 1) else size - 1
        a0, a1, a2 = coeffs
        w = a0 - a1 * np.cos(2 * np.pi * n / length) + a2 * np.cos(4 * np.pi * n / length)
        return cx.b.const(w.astype(dt))
    return conv


for _k in ("HannWindow", "HammingWindow", "BlackmanWindow"):
    converter(_k, since=17)(_window(_k))


def _dft(cx, x, axis, length, inverse, onesided):
    """DFT along `axis` of x [..., 1 or 2] (real or complex as its last dim): [..., n_out, 2]."""
    if inverse and onesided:
        raise cx.unsupported("an inverse one-sided DFT")
    nd = x.type.ndim
    axis = cx.axis(axis, nd)
    if axis == nd - 1:
        raise ShapeError(f"{cx.where()}: axis {axis} is the last dim, which holds the real and imaginary parts; "
                         f"DFT runs along one of dims 0 to {nd - 2}")
    n = x.shape[axis]
    length = n if length is None else length
    if length < n:
        x = cx.op("slice", [x], dim=axis, start=0, end=length, step=1)
    elif length > n:
        pads = [0] * (2 * nd)
        pads[nd + axis] = length - n
        x = pad_nd(cx, x, pads)
    k_out = length // 2 + 1 if onesided else length
    t = np.outer(np.arange(length), np.arange(k_out)) * (2 * np.pi / length)
    sign = 1.0 if inverse else -1.0
    cos, sin = np.cos(t), sign * np.sin(t)         # e^{sign i t} = cos + i sin
    scale = 1.0 / length if inverse else 1.0
    perm = [d for d in range(nd - 1) if d != axis] + [nd - 1, axis]
    back = [int(i) for i in np.argsort([d for d in range(nd - 1) if d != axis] + [axis])]
    t = cx.op("permute", [x], dims=tuple(perm))       # [..., 1 or 2, L]
    re = cx.op("slice", [t], dim=nd - 2, start=0, end=1, step=1)
    c = cx.b.const((cos * scale).astype(x.dtype))
    s = cx.b.const((sin * scale).astype(x.dtype))
    yr, yi = cx.op("matmul", [re, c]), cx.op("matmul", [re, s])
    if x.shape[-1] == 2:
        im = cx.op("slice", [t], dim=nd - 2, start=1, end=2, step=1)
        yr = cx.op("sub", [yr, cx.op("matmul", [im, s])])
        yi = cx.op("add", [yi, cx.op("matmul", [im, c])])
    y = cx.op("cat", [yr, yi], dim=nd - 2)          # [..., 2, K]
    y = cx.op("permute", [y], dims=tuple(list(range(nd - 2)) + [nd - 1, nd - 2]))   # [..., K, 2]
    return cx.op("permute", [y], dims=tuple(back) + (nd - 1,))


@converter("DFT", since=17)
def dft_17(cx, ins, at):
    length = cx.one_int(ins[1], "dft_length") if len(ins) > 1 and ins[1] is not None else None
    return _dft(cx, ins[0], int(at.get("axis", 1)), length, at.get("inverse", 0), at.get("onesided", 0))


@converter("DFT", since=20)
def dft(cx, ins, at):
    length = cx.one_int(ins[1], "dft_length") if len(ins) > 1 and ins[1] is not None else None
    axis = cx.one_int(ins[2], "axis") if len(ins) > 2 and ins[2] is not None else -2
    return _dft(cx, ins[0], axis, length, at.get("inverse", 0), at.get("onesided", 0))
