"""The reference models on the webgl target at full size: latency of a call from Python (RPC: inputs to the page,
the plan drawn, outputs back) and the error against eager PyTorch, with the slowest kernels.

    .venv/bin/python -m benchmarks.webgl_models                          # resnet18, mobilenet_v2, bert (seq 32)
    .venv/bin/python -m benchmarks.webgl_models --models mobilenet_v2 --runs 3 --profile

Models and inputs from fxc.testing.models (batch 1; BERT at sequence length 32). Per model: build time, every
call's time, max abs error / output scale, and with --profile the per-draw times of the slowest kernels (a
one-texel read after each draw waits for it, so a profiled call is a little slower).
"""
from __future__ import annotations

import argparse
import time

import numpy as np
import torch

import fxc
from fxc.testing.models import MODEL_NAMES, example_inputs, make_model


def alternate_calls(built: dict, arrays: list, expected: np.ndarray, calls: int) -> tuple:
    """Calls of the built variants (name -> compiled) alternated `calls` times: ({name: [seconds]}, {name: max abs
    error against `expected`}); the A/B scripts (webgl_conv_ab, webgl_bert_ab) compare their medians."""
    times = {name: [] for name in built}
    err = dict.fromkeys(built, 0.0)
    for _ in range(calls):
        for name, c in built.items():
            t0 = time.perf_counter()
            out = c(*arrays)
            times[name].append(time.perf_counter() - t0)
            err[name] = max(err[name], float(np.abs(out - expected).max()))
    return times, err


def run(name: str, runs: int, profile: bool, seq: int = 32) -> dict:
    model = make_model(name)
    inputs = example_inputs(name, batch=1, seq_len=seq)
    t0 = time.perf_counter()
    compiled = fxc.from_torch(model, inputs, target="webgl", profile=profile)
    build = time.perf_counter() - t0
    with torch.no_grad():
        expected = model(*inputs).numpy()
    arrays = [x.numpy() for x in inputs]
    times, err = [], 0.0
    for _ in range(runs):
        t0 = time.perf_counter()
        out = compiled(*arrays)
        times.append(time.perf_counter() - t0)
        err = max(err, float(np.abs(out - expected).max()))
    scale = float(np.abs(expected).max())
    print(f"{name}: build {build:.1f} s, {len(compiled.module.plan)} draws; calls "
          f"{', '.join(f'{t:.2f}' for t in times)} s; max abs error {err:.2e} at output scale {scale:.2f} "
          f"({err / scale:.1e} x scale)", flush=True)
    if profile:
        print(compiled.module.profile_table(top=12), flush=True)
    return {"model": name, "build_s": build, "calls_s": times, "max_abs_error": err, "scale": scale}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--models", default=",".join(MODEL_NAMES))
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--profile", action="store_true", help="also time every draw (the slowest kernels)")
    p.add_argument("--seq", type=int, default=32, help="BERT's sequence length (the browser peers use 128)")
    args = p.parse_args(argv)
    from fxc.runtime.browser.webgl import open_page
    print(f"device: {open_page().info['name']}, {open_page().info['driver']}", flush=True)
    for name in args.models.split(","):
        run(name, args.runs, args.profile, args.seq)


if __name__ == "__main__":
    main()
