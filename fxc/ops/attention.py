"""Scaled dot-product attention in training graphs.

Core-ATen decomposition turns `F.scaled_dot_product_attention` into matmul/softmax ops in the forward
graph, but AOT autograd still takes the backward from the fused CPU kernel's derivative,
`aten._scaled_dot_product_flash_attention_for_cpu_backward`. Its converter recomputes the attention
probabilities from the saved log-sum-exp and composes the gradients from registry ops:

    P = exp(Q K^T * scale + mask - lse)      dV = P^T dO      dP = dO V^T
    dS = P * (dP - rowsum(dO * O))           dQ = dS K * scale      dK = dS^T Q * scale

Core ATen's decomposition of the forward op returns the probabilities P in the log-sum-exp's place, so
the backward receives P (4-d) rather than the log-sum-exp (3-d); both are accepted. (torch's own
backward kernel reads P as a log-sum-exp and computes wrong gradients, so this op must not fall back.)
The fused forward op is converted too, with a true log-sum-exp, for graphs that keep it.
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import UnsupportedOpError
from ..symbolic.expr import is_float
from .registry import register_aten


def _scores(b, q, k, is_causal, attn_mask, scale):
    """Q K^T * scale + mask (causal: -inf above the diagonal, top-left aligned)."""
    if not is_float(q.dtype) or q.type.ndim != 4 or k.type.ndim != 4 or k.shape[:2] != q.shape[:2]:
        raise UnsupportedOpError("attention needs 4-d float q/k/v with equal batch and head dims")
    L, S = q.shape[2], k.shape[2]
    s = b.call("mul", [b.call("matmul", [q, k], trans_b=True), scale])
    if is_causal:
        keep = np.tril(np.ones((L, S), bool))
        s = b.call("add", [s, b.const(np.where(keep, 0.0, -np.inf).astype(q.dtype))])
    if attn_mask is not None:
        if attn_mask.dtype == "bool":
            attn_mask = b.call("where", [attn_mask, b.scalar(0.0, q.dtype), b.scalar(-math.inf, q.dtype)])
        s = b.call("add", [s, b.as_tensor(attn_mask, q.dtype)])
    return s


def _scale(q, scale):
    return float(scale) if scale is not None else 1.0 / math.sqrt(q.shape[3])


def _sdpa_flash(b, q, k, v, dropout_p=0.0, is_causal=False, attn_mask=None, scale=None):
    if dropout_p:
        raise UnsupportedOpError("attention with dropout")
    if v.type.ndim != 4 or v.shape[:2] != q.shape[:2]:
        raise UnsupportedOpError("attention with grouped-query heads")
    s = _scores(b, q, k, is_causal, attn_mask, _scale(q, scale))
    m = b.call("amax", [s], axes=(3,), keepdim=True)
    e = b.call("exp", [b.call("sub", [s, m])])
    total = b.call("sum", [e], axes=(3,), keepdim=True)
    lse = b.call("reshape", [b.call("add", [m, b.call("log", [total])])], shape=tuple(q.shape[:3]))
    out = b.call("matmul", [b.call("div", [e, total]), v])
    return out, lse


def _sdpa_flash_backward(b, grad_out, q, k, v, out, lse, dropout_p, is_causal, attn_mask=None, scale=None):
    if dropout_p:
        raise UnsupportedOpError("attention backward with dropout")
    if v.type.ndim != 4 or v.shape[:2] != q.shape[:2]:
        raise UnsupportedOpError("attention backward with grouped-query heads")
    scale = _scale(q, scale)
    if lse.type.ndim == 4:      # the decomposed forward saved the probabilities themselves
        p = lse
    else:
        s = _scores(b, q, k, is_causal, attn_mask, scale)
        p = b.call("exp", [b.call("sub", [s, b.call("reshape", [lse], shape=tuple(lse.shape) + (1,))])])
    dv = b.call("matmul", [p, grad_out], trans_a=True)
    dp = b.call("matmul", [grad_out, v], trans_b=True)
    d = b.call("sum", [b.call("mul", [grad_out, out])], axes=(3,), keepdim=True)
    ds = b.call("mul", [p, b.call("sub", [dp, d])])
    dq = b.call("mul", [b.call("matmul", [ds, k]), scale])
    dk = b.call("mul", [b.call("matmul", [ds, q], trans_a=True), scale])
    return dq, dk, dv


register_aten("aten._scaled_dot_product_flash_attention_for_cpu.default", _sdpa_flash)
register_aten("aten._scaled_dot_product_flash_attention_for_cpu_backward.default", _sdpa_flash_backward)
