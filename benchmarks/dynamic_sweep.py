"""Size sweep of dynamic shapes (issue 26 item 3): compile count, compile time and latency per size of one dynamic fxc
build, static fxc builds per size and inductor with dynamic=True.

    python -m benchmarks.dynamic --sweep                     # the issue's sweep (long: hours on a small host)
    python -m benchmarks.dynamic --sweep --quick             # 3 sizes per model, 64 x 64 images, 3 runs
    python -m benchmarks.dynamic --sweep --models resnet18,bert --sizes "resnet18:2,8,32;bert:16,128" --runs 10

Models and the size that varies: resnet18 and mobilenet_v2 (batch 2..64, --image square images), bert
(fxc.testing.models' encoder, batch 1, sequence 16..128: its position table stops at 128) and transformer_encoder
(fxc.testing.standard's 4-layer nn.TransformerEncoder, batch 1, sequence 16..512). Variants:

- fxc_dynamic: `torch.compile(model, backend="fxc", dynamic=True, options={"target": --target})`, called at every
  size in turn; `builds` counts fxc builds over the whole sweep (fxc.driver.build.stats; 1 when one build serves every
  size, one per size where a part of the graph cannot stay symbolic: that is reported, not hidden);
- fxc_static: `fxc.from_torch(model, inputs)` per size (one static build each);
- inductor: `torch.compile(model, dynamic=True)` (PyTorch's default backend; `builds` counts Dynamo graphs);
- eager: the model itself (the reference every variant's output is compared with; its latency for scale).

`compile_s` is the sum over sizes of each variant's first call at that size (what a caller waits for: tracing,
building and one run) minus one steady call. Latency: the median of --runs calls per size. Each variant's calls
run in a row (after one untimed call): called round robin, the worker threads of one runtime still spinning after
its call (fxc's pool, inductor's OpenMP team) slowed the next variant's call several-fold on a 2-core host. Half
the calls run in the variants' order, half in the reverse order, so that a drift of the load reaches all alike.
Writes benchmarks/results/dynamic-<UTC time>.json (atomically) and .png: one panel per model, latency against
size for each variant, linear axes from zero.
"""
from __future__ import annotations

import json
import os
import platform
import statistics
import time
from pathlib import Path

from .run import wait_until_idle

ROOT = Path(__file__).resolve().parent.parent
MODELS = ("resnet18", "mobilenet_v2", "bert", "transformer_encoder")
SIZES = {"resnet18": [2, 4, 8, 16, 32, 64], "mobilenet_v2": [2, 4, 8, 16, 32, 64], "bert": [16, 32, 64, 96, 128],
         "transformer_encoder": [16, 32, 64, 128, 256, 512]}
QUICK = {"resnet18": [2, 5, 9], "mobilenet_v2": [2, 5, 9], "bert": [16, 40, 64], "transformer_encoder": [16, 100, 200]}
VARIANTS = ("fxc_dynamic", "fxc_static", "inductor", "eager")
COLORS = {"fxc_dynamic": "tab:red", "fxc_static": "tab:orange", "inductor": "tab:blue", "eager": "tab:gray"}


def make(name: str):
    from fxc.testing.models import make_model
    from fxc.testing.standard import make_standard_model
    return make_standard_model(name) if name == "transformer_encoder" else make_model(name)


def inputs_at(name: str, size: int, image: int) -> tuple:
    """The model's inputs at `size` (a batch, or a sequence length at batch 1)."""
    import torch

    from fxc.testing.models import example_inputs
    g = torch.Generator().manual_seed(size)
    if name == "bert":
        return example_inputs(name, batch=1, seq_len=size)
    if name == "transformer_encoder":
        return (torch.randn(1, size, 256, generator=g),)
    return (torch.randn(size, 3, image, image, generator=g),)


def _builds() -> int:
    import fxc.driver.build
    return fxc.driver.build.stats["builds"]


def _graphs() -> int:
    from torch._dynamo.utils import counters
    return int(counters["stats"]["unique_graphs"])


class Variant:
    """One way of running the model: first_call(inputs) (building as needed) and call(inputs)."""

    def __init__(self, kind: str, model, target: str):
        import torch
        self.kind, self.model, self.builds, self.compile_s = kind, model, 0, 0.0
        self.static: dict = {}
        if kind == "fxc_dynamic":
            self.fn = torch.compile(model, backend="fxc", dynamic=True, options={"target": target})
        elif kind == "inductor":
            self.fn = torch.compile(model, dynamic=True)
        elif kind == "eager":
            self.fn = model
        self.target = target

    def prepare(self, size: int, inputs: tuple) -> float:
        """The first call at this size (builds counted); its seconds."""
        import fxc
        count = _builds if self.kind.startswith("fxc") else _graphs     # fxc builds; Dynamo graphs
        before = count()
        t0 = time.perf_counter()
        if self.kind == "fxc_static":
            self.static[size] = fxc.from_torch(self.model, inputs, target=self.target)
        self.call(size, inputs)
        took = time.perf_counter() - t0
        self.builds += count() - before
        return took

    def call(self, size: int, inputs: tuple):
        return (self.static[size] if self.kind == "fxc_static" else self.fn)(*inputs)


def sweep(name: str, sizes: list, runs: int, image: int, variants: list, target: str, log=print) -> dict:
    """{sizes, variants: {kind: {builds, compile_s, ms: [median per size], min_ms}}, max_err} of one model."""
    import torch
    model = make(name)
    vs = [Variant(kind, model, target) for kind in variants]
    out = {kind: {"ms": [], "min_ms": [], "first_call_s": []} for kind in variants}
    max_err = {kind: 0.0 for kind in variants}
    with torch.no_grad():
        for size in sizes:
            inputs = inputs_at(name, size, image)
            ref = model(*inputs)
            first = {}
            for v in vs:
                first[v.kind] = v.prepare(size, inputs)
                got = v.call(size, inputs)          # warm-up, and the check against eager
                max_err[v.kind] = max(max_err[v.kind], float((got - ref).abs().max()))
            times = {v.kind: [] for v in vs}
            for half, order in ((runs - runs // 2, vs), (runs // 2, vs[::-1])):
                for v in order:         # a variant's calls in a row: see the module docstring
                    wait_until_idle()   # (the previous variant's threads may still spin)
                    v.call(size, inputs)
                    for _ in range(half):
                        t0 = time.perf_counter()
                        v.call(size, inputs)
                        times[v.kind].append(1e3 * (time.perf_counter() - t0))
            for v in vs:
                med = statistics.median(times[v.kind])
                out[v.kind]["ms"].append(med)
                out[v.kind]["min_ms"].append(min(times[v.kind]))
                out[v.kind]["first_call_s"].append(first[v.kind])
                v.compile_s += max(0.0, first[v.kind] - med / 1e3)
            log(f"  {name} {size}: " + ", ".join(f"{v.kind} {out[v.kind]['ms'][-1]:.2f} ms (first call "
                                                 f"{first[v.kind]:.1f} s)" for v in vs), flush=True)
    for v in vs:
        out[v.kind].update(builds=v.builds, compile_s=v.compile_s, max_abs_err=max_err[v.kind])
    return {"sizes": list(sizes), "variants": out}


def plot(results: dict, path: Path, footer: str) -> None:
    from .charts import _plt, save
    plt = _plt()
    names = list(results)
    fig, axes = plt.subplots(1, len(names), figsize=(4.4 * len(names), 4.2), squeeze=False)
    for ax, name in zip(axes[0], names):
        r = results[name]
        for kind, v in r["variants"].items():
            label = kind if kind == "eager" else \
                f"{kind}: {v['builds']} {'graphs' if kind == 'inductor' else 'builds'}, {v['compile_s']:.0f} s"
            ax.plot(r["sizes"], v["ms"], marker="o", color=COLORS.get(kind), label=label)
        ax.set_xlim(0, max(r["sizes"]) * 1.05)
        ax.set_ylim(0, max(max(v["ms"]) for v in r["variants"].values()) * 1.15)
        ax.set_xlabel("sequence length" if name in ("bert", "transformer_encoder") else "batch")
        ax.set_ylabel("median latency (ms)")
        ax.set_title(name, fontsize=9)
        ax.legend(fontsize=7, loc="upper left")
        ax.grid(alpha=0.3)
    save(fig, path, "fxc dynamic build vs static builds per size vs inductor dynamic=True", footer)


def run(models: list, sizes: dict, runs: int, image: int, variants: list, target: str, out_dir: Path) -> Path:
    """Sweep every model, write the JSON and PNG; returns the JSON's path."""
    import torch

    from fxc.runtime.store import atomic_write
    for key in ("recompile_limit", "accumulated_recompile_limit"):
        setattr(torch._dynamo.config, key, max(256, getattr(torch._dynamo.config, key)))
    results, t0 = {}, time.perf_counter()
    load0 = os.getloadavg()
    for name in models:
        print(f"{name}: sizes {sizes[name]}", flush=True)
        results[name] = sweep(name, sizes[name], runs, image, variants, target)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    doc = {"date": stamp, "host": platform.node(), "cpus": os.cpu_count(), "torch": torch.__version__,
           "threads": torch.get_num_threads(), "load_average_start": load0, "load_average_end": os.getloadavg(),
           "target": target, "runs": runs,
           "image": image, "seconds": time.perf_counter() - t0, "models": results}
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"dynamic-{stamp}.json"
    atomic_write(path, json.dumps(doc, indent=1).encode())
    footer = (f"{stamp}, target {target}, {torch.get_num_threads()} threads, {os.cpu_count()} CPUs, load average "
              f"{load0[0]:.1f} -> "
              f"{doc['load_average_end'][0]:.1f}; median of {runs} calls per size; images {image}x{image}")
    try:
        plot(results, path.with_suffix(".png"), footer)
    except RuntimeError as e:           # charts.ChartUnavailable: the table and JSON stand
        print(e)
    table(doc)
    return path


def table(doc: dict) -> None:
    """Markdown tables of a sweep's JSON document."""
    for name, r in doc["models"].items():
        kinds = list(r["variants"])
        print(f"\n{name} (builds / compile s: " + "; ".join(
            f"{k} {r['variants'][k]['builds']} / {r['variants'][k]['compile_s']:.1f}" for k in kinds) + ")")
        print("| size | " + " | ".join(f"{k} ms" for k in kinds) + " |")
        print("|---" * (len(kinds) + 1) + "|")
        for i, size in enumerate(r["sizes"]):
            print(f"| {size} | " + " | ".join(f"{r['variants'][k]['ms'][i]:.2f}" for k in kinds) + " |")


def main(a) -> None:
    """Run from `python -m benchmarks.dynamic --sweep` (its parsed arguments)."""
    threads = a.threads or len(os.sched_getaffinity(0))
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "FXC_NUM_THREADS"):    # before fxc's runtime starts its pool
        os.environ[var] = str(threads)
    import torch
    torch.set_num_threads(threads)
    models = [m for m in (a.models or ",".join(MODELS)).split(",") if m]
    unknown = sorted(set(models) - set(MODELS))
    if unknown:
        raise SystemExit(f"unknown model(s) {', '.join(unknown)}; choose from {', '.join(MODELS)}")
    sizes = dict(QUICK if a.quick else SIZES)
    for case in filter(None, (a.sizes or "").split(";")):
        name, _, values = case.partition(":")
        sizes[name] = [int(s) for s in values.split(",")]
    variants = [v for v in (a.variants or ",".join(VARIANTS)).split(",") if v]
    bad = sorted(set(variants) - set(VARIANTS))
    if bad:
        raise SystemExit(f"unknown variant(s) {', '.join(bad)}; choose from {', '.join(VARIANTS)}")
    runs = a.runs if a.runs is not None else (3 if a.quick else 20)
    image = a.image if a.image is not None else (64 if a.quick else 224)
    path = run(models, sizes, runs, image, variants, a.target, Path(a.out))
    print(f"\nresults: {path} and {path.with_suffix('.png')}")
