"""GEMM microbenchmark on one OpenCL device: fxc's generated matmul kernel against CLBlast's SGEMM, on the GEMM
shapes of ResNet-18's convolutions (im2col: M = output channels, N = output pixels, K = in channels x kernel).

    python -m benchmarks.opencl_gemm [--runs 5] [--device 0]

Device times come from OpenCL profiling events on both sides (no host copies). Needs pyclblast (Debian
libclblast-dev, then pip install pyclblast); without it only fxc's column is printed."""
from __future__ import annotations

import argparse
import statistics

import numpy as np

from benchmarks.device_time import device_times

# (name, M, N, K): ResNet-18 batch 1 convolutions as GEMMs
SHAPES = [("conv1 7x7/2", 64, 12544, 147), ("layer1 3x3", 64, 3136, 576), ("layer2 3x3", 128, 784, 1152),
          ("layer3 3x3", 256, 196, 2304), ("layer4 3x3", 512, 49, 4608)]


def fxc_gemm_ms(m: int, n: int, k: int, runs: int, device: str) -> float:
    from fxc.driver.build import build
    from fxc.relay_like.builder import Builder
    b = Builder()
    a, w = b.graph.input((m, k), "float32"), b.graph.input((k, n), "float32")
    b.graph.outputs = [b.call("matmul", [a, w])]
    mod = build(b.graph, target=f"opencl -device={device}", profile=True)
    x, y = np.random.rand(m, k).astype(np.float32), np.random.rand(k, n).astype(np.float32)
    out = mod(x, y)
    assert np.allclose(out, x @ y, rtol=1e-3, atol=1e-3), "fxc's GEMM is wrong"
    return device_times(mod, (x, y), runs)[1]


def clblast_gemm_ms(m: int, n: int, k: int, runs: int, device: str) -> float | None:
    try:
        import pyclblast
    except ImportError:
        return None
    import pyopencl as cl
    import pyopencl.array as cla

    from fxc.runtime.opencl.device import open_device
    dev = open_device(device)
    q = dev.queue
    x, y = np.random.rand(m, k).astype(np.float32), np.random.rand(k, n).astype(np.float32)
    a, b, c = cla.to_device(q, x), cla.to_device(q, y), cla.zeros(q, (m, n), np.float32)
    pyclblast.gemm(q, m, n, k, a, b, c, a_ld=k, b_ld=n, c_ld=n).wait()      # compiles CLBlast's kernels
    assert np.allclose(c.get(), x @ y, rtol=1e-3, atol=1e-3), "CLBlast's GEMM is wrong"
    times = []
    for _ in range(runs):
        ev = pyclblast.gemm(q, m, n, k, a, b, c, a_ld=k, b_ld=n, c_ld=n)
        ev.wait()
        times.append((ev.profile.end - ev.profile.start) / 1e6)
    del cl
    return statistics.median(times)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--device", default="0")
    a = p.parse_args(argv)
    from fxc.runtime.opencl.device import open_device
    print(f"device: {open_device(a.device)}")
    print(f"{'shape':<14} {'M':>5} {'N':>6} {'K':>5} {'fxc GFLOP/s':>12} {'CLBlast GFLOP/s':>16} {'fxc/CLBlast':>12}")
    for name, m, n, k in SHAPES:
        flop = 2 * m * n * k
        f = fxc_gemm_ms(m, n, k, a.runs, a.device)
        c = clblast_gemm_ms(m, n, k, a.runs, a.device)
        cg = f"{flop / c / 1e6:16.1f}" if c else f"{'-':>16}"
        ratio = f"{c / f:12.2f}" if c else f"{'-':>12}"
        print(f"{name:<14} {m:>5} {n:>6} {k:>5} {flop / f / 1e6:12.1f} {cg} {ratio}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
