"""ResNet-18 / MobileNetV2 on webgl: this tree's conv forms against the earlier ones, in one process, calls alternated.

    .venv/bin/python -m benchmarks.webgl_conv_ab --models resnet18,mobilenet_v2 --calls 4 [--variants a,b,..]

Variants (each a build of the model on the webgl target, the module cache off), each turning off what it names:
  this tree   as the tree is
  nchw-stem   the image not converted at its zero pad: the stem conv reads NCHW (a component picked a step)
  per-lane    a lane-independent index that is not affine (a padded window's clamped row) computed per lane: the
              depthwise convs with a fused pad fetch their input per lane (four fetches a tap, was one)
  no-pool     max pools expanded to strided slices in NCHW (expand_opaque): the blocked regions end there
  before      all of the above, and the loop over a block's four channels not unrolled (only loops of 8 and more)
  channel-cut draw buffers cut as the output's quarters only (a blocked conv's parts: channel blocks, sharing the
              input texels), not by output pixel within a channel block (sharing the weight texels)
  one-target  no draw buffers (Caps.draw_buffers 1: four outputs a fragment)
  any-share   draw buffers wherever the copies share a load (draw_buffers.MAX_READS 1: a 7x7 conv's channel-block
              quarters too), not only where they read at most half of what they read apart
Calls of the variants alternate in the same page (back to back, so the host's load falls on all alike); prints each
one's draws, every call's seconds, the median and the ratio to the first variant, and max abs error / output scale.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib
import os
import statistics

import numpy as np
import torch

import fxc
import fxc.target as fxc_target
from benchmarks.webgl_models import alternate_calls
from fxc.backends.webgl import draw_buffers, lanes as webgl_lanes
from fxc.testing.models import example_inputs, make_model

eo = importlib.import_module("fxc.relay_like.passes.expand_opaque")    # the module (the package exports its function)
bl = importlib.import_module("fxc.relay_like.passes.use_blocked_layout")


OFF = {"this tree": (), "nchw-stem": ("stem",), "per-lane": ("uniform",), "no-pool": ("pool",),
       "before": ("stem", "uniform", "pool", "unroll"), "channel-cut": ("pixel-cut",), "one-target": ("targets",),
       "any-share": ("max-reads",)}


@contextlib.contextmanager
def _variant(name: str):
    lanes = webgl_lanes.WebGLLanesRenderer
    saved = eo._pool_for_blocks, bl._entry_pad, lanes._unrollable, lanes._uniform
    caps, divisors, reads = fxc_target.webgl_caps, draw_buffers._divisors, draw_buffers.MAX_READS
    off = OFF[name]
    if "pixel-cut" in off:
        draw_buffers._divisors = lambda s: set()
        draw_buffers.MAX_READS = 1.0
    if "max-reads" in off:
        draw_buffers.MAX_READS = 1.0
    if "targets" in off:
        fxc_target.webgl_caps = lambda info: dataclasses.replace(caps(info), draw_buffers=1)
    if "pool" in off:
        eo._pool_for_blocks = lambda n, caps: False
    if "stem" in off:
        bl._entry_pad = lambda n, every_region: False
    if "uniform" in off:
        lanes._uniform = lambda self, e: not self.varying(e)
    if "unroll" in off:
        lanes._unrollable = lambda self, s: saved[2](self, s) and s.extent >= 8
    try:
        yield
    finally:
        eo._pool_for_blocks, bl._entry_pad, lanes._unrollable, lanes._uniform = saved
        fxc_target.webgl_caps, draw_buffers._divisors, draw_buffers.MAX_READS = caps, divisors, reads


def run(model_name: str, variants: list, calls: int) -> None:
    model = make_model(model_name)
    inputs = example_inputs(model_name, batch=1)
    with torch.no_grad():
        expected = model(*inputs).numpy()
    arrays = [x.numpy() for x in inputs]
    built = {}
    for name in variants:
        with _variant(name):
            built[name] = fxc.from_torch(model, inputs, target="webgl")
            built[name](*arrays)                                  # warm-up (and the shaders' compile)
    times, err = alternate_calls(built, arrays, expected, calls)
    scale = float(np.abs(expected).max())
    first = statistics.median(times[variants[0]])
    for name, c in built.items():
        med = statistics.median(times[name])
        calls = ", ".join(f"{t:.2f}" for t in times[name])
        print(f"{model_name} [{name}]: {len(c.module.plan)} draws; calls {calls} s;"
              f" median {med:.2f} s ({first / med:.2f}x of {variants[0]}'s speed); max abs error / scale "
              f"{err[name] / scale:.1e}", flush=True)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--models", default="resnet18,mobilenet_v2")
    p.add_argument("--calls", type=int, default=4)
    p.add_argument("--variants", default=",".join(OFF))
    args = p.parse_args(argv)
    os.environ["FXC_MODULE_CACHE"] = "0"        # each variant built by this process, not taken from the cache
    print(f"load average {os.getloadavg()}", flush=True)
    for name in args.models.split(","):
        run(name, args.variants.split(","), args.calls)
    print(f"load average {os.getloadavg()}", flush=True)


if __name__ == "__main__":
    main()
