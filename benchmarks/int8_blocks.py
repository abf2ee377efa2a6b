"""fxc int8 with the activations between its convs in channel blocks (use_int8_blocks, the default) against the same
build in NCHW (blocked_layout=False) and the int8 peers, A/B in one process (docs/int8.md, "Channel blocks between the
int8 convs").

    .venv/bin/python -m benchmarks.int8_blocks                          # ResNet-18, batch 1, 2 threads, 40 runs
    .venv/bin/python -m benchmarks.int8_blocks --threads 1 --runs 30 --models resnet18,mobilenet_v2

Per model (benchmarks/int8.py's: PT2E through fxc.from_torch, and the QDQ export ONNX Runtime and OpenVINO run):
median and min latency, timed interleaved (round-robin, the order rotating each round, each call once the process is
idle: benchmarks/run.py's wait_until_idle): wall clock at --threads, the calling thread's CPU time at --threads 1
(time preempted on a shared host is not counted). Also printed: whether both fxc builds give the same output (they
must: the layout changes no arithmetic).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time


def run(name: str, threads: int, runs: int) -> dict:
    import torch

    import fxc
    from benchmarks.int8 import build_openvino, build_ort, onnx_int8, pt2e_model, random_inputs
    from benchmarks.peers import _private
    from benchmarks.run import wait_until_idle
    from fxc.testing.models import make_model
    model = make_model(name).eval()
    inputs = random_inputs(name, 0, 128)
    calibration = [random_inputs(name, 1000 + i, 128) for i in range(4)]
    q = pt2e_model(_private(model), inputs, calibration, False)
    with torch.no_grad():
        blocks = fxc.from_torch(q, tuple(inputs))
        nchw = fxc.from_torch(q, tuple(inputs), blocked_layout=False)
    x = inputs[0]
    calls = {"fxc int8, channel blocks": lambda: blocks(x), "fxc int8, NCHW": lambda: nchw(x)}
    with tempfile.TemporaryDirectory() as folder:
        path = onnx_int8(_private(model), inputs, calibration, False, folder)
        for peer, build in (("onnxruntime int8", build_ort), ("openvino int8", build_openvino)):
            try:
                calls[peer] = build(path, inputs, threads)[0].run
            except Exception as e:      # a peer that fails is reported; the run goes on
                print(f"{peer}: unavailable ({type(e).__name__}: {e})", flush=True)
    same = bool(torch.equal(blocks(x), nchw(x)))
    clock = time.thread_time if threads == 1 else time.perf_counter
    times = {k: [] for k in calls}
    for f in calls.values():
        for _ in range(3):
            f()
    keys = list(calls)
    for r in range(runs):
        for k in keys[r % len(keys):] + keys[:r % len(keys)]:
            wait_until_idle()       # no peer's spinning workers (ONNX Runtime's: ~40 ms) in the next one's call
            t = clock()
            calls[k]()
            times[k].append(clock() - t)
    return {"same_outputs": same, **{k: (1e3 * statistics.median(t), 1e3 * min(t)) for k, t in times.items()}}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.int8_blocks", description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="resnet18")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=40)
    args = ap.parse_args(argv)
    os.environ["FXC_NUM_THREADS"] = str(args.threads)
    import torch
    torch.set_num_threads(args.threads)
    clock = "CPU time of the calling thread" if args.threads == 1 else "wall clock"
    for name in args.models.split(","):
        res = run(name.strip(), args.threads, args.runs)
        print(f"{name}, batch 1, {args.threads} thread(s), {clock}, {args.runs} interleaved runs "
              f"(load {os.getloadavg()[0]:.1f}); fxc builds give the same output: {res.pop('same_outputs')}")
        for k, (median, least) in res.items():
            print(f"  {k:26} median {median:7.2f} ms   min {least:7.2f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
