"""ONNX converters: Attention (opset 23+) and RotaryEmbedding (see table.py for the protocol).

Attention follows onnx's reference: 3-d inputs split into heads, past key/value concatenated (the present
outputs), grouped-query heads repeated, Q and K each scaled by sqrt(scale), an optional softcap, the mask (bool
or additive, padded to the key length), causal and sliding-window biases as constants, a softmax whose rows
that are masked everywhere give zeros, and the qk output of the mode asked for.
"""
from __future__ import annotations

import math

import numpy as np

from .ops_tensor import pad_nd
from .table import converter

NEG_INF = float("-inf")


def _heads(cx, x, n):
    """(B, S, n * D) -> (B, n, S, D)."""
    b, s, hidden = x.shape
    return cx.op("permute", [cx.op("reshape", [x], shape=(b, s, n, hidden // n))], dims=(0, 2, 1, 3))


def _repeat_heads(cx, x, reps):
    """np.repeat(x, reps, axis=1) for (B, H, S, D)."""
    b, h, s, d = x.shape
    t = cx.op("expand", [cx.op("reshape", [x], shape=(b, h, 1, s, d))], size=(b, h, reps, s, d))
    return cx.op("reshape", [t], shape=(b, h * reps, s, d))


def _window(qlen, kvlen, offset, left, right, causal):
    """Allowed (query, key) pairs, (q, kv) for a scalar offset or (B, 1, q, kv) for one per batch."""
    i = np.arange(qlen).reshape(qlen, 1)
    j = np.arange(kvlen).reshape(1, kvlen)
    off = np.asarray(offset).reshape(-1, 1, 1) if np.ndim(offset) else int(offset)
    diff = i + off - j
    ok = np.ones(np.shape(diff), dtype=bool)
    if causal:
        ok &= diff >= 0
    if left >= 0:
        ok &= diff <= left
    if right >= 0:
        ok &= -diff <= right
    return ok.reshape(ok.shape[0], 1, qlen, kvlen) if np.ndim(offset) else ok


@converter("Attention", since=23)
def attention(cx, ins, at):
    ins = list(ins) + [None] * (7 - len(ins))
    q, k, v, mask, past_k, past_v, nonpad = ins[:7]
    three = q.type.ndim == 3
    if three:
        q, k, v = _heads(cx, q, at["q_num_heads"]), _heads(cx, k, at["kv_num_heads"]), _heads(cx, v, at["kv_num_heads"])
    dt = q.dtype
    scale = at.get("scale")
    s = math.sqrt(scale if scale is not None else 1 / math.sqrt(q.shape[3]))
    if past_k is not None:
        k, v = cx.op("cat", [past_k, k], dim=2), cx.op("cat", [past_v, v], dim=2)
    present_k, present_v = k, v
    qlen, kvlen = q.shape[2], k.shape[2]
    bias = None
    if mask is not None:
        m = cx.op("where", [mask, cx.scalar(0.0, dt), cx.scalar(NEG_INF, dt)]) if mask.dtype == "bool" else mask
        pad = kvlen - m.shape[-1]
        if pad > 0:
            nd = m.type.ndim
            m = pad_nd(cx, m, [0] * nd + [0] * (nd - 1) + [pad], value=NEG_INF)
        bias = m
    lens = cx.ints(nonpad, "nonpad_kv_seqlen") if nonpad is not None else None
    offset = past_k.shape[2] if past_k is not None else (np.array(lens) - qlen if lens is not None else 0)
    left, right = int(at.get("left_window_size", -1)), int(at.get("right_window_size", -1))
    causal = bool(at.get("is_causal", 0))
    if causal or left >= 0 or right >= 0:
        ok = _window(qlen, kvlen, offset, left, right, causal)
        c = cx.b.const(np.where(ok, 0.0, NEG_INF).astype(dt))
        bias = c if bias is None else cx.op("add", [bias, c])
    if lens is not None:
        pm = np.arange(kvlen)[None, :] < np.array(lens)[:, None]
        c = cx.b.const(np.where(pm, 0.0, NEG_INF).astype(dt).reshape(len(lens), 1, 1, kvlen))
        bias = c if bias is None else cx.op("add", [bias, c])
    if q.shape[1] != k.shape[1]:
        reps = q.shape[1] // k.shape[1]
        k, v = _repeat_heads(cx, k, reps), _repeat_heads(cx, v, reps)
    qk = cx.op("matmul", [cx.op("mul", [q, s]), cx.op("mul", [k, s])], trans_b=True)
    softcap = float(at.get("softcap", 0.0))
    if softcap > 0:
        qk = cx.op("mul", [cx.op("tanh", [cx.op("div", [qk, softcap])]), softcap])
    mode = int(at.get("qk_matmul_output_mode", 0))
    qkb = qk if bias is None else cx.op("add", [qk, bias])
    probs = cx.op("softmax", [qkb], dim=qkb.type.ndim - 1, safe=True)
    qk_out = qkb if mode == 2 else probs if mode == 3 else qk
    y = cx.op("matmul", [probs, v])
    if three:
        y = cx.op("permute", [y], dims=(0, 2, 1, 3))
        y = cx.op("reshape", [y], shape=(y.shape[0], y.shape[1], y.shape[2] * y.shape[3]))
    return y, present_k, present_v, qk_out


def _step(cx, x, t):
    """x[:, :, t] of a (B, H, T, D) tensor as (B, H, D)."""
    b, h, _, d = x.shape
    return cx.op("reshape", [cx.op("slice", [x], dim=2, start=t, end=t + 1, step=1)], shape=(b, h, d))


@converter("LinearAttention", since=27)
def linear_attention(cx, ins, at):
    """The recurrent form onnx's reference states: per step, decay the state (gated rules), correct the value
    by what the state already retrieves for the key (delta rules), add key x value, read it with the query."""
    ins = list(ins) + [None] * (6 - len(ins))
    q, k, v, past, decay, beta = ins[:6]
    rule = at.get("update_rule", "gated_delta")
    gating, delta = rule in ("gated", "gated_delta"), rule in ("delta", "gated_delta")
    if rule not in ("linear", "gated", "delta", "gated_delta") or gating != (decay is not None) \
            or delta != (beta is not None):
        raise cx.unsupported(f"update_rule {rule!r} with these inputs")
    hq, hkv = int(at["q_num_heads"]), int(at["kv_num_heads"])
    b, steps, _ = q.shape
    q4, k4, v4 = _heads(cx, q, hq), _heads(cx, k, hkv), _heads(cx, v, hkv)
    dk, dv = q4.shape[3], v4.shape[3]
    scale = float(at.get("scale", 0.0)) or 1.0 / math.sqrt(dk)
    if decay is not None:
        decay = _heads(cx, decay, hkv) if decay.shape[-1] != hkv else cx.op(
            "permute", [cx.op("reshape", [decay], shape=(b, steps, hkv, 1))], dims=(0, 2, 1, 3))
    if beta is not None:
        beta = cx.op("permute", [cx.op("reshape", [beta], shape=(b, steps, beta.shape[-1], 1))], dims=(0, 2, 1, 3))
    state = past if past is not None else cx.b.const(np.zeros((b, hkv, dk, dv), dtype=q.dtype))
    outs = []
    for t in range(steps):
        kt, vt = _step(cx, k4, t), _step(cx, v4, t)
        if gating:
            g = _step(cx, decay, t)
            state = cx.op("mul", [state, cx.op("reshape", [cx.op("exp", [g])], shape=g.shape + (1,))])
        if delta:
            got = cx.op("reshape", [cx.op("matmul", [cx.op("reshape", [kt], shape=(b, hkv, 1, dk)), state])],
                        shape=(b, hkv, dv))
            vt = cx.op("mul", [_step(cx, beta, t), cx.op("sub", [vt, got])])
        state = cx.op("add", [state, cx.op("mul", [cx.op("reshape", [kt], shape=(b, hkv, dk, 1)),
                                                   cx.op("reshape", [vt], shape=(b, hkv, 1, dv))])])
        read = state if hq == hkv else _repeat_heads(cx, state, hq // hkv)
        qt = cx.op("reshape", [_step(cx, q4, t)], shape=(b, hq, 1, dk))
        outs.append(cx.op("mul", [cx.op("matmul", [qt, read]), scale]))
    y = cx.op("cat", outs, dim=2) if len(outs) > 1 else outs[0]
    y = cx.op("reshape", [cx.op("permute", [y], dims=(0, 2, 1, 3))], shape=(b, steps, hq * dv))
    return y, state
