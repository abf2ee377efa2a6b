"""What a dynamic artifact costs at run time (issue 26): a model exported once with a dynamic batch
(`fxc.from_torch(..., dynamic_shapes=...)`, `fxc.export`) against artifacts exported static per batch, all run
through `fxc.load` (the deploy runtime) on the same inputs, interleaved, medians of --runs calls after warm-up.

    .venv/bin/python -m benchmarks.dynamic_export [--model resnet18] [--size 64] [--batches 1,5,8] [--runs 30]
                                                  [--target opencl]  # llvm (default) or a device target

Prints the dynamic build's build + export time once, then per batch: dynamic ms, static ms, dynamic / static, and
the static build + export time (the dynamic outputs are checked against the static ones first).
"""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="resnet18", help="a fxc.testing.models image model")
    ap.add_argument("--size", type=int, default=64, help="image height and width")
    ap.add_argument("--batches", default="1,5,8")
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--target", default="llvm", help="llvm, or a device target: opencl, opengl, webgpu, webgl, wasm")
    args = ap.parse_args(argv)
    import torch
    from torch.export import Dim

    import fxc
    from fxc.testing.models import make_model
    batches = [int(b) for b in args.batches.split(",")]
    model, hw = make_model(args.model), args.size
    with tempfile.TemporaryDirectory() as d:
        t = time.perf_counter()
        dynamic = fxc.from_torch(model, (torch.randn(2, 3, hw, hw),),
                                 dynamic_shapes=({0: Dim("batch", min=1, max=max(batches + [16]))},),
                                 target=args.target)
        dyn = fxc.load(fxc.export(dynamic, Path(d) / "dynamic.fxc"))
        print(f"{args.model} {hw}x{hw}: dynamic build + export {time.perf_counter() - t:.1f} s")
        for b in batches:
            t = time.perf_counter()
            static = fxc.from_torch(model, (torch.randn(b, 3, hw, hw),), target=args.target)
            st = fxc.load(fxc.export(static, Path(d) / f"static{b}.fxc"))
            built = time.perf_counter() - t
            x = np.random.default_rng(b).standard_normal((b, 3, hw, hw)).astype(np.float32)
            np.testing.assert_allclose(dyn(x), st(x), rtol=1e-3, atol=1e-3)
            times = ([], [])
            for k in range(args.runs + 3):
                for m, spent in zip((dyn, st), times):
                    a = time.perf_counter()
                    m(x)
                    if k >= 3:
                        spent.append(time.perf_counter() - a)
            td, ts = (1e3 * float(np.median(spent)) for spent in times)
            print(f"batch {b}: dynamic {td:.2f} ms  static {ts:.2f} ms  dynamic/static {td / ts:.3f}  "
                  f"(static build + export {built:.1f} s)")


if __name__ == "__main__":
    main()
