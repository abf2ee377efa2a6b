"""What the bounds checks of fxc's index ops cost (issue 23, item 11): each workload is compiled twice with
`fxc.from_torch`, once as fxc builds it (every data-dependent index checked: fxc/ops/movement.py check_index) and
once with the checks replaced by the old silent clamp, and both are timed interleaved (median of --runs calls,
after warm-up), with eager PyTorch for scale.

    .venv/bin/python -m benchmarks.index_checks [--runs 200] [--threads N]

Prints one row per workload: eager, clamped, checked (ms) and checked / clamped.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import time

import numpy as np

os.environ["FXC_MODULE_CACHE"] = "0"        # both variants really compile (the module cache keys on fxc's source)


def workloads():
    import torch
    g = torch.Generator().manual_seed(0)
    emb = torch.nn.Embedding(30000, 256).eval()
    ints = lambda lo, hi, shape: torch.randint(lo, hi, shape, generator=g)   # noqa: E731
    floats = lambda *shape: torch.randn(*shape, generator=g)                 # noqa: E731
    return {
        "embedding 30000x256, 4096 ids": (emb, (ints(0, 30000, (4096,)),)),
        "gather 512x1024 along 1": (lambda x, i: x.gather(1, i) + 1, (floats(512, 1024), ints(0, 1024, (512, 1024)))),
        "index x[i], 1M of 100k": (lambda x, i: x[i] * 2, (floats(100000), ints(-100000, 100000, (1 << 20,)))),
        "index_select 4096 rows of 8192x64": (lambda x, i: x.index_select(0, i) + 1,
                                              (floats(8192, 64), ints(0, 8192, (4096,)))),
        "scatter_add 50000x64 into 10000x64": (lambda x, i, s: x.scatter_add(0, i, s), (
            torch.zeros(10000, 64), ints(0, 10000, (50000, 64)), floats(50000, 64))),
    }


@contextlib.contextmanager
def clamped():
    """fxc's index ops with the pre-issue-23 clamp instead of the check (wrap negatives, clamp into [0, n))."""
    from fxc.lowering import te
    from fxc.symbolic.expr import as_expr, cast, compare, maximum, minimum, select

    def clamp(i, n, op, wrap=False):
        i = cast("int64", i)
        i = select(compare("lt", i, as_expr(0)), i + n, i)
        return minimum(maximum(i, as_expr(0)), as_expr(max(n - 1, 0)))
    saved = te.check_index
    te.check_index = clamp
    try:
        yield
    finally:
        te.check_index = saved


def main(argv=None) -> None:
    import torch

    import fxc
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--runs", type=int, default=200)
    p.add_argument("--threads", type=int, default=0, help="FXC_NUM_THREADS and torch threads (0: all cores)")
    args = p.parse_args(argv)
    if args.threads:
        os.environ["FXC_NUM_THREADS"] = str(args.threads)
        torch.set_num_threads(args.threads)
    print(f"{'workload':<38}{'eager ms':>10}{'clamped ms':>12}{'checked ms':>12}{'checked/clamped':>17}")
    for name, (fn, inputs) in workloads().items():
        model = (fn if isinstance(fn, torch.nn.Module) else _module(fn)).eval()
        checked = fxc.from_torch(model, inputs).module
        with clamped():
            clamp = fxc.from_torch(model, inputs).module
        arrays = [t.numpy() for t in inputs]
        with torch.no_grad():
            np.testing.assert_allclose(_first(checked(*arrays)), model(*inputs).numpy(), rtol=1e-5, atol=1e-5)
        times = {"eager": [], "clamped": [], "checked": []}
        calls = {"eager": lambda: model(*inputs), "clamped": lambda: clamp(*arrays),
                 "checked": lambda: checked(*arrays)}
        with torch.no_grad():
            for _ in range(5):
                for f in calls.values():
                    f()
            for r in range(args.runs):
                order = list(calls)[r % 3:] + list(calls)[:r % 3]
                for k in order:
                    t0 = time.perf_counter()
                    calls[k]()
                    times[k].append(time.perf_counter() - t0)
        med = {k: 1e3 * float(np.median(v)) for k, v in times.items()}
        print(f"{name:<38}{med['eager']:>10.3f}{med['clamped']:>12.3f}{med['checked']:>12.3f}"
              f"{med['checked'] / med['clamped']:>16.2f}x", flush=True)


def _first(out):
    return out[0] if isinstance(out, list) else out


def _module(fn):
    import torch

    class Wrap(torch.nn.Module):
        def forward(self, *xs):
            return fn(*xs)
    return Wrap()


if __name__ == "__main__":
    main()
