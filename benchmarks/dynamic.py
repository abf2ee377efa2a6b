"""Latency of a dynamic build (one build for a range of sizes) against static builds at each size.

    python -m benchmarks.dynamic --cases "resnet18:1,8;mobilenet_v2:1" --runs 30

For each model, one `fxc.from_torch(..., dynamic_shapes=...)` build (the batch, or BERT's sequence length, a
torch.export Dim of range [1, --max]) and one static `fxc.from_torch` build per size; at each size both are timed
round robin (one call of each per round, after 3 warm-up calls), so both see the same machine load. Prints per
size the median ms of each, their ratio (dynamic / static) and the compile seconds of each build.

    python -m benchmarks.dynamic --sweep [--quick]

runs the size sweep of issue 26 against inductor with dynamic=True, writing a JSON and a plot
(benchmarks/dynamic_sweep.py).

    python -m benchmarks.dynamic --pairs "1x16,2x16,4x64,4x128,8x128" --threads 1 [--small]

times BERT built once with a batch and a sequence symbol against static builds and eager
(benchmarks/dynamic_pairs.py).
"""
from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _inputs(name: str, size: int, image: int):
    import torch

    from fxc.testing.models import example_inputs
    if name == "bert":
        return example_inputs(name, batch=1, seq_len=size)
    if name == "transformer_encoder":           # issue 27's nn.TransformerEncoder: [1, sequence, 256]
        return (torch.randn(1, size, 256, generator=torch.Generator().manual_seed(size)),)
    return (torch.randn(size, 3, image, image),)


def _dims(name: str, hi: int):
    from torch.export import Dim
    if name == "bert":
        seq = Dim("seq", min=1, max=min(hi, 128))      # (its position table stops at 128)
        return ({1: seq}, {1: seq})
    if name == "transformer_encoder":
        return ({1: Dim("seq", min=2, max=hi)},)
    return ({0: Dim("batch", min=1, max=hi)},)


def measure(name: str, sizes: list, runs: int, hi: int, image: int) -> list:
    """[(size, dynamic ms list, static ms list, static compile s)], and the dynamic build's compile seconds."""
    import torch

    import fxc
    from fxc.testing.models import make_model
    if name == "transformer_encoder":
        from fxc.testing.standard import transformer_encoder
        torch.manual_seed(0)
        model = transformer_encoder().eval()
    else:
        model = make_model(name)
    t0 = time.perf_counter()
    dynamic = fxc.from_torch(model, _inputs(name, max(2, sizes[0]), image), dynamic_shapes=_dims(name, hi))
    dyn_compile = time.perf_counter() - t0
    rows = []
    with torch.no_grad():
        for size in sizes:
            inputs = _inputs(name, size, image)
            t0 = time.perf_counter()
            static = fxc.from_torch(model, inputs)
            st_compile = time.perf_counter() - t0
            for _ in range(3):
                dynamic(*inputs)
                static(*inputs)
            times = {"d": [], "s": []}
            for _ in range(runs):
                for key, fn in (("d", dynamic), ("s", static)):
                    t0 = time.perf_counter()
                    fn(*inputs)
                    times[key].append(1e3 * (time.perf_counter() - t0))
            rows.append((size, times["d"], times["s"], st_compile))
    return rows, dyn_compile


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--cases", default="resnet18:1,8;mobilenet_v2:1;bert:128",
                   help="model:size,size;... (batch sizes; bert, transformer_encoder: sequence lengths)")
    p.add_argument("--runs", type=int, default=None, help="timed calls per size (30; sweep: 20, quick 3)")
    p.add_argument("--max", type=int, default=128, help="the dynamic build's largest size")
    p.add_argument("--image", type=int, default=None, help="image side of the conv nets (224; --quick: 64)")
    p.add_argument("--sweep", action="store_true", help="the size sweep against inductor (benchmarks/dynamic_sweep.py)")
    p.add_argument("--quick", action="store_true", help="sweep: 3 sizes per model, small images, 3 runs")
    p.add_argument("--models", default=None, help="sweep: comma list of resnet18, mobilenet_v2, bert, "
                                                  "transformer_encoder (default: all)")
    p.add_argument("--sizes", default=None, help="sweep: model:size,size;... replacing a model's default sizes")
    p.add_argument("--variants", default=None, help="sweep: comma list of fxc_dynamic, fxc_static, inductor")
    p.add_argument("--target", default="llvm", help="sweep: the fxc target (llvm, opencl, opengl)")
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results"), help="sweep: folder of the JSON and PNG")
    p.add_argument("--threads", type=int, default=None, help="sweep: threads for every variant (default: all cores; "
                                                             "1 on a host shared with other jobs, where a team of 2 "
                                                             "waits at each barrier for a descheduled thread)")
    p.add_argument("--pairs", default=None, help="batch x sequence pairs of BERT with two symbols, e.g. "
                                                 "1x16,4x128 (benchmarks/dynamic_pairs.py)")
    p.add_argument("--small", action="store_true", help="pairs: the 2-layer hidden-64 BERT of the tests")
    a = p.parse_args(argv)
    if a.pairs:
        from .dynamic_pairs import main as pairs_main
        pairs_main(a)
        return
    if a.sweep:
        from .dynamic_sweep import main as sweep_main
        sweep_main(a)
        return
    a.runs = 30 if a.runs is None else a.runs
    a.image = 224 if a.image is None else a.image
    print("| model | size | dynamic ms | static ms | dynamic / static | compile s (dynamic once, static) "
          "| min ms (dynamic, static) |")
    print("|---|---|---|---|---|---|---|")
    for case in a.cases.split(";"):
        name, sizes = case.split(":")
        rows, dyn_compile = measure(name, [int(s) for s in sizes.split(",")], a.runs, a.max, a.image)
        for size, d, s, st_compile in rows:
            md, ms = statistics.median(d), statistics.median(s)
            print(f"| {name} | {size} | {md:.2f} | {ms:.2f} | {md / ms:.3f} | {dyn_compile:.1f}, {st_compile:.1f} "
                  f"| {min(d):.2f}, {min(s):.2f} |", flush=True)


if __name__ == "__main__":
    main()
