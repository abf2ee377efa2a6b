"""Latency of the reference models compiled by `fxc.from_torch` for several CPU targets, side by side (batch 1).

    python -m benchmarks.target_latency --targets "llvm;llvm -mcpu=haswell;llvm -mcpu=x86-64-v2" --runs 60

Every target's build of a model is timed round robin (one call of each per round, after 3 warm-up calls), so all
see the same machine load; prints, per model and target, the median and minimum in ms over --runs rounds and the
median's ratio to the first target's. Targets whose CPU features this host lacks are skipped with the reason.
"""
from __future__ import annotations

import argparse
import statistics
import time


def measure(name: str, targets: list, runs: int) -> dict:
    """target -> list of call times in ms, for model `name` compiled for each target."""
    import torch

    import fxc
    from fxc.testing.models import example_inputs, make_model
    model = make_model(name)
    inputs = example_inputs(name, batch=1, seq_len=64)
    compiled = {}
    with torch.no_grad():
        for t in targets:
            compiled[t] = fxc.from_torch(model, inputs, target=t)
            for _ in range(3):
                compiled[t](*inputs)
        times = {t: [] for t in compiled}
        for _ in range(runs):
            for t, c in compiled.items():
                t0 = time.perf_counter()
                c(*inputs)
                times[t].append(1e3 * (time.perf_counter() - t0))
    return times


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--targets", default="llvm;llvm -mcpu=haswell;llvm -mcpu=x86-64-v2", help="';'-separated")
    p.add_argument("--models", default="resnet18,mobilenet_v2,bert")
    p.add_argument("--runs", type=int, default=60)
    a = p.parse_args(argv)
    from fxc.backends import check_runnable
    from fxc.errors import TargetError
    from fxc.target import host_cpu
    print(f"host CPU: {host_cpu()}")
    targets = []
    for t in filter(None, (t.strip() for t in a.targets.split(";"))):
        try:
            check_runnable(t)
            targets.append(t)
        except TargetError as e:
            print(f"skipped {t}: {e}")
    for name in a.models.split(","):
        times = measure(name, targets, a.runs)
        first = None
        for t, ts in times.items():
            med = statistics.median(ts)
            first = first or med
            print(f"{name:<13} {t:<28} median {med:8.2f} ms  min {min(ts):8.2f} ms  x{med / first:5.2f}", flush=True)


if __name__ == "__main__":
    main()
