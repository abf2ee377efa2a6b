"""Latency of two builds of fxc side by side in one process: artifacts exported by each tree, timed round robin.

On a shared, loaded host two runs of `benchmarks.target_latency` minutes apart differ by more than a code change
does; timing the two trees' artifacts interleaved (one call of each per round) puts both under the same load.

    # 1. export the reference models from each tree (run once per tree, its checkout on PYTHONPATH)
    PYTHONPATH=/path/to/before python -m benchmarks.ab_latency export /tmp/ab/before
    PYTHONPATH=/path/to/after  python -m benchmarks.ab_latency export /tmp/ab/after
    # 2. time them together (any tree: loading an artifact needs the runtime only)
    python -m benchmarks.ab_latency time /tmp/ab/before /tmp/ab/after --runs 30

`export` writes <dir>/<model>@<target>.fxc for --models x --targets (batch 1, as target_latency); `time` prints per
model and target the median and minimum in ms of each directory's artifact and the ratio of the medians
(second / first). Targets this host cannot run are skipped with the reason.
"""
from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

TARGETS = "llvm;llvm -mcpu=haswell;llvm -mcpu=x86-64-v2"
MODELS = "resnet18,mobilenet_v2,bert"


def _name(model: str, target: str) -> str:
    return f"{model}@{target.replace(' ', '_')}.fxc"


def _runnable(targets: str) -> list:
    from fxc.backends import check_runnable
    from fxc.errors import TargetError
    out = []
    for t in filter(None, (t.strip() for t in targets.split(";"))):
        try:
            check_runnable(t)
            out.append(t)
        except TargetError as e:
            print(f"skipped {t}: {e}")
    return out


def export_all(out_dir: Path, models: list, targets: list) -> None:
    import torch

    import fxc
    from fxc.testing.models import example_inputs, make_model
    out_dir.mkdir(parents=True, exist_ok=True)
    for name in models:
        model, inputs = make_model(name), example_inputs(name, batch=1, seq_len=64)
        with torch.no_grad():
            for t in targets:
                fxc.export(fxc.from_torch(model, inputs, target=t), out_dir / _name(name, t))
                print(f"exported {name} for {t!r}")


def time_all(dirs: list, models: list, targets: list, runs: int) -> None:
    import fxc
    from fxc.testing.models import example_inputs
    for name in models:
        inputs = [x.numpy() for x in example_inputs(name, batch=1, seq_len=64)]
        mods = {(t, d): fxc.load(Path(d) / _name(name, t)) for t in targets for d in dirs}
        for m in mods.values():
            for _ in range(3):
                m(*inputs)
        times: dict = {k: [] for k in mods}
        for _ in range(runs):
            for k, m in mods.items():
                t0 = time.perf_counter()
                m(*inputs)
                times[k].append(1e3 * (time.perf_counter() - t0))
        for t in targets:
            meds = [statistics.median(times[(t, d)]) for d in dirs]
            cells = "  ".join(f"{Path(d).name}: median {med:8.2f} min {min(times[(t, d)]):8.2f}"
                              for d, med in zip(dirs, meds))
            print(f"{name:<13} {t:<22} {cells}  x {meds[-1] / meds[0]:.2f}")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("mode", choices=("export", "time"))
    p.add_argument("dirs", nargs="+", help="export: the output directory; time: the artifact directories")
    p.add_argument("--targets", default=TARGETS, help="';'-separated")
    p.add_argument("--models", default=MODELS)
    p.add_argument("--runs", type=int, default=30)
    a = p.parse_args(argv)
    from fxc.target import host_cpu
    print(f"host CPU: {host_cpu()}")
    targets, models = _runnable(a.targets), a.models.split(",")
    if a.mode == "export":
        export_all(Path(a.dirs[0]), models, targets)
    else:
        time_all(a.dirs, models, targets, a.runs)


if __name__ == "__main__":
    main()
