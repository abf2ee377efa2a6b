"""Latency of the reference models on the `wasm` target in headless Chromium (batch 1, model execution only).

    python -m benchmarks.wasm_latency --runs 20 [--targets "wasm;wasm -num-threads=2"] [--models resnet18,...]

Each model is compiled by `fxc.from_torch(..., target=T)` for each wasm target T of --targets; the page then
runs the plan `--runs` times with the inputs and packed weights in place (`WasmModule.benchmark`: performance.now()
around the calls, as the seed's Figure 3 measured model execution only) after one warm-up run. For scale, the same
model on the `llvm` target in this process (one thread, native code, --runs calls). Five rounds, the targets round
robin (all see the same machine load); prints the median and minimum of the five means in ms, and the max abs error
against eager PyTorch relative to the output's scale.
"""
from __future__ import annotations

import argparse
import os
import statistics
import time


def measure(name: str, runs: int, seq_len: int, targets: list) -> dict:
    import numpy as np
    import torch

    import fxc
    from fxc.testing.models import example_inputs, make_model
    model = make_model(name)
    inputs = example_inputs(name, batch=1, seq_len=seq_len)
    arrays = [t.numpy() for t in inputs]
    with torch.no_grad():
        expected = model(*inputs)
        e = expected.numpy() if isinstance(expected, torch.Tensor) else expected[0].numpy()
        compiled, errors = {}, {}
        for t in targets:
            compiled[t] = fxc.from_torch(model, inputs, target=t)
            got = compiled[t](*arrays)
            got = got[0] if isinstance(got, list) else got
            errors[t] = float(np.abs(got - e).max() / max(np.abs(e).max(), 1.0))
        native = fxc.from_torch(model, inputs, target="llvm -num-threads=1")
        for _ in range(3):
            native(*arrays)
        means = {t: [] for t in [*targets, "llvm -num-threads=1"]}
        for _ in range(5):          # round robin: every target sees the same machine load
            for t, c in compiled.items():
                means[t].append(c.module.benchmark(*arrays, runs=runs))
            t0 = time.perf_counter()
            for _ in range(runs):
                native(*arrays)
            means["llvm -num-threads=1"].append(1e3 * (time.perf_counter() - t0) / runs)
    return {t: (statistics.median(m), min(m), errors.get(t, float("nan"))) for t, m in means.items()}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--models", default="resnet18,mobilenet_v2,bert")
    p.add_argument("--runs", type=int, default=20)
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument("--targets", default="wasm;wasm -num-threads=2", help="';'-separated wasm targets")
    a = p.parse_args(argv)
    from fxc.runtime.browser.wasm import open_wasm_runtime
    from fxc.target import host_cpu
    info = open_wasm_runtime().info
    print(f"{info['name']}; cross-origin isolated: {info['isolated']}; host CPU {host_cpu()}, "
          f"{len(os.sched_getaffinity(0))} cores, load average {os.getloadavg()[0]:.1f}")
    print(f"{'model':<14} {'target':<34} {'median ms':>10} {'min ms':>8} {'max err / scale':>16}")
    targets = [t.strip() for t in a.targets.split(";") if t.strip()]
    for name in a.models.split(","):
        for label, (med, low, err) in measure(name, a.runs, a.seq_len, targets).items():
            print(f"{name:<14} {label:<34} {med:>10.2f} {low:>8.2f} {err:>16.2e}", flush=True)


if __name__ == "__main__":
    main()
