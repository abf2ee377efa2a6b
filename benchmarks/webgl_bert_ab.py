"""BERT on webgl: this tree's layer-norm and softmax forms against the earlier ones, in one process, calls alternated.

    .venv/bin/python -m benchmarks.webgl_bert_ab --seq 128 --calls 6
    .venv/bin/python -m benchmarks.webgl_bert_ab --seq 128 --calls 6 --ab targets    # 4 draw buffers against 1

Builds the BERT encoder (fxc.testing.models, batch 1) twice on the webgl target: with expand_opaque's forms as they
are (layer norm: one reduction draw for the row moments; softmax: three draws) and with the earlier forms (the
corrected two-pass mean, the variance, rsqrt: three reductions; softmax: four draws), then alternates calls of the
two in the same page (back to back, so the host's load falls on both alike) and prints each one's draws, median and
minimum seconds a call, and max abs error against eager. `--ab targets`: instead, the webgl Caps' draw buffers as
they are (4: fragments that write four texels, fxc/backends/webgl/draw_buffers.py) against 1 (four outputs a
fragment)."""
from __future__ import annotations

import argparse
import dataclasses
import importlib
import math
import statistics

import numpy as np
import torch

import fxc
import fxc.target as fxc_target
from benchmarks.webgl_models import alternate_calls
from fxc.ops.reduce import centre
from fxc.testing.models import example_inputs, make_model

eo = importlib.import_module("fxc.relay_like.passes.expand_opaque")    # the module (the package exports its function)


def _layer_norm_before(b, x, *affine, ndims, eps, weight, bias):
    axes = tuple(range(x.type.ndim - ndims, x.type.ndim))
    mean, xc = centre(b, x, axes)
    var = b.call("mean", [b.call("mul", [xc, xc])], axes=axes, keepdim=True)
    rstd = b.call("rsqrt", [b.call("add", [var, float(eps)])])
    out = b.call("mul", [xc, rstd])
    if weight:
        out = b.call("mul", [out, affine[0]])
    if bias:
        out = b.call("add", [out, affine[-1]])
    return out, mean, rstd


def _softmax_before(b, x, dim, safe=False):
    axes = (dim % x.type.ndim,)
    m = b.call("amax", [x], axes=axes, keepdim=True)
    zero = b.scalar(0.0, x.dtype)
    if safe:
        m = b.call("where", [b.call("eq", [m, -math.inf]), zero, m])
    e = b.call("exp", [b.call("sub", [x, m])])
    s = b.call("sum", [e], axes=axes, keepdim=True)
    out = b.call("div", [e, s])
    if safe:
        out = b.call("where", [b.call("eq", [s, 0.0]), zero, out])
    return (out,)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--calls", type=int, default=6)
    p.add_argument("--ab", choices=("norms", "targets"), default="norms")
    args = p.parse_args(argv)
    model = make_model("bert")
    inputs = example_inputs("bert", batch=1, seq_len=args.seq)
    with torch.no_grad():
        expected = model(*inputs).numpy()
    arrays = [x.numpy() for x in inputs]
    now = dict(eo.EXPANSIONS)
    built = {}
    if args.ab == "targets":
        caps = fxc_target.webgl_caps
        for name, n in (("4 draw buffers", 4), ("1 draw buffer", 1)):
            fxc_target.webgl_caps = lambda info, n=n: dataclasses.replace(caps(info), draw_buffers=n)
            built[name] = fxc.from_torch(model, inputs, target="webgl")
            built[name](*arrays)                              # warm-up
        fxc_target.webgl_caps = caps
    forms = {"this tree": now, "before": {**now, "layer_norm": _layer_norm_before, "softmax": _softmax_before}}
    for name, expansions in forms.items() if args.ab == "norms" else ():
        eo.EXPANSIONS.clear()
        eo.EXPANSIONS.update(expansions)
        built[name] = fxc.from_torch(model, inputs, target="webgl")
        built[name](*arrays)                                  # warm-up
    eo.EXPANSIONS.clear()
    eo.EXPANSIONS.update(now)
    times, err = alternate_calls(built, arrays, expected, args.calls)
    scale = float(np.abs(expected).max())
    for name, c in built.items():
        med = statistics.median(times[name])
        print(f"bert seq {args.seq}, {name}: {len(c.module.plan)} draws; median {med:.3f} s, "
              f"min {min(times[name]):.3f} s over {args.calls} calls; max abs error {err[name]:.2e} "
              f"(scale {scale:.2f})", flush=True)


if __name__ == "__main__":
    main()
