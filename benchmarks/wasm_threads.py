"""fxc's `wasm` target at 1 and N threads, the plan alone in the page (issue 28 item 7): model execution only, the
inputs and packed weights in place (WasmModule.benchmark: the page's FxcWasmModel.bench), rounds alternating the
targets so that a loaded host slows each alike. Prints median and min ms per run and the ratio 1 thread / N threads.

    .venv/bin/python -m benchmarks.wasm_threads [--models bert,mobilenet_v2,resnet18] [--threads 2] [--rounds 7]
        [--runs 5]

The end-to-end comparison with onnxruntime-web and TF.js (each call from Python, data in and out) is
benchmarks.browser_peers; this one isolates the plan, where the thread pool's fork/join cost shows.
"""
from __future__ import annotations

import argparse
import os
import statistics


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default="bert,mobilenet_v2,resnet18")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=7, help="alternating rounds (each: every target once)")
    p.add_argument("--runs", type=int, default=5, help="plan runs per round (their mean is one sample)")
    args = p.parse_args(argv)
    import fxc
    from fxc.testing.models import example_inputs, make_model
    targets = ["wasm -num-threads=1", f"wasm -num-threads={args.threads}"]
    print(f"load average {os.getloadavg()[0]:.2f}; {args.rounds} rounds x {args.runs} runs; ms per run of the plan")
    for name in args.models.split(","):
        model, inputs = make_model(name), example_inputs(name)
        mods = {t: fxc.from_torch(model, inputs, target=t).module for t in targets}
        arrays = {t: [i.numpy() for i in inputs] for t in targets}
        times = {t: [] for t in targets}
        for r in range(args.rounds):
            for t in (targets if r % 2 == 0 else targets[::-1]):
                times[t].append(mods[t].benchmark(*arrays[t], runs=args.runs))
        med = {t: statistics.median(v) for t, v in times.items()}
        cells = "  ".join(f"{t}: {med[t]:.1f} ({min(times[t]):.1f})" for t in targets)
        print(f"{name:<14} {cells}  1 thread / {args.threads}: {med[targets[0]] / med[targets[1]]:.2f}"
              f"  (load {os.getloadavg()[0]:.2f})", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
