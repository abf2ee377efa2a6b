"""BYOC on llvm: oneDNN (-libs=dnnl) against fxc's own kernels, per region and end to end, measured the way a
build's cost choice measures them (fxc/driver/offload.py: the region alone, both sides called in turn, least of 10
rounds after a warm-up), and what the choice keeps. (CLBlast on opencl: benchmarks/byoc.py.)

    python -m benchmarks.byoc_dnnl [--only resnet18] [--rounds 30]

Models: ResNet-18 and MobileNetV2 (batch 1, 224x224), the reference BERT encoder (fxc.testing.models, sequence
128) and an LSTM classifier (fxc.testing.zoo "lstm": 2 layers, hidden 128, 32 steps), plus a larger LSTM (1 layer,
hidden 512, batch 16, 64 steps). Every region the patterns accept is timed alone (one row per distinct workload,
with its count and the implementation oneDNN picks), then the whole model is built three ways: fxc's own kernels,
every region forced to oneDNN (offload="always"), and the cost choice (offload="auto", which reads the figures
just measured): median and least of --rounds calls, the three called in turn in one process, and how far their
outputs are from fxc's. A fresh cache folder is used, so nothing is read from an earlier run."""
from __future__ import annotations

import argparse
import os
import tempfile
import time

import numpy as np
import torch

MODELS = ("resnet18", "mobilenet_v2", "bert", "lstm", "lstm-large")


class _LargeLSTM(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = torch.nn.LSTM(256, 512, 1, batch_first=True)

    def forward(self, x):
        return self.lstm(x)[0]


def _model(name):
    from fxc.testing.models import example_inputs, make_model
    from fxc.testing.zoo import make_zoo_model, zoo_inputs
    if name == "lstm":
        return make_zoo_model("lstm"), zoo_inputs("lstm")
    if name == "lstm-large":
        torch.manual_seed(0)
        return _LargeLSTM().eval(), (torch.randn(16, 64, 256),)
    return make_model(name), example_inputs(name)


def _describe(nodes) -> str:
    shapes = " ".join("x".join(map(str, v.shape)) for v in nodes[0].inputs[:2])
    return f"{'+'.join(x.op for x in nodes)} {shapes}"[:62]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", default="", help="a model name: its regions only")
    ap.add_argument("--rounds", type=int, default=30, help="end-to-end calls per build")
    args = ap.parse_args()
    os.environ["FXC_CACHE_DIR"] = tempfile.mkdtemp(prefix="fxc-byoc-dnnl-")
    from fxc.backends import fill, libraries_of
    from fxc.backends.external.dnnl import shim
    from fxc.driver.build import build
    from fxc.driver.offload import offload_cost, workload_key
    from fxc.relay_like.context import PassContext
    from fxc.relay_like.pipeline import plan_graph, run_passes
    from fxc.tuning.frontends import graph_of
    target = fill("llvm -libs=dnnl")
    (lib,), cost = libraries_of(target), offload_cost(target, build)
    print(f"target: {target} ({target.caps.threads} threads, {target.caps.lanes} float32 lanes)")
    for name in MODELS:
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
                    impl = shim.primitive(lib.lower(list(nodes))[1])[1]
                    rows[key] = [pat, _describe(nodes), impl, 0, cost(lib, list(nodes), p.graph.weights)]
                rows[key][3] += 1
        print(f"\n{name}: {sum(r[3] for r in rows.values())} regions oneDNN takes, {len(rows)} distinct")
        print(f"  {'pattern':<7} {'region (ops, input shapes)':<62} {'oneDNN impl':<22} {'n':>3} {'dnnl ms':>8} "
              f"{'fxc ms':>8} {'fxc/dnnl':>8}  kept")
        for pat, desc, impl, count, (t_lib, t_fxc) in rows.values():
            print(f"  {pat:<7} {desc:<62} {impl:<22} {count:3d} {1e3 * t_lib:8.3f} {1e3 * t_fxc:8.3f} "
                  f"{t_fxc / t_lib:8.2f}  {'dnnl' if t_lib < t_fxc else 'fxc'}", flush=True)
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


if __name__ == "__main__":
    main()
