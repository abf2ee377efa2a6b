"""The FFT family (ATen _fft_r2c, _fft_c2c, _fft_c2r) as DFTs against precomputed twiddle matrices.

Accepts real or `Complex` (fxc/ops/complex.py) values; produces, per transformed dim, one float64 `matmul` of
the values (that dim last, flattened with its real/imag pairs) by a constant [in, out] matrix, so a transform
of n points costs O(n^2) per row, accumulated in float64 and rounded once at the end. Dims are transformed
one after another (r2c: the last dim first, one-sided; c2r: the last dim last, Hermitian). `normalization`
is ATen's: 0 none, 1 1/sqrt(n), 2 1/n, with n the product of the signal sizes. Larger transforms fall back.
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import UnsupportedOpError
from .common import norm_axis
from .complex import ARITH, Complex, register_complex
from .registry import register_aten

MAX_POINTS = 1024      # the twiddle matrix of one dim is (2n)^2 float64 values: 32 MiB here


def twiddle(n: int, sign: int):
    """cos and sin of sign * 2*pi*r/n for r in 0..n-1, exact at the quarter turns."""
    r = np.arange(n)
    c, s = np.cos(2 * np.pi * r / n), np.sin(2 * np.pi * r / n)
    quarter = (4 * r) % n == 0
    q = (4 * r[quarter]) // n
    c[quarter], s[quarter] = np.array([1.0, 0.0, -1.0, 0.0])[q], np.array([0.0, 1.0, 0.0, -1.0])[q]
    return c, sign * s


def _tables(n_in: int, m_out: int, n: int, sign: int):
    """C[j, k], S[j, k] for e^{sign i 2 pi j k / n}, j < n_in, k < m_out."""
    c, s = twiddle(n, sign)
    jk = np.outer(np.arange(n_in), np.arange(m_out)) % n
    return c[jk], s[jk]


def c2c_matrix(n: int, sign: int, scale: float) -> np.ndarray:
    """[2n, 2n]: (re, im) pairs in, (re, im) pairs out: (a + ib)(C + iS) = aC - bS + i(aS + bC)."""
    C, S = _tables(n, n, n, sign)
    w = np.empty((2 * n, 2 * n))
    w[0::2, 0::2], w[1::2, 0::2], w[0::2, 1::2], w[1::2, 1::2] = C, -S, S, C
    return w * scale


def r2c_matrix(n: int, m: int, scale: float) -> np.ndarray:
    """[n, 2m]: real values in, the first m (re, im) pairs of their forward DFT out."""
    C, S = _tables(n, m, n, -1)
    w = np.empty((n, 2 * m))
    w[:, 0::2], w[:, 1::2] = C, S
    return w * scale


def c2r_matrix(h: int, n: int, scale: float) -> np.ndarray:
    """[2h, n]: the first h (re, im) pairs of a Hermitian signal in, its n-point real inverse DFT out.
    Pairs 0 < j < n/2 stand for themselves and their mirror (weight 2); the imaginary parts of pair 0 and
    pair n/2 do not contribute (their sines are exactly 0), as in pocketfft/MKL."""
    C, S = _tables(h, n, n, 1)
    j = np.arange(h)
    wt = np.where((j == 0) | (2 * j == n), 1.0, 2.0)[:, None] * (j < n // 2 + 1)[:, None]
    w = np.empty((2 * h, n))
    w[0::2], w[1::2] = wt * C, -wt * S
    return w * scale


def _scale(normalization: int, sizes) -> float:
    n = math.prod(sizes)
    return {0: 1.0, 1: 1.0 / math.sqrt(n), 2: 1.0 / n}[int(normalization)]


def _along(b, x, d: int, pair: bool, w: np.ndarray, out_pair: bool):
    """Multiply dim d of x (a real tensor; with a trailing (re, im) dim if pair) by w; the result has w's
    output size at d (and a trailing pair dim if out_pair)."""
    shape = tuple(x.shape)
    nd = len(shape) - (1 if pair else 0)
    perm = [i for i in range(nd) if i != d] + [d] + ([nd] if pair else [])
    t = x if perm == list(range(len(shape))) else b.call("permute", [x], dims=tuple(perm))
    lead = tuple(shape[i] for i in range(nd) if i != d)
    rows = math.prod(lead)
    flat = b.call("reshape", [t], shape=(rows, w.shape[0]))
    out = b.call("matmul", [flat, b.const(w)])
    m = w.shape[1] // 2 if out_pair else w.shape[1]
    out = b.call("reshape", [out], shape=lead + (m,) + ((2,) if out_pair else ()))
    back = list(range(nd - 1))
    back.insert(d, nd - 1)
    back += [nd] if out_pair else []
    return out if back == list(range(len(back))) else b.call("permute", [out], dims=tuple(back))


def _check(shape, dims, what):
    if not dims:
        raise UnsupportedOpError(f"{what} over no dims")
    if 0 in shape:
        raise UnsupportedOpError(f"{what} of an empty tensor")
    for d in dims:
        if shape[d] > MAX_POINTS:
            raise UnsupportedOpError(f"{what} of {shape[d]} points (fxc's DFT takes up to {MAX_POINTS})")


def _dims(dim, ndim):
    return [norm_axis(d, ndim) for d in (dim if isinstance(dim, (list, tuple)) else [dim])]


def fft_r2c(b, x, dim, normalization, onesided):
    if isinstance(x, Complex) or x.dtype not in ARITH:
        raise UnsupportedOpError(f"_fft_r2c of {getattr(x, 'type', x)}")
    dims = _dims(dim, len(x.shape))
    _check(tuple(x.shape), dims, "_fft_r2c")
    rt = x.dtype
    scale = _scale(normalization, [x.shape[d] for d in dims])
    last, n = dims[-1], x.shape[dims[-1]]
    m = n // 2 + 1 if onesided else n
    v = _along(b, b.call("cast", [x], dtype="float64"), last, False, r2c_matrix(n, m, scale), True)
    for d in dims[:-1]:
        v = _along(b, v, d, True, c2c_matrix(x.shape[d], -1, 1.0), True)
    return Complex(b.call("cast", [v], dtype=rt))


def fft_c2c(b, x, dim, normalization, forward):
    if not isinstance(x, Complex) or x.v.dtype not in ARITH:
        raise UnsupportedOpError(f"_fft_c2c of {getattr(x, 'type', x)}")
    dims = _dims(dim, x.ndim)
    _check(x.shape, dims, "_fft_c2c")
    scale = _scale(normalization, [x.shape[d] for d in dims])
    v = b.call("cast", [x.v], dtype="float64")
    for k, d in enumerate(dims):
        v = _along(b, v, d, True, c2c_matrix(x.shape[d], -1 if forward else 1, scale if k == 0 else 1.0), True)
    return Complex(b.call("cast", [v], dtype=x.v.dtype))


def fft_c2r(b, x, dim, normalization, last_dim_size):
    if not isinstance(x, Complex) or x.v.dtype not in ARITH:
        raise UnsupportedOpError(f"_fft_c2r of {getattr(x, 'type', x)}")
    dims = _dims(dim, x.ndim)
    _check(x.shape, dims, "_fft_c2r")
    n = int(last_dim_size)
    if n < 1 or n > MAX_POINTS:
        raise UnsupportedOpError(f"_fft_c2r to {n} points")
    sizes = [x.shape[d] for d in dims[:-1]] + [n]
    v = b.call("cast", [x.v], dtype="float64")
    for d in dims[:-1]:
        v = _along(b, v, d, True, c2c_matrix(x.shape[d], 1, 1.0), True)
    last = dims[-1]
    h = min(x.shape[last], n // 2 + 1)
    if h != x.shape[last]:
        v = b.call("slice", [v], dim=last, start=0, end=h, step=1)
    out = _along(b, v, last, True, c2r_matrix(h, n, _scale(normalization, sizes)), False)
    return b.call("cast", [out], dtype=x.v.dtype)


register_aten("aten._fft_r2c.default", fft_r2c)
register_complex("aten._fft_c2c.default", fft_c2c)
register_complex("aten._fft_c2r.default", fft_c2r)
