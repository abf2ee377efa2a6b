"""PyTorch's fused module fast paths and recurrent modules, as both captures (torch.compile's and fxc.from_torch's)
decompose them: entries for the decomposition table (`fused_decompositions`).

In eval mode, or under `torch.no_grad()` / `torch.inference_mode()`, `nn.TransformerEncoderLayer` calls one fused
native op, `aten._transformer_encoder_layer_fwd`, and `nn.MultiheadAttention` may call
`aten._native_multi_head_attention`. Both are written here as the ATen ops they are made of (linear, layer norm,
attention with its mask, GELU / ReLU feed-forward), so fxc compiles every GEMM of them. The masks follow the native
kernels: a mask (bool, or float where nonzero means masked) is a source mask ([T, S], mask_type 0), a key padding
mask ([B, S], mask_type 1) or one of the scores' shape (mask_type 2); a row with every key masked gives nan, as the
native masked softmax does. A variant these decompositions do not cover keeps the fused op, which then runs
in eager PyTorch with fxc's one-line note.

`aten.lstm.input`, `aten.gru.input`, `aten.rnn_tanh.input` and `aten.rnn_relu.input` (what Dynamo captures of
`nn.LSTM` / `nn.GRU` / `nn.RNN` when `torch._dynamo.config.allow_rnn` is on) become one op for the whole module,
`fxc::lstm` or `fxc::rnn`, which fxc compiles as a loop over time steps (fxc/ops/rnn.py); in eager PyTorch (a
fallback) they run PyTorch's own kernel. torch._decomp's decompositions, which unroll every time step into a
graph of its own ops, remain for what these do not cover: a graph that needs gradients (training), dropout
between layers in training mode, LSTM projections, inputs that are not 3-d float tensors.
"""
from __future__ import annotations

import logging
import math

import torch
import torch.nn.functional as F
from torch._decomp import decomposition_table as torch_table

aten = torch.ops.aten
log = logging.getLogger("fxc")
RNN_MODES = {"gru": torch.gru, "rnn_tanh": torch.rnn_tanh, "rnn_relu": torch.rnn_relu}


# -- the fused transformer fast paths ----------------------------------------------------------------------------------
def _attention_mask(mask, mask_type, B, H, T, S):
    """The native kernels' mask as a bool mask broadcastable to the scores [B, H, T, S] (True: masked), or None
    when its form is not one they accept."""
    m = mask if mask.dtype == torch.bool else mask != 0
    if mask_type == 0 and tuple(m.shape) == (T, S):
        return m
    if mask_type == 1 and tuple(m.shape) == (B, S):
        return m.view(B, 1, 1, S)
    if mask_type in (2, None) and m.dim() == 4 and all(a in (1, n) for a, n in zip(m.shape, (B, H, T, S))):
        return m
    return None


def _multi_head_attention(query, key, value, embed_dim, num_head, qkv_weight, qkv_bias, proj_weight, proj_bias,
                          mask=None, need_weights=True, average_attn_weights=True, mask_type=None):
    """aten._native_multi_head_attention: (output [B, T, D], the attention weights or an empty tensor)."""
    if query.dim() != 3 or key.shape != query.shape or value.shape != query.shape or query.is_nested \
            or embed_dim % num_head or not query.is_floating_point():
        return NotImplemented
    B, T, D = query.shape
    dh = D // num_head
    if query is key and key is value:       # self-attention: one projection
        q, k, v = F.linear(query, qkv_weight, qkv_bias).chunk(3, dim=-1)
    else:
        ws, bs = qkv_weight.chunk(3, dim=0), qkv_bias.chunk(3, dim=0)
        q, k, v = (F.linear(x, w, b_) for x, w, b_ in zip((query, key, value), ws, bs))
    def heads(x):
        return x.reshape(B, T, num_head, dh).transpose(1, 2)
    q, k, v = heads(q) * (1.0 / math.sqrt(dh)), heads(k), heads(v)
    scores = q @ k.transpose(-2, -1)
    if mask is not None:
        m = _attention_mask(mask, mask_type, B, num_head, T, T)
        if m is None:
            return NotImplemented
        scores = scores.masked_fill(m, -math.inf)
    p = torch.softmax(scores, -1)           # a row of masked keys only: nan, as the native masked softmax
    ctx = (p @ v).transpose(1, 2).reshape(B, T, D)
    out = F.linear(ctx, proj_weight, proj_bias)
    if not need_weights:
        return out, None
    return out, (p.sum(dim=1) / num_head if average_attn_weights else p)


def _encoder_layer(src, embed_dim, num_heads, qkv_weight, qkv_bias, proj_weight, proj_bias, use_gelu, norm_first,
                   eps, norm_weight_1, norm_bias_1, norm_weight_2, norm_bias_2, ffn_weight_1, ffn_bias_1,
                   ffn_weight_2, ffn_bias_2, mask=None, mask_type=None):
    """aten._transformer_encoder_layer_fwd: self-attention and feed-forward blocks, each with its residual and
    layer norm (before the block with `norm_first`, after it otherwise)."""
    if src.dim() != 3 or src.is_nested or src.numel() == 0:
        return NotImplemented

    def norm(x, w, b_):
        return F.layer_norm(x, (embed_dim,), w, b_, eps)
    x = norm(src, norm_weight_1, norm_bias_1) if norm_first else src
    a = _multi_head_attention(x, x, x, embed_dim, num_heads, qkv_weight, qkv_bias, proj_weight, proj_bias, mask,
                              False, True, mask_type)
    if a is NotImplemented:
        return NotImplemented
    x = a[0] + src
    if not norm_first:
        x = norm(x, norm_weight_1, norm_bias_1)
    res = x
    if norm_first:
        x = norm(x, norm_weight_2, norm_bias_2)
    h = F.linear(x, ffn_weight_1, ffn_bias_1)
    h = F.gelu(h) if use_gelu else F.relu(h)
    x = F.linear(h, ffn_weight_2, ffn_bias_2) + res
    return x if norm_first else norm(x, norm_weight_2, norm_bias_2)


# -- recurrent modules: one op for the whole module ------------------------------------------------------------------
@torch.library.custom_op("fxc::lstm", mutates_args=())
def lstm(input: torch.Tensor, hx: list[torch.Tensor], params: list[torch.Tensor], has_biases: bool, num_layers: int,
         bidirectional: bool, batch_first: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """nn.LSTM's aten.lstm.input in inference (no dropout); eager PyTorch's kernel when it runs uncompiled."""
    out, h, c = torch.lstm(input, hx, params, has_biases, num_layers, 0.0, False, bidirectional, batch_first)
    return out.clone(), h.clone(), c.clone()


@lstm.register_fake
def _lstm_fake(input, hx, params, has_biases, num_layers, bidirectional, batch_first):
    out = _rnn_out(input, hx[0], bidirectional, batch_first)
    return out, torch.empty_like(hx[0]), torch.empty_like(hx[1])


@torch.library.custom_op("fxc::rnn", mutates_args=())
def rnn(mode: str, input: torch.Tensor, hx: torch.Tensor, params: list[torch.Tensor], has_biases: bool,
        num_layers: int, bidirectional: bool, batch_first: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """nn.GRU's / nn.RNN's aten.gru.input, rnn_tanh.input or rnn_relu.input (`mode`) in inference."""
    out, h = RNN_MODES[mode](input, hx, params, has_biases, num_layers, 0.0, False, bidirectional, batch_first)
    return out.clone(), h.clone()


@rnn.register_fake
def _rnn_fake(mode, input, hx, params, has_biases, num_layers, bidirectional, batch_first):
    return _rnn_out(input, hx, bidirectional, batch_first), torch.empty_like(hx)


def _rnn_out(input, h0, bidirectional, batch_first):
    steps, batch = (input.shape[1], input.shape[0]) if batch_first else input.shape[:2]
    feat = h0.shape[-1] * (2 if bidirectional else 1)
    return input.new_empty((batch, steps, feat) if batch_first else (steps, batch, feat))


def _unrolled_because(input, hx, params, has_biases, num_layers, dropout, train, bidirectional) -> str | None:
    """Why fxc's one-op form does not cover this call (torch._decomp's unrolled decomposition is used instead), or
    None when it does."""
    tensors = [input, *hx, *params]
    per = (4 if has_biases else 2) * (2 if bidirectional else 1)
    if input.dim() != 3 or input.dtype not in (torch.float32, torch.float64) \
            or any(t.dtype != input.dtype for t in tensors):
        return "inputs other than 3-d float32/float64 tensors of one dtype"
    if len(params) != per * num_layers:
        return "projections (proj_size)"
    if train and dropout and num_layers > 1:
        return "dropout between layers in training mode"
    if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
        return "gradients needed (training)"
    return None


def _unrolled(mode, reason):
    log.info("fxc: %s with %s runs as PyTorch's decomposition, a graph of ops per time step, not fxc's recurrent "
             "loop", mode, reason)


def _lstm_decomposition(fallback):
    def decompose(input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first):
        reason = _unrolled_because(input, hx, params, has_biases, num_layers, dropout, train, bidirectional)
        if reason:
            _unrolled("lstm", reason)
            # torch._decomp's oneDNN form (mkldnn_rnn_layer, taken when the input needs no gradient) saves
            # nothing AOT autograd can replay for the backward (PyTorch's own aot_eager fails on it): its portable
            # form instead, for every graph that gets here
            with torch.backends.mkldnn.flags(enabled=False):
                return fallback(input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first)
        return torch.ops.fxc.lstm(input, list(hx), list(params), has_biases, num_layers, bidirectional, batch_first)
    return decompose


def _rnn_decomposition(mode, fallback):
    def decompose(input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first):
        reason = _unrolled_because(input, [hx], params, has_biases, num_layers, dropout, train, bidirectional)
        if reason:
            _unrolled(mode, reason)
            return fallback(input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first)
        return torch.ops.fxc.rnn(mode, input, hx, list(params), has_biases, num_layers, bidirectional, batch_first)
    return decompose


def route_rnn_calls(gm: torch.fx.GraphModule) -> None:
    """Point the calls of torch.lstm / gru / rnn_tanh / rnn_relu in Dynamo's graph at the one-op forms above:
    their ATen ops are CompositeImplicitAutograd with torch._decomp's unrolled Python kernels attached, so AOT
    autograd's tracing decomposes them before it reads a decomposition table. (torch.export keeps them whole, and
    `fused_decompositions` serves fxc.from_torch.) Packed-sequence calls (the `.data` overloads) stay as they are."""
    routes = {torch.lstm: _routed("lstm", torch.lstm)}
    routes.update({fn: _routed(mode, fn) for mode, fn in RNN_MODES.items()})
    changed = False
    for node in gm.graph.nodes:
        if node.op == "call_function" and not isinstance(node.target, str) and node.target in routes:
            node.target = routes[node.target]
            changed = True
    if changed:
        gm.recompile()


def _routed(mode, fn):
    decompose = _lstm_decomposition(fn) if mode == "lstm" else _rnn_decomposition(mode, fn)

    def call(*args, **kwargs):
        if kwargs or len(args) != 9 or not isinstance(args[1 if mode == "lstm" else 2], (list, tuple)):
            return fn(*args, **kwargs)      # the packed-sequence overload
        return decompose(*args)
    call.__name__ = f"fxc_{mode}"
    return call


def fused_decompositions(table: dict) -> dict:
    """Entries that replace `table`'s for the fused fast paths and the recurrent modules (those fall back to the
    table's own entry, or to PyTorch's decomposition, for what fxc's forms do not cover)."""
    out = {aten._transformer_encoder_layer_fwd.default: _encoder_layer,
           aten._native_multi_head_attention.default: _multi_head_attention}
    lstm_op = aten.lstm.input
    out[lstm_op] = _lstm_decomposition(table.get(lstm_op, torch_table[lstm_op]))
    for mode in RNN_MODES:
        op = getattr(aten, mode).input
        out[op] = _rnn_decomposition(mode, table.get(op, torch_table[op]))
    return out
