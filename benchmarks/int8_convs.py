"""ResNet-18's convolutions in int8 against fxc's own float32, layer by layer (issue 43: int8 >= 2x fp32 on VNNI).

    .venv/bin/python -m benchmarks.int8_convs                      # every layer, this host's target
    .venv/bin/python -m benchmarks.int8_convs --target "llvm -mcpu=haswell" --runs 30 --json out.json

int8: one qconv2d (ops/quant.py: uint8 activations, int8 per-channel weights, float32 bias, relu, uint8 out: the
dequantize -> conv -> relu -> quantize chain of a static PT2E / QDQ model), built by fxc.driver.build, so use_int8 makes
it conv2d_packed_i8 (the target's Caps.int8_dot form). fp32: `fxc.from_torch` of the same nn.Conv2d + ReLU. Both
batch 1, timed interleaved in one process, min and median over --runs calls each: at --threads 1 (the default) the
calling thread's CPU time (FXC_NUM_THREADS=1: the kernels run on it; time preempted on a loaded, shared host is not
counted), else wall clock at that many threads (the noise of a shared host falls on both alike). GOP/s counts 2 per
multiply-add.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

LAYERS = {  # name -> (in channels, out channels, kernel, stride, padding, input size)
    "conv1 7x7 s2 3->64 @224": (3, 64, 7, 2, 3, 224),
    "layer1 3x3 64 @56": (64, 64, 3, 1, 1, 56),
    "layer2 3x3 s2 64->128 @56": (64, 128, 3, 2, 1, 56),
    "layer2 1x1 s2 64->128 @56": (64, 128, 1, 2, 0, 56),
    "layer2 3x3 128 @28": (128, 128, 3, 1, 1, 28),
    "layer3 3x3 s2 128->256 @28": (128, 256, 3, 2, 1, 28),
    "layer3 3x3 256 @14": (256, 256, 3, 1, 1, 14),
    "layer4 3x3 s2 256->512 @14": (256, 512, 3, 2, 1, 14),
    "layer4 3x3 512 @7": (512, 512, 3, 1, 1, 7),
}


def int8_layer(c, o, k, s, p, size, target, rng):
    """(module, input) of one quantised conv + relu."""
    import numpy as np

    from fxc.driver.build import build
    from fxc.relay_like.builder import Builder
    b = Builder()
    g = b.graph
    x = rng.integers(0, 256, (1, c, size, size)).astype(np.uint8)
    w = rng.integers(-128, 128, (o, c, k, k)).astype(np.int8)
    consts = [w, rng.uniform(-1, 1, o).astype(np.float32), np.float32(0.02), np.int32(3),
              rng.uniform(2 ** -9, 2 ** -6, o).astype(np.float32), np.zeros(o, np.int32), np.float32(0.05),
              np.int32(0)]
    xi = g.input(x.shape, "uint8")
    g.outputs = g.call("qconv2d", [xi] + [g.const(t) for t in consts], stride=(s, s), padding=(p, p), relu=True)
    return build(g, target=target), x


def fp32_layer(c, o, k, s, p, size, target):
    import torch

    import fxc
    m = torch.nn.Sequential(torch.nn.Conv2d(c, o, k, s, p), torch.nn.ReLU()).eval()
    x = torch.randn(1, c, size, size)
    with torch.no_grad():
        return fxc.from_torch(m, (x,), target=target), x


def times(fns: dict, runs: int, clock) -> dict:
    """Each fn called `runs` times, interleaved, after one warm-up call: seconds per call by `clock`."""
    out = {k: [] for k in fns}
    for fn in fns.values():
        fn()
    for r in range(runs):
        for k in (list(fns) if r % 2 == 0 else list(reversed(fns))):
            t = clock()
            fns[k]()
            out[k].append(clock() - t)
    return out


def main(argv=None) -> int:
    import numpy as np
    import torch
    ap = argparse.ArgumentParser(prog="python -m benchmarks.int8_convs", description=__doc__.split("\n\n")[0])
    ap.add_argument("words", nargs="*", help="run the layers whose name contains one of these")
    ap.add_argument("--target", default="llvm")
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    os.environ["FXC_NUM_THREADS"] = str(args.threads)
    torch.set_num_threads(args.threads)
    clock = time.thread_time if args.threads == 1 else time.perf_counter
    from fxc.target import Target
    caps = Target.parse(args.target).caps
    print(f"target {args.target}: int8_dot {caps.int8_dot or 'scalar'}, {args.threads} thread(s), "
          f"{'CPU' if args.threads == 1 else 'wall'} time", flush=True)
    rows = []
    rng = np.random.default_rng(0)
    for name, (c, o, k, s, p, size) in LAYERS.items():
        if args.words and not any(w in name for w in args.words):
            continue
        q, xq = int8_layer(c, o, k, s, p, size, args.target, rng)
        f, xf = fp32_layer(c, o, k, s, p, size, args.target)
        with torch.no_grad():
            ts = times({"int8": lambda: q(xq), "fp32": lambda: f(xf)}, args.runs, clock)
        oh = (size + 2 * p - k) // s + 1
        gop = 2 * o * oh * oh * c * k * k / 1e9
        row = {"layer": name, "gop": gop}
        for key, t in ts.items():
            row[key] = {"min_ms": 1e3 * min(t), "median_ms": 1e3 * statistics.median(t), "gops_at_min": gop / min(t)}
        row["speedup_min"] = min(ts["fp32"]) / min(ts["int8"])
        row["speedup_median"] = statistics.median(ts["fp32"]) / statistics.median(ts["int8"])
        rows.append(row)
        print(f"{name:<30} int8 {row['int8']['min_ms']:7.3f} ms ({row['int8']['gops_at_min']:6.1f} GOP/s)  "
              f"fp32 {row['fp32']['min_ms']:7.3f} ms ({row['fp32']['gops_at_min']:6.1f} GFLOP/s)  "
              f"x{row['speedup_min']:.2f} (median x{row['speedup_median']:.2f})", flush=True)
    tq = sum(r["int8"]["min_ms"] for r in rows)
    tf = sum(r["fp32"]["min_ms"] for r in rows)
    print(f"{'all layers (sum of mins)':<30} int8 {tq:7.3f} ms  fp32 {tf:7.3f} ms  x{tf / tq:.2f}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"target": args.target, "threads": args.threads, "rows": rows}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
