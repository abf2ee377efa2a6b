"""BYOC: the vendor libraries against fxc's own kernels, per region and end to end, measured the way a build's cost
choice measures them (fxc/driver/offload.py: the region alone, both sides called in turn, least of 10 rounds after
a warm-up), and what the choice keeps.

    python -m benchmarks.byoc [--library clblast] [--device 0] [--only bert]     # CLBlast on opencl (PoCL here)
    python -m benchmarks.byoc --library dnnl [--only resnet18] [--rounds 20]     # oneDNN on llvm

CLBlast: the GEMM regions of ResNet-18's and MobileNetV2's classifier (batch 1) and BERT-base's at sequence 128
(QKV / output projections, the FFN's two GEMMs, attention's two batched matmuls).

oneDNN: ResNet-18 and MobileNetV2 (batch 1, 224x224), the reference BERT encoder (fxc.testing.models, sequence 128)
and an LSTM classifier (fxc.testing.zoo "lstm": 2 layers, hidden 128, 32 steps): every region the patterns accept,
timed alone (one row per distinct workload, with its count), then the whole model built three ways: fxc's own
kernels, every region forced to oneDNN (offload="always"), and the cost choice (offload="auto", which reads the
figures just measured): median and least of --rounds calls, the three called in turn in one process.
Figures go to stdout as tables; a fresh cache folder is used, so nothing is read from an earlier run."""
from __future__ import annotations

import argparse
import os
import tempfile
import time

import numpy as np

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
DNNL_MODELS = ("resnet18", "mobilenet_v2", "bert", "lstm")


def clblast(args) -> None:
    from fxc.backends import fill, libraries_of
    from fxc.driver.build import build
    from fxc.driver.offload import offload_cost
    from fxc.relay_like.graph import Graph
    target = fill("opencl -libs=clblast" + (f" -device={args.device}" if args.device else ""))
    (lib,), cost = libraries_of(target), offload_cost(target, build)
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
        t_lib, t_fxc = cost(lib, [g.outputs[0].node])
        print(f"{model:<13} {name:<24} {1e3 * t_lib:10.3f} {1e3 * t_fxc:8.3f} {t_fxc / t_lib:11.2f}  "
              f"{'clblast' if t_lib < t_fxc else 'fxc'}", flush=True)


def _model(name):
    from fxc.testing.models import example_inputs, make_model
    from fxc.testing.zoo import make_zoo_model, zoo_inputs
    if name == "lstm":
        return make_zoo_model("lstm"), zoo_inputs("lstm")
    return make_model(name), example_inputs(name)


def _describe(nodes) -> str:
    shapes = " ".join("x".join(map(str, v.shape)) for v in nodes[0].inputs[:2])
    return f"{'+'.join(x.op for x in nodes)} {shapes}"[:70]


def dnnl(args) -> None:
    from fxc.backends import fill, libraries_of
    from fxc.driver.build import build
    from fxc.driver.offload import offload_cost, workload_key
    from fxc.relay_like.context import PassContext
    from fxc.relay_like.pipeline import plan_graph, run_passes
    from fxc.tuning.frontends import graph_of
    target = fill("llvm -libs=dnnl")
    (lib,), cost = libraries_of(target), offload_cost(target, build)
    print(f"target: {target} ({target.caps.threads} threads, {target.caps.lanes} float32 lanes)")
    for name in DNNL_MODELS:
        if args.only and name != args.only:
            continue
        model, example = _model(name)
        g = graph_of(model, example)
        ctx = PassContext(target, libraries=(lib,), offload="always")
        p = plan_graph(run_passes(g, ctx), ctx)
        rows: dict = {}
        for r in p.regions:
            for pat, nodes in r.matches:
                key = workload_key(lib.name, list(nodes), target)
                if key not in rows:
                    rows[key] = [pat, _describe(nodes), 0, cost(lib, list(nodes), p.graph.weights)]
                rows[key][2] += 1
        print(f"\n{name}: {sum(r[2] for r in rows.values())} regions oneDNN takes, {len(rows)} distinct")
        print(f"  {'pattern':<7} {'region (ops, input shapes)':<70} {'n':>3} {'dnnl ms':>8} {'fxc ms':>8} "
              f"{'fxc/dnnl':>8}  kept")
        for pat, desc, count, (t_lib, t_fxc) in rows.values():
            print(f"  {pat:<7} {desc:<70} {count:3d} {1e3 * t_lib:8.3f} {1e3 * t_fxc:8.3f} {t_fxc / t_lib:8.2f}  "
                  f"{'dnnl' if t_lib < t_fxc else 'fxc'}", flush=True)
        modules = {"fxc": build(g, "llvm"), "dnnl forced": build(g, target, offload="always"),
                   "cost choice": build(g, target)}
        kept = sum(k.startswith("fxc_dnnl_") for k, _ in modules["cost choice"].plan)
        arrays = [np.ascontiguousarray(t.numpy()) for t in example]
        times = {k: [] for k in modules}
        outs = {k: m(*arrays) for k, m in modules.items()}
        diff = max(float(np.abs(np.asarray(outs[k]) - np.asarray(outs["fxc"])).max()) for k in outs)
        for _ in range(args.rounds):
            for k, m in modules.items():
                t0 = time.perf_counter()
                m(*arrays)
                times[k].append(time.perf_counter() - t0)
        print(f"  end to end ({args.rounds} rounds, interleaved): " + "; ".join(
            f"{k} median {1e3 * np.median(v):.2f} ms, min {1e3 * min(v):.2f} ms" for k, v in times.items())
            + f"; the cost choice runs {kept} steps on oneDNN; outputs differ from fxc's by {diff:.2g} at most",
            flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--library", default="clblast", choices=("clblast", "dnnl"))
    ap.add_argument("--device", default="", help="clblast: the OpenCL device")
    ap.add_argument("--only", default="", help="a model name: its regions only")
    ap.add_argument("--rounds", type=int, default=20, help="dnnl: end-to-end calls per build")
    args = ap.parse_args()
    os.environ["FXC_CACHE_DIR"] = tempfile.mkdtemp(prefix="fxc-byoc-")
    (dnnl if args.library == "dnnl" else clblast)(args)


if __name__ == "__main__":
    main()
