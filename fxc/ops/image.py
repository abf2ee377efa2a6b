"""Image sampling: `grid_sample` (aten.grid_sampler_2d) with bilinear or nearest interpolation and zero
padding, and `resize2d` (aten.upsample_bilinear2d / upsample_nearest2d, `F.interpolate`'s 2-d modes): an NCHW
image resampled to a given size. (Padding and pixel shuffle need no op of their own: core-ATen decomposition
turns them into `pad` and reshapes.)

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


# -- resize2d ----------------------------------------------------------------------------------------------------------
# Source coordinate of output pixel d along an axis of input size n and output size m; `scale` is the caller's
# output/input factor where it gave one (PyTorch then samples with 1/scale, not n/m):
#   align_corners: d * (n - 1) / (m - 1)   (0 when m == 1)
#   half_pixel:    max((d + 0.5) * r - 0.5, 0) with r = 1/scale or n/m      (PyTorch's align_corners=False)
#   asymmetric:    d * r                                                      (nearest: floor, at most n - 1)
MODES = {"bilinear": ("align_corners", "half_pixel"), "nearest": ("asymmetric",)}


def _ratio(n, m, scale, rule):
    if rule == "align_corners":
        return (n - 1) / (m - 1) if m > 1 else 0.0
    return 1.0 / scale if scale else n / m


def _resize_infer(types, size, mode="bilinear", coord="half_pixel", scales=None):
    x, = types
    if x.ndim != 4:
        raise ShapeError(f"resize2d: an NCHW input, not {x.shape}")
    if mode not in MODES or coord not in MODES[mode]:
        raise UnsupportedOpError(f"resize2d: mode {mode!r} with coordinates {coord!r} (supported: {MODES})")
    if len(size) != 2 or min(size) < 1:
        raise ShapeError(f"resize2d: output size {size} is not two positive integers")
    return [TensorType(tuple(x.shape[:2]) + tuple(size), x.dtype)]


def _resize_compute(x, size, mode="bilinear", coord="half_pixel", scales=None):
    H, W = x.shape[2:]
    if not isinstance(H, int) or not isinstance(W, int):
        raise ShapeError(f"resize2d: a symbolic image size {list(x.shape[2:])} (built per size)")
    scales = scales or (None, None)
    rh, rw = (_ratio(n, m, s, coord) for n, m, s in zip((H, W), size, scales))
    dt = x.dtype

    def src(d, r):
        f = cast(dt, d) * Const(r, dt)
        if coord == "half_pixel":
            f = maximum((cast(dt, d) + Const(0.5, dt)) * Const(r, dt) - Const(0.5, dt), Const(0.0, dt))
        return f

    def lo(f, n):
        return minimum(maximum(cast("int64", unary("floor", f)), as_expr(0)), as_expr(n - 1))   # (bounds: 32-bit GPUs)

    def body(n, c, h, w):
        sy, sx = src(h, rh), src(w, rw)
        y0, x0 = lo(sy, H), lo(sx, W)
        if mode == "nearest":
            return x[n, c, y0, x0]
        y1, x1 = minimum(y0 + 1, as_expr(H - 1)), minimum(x0 + 1, as_expr(W - 1))
        fy, fx = sy - cast(dt, y0), sx - cast(dt, x0)
        top = x[n, c, y0, x0] + (x[n, c, y0, x1] - x[n, c, y0, x0]) * fx
        bottom = x[n, c, y1, x0] + (x[n, c, y1, x1] - x[n, c, y1, x0]) * fx
        return top + (bottom - top) * fy
    return te.compute(tuple(x.shape[:2]) + tuple(size), body, "resize2d")


def _resize_ref(x, size, mode="bilinear", coord="half_pixel", scales=None):
    H, W = x.shape[2:]
    scales = scales or (None, None)
    dt = x.dtype.type

    def axis(n, m, s):
        d = np.arange(m).astype(x.dtype)
        r = dt(_ratio(n, m, s, coord))
        f = np.maximum((d + dt(0.5)) * r - dt(0.5), dt(0)) if coord == "half_pixel" else d * r
        i0 = np.minimum(np.floor(f).astype(np.int64), n - 1)
        return i0, np.minimum(i0 + 1, n - 1), (f - i0).astype(np.float64)
    (y0, y1, fy), (x0, x1, fx) = axis(H, size[0], scales[0]), axis(W, size[1], scales[1])
    v = x.astype(np.float64)
    if mode == "nearest":
        return np.ascontiguousarray(v[:, :, y0][:, :, :, x0]).astype(x.dtype)
    rows = v[:, :, y0] * (1 - fy[:, None]) + v[:, :, y1] * fy[:, None]
    out = rows[..., x0] * (1 - fx) + rows[..., x1] * fx
    return out.astype(x.dtype)


def _out_size(x, output_size, scale_factors):
    if output_size is not None:
        return tuple(int(s) for s in output_size), None
    scales = tuple(float(s) for s in scale_factors)
    return tuple(int(n * s) for n, s in zip(x.shape[2:], scales)), scales


def _float_input(x, what):
    if len(x.shape) != 4 or not is_float(x.dtype):
        raise UnsupportedOpError(f"{what} of a {len(x.shape)}-d {x.dtype} tensor (resize2d takes NCHW float images)")


def _bilinear_vec(b, x, output_size, align_corners, scale_factors):
    _float_input(x, "upsample_bilinear2d")
    size, scales = _out_size(x, output_size, scale_factors)
    return _bilinear(b, x, size, align_corners, *(scales or (None, None)))


def _bilinear(b, x, output_size, align_corners, scales_h=None, scales_w=None):
    _float_input(x, "upsample_bilinear2d")
    scales = None if align_corners or (scales_h is None and scales_w is None) else (scales_h, scales_w)
    return b.call("resize2d", [x], size=tuple(int(s) for s in output_size), mode="bilinear",
                  coord="align_corners" if align_corners else "half_pixel", scales=scales)


def _nearest_vec(b, x, output_size, scale_factors):
    _float_input(x, "upsample_nearest2d")
    size, scales = _out_size(x, output_size, scale_factors)
    return _nearest(b, x, size, *(scales or (None, None)))


def _nearest(b, x, output_size, scales_h=None, scales_w=None):
    _float_input(x, "upsample_nearest2d")
    scales = None if scales_h is None and scales_w is None else (scales_h, scales_w)
    return b.call("resize2d", [x], size=tuple(int(s) for s in output_size), mode="nearest", coord="asymmetric",
                  scales=scales)


register(OpDef("resize2d", Kind.INJECTIVE, _resize_infer, _resize_ref, _resize_compute,
               {"aten.upsample_bilinear2d.vec": _bilinear_vec, "aten.upsample_bilinear2d.default": _bilinear,
                "aten.upsample_nearest2d.vec": _nearest_vec, "aten.upsample_nearest2d.default": _nearest}, None,
               lambda rng: [([rand(rng, (1, 3, 4, 5))], {"size": (8, 10)}),
                            ([rand(rng, (2, 2, 5, 3))], {"size": (7, 8), "coord": "align_corners"}),
                            ([rand(rng, (1, 2, 6, 7))], {"size": (4, 3)}),
                            ([rand(rng, (1, 2, 3, 4))], {"size": (6, 8), "mode": "nearest", "coord": "asymmetric"}),
                            ([rand(rng, (1, 2, 5, 5))], {"size": (7, 7), "mode": "nearest", "coord": "asymmetric",
                                                         "scales": (1.5, 1.5)})],
               FLT))
