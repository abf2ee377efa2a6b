"""Latency of the reference models compiled by `fxc.from_torch` for one CPU target (batch 1), median and minimum.

    python -m benchmarks.target_latency --target "llvm -mcpu=haswell" --runs 30

Prints one line per model: target, model, median and minimum in ms over --runs calls (after 3 warm-up calls).
The host target ("llvm") is the default; a lower ISA (haswell, x86-64-v2) runs here when the host has its
features."""
from __future__ import annotations

import argparse
import statistics
import time


def measure(name: str, target: str, runs: int) -> tuple:
    import torch

    import fxc
    from fxc.testing.models import example_inputs, make_model
    model = make_model(name)
    inputs = example_inputs(name, batch=1, seq_len=64)
    kw = {} if target == "llvm" else {"target": target}
    with torch.no_grad():
        compiled = fxc.from_torch(model, inputs, **kw)
        for _ in range(3):
            compiled(*inputs)
        times = []
        for _ in range(runs):
            t0 = time.perf_counter()
            compiled(*inputs)
            times.append(1e3 * (time.perf_counter() - t0))
    return statistics.median(times), min(times)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--target", default="llvm")
    p.add_argument("--models", default="resnet18,mobilenet_v2,bert")
    p.add_argument("--runs", type=int, default=30)
    a = p.parse_args(argv)
    for name in a.models.split(","):
        med, lo = measure(name, a.target, a.runs)
        print(f"{a.target:<24} {name:<14} median {med:8.2f} ms  min {lo:8.2f} ms", flush=True)


if __name__ == "__main__":
    main()
