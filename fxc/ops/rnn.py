"""Recurrent layers: LSTM, GRU and Elman RNN (tanh / relu) as a loop over time steps, not unrolled.

`rnn_layer` is one direction of one layer. Its input projection for every time step is computed before it, as
one GEMM (`matmul` of all T x B rows with W_ih, plus the biases that add to it: the converter below), so the op
takes `xp`, the projected rows in time-major order ([T*B, G*H]; batch-major [B*T, G*H] with `batch_first`).
The op itself is a `te.extern` whose loop IR runs, for each sequence of the batch (in parallel across the batch):

    h, c = h0[b], c0[b]
    for each time step t (T-1 .. 0 with `reverse`):
        gates = xp[t, b] + W_hh h          (gru: gates = b_hh + W_hh h; xp is added gate by gate)
        i, f, g, o = sigmoid, sigmoid, tanh, sigmoid of the gates;  c = f c + i g;  h = o tanh(c)   (lstm)
        r, z = sigmoid(x_r + g_r), sigmoid(x_z + g_z);  n = tanh(x_n + r g_n);  h = (1 - z) n + z h    (gru)
        h = tanh(gates) or relu(gates)                                                                 (rnn)
        out[t, b] = h

The loop IR is fxc/lowering/extern/rnn.py. The recurrent GEMM is a row of multiply-adds over the transposed W_hh
([H, G*H], contiguous along the gates), four hidden units at a time into a vector accumulator row, and the gate
activations are one vectorized pass: every loop that runs along the gates or the hidden units is a `vectorize`
loop, so its lane count is the lowering's (`vectorize_loops`). Inputs: xp, W_hh^T, h0 [B, H], then c0 [B, H]
(lstm) or b_hh [G*H] (gru with
biases). Outputs: out [T, B, H] ([B, T, H] with `batch_first`), h_T [B, H], and c_T [B, H] (lstm).

The converters map fxc's capture ops `fxc.lstm` / `fxc.rnn` (what `aten.lstm.input`, `aten.gru.input`,
`aten.rnn_tanh.input` and `aten.rnn_relu.input` become in fxc's capture: fxc/capture/torch/fused.py) onto it:
layers in turn, a direction each, bidirectional outputs concatenated along the features.
"""
from __future__ import annotations

import numpy as np

from ..errors import ShapeError, UnsupportedOpError
from ..lowering import te
from ..lowering.extern.rnn import rnn_loops
from ..types import TensorType
from .common import rand
from .registry import Kind, OpDef, register, register_aten

GATES = {"lstm": 4, "gru": 3, "rnn_tanh": 1, "rnn_relu": 1}
FLT = ("float32", "float64")


def _dims(types, mode, batch_first):
    """(T, B, H) of a layer from its xp and h0 types."""
    if mode not in GATES:
        raise ShapeError(f"rnn_layer: unknown mode {mode!r}; one of {sorted(GATES)}")
    xp, w, h0 = types[:3]
    B, H = h0.shape
    if xp.ndim != 2 or B == 0 or xp.shape[0] % B or xp.shape[1] != GATES[mode] * H \
            or tuple(w.shape) != (H, xp.shape[1]):
        raise ShapeError(f"rnn_layer ({mode}): xp {list(xp.shape)}, W_hh^T {list(w.shape)} and h0 {list(h0.shape)} "
                         f"do not agree (xp [T*B, {GATES[mode]}*H], W_hh^T [H, {GATES[mode]}*H], h0 [B, H])")
    return xp.shape[0] // B, B, H


def _infer(types, mode, reverse=False, batch_first=False):
    T, B, H = _dims(types, mode, batch_first)
    dt = types[0].dtype
    out = TensorType((B, T, H) if batch_first else (T, B, H), dt)
    state = TensorType((B, H), dt)
    return [out, state, state] if mode == "lstm" else [out, state]


def _compute(xp, w, h0, *rest, mode, reverse=False, batch_first=False):
    GH, H, B = xp.shape[1], h0.shape[1], h0.shape[0]
    T, dt = xp.shape[0] // B, xp.dtype
    lstm = mode == "lstm"
    outs = [((B, T, H) if batch_first else (T, B, H), dt), ((B, H), dt)] + ([((B, H), dt)] if lstm else [])
    return tuple(te.extern(outs, [xp, w, h0, *rest], rnn_loops(T, B, H, GH, dt, mode, reverse, batch_first),
                           f"rnn_{mode}"))


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def _reference(xp, w, h0, *rest, mode, reverse=False, batch_first=False):
    B, H = h0.shape
    T = xp.shape[0] // B
    x = xp.astype(np.float64).reshape((B, T, -1) if batch_first else (T, B, -1))
    if batch_first:
        x = x.transpose(1, 0, 2)
    w64, h = w.astype(np.float64), h0.astype(np.float64)
    c = rest[0].astype(np.float64) if mode == "lstm" else None
    bh = rest[0].astype(np.float64) if mode == "gru" and rest else 0.0
    out = np.zeros((T, B, H))
    for t in (range(T - 1, -1, -1) if reverse else range(T)):
        if mode == "gru":
            gh = h @ w64 + bh
            r, z = _sigmoid(x[t, :, :H] + gh[:, :H]), _sigmoid(x[t, :, H:2 * H] + gh[:, H:2 * H])
            n = np.tanh(x[t, :, 2 * H:] + r * gh[:, 2 * H:])
            h = (1.0 - z) * n + z * h
        else:
            a = x[t] + h @ w64
            if mode == "lstm":
                i, f, o = _sigmoid(a[:, :H]), _sigmoid(a[:, H:2 * H]), _sigmoid(a[:, 3 * H:])
                c = f * c + i * np.tanh(a[:, 2 * H:3 * H])
                h = o * np.tanh(c)
            else:
                h = np.tanh(a) if mode == "rnn_tanh" else np.maximum(a, 0.0)
        out[t] = h
    if batch_first:
        out = out.transpose(1, 0, 2)
    dt = xp.dtype
    res = [np.ascontiguousarray(out).astype(dt), h.astype(dt)]
    return tuple(res + [c.astype(dt)] if mode == "lstm" else res)


def _check(types, mode, reverse=False, batch_first=False):
    if len(types) != 3 + (mode == "lstm") and not (mode == "gru" and len(types) == 4):
        return f"{mode} takes xp, W_hh^T, h0" + {"lstm": ", c0", "gru": " [, b_hh]"}.get(mode, "")
    T, B, H = _dims(types, mode, batch_first)
    if T == 0 or H == 0:
        return "an empty sequence"
    return None


def _samples(rng):
    def case(mode, T, B, H, bias=False, dt="float32", **attrs):
        G = GATES[mode]
        ins = [rand(rng, (T * B, G * H), dt, -1.0, 1.0), rand(rng, (H, G * H), dt, -0.5, 0.5),
               rand(rng, (B, H), dt, -1.0, 1.0)]
        if mode == "lstm":
            ins.append(rand(rng, (B, H), dt, -1.0, 1.0))
        elif bias:
            ins.append(rand(rng, (G * H,), dt, -0.5, 0.5))
        return ins, dict(mode=mode, **attrs)
    return [case("lstm", 5, 2, 8), case("lstm", 4, 3, 19, reverse=True, batch_first=True),
            case("gru", 6, 2, 18, bias=True), case("gru", 3, 1, 5, reverse=True),
            case("rnn_tanh", 4, 2, 33, batch_first=True), case("rnn_relu", 3, 2, 7),
            case("lstm", 3, 2, 20, dt="float64", reverse=True), case("gru", 2, 3, 17, bias=True, dt="float64")]


register(OpDef("rnn_layer", Kind.OPAQUE, _infer, _reference, _compute, {}, "out", _samples, FLT, _check,
               doc="One direction of one LSTM / GRU / RNN layer over projected inputs: (out, h_T[, c_T])."))


# -- fxc.lstm / fxc.rnn (the capture's whole-module RNN ops) as layers of rnn_layer --------------------------------
def _layers(b, mode, x, h0s, c0s, params, has_biases, num_layers, bidirectional, batch_first):
    D, per = (2 if bidirectional else 1), (4 if has_biases else 2)
    if len(params) != num_layers * D * per:
        raise UnsupportedOpError(f"{mode} with {len(params)} weights for {num_layers} layer(s): projections "
                                 "(proj_size) are not supported")
    if x.type.ndim != 3 or x.dtype not in FLT:
        raise UnsupportedOpError(f"{mode} of a {x.type.ndim}-d {x.dtype} input (3-d float inputs only)")
    steps, batch = (x.shape[1], x.shape[0]) if batch_first else x.shape[:2]
    H = h0s.shape[-1]
    hs, cs = [], []
    for layer in range(num_layers):
        outs = []
        for d in range(D):
            at = layer * D + d
            w_ih, w_hh = params[at * per], params[at * per + 1]
            xp = b.call("matmul", [b.call("reshape", [x], shape=(steps * batch, x.shape[2])), w_ih], trans_b=True)
            extra = []
            if has_biases:
                b_ih, b_hh = params[at * per + 2], params[at * per + 3]
                xp = b.call("add", [xp, b_ih if mode == "gru" else b.call("add", [b_ih, b_hh])])
                extra = [b_hh] if mode == "gru" else []
            def state(s):       # this layer and direction's [B, H] of the [layers * directions, B, H] states
                return b.call("reshape", [b.call("slice", [s], dim=0, start=at, end=at + 1, step=1)], shape=(batch, H))
            ins = [xp, b.call("permute", [w_hh], dims=(1, 0)), state(h0s)] + ([state(c0s)] if mode == "lstm" else extra)
            res = b.call("rnn_layer", ins, mode=mode, reverse=d == 1, batch_first=bool(batch_first))
            outs.append(res[0])
            hs.append(res[1])
            if mode == "lstm":
                cs.append(res[2])
        x = outs[0] if D == 1 else b.call("cat", outs, dim=2)

    def stack(vs):
        vs = [b.call("reshape", [v], shape=(1, batch, H)) for v in vs]
        return vs[0] if len(vs) == 1 else b.call("cat", vs, dim=0)
    return (x, stack(hs), stack(cs)) if mode == "lstm" else (x, stack(hs))


def _lstm_aten(b, x, hx, params, has_biases, num_layers, bidirectional, batch_first):
    return _layers(b, "lstm", x, hx[0], hx[1], params, has_biases, num_layers, bidirectional, batch_first)


def _rnn_aten(b, mode, x, hx, params, has_biases, num_layers, bidirectional, batch_first):
    if mode not in GATES or mode == "lstm":
        raise UnsupportedOpError(f"recurrent mode {mode!r}")
    return _layers(b, mode, x, hx, None, params, has_biases, num_layers, bidirectional, batch_first)


register_aten("fxc.lstm.default", _lstm_aten)
register_aten("fxc.rnn.default", _rnn_aten)
