"""Matrix-vector microbenchmark on one OpenCL device: the classifier layers of the reference models at batch 1
(a linear layer with its bias: [rows, k] x [n, k]^T + b) under fxc's GPU schedules: the GEMV schedule
(lowering/schedules/gpu/gemv.py) with the device's knobs ("gemv"), its GPU form (64 work-items along k, float4
loads, a shared-memory tree: "gemv_tree"), and the GEMM schedule it replaces ("gemm": no GEMV schedule, as before).

    python -m benchmarks.opencl_gemv [--runs 10] [--device 0] [--variants gemv,gemm]

Device times come from OpenCL profiling events (no host copies): each cell is the fastest / the median of --runs
calls, in ms."""
from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
from contextlib import contextmanager

import numpy as np

# (name, rows, k, n): MobileNetV2's and ResNet-18's classifiers, a BERT-base projection, a batch of 4
SHAPES = [("mobilenet_v2 fc", 1, 1280, 1000), ("resnet18 fc", 1, 512, 1000), ("bert 768x768", 1, 768, 768),
          ("mobilenet_v2 fc x4", 4, 1280, 1000)]
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


def linear_ms(rows: int, k: int, n: int, runs: int, device: str) -> tuple:
    from fxc.build import build
    from fxc.relay_like.builder import Builder
    rng = np.random.default_rng(0)
    x, w, bias = (rng.standard_normal(s).astype(np.float32) for s in ((rows, k), (n, k), (n,)))
    b = Builder()
    xi, wi, bi = (b.graph.input(a.shape, "float32") for a in (x, w, bias))
    b.graph.outputs = [b.call("add", [b.call("matmul", [xi, b.call("permute", [wi], dims=(1, 0))]), bi])]
    mod = build(b.graph, target=f"opencl -device={device}", profile=True)
    assert np.allclose(mod(x, w, bias), x @ w.T + bias, rtol=1e-3, atol=1e-3), f"linear {rows}x{k}x{n} is wrong"
    times = []
    for _ in range(runs):
        mod.profile(reset=True)
        mod(x, w, bias)
        times.append(sum(r["total_ms"] for r in mod.profile()))
    return min(times), statistics.median(times)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.opencl_gemv", description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=10)
    p.add_argument("--device", default="0")
    p.add_argument("--variants", help=f"comma list of {', '.join(VARIANTS)} (default: all)")
    a = p.parse_args(argv)
    os.environ["FXC_MODULE_CACHE"] = "0"        # each variant is built, not read back from the cache
    from fxc.runtime.opencl import open_device
    print(f"device: {open_device(a.device).info['name']}")
    variants = a.variants.split(",") if a.variants else list(VARIANTS)
    print(f"{'layer':<22}" + "".join(f"{v:>18}" for v in variants) + "   (ms, device time: min/median)")
    for name, rows, k, n in SHAPES:
        row = []
        for v in variants:
            with variant(v):
                row.append("{:.3f}/{:.3f}".format(*linear_ms(rows, k, n, a.runs, a.device)))
        print(f"{name:<22}" + "".join(f"{x:>18}" for x in row), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
