"""The loop IR of rnn_layer (fxc/ops/rnn.py): one direction of one LSTM / GRU / Elman layer over its time steps,
the sequences of the batch in parallel; the recurrent GEMM a row of multiply-adds, UNROLL hidden units at a time,
and every loop along the gates or the hidden units a `vectorize` loop."""
from __future__ import annotations

from ...symbolic.expr import Const, Fma, Var, as_expr, maximum, unary
from ..loop_ir import Allocate, Buffer, For, Store, seq

UNROLL = 4          # hidden units per multiply-add pass over the gate row


def rnn_loops(T, B, H, GH, dt: str, mode: str, reverse: bool, batch_first: bool):
    """lower(outs, ins) of rnn_layer: T steps, B sequences, H hidden units, GH = gates x H; the inputs and outputs
    as fxc/ops/rnn.py describes them."""
    lstm, gru = mode == "lstm", mode == "gru"

    def lower(obufs, ibufs):
        out, h_last = obufs[0], obufs[1]
        xb, wb, h0b = ibufs[:3]
        extra = ibufs[3] if len(ibufs) > 3 else None      # c0 (lstm) or b_hh (gru)
        gates, hl = Buffer("gates", dt, GH, "private"), Buffer("hl", dt, H, "private")
        cl = Buffer("cl", dt, H, "private")
        bv, s, k, g, j = Var("b"), Var("s"), Var("k"), Var("g"), Var("j")
        t = as_expr(T - 1) - s if reverse else s
        row = bv * T + t if batch_first else t * B + bv

        def x(q):       # gate q of this step's projected input, unit j
            return xb[row * GH + q * H + j]

        def gate(q):    # gate q of the recurrent GEMM's row, unit j
            return gates[q * H + j]

        def mac(k0, n):       # gates[g] + sum over n hidden units from k0 of h[k] W_hh^T[k, g]
            acc = gates[g]
            for u in range(n):
                acc = Fma(hl[k0 + u], wb[(k0 + u) * GH + g], acc)
            return Store(gates, g, acc)

        start = (extra[g] if extra is not None else Const(0.0, dt)) if gru else xb[row * GH + g]
        full, tail = divmod(H, UNROLL)
        gemm = seq(For(g, GH, Store(gates, g, start), "vectorize"),
                   For(k, full, For(g, GH, mac(k * UNROLL, UNROLL), "vectorize")) if full else None,
                   For(g, GH, mac(full * UNROLL, tail), "vectorize") if tail else None)
        def sig(e):
            return unary("sigmoid", e)

        def tanh(e):
            return unary("tanh", e)
        if lstm:
            act = [Store(cl, j, sig(gate(1)) * cl[j] + sig(gate(0)) * tanh(gate(2))),
                   Store(hl, j, sig(gate(3)) * tanh(cl[j]))]
        elif gru:
            r, z = sig(x(0) + gate(0)), sig(x(1) + gate(1))
            n = tanh(x(2) + r * gate(2))
            act = [Store(hl, j, (1.0 - z) * n + z * hl[j])]
        else:
            pre = gate(0)
            act = [Store(hl, j, tanh(pre) if mode == "rnn_tanh" else maximum(pre, Const(0.0, dt)))]
        step = seq(gemm, For(j, H, seq(*act, Store(out, row * H + j, hl[j])), "vectorize"))
        load = [Store(hl, j, h0b[bv * H + j])] + ([Store(cl, j, extra[bv * H + j])] if lstm else [])
        save = [Store(h_last, bv * H + j, hl[j])] + ([Store(obufs[2], bv * H + j, cl[j])] if lstm else [])
        body = seq(For(j, H, seq(*load), "vectorize"), For(s, T, step), For(j, H, seq(*save), "vectorize"))
        body = Allocate(gates, Allocate(hl, Allocate(cl, body) if lstm else body))
        kind = "parallel" if B > 1 and B * T * GH * H >= 1 << 15 else "serial"
        return For(bv, B, body, kind)
    return lower
