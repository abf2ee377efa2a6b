"""A bfloat16 graph on the CPU: a reference model under `torch.autocast("cpu", dtype=torch.bfloat16)`, eager PyTorch
against fxc's build of the same (fxc.from_torch under autocast), fxc's `precision="bf16"` build of the float32 model
and its float32 build, all timed round robin in one process (one call of each per round: the host's load falls on
all alike), and each output's largest error against a float64 run of the model.

    python -m benchmarks.autocast_bf16 [--model resnet18] [--threads 2] [--runs 40]

Prints per build the median and minimum in ms (CPU time of the calling thread at --threads 1, else wall time) and
eager autocast's median over each. docs/precision.md quotes it.
"""
from __future__ import annotations

import argparse
import statistics
import time


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.autocast_bf16", description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="resnet18")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=40)
    args = ap.parse_args(argv)

    import torch

    import fxc
    from fxc.testing.models import example_inputs, make_model
    torch.set_num_threads(args.threads)
    target = f"llvm -num-threads={args.threads}"
    torch.manual_seed(0)
    model = make_model(args.model).eval()
    inputs = example_inputs(args.model)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        autocast_fxc = fxc.from_torch(model, inputs, target=target)
    builds = {"eager autocast": lambda *xs: model(*xs), "fxc autocast": autocast_fxc,
              "fxc precision=bf16": fxc.from_torch(model, inputs, target=target, precision="bf16"),
              "fxc fp32": fxc.from_torch(model, inputs, target=target)}
    autocast = {"eager autocast", "fxc autocast"}
    with torch.no_grad():
        exact = model.double()(*(x.double() if x.is_floating_point() else x for x in inputs))
        model.float()

    def call(name):
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=name in autocast):
            return builds[name](*inputs)
    clock = time.thread_time if args.threads == 1 else time.perf_counter
    times: dict = {name: [] for name in builds}
    for name in builds:
        for _ in range(3):
            call(name)
    names = list(builds)
    for i in range(args.runs):
        for name in names[i % len(names):] + names[:i % len(names)]:
            t0 = clock()
            call(name)
            times[name].append(1e3 * (clock() - t0))
    print(f"{args.model}, batch 1, {args.threads} thread(s), {args.runs} rounds, "
          f"{'CPU time' if args.threads == 1 else 'wall time'}; torch {torch.__version__}, fxc {fxc.__version__}")
    base = statistics.median(times["eager autocast"])
    for name, t in times.items():
        err = (call(name).double() - exact).abs().max().item()
        print(f"  {name:<20} median {statistics.median(t):8.2f} ms  min {min(t):8.2f} ms  "
              f"eager autocast / this {base / statistics.median(t):5.2f}x  max|y - float64| {err:.3g}")


if __name__ == "__main__":
    main()
