"""BYOC on OpenCL: CLBlast against fxc's own kernels on the GEMM regions of the reference models, measured the way
a build's cost choice measures them (fxc/driver/offload.py: the region alone, both sides called in turn, least of
10 rounds after a warm-up, host copies on both sides), and what the choice keeps.

    python -m benchmarks.byoc [--device 0] [--only bert]            # the GEMM regions
    python -m benchmarks.byoc --convs [--only resnet18] [--size 224]   # each distinct conv region: convgemm vs fxc
    python -m benchmarks.byoc --e2e [--only resnet18] [--size 224]     # whole models: fxc, CLBlast forced, the choice

Regions: ResNet-18's and MobileNetV2's classifier (batch 1) and BERT-base's at sequence 128 (QKV / output
projections, the FFN's two GEMMs, attention's two batched matmuls); with --convs, every distinct convolution of
ResNet-18 and MobileNetV2 (batch 1) that CLBlast's convgemm takes (groups 1: MobileNetV2's depthwise convs stay
fxc's), measured as the build's cost choice measures it; with --e2e, each whole model built for "opencl", for
"opencl -libs=clblast" with offload="always" and with the cost choice (offload="auto", its measurements shared with
--convs through the cache folder), called in turn (median and min of ROUNDS calls), and what the choice kept.
Figures go to stdout as tables; a fresh cache folder is used, so nothing is read from an earlier run. On a shared
host (the 2-core AMD EPYC these figures were taken on ran other work too), read the ratios. (oneDNN on llvm,
-libs=dnnl: benchmarks/byoc_dnnl.py; CLML has no device here, docs/byoc.md.)"""
from __future__ import annotations

import argparse
import os
import tempfile
import time

import numpy as np

ROUNDS = 10
MODELS = ("resnet18", "mobilenet_v2")

# (model, region, A shape, B shape, matmul attrs): B constant for the weights, an input for attention
REGIONS = [
    ("resnet18", "fc 512->1000", (1, 512), (1000, 512), {"trans_b": True}),
    ("mobilenet_v2", "classifier 1280->1000", (1, 1280), (1000, 1280), {"trans_b": True}),
    ("bert", "qkv / out 768->768", (128, 768), (768, 768), {"trans_b": True}),
    ("bert", "ffn up 768->3072", (128, 768), (3072, 768), {"trans_b": True}),
    ("bert", "ffn down 3072->768", (128, 3072), (768, 3072), {"trans_b": True}),
    ("bert", "attention q.k^T", (12, 128, 64), (12, 128, 64), {"trans_b": True}),
    ("bert", "attention p.v", (12, 128, 128), (12, 128, 64), {}),
]


def _model(name: str, size: int):
    import torch

    from fxc.testing import models
    torch.manual_seed(0)
    return getattr(models, name)().eval(), torch.randn(1, 3, size, size)


def _graph(model, x):
    from fxc.capture.torch.aot import capture
    from fxc.capture.torch.graph import to_graph
    gm, _ = capture(model, (x,))
    return to_graph(gm, (x,))[0]


def conv_regions(target: str, only: str, size: int) -> None:
    """Each distinct conv region (the shapes ResNet-18 / MobileNetV2 repeat once) alone: CLBlast's convgemm
    against fxc's kernel, as the cost choice measures them, and what it keeps."""
    from fxc.backends import fill, libraries_of
    from fxc.driver.build import build
    from fxc.driver.offload import offload_cost, workload_key
    from fxc.driver.options import pass_context
    from fxc.relay_like.pipeline import plan_graph, run_passes
    target = fill(target)
    (clblast,), cost = libraries_of(target), offload_cost(target, build)
    print(f"device: {target.device}")
    print(f"{'model':<13} {'conv region':<42} {'count':>5} {'clblast ms':>10} {'fxc ms':>8} {'fxc/clblast':>11}  kept")
    for name in MODELS:
        if only and name != only:
            continue
        model, x = _model(name, size)
        ctx = pass_context(target, {"offload": "always"})
        p = plan_graph(run_passes(_graph(model, x), ctx), ctx)
        seen = {}
        for r in p.regions:
            for pat, nodes in r.matches:
                if pat == "convgemm":
                    seen.setdefault(workload_key("clblast", list(nodes), target), []).append(nodes)
        total = [0.0, 0.0]
        for same in seen.values():
            nodes = same[0]
            conv = nodes[-1]
            x_, w = nodes[0].inputs[0], conv.inputs[1]
            label = f"{x_.shape[1]}x{x_.shape[2]}x{x_.shape[3]} k{w.shape[0]} {w.shape[2]}x{w.shape[3]} " \
                    f"s{conv.attrs.get('stride', (1, 1))[0]}{' pad' if len(nodes) == 2 else ''}"
            t_lib, t_fxc = cost(clblast, list(nodes), p.graph.weights)
            total[0] += len(same) * t_lib
            total[1] += len(same) * t_fxc
            print(f"{name:<13} {label:<42} {len(same):5d} {1e3 * t_lib:10.3f} {1e3 * t_fxc:8.3f} "
                  f"{t_fxc / t_lib:11.2f}  {'clblast' if t_lib < t_fxc else 'fxc'}", flush=True)
        print(f"{name:<13} {'all conv regions (sum, x count)':<42} {'':>5} {1e3 * total[0]:10.1f} "
              f"{1e3 * total[1]:8.1f} {total[1] / total[0]:11.2f}", flush=True)


def end_to_end(target: str, only: str, size: int) -> None:
    """Each model whole: fxc's kernels only, CLBlast forced on every match, and the cost choice; called in turn
    (ROUNDS rounds after a warm-up), median and min, and how many regions the choice offloaded."""
    import fxc
    print(f"{'model':<13} {'build':<34} {'median ms':>9} {'min ms':>8} {'regions':>7}")
    for name in MODELS:
        if only and name != only:
            continue
        model, x = _model(name, size)
        builds = {"opencl (fxc only)": fxc.from_torch(model, (x,), target=target),
                  "-libs=clblast offload=always": fxc.from_torch(model, (x,), target=f"{target} -libs=clblast",
                                                                 offload="always"),
                  "-libs=clblast (cost choice)": fxc.from_torch(model, (x,), target=f"{target} -libs=clblast")}
        times = {k: [] for k in builds}
        for m in builds.values():
            m(x)
        for _ in range(ROUNDS):
            for k, m in builds.items():
                t0 = time.perf_counter()
                m(x)
                times[k].append(time.perf_counter() - t0)
        for k, m in builds.items():
            regions = sum(x.startswith("region") for x in m.module.offload)
            print(f"{name:<13} {k:<34} {1e3 * np.median(times[k]):9.2f} {1e3 * min(times[k]):8.2f} {regions:7d}",
                  flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="")
    ap.add_argument("--only", default="", help="a model name: its regions only")
    ap.add_argument("--convs", action="store_true", help="the conv regions of ResNet-18 and MobileNetV2")
    ap.add_argument("--e2e", action="store_true", help="whole models: fxc, CLBlast forced, the cost choice")
    ap.add_argument("--size", type=int, default=224, help="the image size of --convs and --e2e")
    args = ap.parse_args()
    os.environ["FXC_CACHE_DIR"] = tempfile.mkdtemp(prefix="fxc-byoc-")
    base = "opencl" + (f" -device={args.device}" if args.device else "")
    if args.convs or args.e2e:
        if args.convs:
            conv_regions(base + " -libs=clblast", args.only, args.size)
        if args.e2e:
            end_to_end(base, args.only, args.size)
        return
    from fxc.backends import fill, libraries_of
    from fxc.driver.build import build
    from fxc.driver.offload import offload_cost
    from fxc.relay_like.graph import Graph
    target = fill("opencl -libs=clblast" + (f" -device={args.device}" if args.device else ""))
    (clblast,), cost = libraries_of(target), offload_cost(target, build)
    print(f"device: {target.device}")
    print(f"{'model':<13} {'region':<24} {'clblast ms':>10} {'fxc ms':>8} {'fxc/clblast':>11}  kept")
    rng = np.random.default_rng(0)
    for model, name, a_shape, b_shape, attrs in REGIONS:
        if args.only and model != args.only:
            continue
        g = Graph()
        a = g.input(a_shape, "float32", "a")
        b = Graph.const(rng.standard_normal(b_shape).astype(np.float32)) if len(b_shape) == 2 else \
            g.input(b_shape, "float32", "b")
        g.outputs = [g.call1("matmul", [a, b], **attrs)]
        t_lib, t_fxc = cost(clblast, [g.outputs[0].node])
        print(f"{model:<13} {name:<24} {1e3 * t_lib:10.3f} {1e3 * t_fxc:8.3f} {t_fxc / t_lib:11.2f}  "
              f"{'clblast' if t_lib < t_fxc else 'fxc'}", flush=True)


if __name__ == "__main__":
    main()
