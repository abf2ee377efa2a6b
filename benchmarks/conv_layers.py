"""Convolutions outside the CNN mainstream, layer by layer: fxc against PyTorch eager at one thread.

    .venv/bin/python -m benchmarks.conv_layers                 # every layer below
    .venv/bin/python -m benchmarks.conv_layers "k3 s2" grouped # layers whose name contains one of the words
    .venv/bin/python -m benchmarks.conv_layers --runs 30 --json out.json

The layers: wav2vec2's 1-D convs (the kernel-10 stride-5 stem over one channel, kernel-3 stride-2 and kernel-2
stride-2 convs of 512 channels, run as conv2d over [1, C, 1, L]), grouped convs whose groups hold whole lane blocks
(wav2vec2-base's positional conv) and ones whose groups do not (24, 8 and 4 channels a group), and two of
ResNet-18's 3x3 convs for comparison. Each is `fxc.from_torch` of one nn.Conv1d / nn.Conv2d, checked against eager.

Time is the calling thread's CPU time (`time.thread_time`) with FXC_NUM_THREADS=1 and torch.set_num_threads(1), so
both run on the calling thread and the time it spent preempted on a loaded, shared host is not counted: min and
median over --runs calls. GFLOP/s counts 2 per multiply-add of the conv.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

LAYERS = {  # name -> (module constructor, input shape)
    "stem k10 s5 1->512 @16000": ("Conv1d", (1, 512, 10, 5, 0, 1), (1, 1, 16000)),
    "k3 s2 512->512 @3199": ("Conv1d", (512, 512, 3, 2, 0, 1), (1, 512, 3199)),
    "k3 s2 512->512 @799": ("Conv1d", (512, 512, 3, 2, 0, 1), (1, 512, 799)),
    "k2 s2 512->512 @99": ("Conv1d", (512, 512, 2, 2, 0, 1), (1, 512, 99)),
    "grouped k128 g16 768 @49 (48 a group)": ("Conv1d", (768, 768, 128, 1, 64, 16), (1, 768, 49)),
    "grouped k128 g32 768 @49 (24 a group)": ("Conv1d", (768, 768, 128, 1, 64, 32), (1, 768, 49)),
    "grouped 3x3 g32 128 @56 (4 a group)": ("Conv2d", (128, 128, 3, 1, 1, 32), (1, 128, 56, 56)),
    "grouped 3x3 g32 256 @28 (8 a group)": ("Conv2d", (256, 256, 3, 1, 1, 32), (1, 256, 28, 28)),
    "grouped 3x3 g8 192 @28 (24 a group)": ("Conv2d", (192, 192, 3, 1, 1, 8), (1, 192, 28, 28)),
    "squeezenet 1x1 512->1000 @13": ("Conv2d", (512, 1000, 1, 1, 0, 1), (1, 512, 13, 13)),
    "resnet18 3x3 s1 128 @28": ("Conv2d", (128, 128, 3, 1, 1, 1), (1, 128, 28, 28)),
    "resnet18 3x3 s2 128->256 @28": ("Conv2d", (128, 256, 3, 2, 1, 1), (1, 128, 28, 28)),
}


def cpu_times(fn, runs: int) -> list:
    fn()
    out = []
    for _ in range(runs):
        t = time.thread_time()
        fn()
        out.append(time.thread_time() - t)
    return out


def run_layer(name: str, runs: int) -> dict:
    import torch

    import fxc
    kind, (c, o, k, s, p, g), shape = LAYERS[name]
    torch.manual_seed(0)
    m = getattr(torch.nn, kind)(c, o, k, s, padding=p, groups=g).eval()
    x = torch.randn(shape)
    with torch.no_grad():
        ref = m(x)
        compiled = fxc.from_torch(m, (x,))
        err = float((compiled(x) - ref).abs().max()) / float(ref.abs().max())
        kk = k * k if kind == "Conv2d" else k
        gflop = 2 * ref.numel() * (c // g) * kk / 1e9
        f, e = cpu_times(lambda: compiled(x), runs), cpu_times(lambda: m(x), runs)
    row = {"layer": name, "gflop": gflop, "max_err_rel": err,
           "kernels": [k.split(" -> ")[0] for k in compiled.module.kernels]}
    for peer, ts in (("fxc", f), ("eager", e)):
        row[peer] = {"min_ms": 1e3 * min(ts), "median_ms": 1e3 * statistics.median(ts),
                     "gflops_at_min": gflop / min(ts)}
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.conv_layers", description=__doc__.split("\n\n")[0])
    ap.add_argument("words", nargs="*", help="run the layers whose name contains one of these")
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--json", default=None, help="write the rows to this file too")
    args = ap.parse_args(argv)
    os.environ["FXC_NUM_THREADS"] = "1"
    import torch
    torch.set_num_threads(1)
    names = [n for n in LAYERS if not args.words or any(w in n for w in args.words)]
    if not names:
        print(f"no layer matches {args.words}; layers: {', '.join(LAYERS)}", file=sys.stderr)
        return 2
    print(f"{'layer':40s} {'GFLOP':>6s} {'fxc min / median ms':>20s} {'GFLOP/s':>8s} "
          f"{'eager min / median ms':>22s} {'GFLOP/s':>8s}  err    kernels")
    rows = []
    for name in names:
        r = run_layer(name, args.runs)
        rows.append(r)
        f, e = r["fxc"], r["eager"]
        print(f"{name:40s} {r['gflop']:6.3f} {f['min_ms']:9.2f} / {f['median_ms']:8.2f} {f['gflops_at_min']:8.1f} "
              f"{e['min_ms']:10.2f} / {e['median_ms']:9.2f} {e['gflops_at_min']:8.1f}  {r['max_err_rel']:.0e}  "
              f"{'; '.join(r['kernels'])}", flush=True)
    if args.json:
        from fxc.runtime.store import atomic_write
        atomic_write(args.json, json.dumps(rows, indent=1).encode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
