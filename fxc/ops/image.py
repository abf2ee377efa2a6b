"""Image sampling: `grid_sample` (aten.grid_sampler_2d) with bilinear or nearest interpolation and zero
padding. (Interpolation by `F.interpolate`, padding and pixel shuffle need no op of their own: core-ATen
decomposition turns them into `index`, `pad` and reshapes.)

Each output pixel reads the input at the grid's location, unnormalised from [-1, 1] to pixel coordinates
(align_corners: -1 and 1 are the centres of the corner pixels; otherwise their outer edges); taps outside
the image contribute zero.
"""
from __future__ import annotations

import numpy as np

from ..errors import ShapeError, UnsupportedOpError
from ..lowering import te
from ..symbolic.expr import Const, as_expr, binary, cast, compare, is_float, maximum, minimum, select, unary
from ..types import TensorType
from .common import rand
from .registry import Kind, OpDef, register

FLT = ("float32", "float64")


def _unnormalize(g, size, align_corners):
    if align_corners:
        return (g + 1.0) * ((size - 1) / 2.0)
    return ((g + 1.0) * float(size) - 1.0) * 0.5


def _infer(types, mode="bilinear", align_corners=False):
    x, grid = types
    if x.ndim != 4 or grid.ndim != 4 or grid.shape[-1] != 2 or grid.shape[0] != x.shape[0]:
        raise ShapeError(f"grid_sample: input {x.shape} and grid {grid.shape} do not match")
    return [TensorType((x.shape[0], x.shape[1]) + grid.shape[1:3], x.dtype)]


def _compute(x, grid, mode="bilinear", align_corners=False):
    H, W = x.shape[2:]
    if not isinstance(H, int) or not isinstance(W, int):        # (float constants of the image size)
        raise ShapeError(f"grid_sample: a symbolic image size {list(x.shape[2:])} (built per size)")
    shape = (x.shape[0], x.shape[1]) + grid.shape[1:3]
    zero = Const(0.0, x.dtype)

    def tap(n, c, yi, xi):
        """x[n, c, yi, xi] for integer (float-typed) coordinates, zero outside the image."""
        ok = binary("and",
                    binary("and", compare("ge", xi, Const(0.0, x.dtype)), compare("le", xi, Const(W - 1.0, x.dtype))),
                    binary("and", compare("ge", yi, Const(0.0, x.dtype)), compare("le", yi, Const(H - 1.0, x.dtype))))
        xc = minimum(maximum(cast("int64", unary("floor", xi)), as_expr(0)), as_expr(W - 1))
        yc = minimum(maximum(cast("int64", unary("floor", yi)), as_expr(0)), as_expr(H - 1))
        return select(ok, x[n, c, yc, xc], zero)

    def body(n, c, h, w):
        gx = _unnormalize(grid[n, h, w, 0], W, align_corners)
        gy = _unnormalize(grid[n, h, w, 1], H, align_corners)
        if mode == "nearest":
            return tap(n, c, unary("round", gy), unary("round", gx))
        x0, y0 = unary("floor", gx), unary("floor", gy)
        fx, fy = gx - x0, gy - y0
        x1, y1 = x0 + 1.0, y0 + 1.0
        top = tap(n, c, y0, x0) * (1.0 - fx) + tap(n, c, y0, x1) * fx
        bottom = tap(n, c, y1, x0) * (1.0 - fx) + tap(n, c, y1, x1) * fx
        return top * (1.0 - fy) + bottom * fy
    return te.compute(shape, body, "grid_sample")


def _ref(x, grid, mode="bilinear", align_corners=False):
    N, C, H, W = x.shape
    x64, g = x.astype(np.float64), grid.astype(np.float64)
    gx = _unnormalize(g[..., 0], W, align_corners)
    gy = _unnormalize(g[..., 1], H, align_corners)

    def tap(yi, xi):
        ok = (xi >= 0) & (xi <= W - 1) & (yi >= 0) & (yi <= H - 1)
        xc, yc = np.clip(xi, 0, W - 1).astype(np.int64), np.clip(yi, 0, H - 1).astype(np.int64)
        v = x64[np.arange(N)[:, None, None], :, yc, xc]          # (N, Hg, Wg, C)
        return np.where(ok[..., None], v, 0.0)
    if mode == "nearest":
        out = tap(np.round(gy), np.round(gx))
    else:
        x0, y0 = np.floor(gx), np.floor(gy)
        fx, fy = (gx - x0)[..., None], (gy - y0)[..., None]
        out = ((tap(y0, x0) * (1 - fx) + tap(y0, x0 + 1) * fx) * (1 - fy)
               + (tap(y0 + 1, x0) * (1 - fx) + tap(y0 + 1, x0 + 1) * fx) * fy)
    return np.ascontiguousarray(np.moveaxis(out, -1, 1)).astype(x.dtype)


def _aten(b, x, grid, interpolation_mode, padding_mode, align_corners):
    if interpolation_mode not in (0, 1) or padding_mode != 0:
        raise UnsupportedOpError("grid_sample other than bilinear/nearest with zero padding")
    x, grid = b.promote(x, grid)
    if not is_float(x.dtype):
        raise UnsupportedOpError("grid_sample of an integer tensor")
    return b.call("grid_sample", [x, grid], mode=("bilinear", "nearest")[interpolation_mode],
                  align_corners=bool(align_corners))


register(OpDef("grid_sample", Kind.INJECTIVE, _infer, _ref, _compute, {"aten.grid_sampler_2d.default": _aten}, None,
               lambda rng: [([rand(rng, (2, 3, 5, 6)), rand(rng, (2, 4, 7, 2), low=-1.3, high=1.3)], {}),
                            ([rand(rng, (1, 2, 4, 5)), rand(rng, (1, 3, 3, 2), low=-1.2, high=1.2)],
                             {"align_corners": True}),
                            ([rand(rng, (1, 2, 4, 5)), rand(rng, (1, 3, 4, 2), low=-1.2, high=1.2)],
                             {"mode": "nearest"})],
               FLT))
