"""Latency of the reference models on the `wasm` target in headless Chromium (batch 1, model execution only).

    python -m benchmarks.wasm_latency --runs 20 [--models resnet18,mobilenet_v2,bert] [--seq-len 64]

Each model is compiled by `fxc.from_torch(..., target="wasm")`; the page then runs the plan `--runs` times with the
inputs and packed weights in place (`WasmModule.benchmark`: performance.now() around the calls, as the seed's
Figure 3 measured model execution only) after one warm-up run, five times over; prints the median and minimum of
the five means in ms, and the max abs error against eager PyTorch relative to the output's scale.
"""
from __future__ import annotations

import argparse
import statistics


def measure(name: str, runs: int, seq_len: int) -> dict:
    import numpy as np
    import torch

    import fxc
    from fxc.testing.models import example_inputs, make_model
    model = make_model(name)
    inputs = example_inputs(name, batch=1, seq_len=seq_len)
    with torch.no_grad():
        expected = model(*inputs)
        compiled = fxc.from_torch(model, inputs, target="wasm")
    arrays = [t.numpy() for t in inputs]
    got = compiled(*arrays)
    got = got[0] if isinstance(got, list) else got
    e = expected.numpy() if isinstance(expected, torch.Tensor) else expected[0].numpy()
    err = float(np.abs(got - e).max() / max(np.abs(e).max(), 1.0))
    means = [compiled.module.benchmark(*arrays, runs=runs) for _ in range(5)]
    return {"median": statistics.median(means), "min": min(means), "err": err}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--models", default="resnet18,mobilenet_v2,bert")
    p.add_argument("--runs", type=int, default=20)
    p.add_argument("--seq-len", type=int, default=64)
    a = p.parse_args(argv)
    from fxc.runtime.wasm import open_wasm_runtime
    from fxc.target import Target
    print(f"target {Target.parse('wasm')} ({open_wasm_runtime().info['name']}), 1 thread")
    print(f"{'model':<14} {'median ms':>10} {'min ms':>8} {'max err / scale':>16}")
    for name in a.models.split(","):
        r = measure(name, a.runs, a.seq_len)
        print(f"{name:<14} {r['median']:>10.2f} {r['min']:>8.2f} {r['err']:>16.2e}", flush=True)


if __name__ == "__main__":
    main()
