"""A/B of how a webgl shader picks a texel's component at a run-time index: `fxc_pickf` as selects by bools
(mix(mix(v.x, v.y, c == 1), mix(v.z, v.w, c == 3), c >= 2), fxc's now) against the ternary chain it replaced
(`c < 2 ? (c == 0 ? v.x : v.y) : (c == 2 ? v.z : v.w)`, which hangs SwiftShader's compiler when 32 of them sit in an
unrolled loop body: docs/web.md). The same model (a 3x3 conv2d 32 -> 32 channels at 64x64 and a row sum) is built
twice, once with each helper; calls alternate in one page; prints each variant's median and best call (ms).

    python -m benchmarks.webgl_pick_ab [--calls 11]
"""
import argparse
import time

import numpy as np

import fxc.backends.webgl.lanes as lanes
from fxc.driver.build import build
from fxc.relay_like.builder import Builder

TERNARY = {"f": "float fxc_pickf(vec4 v, int c) { return c < 2 ? (c == 0 ? v.x : v.y) : (c == 2 ? v.z : v.w); }",
           "i": "int fxc_picki(ivec4 v, int c) { return c < 2 ? (c == 0 ? v.x : v.y) : (c == 2 ? v.z : v.w); }"}


def model(pick: dict):
    """The model built with `pick` as the component helpers (the renderer's own restored after)."""
    own = dict(lanes.PICK)
    lanes.PICK.update(pick)
    try:
        b = Builder()
        x, w = b.graph.input((1, 32, 64, 64), "float32"), b.graph.input((32, 32, 3, 3), "float32")
        b.graph.outputs = [b.call("sum", [b.call("exp", [x])], axes=[3], keepdim=False), b.call("conv2d", [x, w])]
        return build(b.graph, target="webgl")
    finally:
        lanes.PICK.update(own)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=11)
    args = ap.parse_args(argv)
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal((1, 32, 64, 64)).astype(np.float32),
              rng.standard_normal((32, 32, 3, 3)).astype(np.float32)]
    mods = {"mix (now)": model({}), "ternary": model(TERNARY)}
    outs = [m(*arrays) for m in mods.values()]           # the first call JIT-compiles the shaders
    assert all(np.array_equal(a, b) for a, b in zip(*outs)), "the two variants disagree"
    times: dict = {n: [] for n in mods}
    for _ in range(args.calls):
        for n, m in mods.items():
            t0 = time.perf_counter()
            m(*arrays)
            times[n].append(1e3 * (time.perf_counter() - t0))
    for n, t in times.items():
        print(f"{n:10s} median {np.median(t):7.1f} ms  best {min(t):7.1f} ms  ({args.calls} calls)")


if __name__ == "__main__":
    main()
