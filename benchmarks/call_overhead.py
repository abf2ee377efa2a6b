"""Where a call of fxc through torch.compile spends its time outside fxc's kernels, beside fxc.from_torch.

    .venv/bin/python -m benchmarks.call_overhead                              # MobileNetV2, batch 1, 2 threads
    .venv/bin/python -m benchmarks.call_overhead --models mobilenet_v2,resnet18 --runs 100
    .venv/bin/python -m benchmarks.call_overhead --recursive-dict-tags        # Dynamo's opt-in guard shortcut

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

`--recursive-dict-tags` compiles with torch._dynamo.config.use_recursive_dict_tags_for_guards (read when the guards
are built, so only this compile is affected): Dynamo then skips the guards of a module subtree whose dicts are
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
    from fxc.capture.torch import FxcSubgraph
    from fxc.runtime.module import Module

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


def measure(name: str, runs: int, recursive_dict_tags: bool) -> dict:
    import torch
    import torch._dynamo

    import fxc
    from fxc.testing.models import example_inputs, make_model
    model = make_model(name).eval()
    inputs = example_inputs(name, 1)
    stamps: dict = {}
    _instrument(stamps)
    aot = fxc.from_torch(copy.deepcopy(model), tuple(inputs))
    compiled = torch.compile(copy.deepcopy(model), backend="fxc")
    with torch._dynamo.config.patch(use_recursive_dict_tags_for_guards=recursive_dict_tags), torch.inference_mode():
        compiled(*inputs)       # compiles (the guards are built now)
    rows: dict = {}

    def add(key, seconds):
        rows.setdefault(key, []).append(seconds * 1e3)

    with torch.inference_mode():
        for _ in range(5):
            aot(*inputs)
            compiled(*inputs)
        for _ in range(runs):
            stamps.clear()
            t0 = time.perf_counter()
            aot(*inputs)
            t1 = time.perf_counter()
            add("from_torch total", t1 - t0)
            add("from_torch kernels", stamps["k1"] - stamps["k0"])
            add("from_torch outside_kernels", t1 - t0 - (stamps["k1"] - stamps["k0"]))
            stamps.clear()
            t0 = time.perf_counter()
            compiled(*inputs)
            t1 = time.perf_counter()
            add("torch.compile total", t1 - t0)
            add("torch.compile dynamo", stamps["f0"] - t0)
            add("torch.compile fxc_before", stamps["k0"] - stamps["f0"])
            add("torch.compile kernels", stamps["k1"] - stamps["k0"])
            add("torch.compile fxc_after", stamps["f1"] - stamps["k1"])
            add("torch.compile return", t1 - stamps["f1"])
            add("torch.compile outside_kernels", t1 - t0 - (stamps["k1"] - stamps["k0"]))
    return rows


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m benchmarks.call_overhead", description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default="mobilenet_v2", help="comma list of fxc.testing.models names (batch 1)")
    p.add_argument("--runs", type=int, default=60, help="calls of each peer (default 60)")
    p.add_argument("--threads", type=int, default=2, help="threads for fxc and PyTorch (default 2)")
    p.add_argument("--recursive-dict-tags", action="store_true",
                   help="compile with torch._dynamo.config.use_recursive_dict_tags_for_guards")
    a = p.parse_args(argv)
    for var in ("OMP_NUM_THREADS", "FXC_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(a.threads)
    import torch
    torch.set_num_threads(a.threads)
    print(f"{_cpu_model()}, {a.threads} threads, torch {torch.__version__}, "
          f"recursive dict tags {'on' if a.recursive_dict_tags else 'off'}")
    for name in a.models.split(","):
        rows = measure(name.strip(), a.runs, a.recursive_dict_tags)
        print(f"\n{name} (batch 1), {a.runs} calls each, load average {os.getloadavg()[0]:.2f}; ms")
        print(f"{'':34s}{'median':>9s}{'min':>9s}")
        for key, ms in rows.items():
            print(f"{key:34s}{statistics.median(ms):9.3f}{min(ms):9.3f}")


if __name__ == "__main__":
    main()
