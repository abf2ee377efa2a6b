"""Windowed-reduction microbenchmark on one OpenCL device: MobileNetV2's depthwise convolutions and ResNet-18's
max pool (and a permute, for the index width), each under fxc's GPU schedules: the sliding-window schedule
(lowering/schedules/gpu/window.py) with the device's index width (PoCL: 64 bits, divisions in 32), its staged form
(the work-group's input tile in local memory, float4 loads: "staged"; scalar loads: "staged_scalar";
gpu/window_tile.py), with every
provable address in 32 bits (a GPU's default) and with none (fxc.lowering.int_ranges), one
work-item per output (one_per_output.py), and, for the max pool, its CPU loop IR run as one work-item per output
row (its te.extern form, the default on a CPU device).

    python -m benchmarks.opencl_window [--runs 5] [--device 0] [--layers dw1,pool] [--variants window,staged]
    python -m benchmarks.opencl_window --models mobilenet_v2,resnet18

Device times come from OpenCL profiling events (no host copies): each cell is the fastest / the median of --runs
calls, in ms (on 2 shared cores the median swings by 2x between runs)."""
from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
from contextlib import contextmanager

import numpy as np

from benchmarks.device_time import device_ms, device_times, table_row

# (name, op, channels, input size, stride): MobileNetV2 (224 x 224) depthwise 3x3 layers, ResNet-18's 3x3/2 max pool
LAYERS = [("dw 32x112 s1", "dw", 32, 112, 1), ("dw 96x112 s2", "dw", 96, 112, 2), ("dw 144x56 s1", "dw", 144, 56, 1),
          ("dw 192x28 s1", "dw", 192, 28, 1), ("dw 384x14 s1", "dw", 384, 14, 1), ("dw 960x7 s1", "dw", 960, 7, 1),
          ("maxpool 64x112 3x3/2", "pool", 64, 112, 2), ("permute 64x112x112", "permute", 64, 112, 1)]
VARIANTS = ("window", "staged", "staged_scalar", "window_i32", "window_i64", "one_per_output", "loops")
STAGED = {"window_local_bytes": 1 << 15}
MODEL_VARIANTS = ("default", "no_gemv", "before")   # the device's defaults; no GEMV schedule and scalarized
#                                                    kernels; no window schedule and 64-bit indices only either


@contextmanager
def variant(name: str):
    """Build with one schedule / index width (patched in for the measurement only)."""
    from fxc.backends.opencl.render import OpenCLRenderer
    from fxc.lowering.schedules import gpu
    from fxc.runtime.opencl import device as cl_api
    for_caps, index_type, caps = gpu.Knobs.for_caps, OpenCLRenderer.index_type, cl_api.opencl_caps
    knobs = {"default": {}, "before": {"window_cols": 0, "extern_computes": False, "gemv_max_rows": 0},
             "no_gemv": {"gemv_max_rows": 0},
             "window": {"extern_computes": True}, "window_i64": {"extern_computes": True},
             "window_i32": {"extern_computes": True},
             "staged": {"extern_computes": True, "vector_width": 4, **STAGED},
             "staged_scalar": {"extern_computes": True, "vector_width": 1, **STAGED},
             "one_per_output": {"window_cols": 0, "extern_computes": True}, "loops": {"extern_computes": False}}[name]
    gpu.Knobs.for_caps = staticmethod(lambda caps: dataclasses.replace(for_caps(caps), **knobs))
    if name in ("window_i64", "before"):    # no 32-bit index arithmetic at all
        OpenCLRenderer.index_type = None
    if name == "window_i32":            # every address proven to fit in 32 bits (a GPU's default)
        cl_api.opencl_caps = lambda info: dataclasses.replace(caps(info), index_bits=32)
    if name in ("no_gemv", "before"):   # every vector taken apart (as before vector loads)
        cl_api.opencl_caps = lambda info: dataclasses.replace(caps(info), vector_widths=frozenset())
    try:
        yield
    finally:
        gpu.Knobs.for_caps, OpenCLRenderer.index_type, cl_api.opencl_caps = for_caps, index_type, caps


def layer_ms(op: str, c: int, size: int, stride: int, runs: int, device: str) -> tuple:
    from fxc.driver.build import build
    from fxc.relay_like.builder import Builder
    b = Builder()
    rng = np.random.default_rng(0)
    if op == "dw":
        x = rng.standard_normal((1, c, size + 2, size + 2)).astype(np.float32)
        w = rng.standard_normal((c, 1, 3, 3)).astype(np.float32)
        xi, wi = b.graph.input(x.shape, "float32"), b.graph.input(w.shape, "float32")
        b.graph.outputs = [b.call("conv2d", [xi, wi], stride=(stride, stride), groups=c)]
        args = (x, w)
        import torch
        ref = torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(w), stride=stride, groups=c).numpy()
    elif op == "permute":
        x = rng.standard_normal((1, c, size, size)).astype(np.float32)
        xi = b.graph.input(x.shape, "float32")
        b.graph.outputs = [b.call("permute", [xi], dims=(0, 2, 3, 1))]
        args, ref = (x,), x.transpose(0, 2, 3, 1)
    else:
        x = rng.standard_normal((1, c, size, size)).astype(np.float32)
        xi = b.graph.input(x.shape, "float32")
        b.graph.outputs = [b.call("max_pool2d", [xi], kernel=(3, 3), stride=(stride, stride), padding=(1, 1))]
        args = (x,)
        import torch
        ref = torch.nn.functional.max_pool2d(torch.from_numpy(x), 3, stride, 1).numpy()
    mod = build(b.graph, target=f"opencl -device={device}", profile=True)
    assert np.allclose(mod(*args), ref, rtol=1e-4, atol=1e-4), f"{op} {c}x{size} is wrong"
    return device_times(mod, args, runs)


def model_ms(name: str, variants: tuple, runs: int, device: str) -> list:
    """A whole reference model (fxc.testing.models, batch 1) through fxc.from_torch, built once per variant: the sum
    of its kernels' device times, the fastest of `runs` calls, the variants' calls interleaved (the load of a shared
    machine then weighs on each alike)."""
    import torch

    import fxc
    from fxc.testing.models import example_inputs, make_model
    model, inputs = make_model(name), example_inputs(name)
    compiled = []
    for v in variants:
        with variant(v):
            compiled.append(fxc.from_torch(model, inputs, target=f"opencl -device={device}", profile=True))
    times = [[] for _ in variants]
    with torch.no_grad():
        want = model(*inputs)
        for c in compiled:
            torch.testing.assert_close(c(*inputs), want, rtol=1e-3, atol=1e-3)
        for _ in range(runs):
            for c, t in zip(compiled, times):
                t.append(device_ms(c.module, c, *inputs))
    return [(min(t), statistics.median(t)) for t in times]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.opencl_window", description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--device", default="0")
    p.add_argument("--layers", help="comma list of name prefixes (default: all)")
    p.add_argument("--variants", help=f"comma list of {', '.join(VARIANTS)} (default: all)")
    p.add_argument("--models", help="comma list of whole models (fxc.testing.models) instead of the layers")
    a = p.parse_args(argv)
    os.environ["FXC_MODULE_CACHE"] = "0"        # each variant is built, not read back from the cache
    from fxc.runtime.opencl.device import open_device
    print(f"device: {open_device(a.device).info['name']}")
    variants = a.variants.split(",") if a.variants else VARIANTS
    if not a.models:
        print(table_row("layer", variants, 24, 16) + "   (ms, device time: min/median)")
    if a.models:
        print(table_row("model", MODEL_VARIANTS, 24, 16) + "   (ms, device time: min/median)")
    for name in (a.models.split(",") if a.models else []):
        row = ["{:.1f}/{:.1f}".format(*ms) for ms in model_ms(name, MODEL_VARIANTS, a.runs, a.device)]
        print(table_row(name, row, 24, 16), flush=True)
    for name, op, c, size, stride in ([] if a.models else LAYERS):
        if a.layers and not any(name.startswith(s) for s in a.layers.split(",")):
            continue
        row = []
        for v in variants:
            if (v == "loops" and op != "pool") or (v in ("one_per_output", "staged", "staged_scalar")
                                                   and op == "permute"):
                row.append("-")
                continue
            with variant(v):
                row.append(layer_ms(op, c, size, stride, a.runs, a.device))
        print(table_row(name, row, 24, 16), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
