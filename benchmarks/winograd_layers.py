"""Per-layer: fxc's direct conv2d_packed kernel against Winograd F(4x4,3x3) on stride-1 3x3 convs.

    FXC_NUM_THREADS=1 .venv/bin/python -m benchmarks.winograd_layers [--runs 150] [NxCxKxHxW ...]

Each layer is conv2d(pad 1) + bias + relu (the epilogue fused), built twice (FXC_WINOGRAD=0 / all) and timed
interleaved, one call of each per round on a fixed weight (the weight transform is a cached prepack step
and runs in the first call, timed as `first call` with the one-time costs). Prints the minimum wall time of many calls (the machine is shared: the
minimum is the least disturbed) and the direct-conv-equivalent GFLOP/s, plus the max error relative to
the output scale. Default layers: ResNet-18's stride-1 3x3 convs at batch 1.
"""
from __future__ import annotations

import argparse
import os
import time

import numpy as np

from fxc.build import build
from fxc.relay_like.builder import Builder
from fxc.relay_like.passes.use_winograd import winograd_pays

RESNET18 = ["1x64x64x56x56", "1x128x128x28x28", "1x256x256x14x14", "1x512x512x7x7"]


def _layer(n, c, k, h, w, winograd: bool):
    os.environ["FXC_WINOGRAD"] = "all" if winograd else "0"
    try:
        g = Builder().graph
        x = g.input((n, c, h, w), "float32")
        wt = g.input((k, c, 3, 3), "float32")
        bias = g.input((k, 1, 1), "float32")
        y = g.call1("conv2d", [g.call1("pad", [x], pad=(1, 1, 1, 1), value=0.0, mode="constant"), wt])
        g.outputs = [g.call1("relu", [g.call1("add", [y, bias])])]
        module = build(g)
    finally:
        os.environ.pop("FXC_WINOGRAD", None)
    if winograd and not any("conv2d_winograd" in line for line in module.kernels):
        return None
    rng = np.random.default_rng(0)
    args = [rng.standard_normal(s).astype(np.float32) for s in [(n, c, h, w), (k, c, 3, 3), (k, 1, 1)]]
    out = np.empty((n, k, h, w), np.float32)
    ptrs = [a.ctypes.data for a in args]
    token = tuple((id(a), 0) for a in args)
    t0 = time.perf_counter()
    module.run_pointers(ptrs, [out.ctypes.data], token)          # packs (or transforms) the weight
    prepack = time.perf_counter() - t0

    def call(keep=(args, module)):          # the closure keeps the arrays behind the pointers alive
        t = time.perf_counter()
        module.run_pointers(ptrs, [out.ctypes.data], token)
        return time.perf_counter() - t
    return call, out, prepack


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("layers", nargs="*", default=RESNET18, help="NxCxKxHxW (padding 1, stride 1)")
    ap.add_argument("--runs", type=int, default=150)
    args = ap.parse_args()
    print(f"threads: {os.environ.get('FXC_NUM_THREADS', 'all')}; load average {os.getloadavg()[0]:.2f}")
    for spec in args.layers:
        n, c, k, h, w = map(int, spec.split("x"))
        flops = 2 * n * k * h * w * c * 9
        direct, wino = _layer(n, c, k, h, w, False), _layer(n, c, k, h, w, True)
        if wino is None:
            print(f"{spec}: not eligible for Winograd")
            continue
        td, tw = [], []
        for _ in range(args.runs):
            td.append(direct[0]())
            tw.append(wino[0]())
        d, wn = min(td), min(tw)
        err = np.abs(direct[1] - wino[1]).max() / max(np.abs(direct[1]).max(), 1.0)
        print(f"{spec}: direct {1e3 * d:7.3f} ms {flops / d / 1e9:6.1f} GFLOP/s | winograd {1e3 * wn:7.3f} ms "
              f"{flops / wn / 1e9:6.1f} GFLOP/s-equiv (first call {1e3 * wino[2]:.1f} ms) | speed-up {d / wn:4.2f}x | "
              f"max err / output scale {err:.1e}" + ("" if winograd_pays(c, k, n, h, w) else "  [fxc picks direct]"),
              flush=True)


if __name__ == "__main__":
    main()
