"""aten.convolution: the one converter of every forward convolution. 1-d and 2-d become conv2d (a 1-d one over a
height of 1, padding as a pad op, bias as an add); 3-d ones are volume.py's `convolution3d`; transposed ones
conv_transpose.py's `transposed_convolution`.
"""
from __future__ import annotations

from ..errors import UnsupportedOpError
from ..symbolic.expr import is_float
from .conv_transpose import transposed_convolution
from .nn import _pair
from .registry import register_aten
from .volume import convolution3d


def _convolution(b, x, w, bias, stride, padding, dilation, transposed, output_padding, groups):
    if transposed:
        return transposed_convolution(b, x, w, bias, stride, padding, dilation, output_padding, groups)
    nd = w.type.ndim - 2
    if nd == 3:
        return convolution3d(b, x, w, bias, stride, padding, dilation, groups)
    if nd not in (1, 2):
        raise UnsupportedOpError(f"{nd}-d convolution")
    x, w = b.promote(x, w)
    if not is_float(x.dtype):
        raise UnsupportedOpError("integer convolution")
    stride, padding, dilation = _pair(stride, nd), _pair(padding, nd), _pair(dilation, nd)
    if nd == 1:   # conv1d as conv2d over a height of 1
        x = b.call("reshape", [x], shape=x.shape[:2] + (1, x.shape[2]))
        w = b.call("reshape", [w], shape=w.shape[:2] + (1, w.shape[2]))
        stride, padding, dilation = (1,) + stride, (0,) + padding, (1,) + dilation
    if any(padding):
        x = b.call("pad", [x], pad=(padding[1], padding[1], padding[0], padding[0]), value=0.0, mode="constant")
    out = b.call("conv2d", [x, w], stride=tuple(stride), dilation=tuple(dilation), groups=groups)
    if bias is not None:
        out = b.call("add", [out, b.call("reshape", [bias], shape=(-1, 1, 1))])
    if nd == 1:
        out = b.call("reshape", [out], shape=(out.shape[0], out.shape[1], out.shape[3]))
    return out


register_aten("aten.convolution.default", _convolution)
