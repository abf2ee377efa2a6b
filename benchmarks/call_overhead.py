"""Where a call of fxc through torch.compile spends its time outside fxc's kernels, beside fxc.from_torch.

    .venv/bin/python -m benchmarks.call_overhead                              # MobileNetV2, batch 1, 2 threads
    .venv/bin/python -m benchmarks.call_overhead --models mobilenet_v2,resnet18 --runs 100
    .venv/bin/python -m benchmarks.call_overhead --recursive-dict-tags        # Dynamo's opt-in guard shortcut
    .venv/bin/python -m benchmarks.call_overhead --with-aot-autograd          # also the AOT autograd path
    .venv/bin/python -m benchmarks.call_overhead --with-dynamo-floor          # also Dynamo alone, warm and cold

Both peers are called alternately under torch.inference_mode() (as benchmarks.run does), so each call follows the
other's kernels, with the caches as cold as in the benchmark. Per call, timed with perf_counter stamps taken in
wrappers of fxc's methods (a microsecond or two each):

- `dynamo`: from the call to the entry of fxc's partition (FxcSubgraph.forward): Dynamo's guards, its bytecode
  that loads every parameter, and the compiled graph's code up to fxc;
- `fxc_before` / `fxc_after`: fxc's Python in the partition before and after the kernels (the weights' checks,
  the outputs' allocation);
- `kernels`: Module.run_prepared (the kernels, the weight fingerprint, the library's lock);
- `return`: from the partition's return to the caller (the compiled graph, Dynamo's frame exit);
- `total`, and for fxc.from_torch `outside_kernels` (its whole Python path).

`--with-aot-autograd` adds a third peer, torch.compile through AOT autograd as in grad mode (the backend's
inference path, fxc/capture/torch/inference.py, switched off for its compile): the same kernels, so the difference
is the path's.

`--with-dynamo-floor` adds what any torch.compile backend pays per call, Dynamo alone: a backend that computes
nothing (it returns the first call's result) timed in the same rotation (`Dynamo alone total`: its caches as cold
as the other peers', after a model's worth of memory traffic) and then in a loop of its own
(`Dynamo alone, warm`: every guard and parameter object still in the cache). The difference is the cache misses of
Dynamo's guards over the model's modules and parameters, which no backend can avoid.

`--recursive-dict-tags` compiles with torch._dynamo.config.use_recursive_dict_tags_for_guards (read when the
guards are built, so only these compiles are affected): Dynamo then skips the guards of a module subtree whose dicts are
unchanged. It is Dynamo's opt-in, off by default; fxc's own checks of the weights (identity, version, address, a
sample of their words) still run on every call.
"""
from __future__ import annotations

import argparse
import copy
import os
import platform
import statistics
import time


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return next(ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or "unknown CPU"


def _instrument(stamps: dict) -> None:
    """Stamp the entry and exit of FxcSubgraph.forward and Module.run_prepared into `stamps` (this process only)."""
    from fxc.capture.torch.partition import FxcSubgraph
    from fxc.runtime.cpu.module import Module

    def wrap(cls, name, enter, leave):
        real = getattr(cls, name)

        def timed(*args, **kwargs):
            stamps[enter] = time.perf_counter()
            try:
                return real(*args, **kwargs)
            finally:
                stamps[leave] = time.perf_counter()
        setattr(cls, name, timed)
        return timed
    forward = wrap(FxcSubgraph, "forward", "f0", "f1")
    if FxcSubgraph.__dict__.get("__call__") is not None:
        FxcSubgraph.__call__ = forward
    wrap(Module, "run_prepared", "k0", "k1")


def _through_aot_autograd(gm, example_inputs):
    """fxc's backend with its inference path off: Dynamo's graph goes through AOT autograd."""
    from unittest import mock

    import fxc.capture.torch.inference as inference
    from fxc.capture.torch.backend import fxc_backend
    with mock.patch.object(inference, "inference_graph", lambda *args: None):
        return fxc_backend(gm, example_inputs)


def measure(name: str, runs: int, recursive_dict_tags: bool, with_aot: bool = False,
            with_floor: bool = False) -> dict:
    import torch
    import torch._dynamo

    import fxc
    from fxc.testing.models import example_inputs, make_model

    from .peers import dynamo_alone
    model = make_model(name).eval()
    inputs = example_inputs(name, 1)
    stamps: dict = {}
    _instrument(stamps)
    aot = fxc.from_torch(copy.deepcopy(model), tuple(inputs))
    peers = {"torch.compile": torch.compile(copy.deepcopy(model), backend="fxc")}
    if with_aot:
        peers["via AOT autograd"] = torch.compile(copy.deepcopy(model), backend=_through_aot_autograd)
    floor = torch.compile(copy.deepcopy(model), backend=dynamo_alone) if with_floor else None
    with torch._dynamo.config.patch(use_recursive_dict_tags_for_guards=recursive_dict_tags), torch.inference_mode():
        for compiled in peers.values():
            compiled(*inputs)       # compiles (the guards are built now)
        if floor is not None:
            floor(*inputs)
    rows: dict = {}

    def add(key, seconds):
        rows.setdefault(key, []).append(seconds * 1e3)

    with torch.inference_mode():
        for _ in range(5):
            aot(*inputs)
            for compiled in peers.values():
                compiled(*inputs)
        for _ in range(runs):
            stamps.clear()
            t0 = time.perf_counter()
            aot(*inputs)
            t1 = time.perf_counter()
            add("from_torch total", t1 - t0)
            add("from_torch kernels", stamps["k1"] - stamps["k0"])
            add("from_torch outside_kernels", t1 - t0 - (stamps["k1"] - stamps["k0"]))
            for label, compiled in peers.items():
                stamps.clear()
                t0 = time.perf_counter()
                compiled(*inputs)
                t1 = time.perf_counter()
                add(f"{label} total", t1 - t0)
                add(f"{label} dynamo", stamps["f0"] - t0)
                add(f"{label} fxc_before", stamps["k0"] - stamps["f0"])
                add(f"{label} kernels", stamps["k1"] - stamps["k0"])
                add(f"{label} fxc_after", stamps["f1"] - stamps["k1"])
                add(f"{label} return", t1 - stamps["f1"])
                add(f"{label} outside_kernels", t1 - t0 - (stamps["k1"] - stamps["k0"]))
            if floor is not None:
                t0 = time.perf_counter()
                floor(*inputs)
                add("Dynamo alone total", time.perf_counter() - t0)
        for _ in range(runs if floor is not None else 0):
            t0 = time.perf_counter()
            floor(*inputs)
            add("Dynamo alone, warm", time.perf_counter() - t0)
    return rows


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m benchmarks.call_overhead", description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default="mobilenet_v2", help="comma list of fxc.testing.models names (batch 1)")
    p.add_argument("--runs", type=int, default=60, help="calls of each peer (default 60)")
    p.add_argument("--threads", type=int, default=2, help="threads for fxc and PyTorch (default 2)")
    p.add_argument("--with-dynamo-floor", action="store_true",
                   help="also time Dynamo alone (a backend computing nothing), in the rotation and warm")
    p.add_argument("--recursive-dict-tags", action="store_true",
                   help="compile with torch._dynamo.config.use_recursive_dict_tags_for_guards")
    p.add_argument("--with-aot-autograd", action="store_true",
                   help="also time torch.compile through AOT autograd (the backend's inference path off)")
    a = p.parse_args(argv)
    for var in ("OMP_NUM_THREADS", "FXC_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(a.threads)
    import torch
    torch.set_num_threads(a.threads)
    print(f"{_cpu_model()}, {a.threads} threads, torch {torch.__version__}, "
          f"recursive dict tags {'on' if a.recursive_dict_tags else 'off'}")
    for name in a.models.split(","):
        rows = measure(name.strip(), a.runs, a.recursive_dict_tags, a.with_aot_autograd, a.with_dynamo_floor)
        print(f"\n{name} (batch 1), {a.runs} calls each, load average {os.getloadavg()[0]:.2f}; ms")
        print(f"{'':36s}{'median':>9s}{'min':>9s}")
        for key, ms in rows.items():
            print(f"{key:36s}{statistics.median(ms):9.3f}{min(ms):9.3f}")


if __name__ == "__main__":
    main()
