"""Ops along one dim that carry state from element to element: cumulative sum/product/logsumexp,
cumulative max/min with indices, and a stable sort (values + indices) that topk, kthvalue and argsort
are built from.

All are `te.extern` ops: the loop IR (fxc/lowering/extern/scan.py) walks each row (the dim, for every position
of the other dims) in order; rows run in parallel. Sort is a bottom-up merge sort with a row of scratch per
thread; ties keep their input order, and NaN sorts as the largest value (as in PyTorch).
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import UnsupportedOpError
from ..lowering import te
from ..lowering.extern.scan import cumext_loops, scan_loops, sort_loops
from ..symbolic.expr import (
    ITEMSIZE,
    Const,
    binary,
    compare,
    is_float,
    maximum,
    minimum,
    select,
    unary,
)
from ..types import TensorType
from .common import norm_axis, rand
from .registry import Kind, OpDef, register, register_aten

NUM = ("float32", "float64", "int32", "int64", "int8", "uint8")
FLT = ("float32", "float64")
SCRATCH_LIMIT = 1 << 20       # bytes of per-thread sort scratch (a row of values and indices)


def _rows(shape, dim):
    d = norm_axis(dim, len(shape))
    return math.prod(shape[:d]), (shape[d] if shape else 1), math.prod(shape[d + 1:])


# -- cumulative sum / product / logsumexp ------------------------------------------------------------------------------
def _logaddexp(a, x):
    hi, lo = maximum(a, x), minimum(a, x)
    inf = Const(math.inf, a.dtype)
    easy = binary("or", compare("eq", lo, -inf), compare("eq", hi, inf))
    return select(easy, hi, hi + unary("log1p", unary("exp", lo - hi)))


_SCANS = {"cumsum": (0, lambda a, x: a + x), "cumprod": (1, lambda a, x: a * x),
          "logcumsumexp": (-math.inf, _logaddexp)}


def _scan_compute(kind):
    init, comb = _SCANS[kind]

    def compute(x, dim):
        return te.extern([(x.shape, x.dtype)], [x], scan_loops(*_rows(x.shape, dim), x.dtype, init, comb), kind)[0]
    return compute


def _scan_ref(kind):
    def ref(x, dim):
        if kind == "logcumsumexp":
            with np.errstate(all="ignore"):
                return np.logaddexp.accumulate(x.astype(np.float64), axis=dim).astype(x.dtype)
        return (np.cumsum if kind == "cumsum" else np.cumprod)(x, axis=dim, dtype=x.dtype)
    return ref


def _cum_aten(kind):
    def conv(b, x, dim, dtype=None):
        out = dtype or (x.dtype if is_float(x.dtype) else "int64")
        if kind == "logcumsumexp" and not is_float(out):
            raise UnsupportedOpError("logcumsumexp of an integer tensor")
        x = b.as_tensor(x, out)
        if x.type.ndim == 0:   # a scan of one element is that element
            return b.call("copy", [x])
        return b.call(kind, [x], dim=dim)
    return conv


for _kind in _SCANS:
    register(OpDef(_kind, Kind.OPAQUE, lambda t, dim: [t[0]], _scan_ref(_kind), _scan_compute(_kind),
                   {f"aten.{_kind}.default": _cum_aten(_kind)}, None,
                   (lambda kind: lambda rng: [([rand(rng, (3, 7), low=-1.0, high=1.0)], {"dim": 1}),
                                              ([rand(rng, (5, 2, 3), low=-1.0, high=1.0)], {"dim": 0}),
                                              ([rand(rng, (4, 9), "int64" if kind != "logcumsumexp" else "float64")],
                                               {"dim": -1})])(_kind),
                   NUM if _kind != "logcumsumexp" else FLT))


# -- cummax / cummin: running extreme and the (last) index reaching it -------------------------------------------------
def _cumext_compute(kind):
    def compute(x, dim):
        lower = cumext_loops(*_rows(x.shape, dim), x.dtype, kind)
        return te.extern([(x.shape, x.dtype), (x.shape, "int64")], [x], lower, kind)
    return compute


def _cumext_ref(kind):
    def ref(x, dim):
        xm = np.moveaxis(x, dim, -1)
        vals, idxs = np.empty_like(xm), np.zeros(xm.shape, np.int64)
        for r in np.ndindex(*xm.shape[:-1]):
            best, at = None, 0
            for k, v in enumerate(xm[r]):
                if k == 0 or (v != v) or (v >= best if kind == "cummax" else v <= best):
                    if best is None or best == best or v != v:
                        best, at = v, k
                vals[r + (k,)], idxs[r + (k,)] = best, at
        return np.ascontiguousarray(np.moveaxis(vals, -1, dim)), np.ascontiguousarray(np.moveaxis(idxs, -1, dim))
    return ref


for _kind in ("cummax", "cummin"):
    register(OpDef(_kind, Kind.OPAQUE, lambda t, dim: [t[0], TensorType(t[0].shape, "int64")], _cumext_ref(_kind),
                   _cumext_compute(_kind),
                   {f"aten.{_kind}.default": (lambda k: lambda b, x, dim: b.call(k, [x], dim=dim))(_kind)},
                   None, lambda rng: [([np.array([[1, 3, 3, np.nan, 2, np.nan, 5], [4, 4, 1, 1, 6, 0, 6]], "float32")],
                                       {"dim": 1}),
                                      ([rand(rng, (6, 3), "int32")], {"dim": 0})],
                   NUM))


# -- sort (stable merge sort), and what is built from it ---------------------------------------------------------------
def _sort_check(types, dim=-1, descending=False):
    n = _rows(types[0].shape, dim)[1]
    if n * (ITEMSIZE[types[0].dtype] + 8) > SCRATCH_LIMIT:
        return f"rows of {n} elements need more sort scratch than {SCRATCH_LIMIT} bytes"
    return None


def _sort_compute(x, dim=-1, descending=False):
    lower = sort_loops(*_rows(x.shape, dim), x.dtype, descending)
    return te.extern([(x.shape, x.dtype), (x.shape, "int64")], [x], lower, "sort")


def _sort_ref(x, dim=-1, descending=False):
    def key(v):
        nan = bool(v != v)
        v = 0 if nan else v.item()
        return (not nan, -v) if descending else (nan, v)
    xm = np.moveaxis(x, dim, -1)
    idx = np.empty(xm.shape, np.int64)
    for r in np.ndindex(*xm.shape[:-1]):
        row = xm[r]
        idx[r] = sorted(range(len(row)), key=lambda k: key(row[k]))   # python's sort is stable
    idx = np.ascontiguousarray(np.moveaxis(idx, -1, dim))
    return np.take_along_axis(x, idx, axis=dim), idx


def _sort_aten(b, x, dim=-1, descending=False, stable=None):
    if x.type.ndim == 0:
        return b.call("copy", [x]), b.const(np.zeros((), np.int64))
    return b.call("sort", [x], dim=dim, descending=bool(descending))


def _scalar_select(b, x, k):
    """topk/kthvalue of a 0-d tensor: the tensor itself and index 0."""
    if k != 1:
        raise UnsupportedOpError(f"k={k} on a 0-d tensor")
    return b.call("copy", [x]), b.const(np.zeros((), np.int64))


def _topk(b, x, k, dim=-1, largest=True, sorted=True):
    if x.type.ndim == 0:
        return _scalar_select(b, x, k)
    d = norm_axis(dim, x.type.ndim)
    vals, idxs = _sort_aten(b, x, d, largest)
    return tuple(b.call("slice", [t], dim=d, start=0, end=k, step=1) for t in (vals, idxs))


def _kthvalue(b, x, k, dim=-1, keepdim=False):
    if x.type.ndim == 0:
        return _scalar_select(b, x, k)
    d = norm_axis(dim, x.type.ndim)
    vals, idxs = _sort_aten(b, x, d, False)
    outs = []
    for t in (vals, idxs):
        t = b.call("slice", [t], dim=d, start=k - 1, end=k, step=1)
        outs.append(t if keepdim else b.call("reshape", [t], shape=x.shape[:d] + x.shape[d + 1:]))
    return tuple(outs)


register(OpDef("sort", Kind.OPAQUE, lambda t, dim=-1, descending=False: [t[0], TensorType(t[0].shape, "int64")],
               _sort_ref, _sort_compute,
               {"aten.sort.default": _sort_aten,
                "aten.sort.stable":
                    lambda b, x, stable=None, dim=-1, descending=False: _sort_aten(b, x, dim, descending)},
               None, lambda rng: [([rand(rng, (3, 13))], {"dim": 1}),
                                  ([np.array([[2, 1, np.nan, 1, 2, -np.inf, 0, np.nan]], "float32")],
                                   {"dim": 1, "descending": True}),
                                  ([np.array([[2, 1, np.nan, 1, 2, -np.inf, 0, np.nan]], "float64")], {"dim": -1}),
                                  ([rand(rng, (16, 3), "int32")], {"dim": 0, "descending": True}),
                                  ([rand(rng, (2, 1, 5), "int64")], {"dim": 1})],
               NUM, _sort_check))
def _median(nan_aware):
    """median along a dim from a stable sort: the lower middle element. median: a row holding NaN gives its
    first NaN; nanmedian: the middle of the row's non-NaN values (all NaN: the middle position)."""
    def conv(b, x, dim=None, keepdim=False):
        whole, scalar = dim is None, x.type.ndim == 0
        if whole or scalar:
            x, dim = b.call("reshape", [x], shape=(-1,)), 0
        d = norm_axis(dim, x.type.ndim)
        n = x.shape[d]
        if n == 0:
            raise UnsupportedOpError("median of an empty tensor")
        vals, idxs = b.call("sort", [x], dim=d, descending=False)
        keep = tuple(1 if k == d else s for k, s in enumerate(x.shape))
        pos = b.const(np.full(keep, (n - 1) // 2, np.int64))
        if is_float(x.dtype):
            nans = b.call("sum", [b.call("cast", [b.call("isnan", [x])], dtype="int64")], axes=(d,), keepdim=True)
            if nan_aware:
                valid = b.call("sub", [n, nans])
                mid = b.call("floordiv", [b.call("sub", [valid, 1]), 2])
                pos = b.call("where", [b.call("gt", [valid, 0]), mid, pos])
            else:
                pos = b.call("where", [b.call("gt", [nans, 0]), b.call("sub", [n, nans]), pos])
        out = [b.call("gather", [t, pos], dim=d) for t in (vals, idxs)]
        if whole:
            return b.call("reshape", [out[0]], shape=())
        if scalar:
            return tuple(b.call("reshape", [t], shape=()) for t in out)
        if not keepdim:
            out = [b.call("reshape", [t], shape=x.shape[:d] + x.shape[d + 1:]) for t in out]
        return tuple(out)
    return conv


register_aten("aten.topk.default", _topk)
register_aten("aten.median.default", lambda b, x: _median(False)(b, x))
register_aten("aten.median.dim", _median(False))
register_aten("aten.nanmedian.default", lambda b, x: _median(True)(b, x))
register_aten("aten.nanmedian.dim", _median(True))
register_aten("aten.kthvalue.default", _kthvalue)
