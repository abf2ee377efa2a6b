"""ONNX converters: Resize and Upsample (see table.py for the protocol).

A linear Resize of an NCHW float image's H and W whose coordinate rule is one of fxc's resize2d op's (half_pixel,
pytorch_half_pixel, align_corners at whole sizes) is that op, as PyTorch's bilinear upsampling is (the graph's
one resize, which an external codegen such as CLML can match). Otherwise
each resized axis is one constant table computed here from the ONNX coordinate rules: nearest modes gather
along the axis (`index` with constant indices, exact for every dtype); linear and cubic modes multiply by a
constant [out, in] interpolation matrix along the axis (each row holds the 2 or 4 taps' weights, edges
clamped as ONNX's reference does). tf_crop_and_resize's points outside the input take `extrapolation_value`.
"""
from __future__ import annotations

import math

import numpy as np

from ...errors import ShapeError
from .table import converter


def _coords(mode, i, n, m, scale, roi):
    """The input coordinate of output index i (numpy array) along an axis of n -> m."""
    if mode == "half_pixel":
        return (i + 0.5) / scale - 0.5
    if mode == "half_pixel_symmetric":
        adj = m / (scale * n)
        return n / 2 * (1 - adj) + (i + 0.5) / scale - 0.5
    if mode == "pytorch_half_pixel":
        return (i + 0.5) / scale - 0.5 if m > 1 else np.zeros_like(i, dtype=np.float64)
    if mode == "align_corners":     # ONNX's reference divides by the unrounded output length n * scale
        return i * (n - 1) / (n * scale - 1) if m > 1 else np.zeros_like(i, dtype=np.float64)
    if mode == "asymmetric":
        return i / scale
    if mode == "tf_crop_and_resize":
        start, end = roi
        if m > 1:
            return start * (n - 1) + i * (end - start) * (n - 1) / (m - 1)
        return np.full(i.shape, 0.5 * (start + end) * (n - 1))
    raise ValueError(mode)


def _nearest(x, rule):
    if rule == "round_prefer_floor":
        return np.where(x == np.floor(x) + 0.5, np.floor(x), np.round(x))
    if rule == "round_prefer_ceil":
        return np.floor(x + 0.5)
    return np.floor(x) if rule == "floor" else np.ceil(x)


def _cubic(r, a):
    """The 4 weights of taps floor-1 .. floor+2 at fraction r (Keys' kernel with coefficient a)."""
    def k(t):
        t = np.abs(t)
        return np.where(t <= 1, (a + 2) * t ** 3 - (a + 3) * t ** 2 + 1,
                        np.where(t < 2, a * t ** 3 - 5 * a * t ** 2 + 8 * a * t - 4 * a, 0.0))
    return np.stack([k(r + 1), k(r), k(1 - r), k(2 - r)], -1)


def _matrix(x, n, mode, a, exclude_outside):
    """[m, n] interpolation weights for input coordinates x (linear: 2 taps, cubic: 4), edges clamped."""
    base = np.floor(x)
    r = x - base
    if mode == "linear":
        taps, w = np.stack([base, base + 1], -1), np.stack([1 - r, r], -1)
    else:
        taps, w = base[:, None] + np.arange(-1, 3), _cubic(r, a)
        if exclude_outside:
            w = np.where((taps < 0) | (taps > n - 1), 0.0, w)
            w = w / w.sum(-1, keepdims=True)
    mat = np.zeros((len(x), n))
    for j in range(taps.shape[1]):
        np.add.at(mat, (np.arange(len(x)), np.clip(taps[:, j], 0, n - 1).astype(np.int64)), w[:, j])
    return mat


_LINEAR = {"half_pixel": "half_pixel", "pytorch_half_pixel": "half_pixel", "align_corners": "align_corners"}


def _resize2d(cx, x, sizes, scales, ctm):
    """A linear resize of x's H and W as one resize2d op where its coordinate rule is the op's, else None.
    Taps outside the image clamp to its edge in both forms."""
    if x.type.ndim != 4 or ctm not in _LINEAR or list(sizes[:2]) != list(x.shape[:2]):
        return None
    (h, w), (oh, ow), (sh, sw) = x.shape[2:], sizes[2:], scales[2:]
    exact = oh == h * sh and ow == w * sw           # (the scales are the size ratios)
    if (ctm == "pytorch_half_pixel" and min(oh, ow) == 1) or (ctm == "align_corners" and not exact):
        return None
    return cx.op("resize2d", [x], size=(int(oh), int(ow)), mode="bilinear", coord=_LINEAR[ctm],
                 scales=None if exact or ctm == "align_corners" else (float(sh), float(sw)))


def resize_axes(cx, x, sizes, scales, at, roi=None):
    """Resize x to `sizes` (one per axis) with `scales`, by the attributes' mode and coordinate rule."""
    mode = at.get("mode", "nearest")
    ctm = at.get("coordinate_transformation_mode", "half_pixel")
    if at.get("antialias", 0) and mode != "nearest" and any(s < 1 for s in scales):
        raise cx.unsupported("antialiased downsampling")
    if mode not in ("nearest", "linear", "cubic"):
        raise cx.unsupported(f"Resize mode {mode!r}")
    if mode != "nearest" and x.dtype not in ("float32", "float64"):
        raise cx.unsupported(f"{mode} Resize of {x.dtype}")
    whole = _resize2d(cx, x, sizes, scales, ctm) if mode == "linear" else None
    if whole is not None:
        return whole
    nd = x.type.ndim
    outside = None
    for ax in range(nd):
        cx.table(int(sizes[ax]) * max(x.shape[ax], 1), f"size {sizes[ax]} of axis {ax}")
        n, m, s = x.shape[ax], sizes[ax], scales[ax]
        if n == m and s == 1 and ctm != "tf_crop_and_resize":
            continue
        coords = _coords(ctm, np.arange(m, dtype=np.float64), n, m, s, (roi[ax], roi[nd + ax]) if roi else None)
        if ctm == "tf_crop_and_resize":
            out = (coords < 0) | (coords > n - 1)
            if out.any():
                o = out.reshape([-1 if d == ax else 1 for d in range(nd)])
                outside = o if outside is None else outside | o
        if mode == "nearest":
            idx = np.clip(_nearest(coords, at.get("nearest_mode", "round_prefer_floor")), 0, n - 1).astype(np.int64)
            x = cx.op("index", [x, cx.b.const(idx)], dims=(ax,))
            continue
        mat = _matrix(coords, n, mode, float(at.get("cubic_coeff_a", -0.75)), at.get("exclude_outside", 0))
        perm = [d for d in range(nd) if d != ax] + [ax]
        t = cx.op("permute", [x], dims=tuple(perm)) if ax != nd - 1 else x
        t = cx.op("matmul", [t, cx.b.const(mat.T.astype(x.dtype))])
        x = cx.op("permute", [t], dims=tuple(int(i) for i in np.argsort(perm))) if ax != nd - 1 else t
    if outside is not None:
        mask = np.broadcast_to(outside, x.shape)
        x = cx.op("where", [cx.b.const(mask.copy()), cx.scalar(float(at.get("extrapolation_value", 0.0)), x.dtype), x])
    return x


def _plan(cx, x, scales, sizes, at):
    """(sizes, scales) for every axis from the given scales or sizes (for `axes`, keep_aspect_ratio_policy)."""
    nd = x.type.ndim
    axes = cx.axes(at.get("axes") or range(nd), nd)
    given = sizes if sizes is not None else scales
    if given is None or len(given) != len(axes) or not all(np.isfinite(v) and v > 0 for v in given):
        what = "sizes" if sizes is not None else "scales"
        raise ShapeError(f"{cx.where()}: {what} {None if given is None else list(given)} must be {len(axes)} "
                         f"positive finite values, one per axis")
    if sizes is not None:
        sizes = list(sizes)
        ratio = [sizes[i] / x.shape[a] for i, a in enumerate(axes)]
        policy = at.get("keep_aspect_ratio_policy", "stretch")
        if policy != "stretch":
            r = min(ratio) if policy == "not_larger" else max(ratio)
            ratio = [r] * len(axes)
            sizes = [math.floor(r * x.shape[a] + 0.5) for a in axes]
        full_sizes, full_scales = list(x.shape), [1.0] * nd
        for i, a in enumerate(axes):
            full_sizes[a], full_scales[a] = sizes[i], ratio[i]
        return full_sizes, full_scales
    full_sizes, full_scales = list(x.shape), [1.0] * nd
    for i, a in enumerate(axes):
        full_scales[a] = float(scales[i])
        full_sizes[a] = math.floor(x.shape[a] * float(scales[i]))
    return full_sizes, full_scales


@converter("Resize", since=10)
def resize_10(cx, ins, at):
    x, scales = ins[0], cx.const(ins[1], "scales")
    sizes, scales = _plan(cx, x, scales, None, at)
    return resize_axes(cx, x, sizes, scales, dict(at, coordinate_transformation_mode="asymmetric",
                                                  nearest_mode="floor" if at.get("mode", "nearest") == "nearest"
                                                  else "round_prefer_floor"))


@converter("Resize", since=11)
def resize(cx, ins, at):
    x = ins[0]
    roi = cx.const(ins[1], "roi") if len(ins) > 1 and ins[1] is not None else None
    scales = cx.const(ins[2], "scales") if len(ins) > 2 and ins[2] is not None else None
    sizes = cx.ints(ins[3], "sizes") if len(ins) > 3 and ins[3] is not None else None
    if scales is not None and scales.size == 0:
        scales = None
    sizes, scales = _plan(cx, x, scales, sizes, at)
    nd = x.type.ndim
    want = 2 * len(at.get("axes") or range(nd))
    if roi is not None and roi.size and roi.size != want:
        raise ShapeError(f"{cx.where()}: roi of {roi.size} values; it needs {want} (starts then ends, per axis)")
    if roi is not None and roi.size and at.get("axes"):
        axes = cx.axes(at["axes"], nd)
        full = [0.0] * nd + [1.0] * nd
        for i, a in enumerate(axes):
            full[a], full[nd + a] = roi.reshape(-1)[i], roi.reshape(-1)[len(axes) + i]
        roi = full
    roi = [float(r) for r in np.reshape(roi, -1)] if roi is not None and np.size(roi) else None
    return resize_axes(cx, x, sizes, scales, at, roi)


@converter("Upsample", since=7)
def upsample(cx, ins, at):
    x = ins[0]
    scales = at["scales"] if "scales" in at else cx.const(ins[1], "scales")
    sizes, scales = _plan(cx, x, scales, None, {})
    mode = at.get("mode", "nearest")
    return resize_axes(cx, x, sizes, scales, {"mode": mode, "coordinate_transformation_mode": "asymmetric",
                                              "nearest_mode": "floor"})
