"""BYOC on OpenCL: CLBlast against fxc's own kernels on the GEMM regions of the reference models, measured the way
a build's cost choice measures them (fxc/driver/offload.py: the region alone, both sides called in turn, least of
10 rounds after a warm-up, host copies on both sides), and what the choice keeps.

    python -m benchmarks.byoc [--device 0] [--only bert]

Regions: ResNet-18's and MobileNetV2's classifier (batch 1) and BERT-base's at sequence 128 (QKV / output
projections, the FFN's two GEMMs, attention's two batched matmuls). Figures go to stdout as a table; a fresh cache
folder is used, so nothing is read from an earlier run."""
from __future__ import annotations

import argparse
import os
import tempfile

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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="")
    ap.add_argument("--only", default="", help="a model name: its regions only")
    args = ap.parse_args()
    os.environ["FXC_CACHE_DIR"] = tempfile.mkdtemp(prefix="fxc-byoc-")
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
