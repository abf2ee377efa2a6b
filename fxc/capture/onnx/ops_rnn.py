"""ONNX converters: RNN, GRU and LSTM, unrolled over the (static) sequence (see table.py for the protocol).

The input projection of every step is one matmul over the whole sequence; each step then adds its recurrent
matmul and applies the gates. Supported: the default and the named Sigmoid/Tanh/Relu activations, forward,
reverse and bidirectional directions, both layouts, initial states, biases and peepholes; sequence_lens only
when every sequence is the full length (others are an UnsupportedOpError, never a wrong answer).
"""
from __future__ import annotations

import numpy as np

from .table import converter

_ACT = {"Sigmoid": "sigmoid", "Tanh": "tanh", "Relu": "relu"}


def _opt(ins, i):
    return ins[i] if len(ins) > i else None


def _take(cx, v, d):
    """v[d] of a [num_directions, ...] tensor."""
    part = cx.op("slice", [v], dim=0, start=d, end=d + 1, step=1)
    return cx.op("reshape", [part], shape=v.shape[1:])


def _cols(cx, v, k, h):
    """The k-th block of h along the last dim."""
    return cx.op("slice", [v], dim=v.type.ndim - 1, start=k * h, end=(k + 1) * h, step=1)


def _run(kind, n_gates, step_fn):
    def conv(cx, ins, at):
        x, w, r = ins[:3]
        b, lens, h0 = _opt(ins, 3), _opt(ins, 4), _opt(ins, 5)
        layout = int(at.get("layout", 0))
        if layout:
            x = cx.op("permute", [x], dims=(1, 0, 2))
        seq, batch, _ = x.shape
        hidden = int(at.get("hidden_size") or r.shape[-1])
        if at.get("clip") is not None:
            raise cx.unsupported(f"{kind} with clip")
        if lens is not None and any(n != seq for n in cx.ints(lens, "sequence_lens")):
            raise cx.unsupported(f"{kind} with sequences shorter than the input")
        direction = at.get("direction", "forward")
        dirs = ["forward", "reverse"] if direction == "bidirectional" else [direction]
        acts = [_ACT.get(a) for a in at.get("activations") or []]
        if None in acts:
            raise cx.unsupported(f"{kind} activations {at.get('activations')}")
        per_dir = len(acts) // len(dirs) if acts else 0
        ys, hs, cs = [], [], []
        for d, name in enumerate(dirs):
            wd, rd = _take(cx, w, d), _take(cx, r, d)
            bd = _take(cx, b, d) if b is not None else None
            fns = acts[d * per_dir:(d + 1) * per_dir] if acts else None
            xw = cx.op("matmul", [cx.op("reshape", [x], shape=(seq * batch, x.shape[2])), wd], trans_b=True)
            xw = cx.op("reshape", [xw], shape=(seq, batch, n_gates * hidden))
            if bd is not None:
                xw = cx.op("add", [xw, _cols(cx, bd, 0, n_gates * hidden)])
                rb = _cols(cx, bd, 1, n_gates * hidden)
            else:
                rb = None
            zeros = cx.b.const(np.zeros((batch, hidden), dtype=x.dtype))
            state = {"h": _take(cx, h0, d) if h0 is not None else zeros}
            if kind == "LSTM":
                c0, p = _opt(ins, 6), _opt(ins, 7)
                state["c"] = _take(cx, c0, d) if c0 is not None else zeros
                state["p"] = _take(cx, p, d) if p is not None else None
            order = range(seq) if name == "forward" else range(seq - 1, -1, -1)
            outs = {}
            for t in order:
                xt = cx.op("reshape", [cx.op("slice", [xw], dim=0, start=t, end=t + 1, step=1)],
                           shape=(batch, n_gates * hidden))
                state = step_fn(cx, at, xt, rd, rb, state, hidden, fns)
                outs[t] = state["h"]
            y = cx.op("cat", [cx.op("reshape", [outs[t]], shape=(1, 1, batch, hidden)) for t in range(seq)], dim=0)
            ys.append(y)
            hs.append(cx.op("reshape", [state["h"]], shape=(1, batch, hidden)))
            if kind == "LSTM":
                cs.append(cx.op("reshape", [state["c"]], shape=(1, batch, hidden)))
        y = ys[0] if len(ys) == 1 else cx.op("cat", ys, dim=1)
        yh = hs[0] if len(hs) == 1 else cx.op("cat", hs, dim=0)
        if layout:
            y = cx.op("permute", [y], dims=(2, 0, 1, 3))
            yh = cx.op("permute", [yh], dims=(1, 0, 2))
        if kind != "LSTM":
            return y, yh
        yc = cs[0] if len(cs) == 1 else cx.op("cat", cs, dim=0)
        return y, yh, (cx.op("permute", [yc], dims=(1, 0, 2)) if layout else yc)
    return conv


def _rec(cx, h, rd, rb):
    hr = cx.op("matmul", [h, rd], trans_b=True)
    return hr if rb is None else cx.op("add", [hr, rb])


def _rnn_step(cx, at, xt, rd, rb, st, hidden, fns):
    f = (fns or ["tanh"])[0]
    return {"h": cx.op(f, [cx.op("add", [xt, _rec(cx, st["h"], rd, rb)])])}


def _gru_step(cx, at, xt, rd, rb, st, hidden, fns):
    f, g = (fns or ["sigmoid", "tanh"])[:2]
    h = st["h"]
    xz, xr, xh = (_cols(cx, xt, k, hidden) for k in range(3))
    rz, rr, rh = (cx.op("slice", [rd], dim=0, start=k * hidden, end=(k + 1) * hidden, step=1) for k in range(3))
    bz, br, bh = ((_cols(cx, rb, k, hidden) if rb is not None else None) for k in range(3))
    z = cx.op(f, [cx.op("add", [xz, _rec(cx, h, rz, bz)])])
    r = cx.op(f, [cx.op("add", [xr, _rec(cx, h, rr, br)])])
    if at.get("linear_before_reset", 0):
        hh = cx.op(g, [cx.op("add", [xh, cx.op("mul", [r, _rec(cx, h, rh, bh)])])])
    else:
        hh = cx.op(g, [cx.op("add", [xh, _rec(cx, cx.op("mul", [r, h]), rh, bh)])])
    one_minus = cx.op("sub", [cx.scalar(1.0, z.dtype), z])
    return {"h": cx.op("add", [cx.op("mul", [one_minus, hh]), cx.op("mul", [z, h])])}


def _lstm_step(cx, at, xt, rd, rb, st, hidden, fns):
    f, g, hf = (fns or ["sigmoid", "tanh", "tanh"])[:3]
    h, c, p = st["h"], st["c"], st["p"]
    pre = cx.op("add", [xt, _rec(cx, h, rd, rb)])
    gi, go, gf, gc = (_cols(cx, pre, k, hidden) for k in range(4))
    if p is not None:
        pi, po, pf = (_cols(cx, p, k, hidden) for k in range(3))
        gi = cx.op("add", [gi, cx.op("mul", [pi, c])])
        gf = cx.op("add", [gf, cx.op("mul", [pf, c])])
    i = cx.op(f, [gi])
    fg = cx.op(f, [gf])
    if at.get("input_forget", 0):
        fg = cx.op("sub", [cx.scalar(1.0, i.dtype), i])
    c = cx.op("add", [cx.op("mul", [fg, c]), cx.op("mul", [i, cx.op(g, [gc])])])
    if p is not None:
        go = cx.op("add", [go, cx.op("mul", [po, c])])
    o = cx.op(f, [go])
    return {"h": cx.op("mul", [o, cx.op(hf, [c])]), "c": c, "p": p}


converter("RNN", since=7)(_run("RNN", 1, _rnn_step))
converter("GRU", since=7)(_run("GRU", 3, _gru_step))
converter("LSTM", since=7)(_run("LSTM", 4, _lstm_step))
