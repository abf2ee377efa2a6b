"""Matrix-vector microbenchmark on one OpenCL device: the classifier layers of the reference models at batch 1
(torch.nn.Linear through fxc.from_torch: [rows, k] x [n, k]^T + b; and "x @ w" with w [k, n], the other layout) under
fxc's GPU schedules: the GEMV schedule
(lowering/schedules/gpu/gemv.py) with the device's knobs ("gemv"), its GPU form (64 work-items along k, float4
loads, a shared-memory tree: "gemv_tree"), and the GEMM schedule it replaces ("gemm": no GEMV schedule, as before).

    python -m benchmarks.opencl_gemv [--runs 10] [--device 0] [--variants gemv,gemm]

Device times come from OpenCL profiling events (no host copies): each cell is the fastest / the median of --runs
calls, in ms."""
from __future__ import annotations

import argparse
import dataclasses
import os
from contextlib import contextmanager

from benchmarks.device_time import device_times, table_row

# (name, rows, k, n): MobileNetV2's and ResNet-18's classifiers, a BERT-base projection, a batch of 4
SHAPES = [("mobilenet_v2 fc", 1, 1280, 1000), ("resnet18 fc", 1, 512, 1000), ("bert 768x768", 1, 768, 768),
          ("mobilenet_v2 fc x4", 4, 1280, 1000), ("x @ w 1280x1000", 1, 1280, 1000)]
VARIANTS = {"gemv": {}, "gemv_tree": {"gemv_threads": 64, "gemv_outputs": 4, "vector_width": 4},
            "gemm": {"gemv_max_rows": 0}}


@contextmanager
def variant(name: str):
    """Build with one variant's knobs (patched in for the measurement only)."""
    from fxc.lowering.schedules import gpu
    for_caps = gpu.Knobs.for_caps
    gpu.Knobs.for_caps = staticmethod(lambda caps: dataclasses.replace(for_caps(caps), **VARIANTS[name]))
    try:
        yield
    finally:
        gpu.Knobs.for_caps = for_caps


def linear_ms(name: str, rows: int, k: int, n: int, runs: int, device: str) -> tuple:
    import torch

    import fxc
    torch.manual_seed(0)
    x = torch.randn(rows, k)
    if name.startswith("x @ w"):
        model, args = torch.nn.Module(), (x, torch.randn(k, n))
        model.forward = lambda a, b: a @ b
    else:
        model, args = torch.nn.Linear(k, n).eval(), (x,)
    c = fxc.from_torch(model, args, target=f"opencl -device={device}", profile=True)
    with torch.no_grad():
        torch.testing.assert_close(c(*args), model(*args), rtol=1e-3, atol=1e-3)
        return device_times(c.module, args, runs, call=c)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.opencl_gemv", description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=10)
    p.add_argument("--device", default="0")
    p.add_argument("--variants", help=f"comma list of {', '.join(VARIANTS)} (default: all)")
    a = p.parse_args(argv)
    os.environ["FXC_MODULE_CACHE"] = "0"        # each variant is built, not read back from the cache
    from fxc.runtime.opencl.device import open_device
    print(f"device: {open_device(a.device).info['name']}")
    variants = a.variants.split(",") if a.variants else list(VARIANTS)
    print(table_row("layer", variants, 22, 18) + "   (ms, device time: min/median)")
    for name, rows, k, n in SHAPES:
        row = []
        for v in variants:
            with variant(v):
                row.append(linear_ms(name, rows, k, n, a.runs, a.device))
        print(table_row(name, row, 22, 18), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
