"""Latency as CPU time, for a loaded shared host: one thread, interleaved peers, min and median.

    .venv/bin/python -m benchmarks.cpu_time torch wav2vec2 [--peers eager,inductor,fxc] [--runs 15]
    .venv/bin/python -m benchmarks.cpu_time mxnet resnet18_v1 [--runs 15]

On a host whose load exceeds its cores, wall-clock latencies measure the scheduler more than the code. At one
thread (`FXC_NUM_THREADS=1`, `torch.set_num_threads(1)`, `OMP_NUM_THREADS=1`) every peer runs its kernels on one
thread, so CPU time leaves out the time a call spent preempted:

- `torch MODEL`: a zoo model (`fxc.testing.zoo`) or a harness model (`fxc.testing.models`) through eager PyTorch,
  `torch.compile` (inductor) and `torch.compile(backend="fxc")`, timed by the calling thread's CPU time
  (`time.thread_time`: PyTorch's and fxc's kernels both run on the calling thread at one thread);
- `mxnet NAME`: a Gluon zoo network through MXNet (hybridized, oneDNN) and `fxc.from_mxnet` on the same weights
  (`benchmarks.mxnet_zoo.build_peers`), timed by the process's CPU time (`time.process_time`: MXNet's engine runs
  its ops on its own threads).

Prints min / median CPU and wall ms per peer and the ratios to fxc (> 1: fxc faster).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time


def torch_peers(name: str, peers: list) -> tuple:
    import torch

    import fxc  # noqa: F401  (registers the backend)
    from fxc.testing.zoo import ZOO_NAMES, make_zoo_model, zoo_inputs
    if name in ZOO_NAMES:
        model, inputs = make_zoo_model(name), zoo_inputs(name)
    else:
        from fxc.testing.models import example_inputs, make_model
        model, inputs = make_model(name), example_inputs(name, batch=1)
    fns = {}
    for p in peers:
        fn = model if p == "eager" else torch.compile(model) if p == "inductor" else torch.compile(model, backend="fxc")
        fns[p] = lambda fn=fn: fn(*inputs)
    return fns, time.thread_time


def mxnet_peers(name: str) -> tuple:
    from benchmarks.mxnet_zoo import build_peers
    runners, _, _, _ = build_peers(name, None, ["mxnet", "fxc"])
    return {k: (lambda fn=fn: fn().wait_to_read()) for k, fn in runners.items()}, time.process_time


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.cpu_time", description=__doc__.split("\n\n")[0])
    ap.add_argument("framework", choices=["torch", "mxnet"])
    ap.add_argument("model")
    ap.add_argument("--peers", default="eager,inductor,fxc", help="torch: comma list of eager, inductor, fxc")
    ap.add_argument("--runs", type=int, default=15)
    args = ap.parse_args(argv)
    for var in ("FXC_NUM_THREADS", "OMP_NUM_THREADS"):
        os.environ[var] = "1"
    import torch
    torch.set_num_threads(1)
    with torch.no_grad():
        fns, clock = torch_peers(args.model, args.peers.split(",")) if args.framework == "torch" \
            else mxnet_peers(args.model)
        for fn in fns.values():
            for _ in range(3):
                fn()
        cpu = {k: [] for k in fns}
        wall = {k: [] for k in fns}
        for _ in range(args.runs):
            for k, fn in fns.items():
                c0, w0 = clock(), time.perf_counter()
                fn()
                cpu[k].append(clock() - c0)
                wall[k].append(time.perf_counter() - w0)
    print(f"{args.model}, 1 thread, {args.runs} interleaved calls, load average {os.getloadavg()[0]:.1f}")
    for k in fns:
        ratio = "" if k == "fxc" else (f"   / fxc: min {min(cpu[k]) / min(cpu['fxc']):.2f} median "
                                       f"{statistics.median(cpu[k]) / statistics.median(cpu['fxc']):.2f}")
        print(f"  {k:9s} CPU min {1e3 * min(cpu[k]):8.2f} median {1e3 * statistics.median(cpu[k]):8.2f} ms | wall "
              f"min {1e3 * min(wall[k]):8.2f} median {1e3 * statistics.median(wall[k]):8.2f} ms{ratio}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
