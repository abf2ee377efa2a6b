"""Test-retest of the tuner's group measurements: how well two measurements of the same candidates agree, per timing
protocol, at about the same wall time per measurement.

    .venv/bin/python -m benchmarks.tune_retest --log tune.jsonl --model resnet18 [--tasks 8] [--per-task 6]
        [--passes 2]

Takes a log fxc.tune wrote and its harness model (fxc.testing.models); picks candidates the log measured (the tasks
with the most measured configs: each one's default and up to per-task - 1 others), builds each once here (profile=True:
the kernel timers the tuner reads) and measures all of them `passes` times with each protocol, the passes of the
protocols interleaved (A1 B1 C1, then B2 C2 A2: the order rotated), so each protocol meets the same host:
- `3 x 20 ms`: today's MeasureParams (3 repeats of at least 20 ms each; the cost the fastest repeat's kernel time);
- `12 x 5 ms`: 12 repeats of at least 5 ms, the fastest;
- `12 x 5 ms, median`: the same repeats, their median;
- `12 x 5 ms, thread CPU`: 12 repeats of at least 5 ms, the calling thread's CPU time (time.thread_time) over the
  repeat's calls, the fastest (a preempted caller's time does not count; a preempted worker's does, as the caller
  runs its chunks or waits).
Prints, per protocol, the rank correlation (Spearman) of one pass with another, averaged over the pairs of passes:
pooled over the tasks on log(cost / the task's default's cost in that pass) — the figure the cost model's held-out
correlation is measured on — and within each task on its costs, averaged over the tasks; and the wall time a
measurement took.
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from fxc.backends import fill
from fxc.driver.build import build
from fxc.target import Target
from fxc.tuning.cost_model import spearman
from fxc.tuning.log import append, best_records, cost, make_record, read
from fxc.tuning.measure import MeasureParams, calls_per_repeat, example_arrays, time_module
from fxc.tuning.tasks import clone_graph, extract_tasks
from fxc.tuning.workload import target_key


def _thread_cpu(module, arrays: list, p: MeasureParams) -> list:
    """Like time_module (number raised until a repeat's wall time reaches min_repeat_ms), each repeat's cost the
    calling thread's CPU time per call."""
    number = calls_per_repeat(module, arrays, p)
    costs = []
    for _ in range(p.repeat):
        c0 = time.thread_time()
        for _ in range(number):
            module(*arrays)
        costs.append((time.thread_time() - c0) / number)
    return costs


PROTOCOLS = {
    "3 x 20 ms": lambda m, a: min(time_module(m, a, MeasureParams())),
    "12 x 5 ms": lambda m, a: min(time_module(m, a, MeasureParams(repeat=12, min_repeat_ms=5))),
    "12 x 5 ms, median": lambda m, a: statistics.median(time_module(m, a, MeasureParams(repeat=12, min_repeat_ms=5))),
    "12 x 5 ms, thread CPU": lambda m, a: min(_thread_cpu(m, a, MeasureParams(repeat=12, min_repeat_ms=5))),
}


def candidates(graph, records: list, target, n_tasks: int, per_task: int) -> list:
    """[(task, [configs: the default first])] of the tasks with the most successfully measured configs."""
    tkey = target_key(target)
    target, tasks = extract_tasks(graph, target, None, best_records(records, tkey))
    by_task: dict = {}
    for r in records:
        if r["target"] == tkey and not r.get("confirmed") and cost(r) < float("inf"):
            by_task.setdefault(r["workload"], {})[json.dumps(r["config"], sort_keys=True)] = r["config"]
    chosen = []
    for t in sorted((t for t in tasks if not t.graph_level and not t.prepack and "{}" in by_task.get(t.key, {})),
                    key=lambda t: -len(by_task[t.key]))[:n_tasks]:
        others = [c for k, c in sorted(by_task[t.key].items()) if k != "{}"]
        step = max(1, len(others) // max(1, per_task - 1))
        chosen.append((t, [{}] + others[::step][:per_task - 1]))
    return chosen


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--log", required=True)
    ap.add_argument("--model", default="resnet18")
    ap.add_argument("--target", default="llvm")
    ap.add_argument("--tasks", type=int, default=8)
    ap.add_argument("--per-task", type=int, default=6)
    ap.add_argument("--passes", type=int, default=2)
    args = ap.parse_args(argv)
    import torch

    from fxc.testing.models import ResNet, example_inputs, make_model, randomize_batchnorm
    from fxc.tuning.frontends import graph_of
    torch.manual_seed(0)
    model = (randomize_batchnorm(ResNet((3, 4, 6, 3))) if args.model == "resnet34" else make_model(args.model)).eval()
    inputs = example_inputs("resnet18" if args.model == "resnet34" else args.model)
    target = fill(Target.parse(args.target))
    chosen = candidates(graph_of(model, inputs), read(args.log), target, args.tasks, args.per_task)
    built = []          # (task index, module, arrays, is the default)
    with tempfile.TemporaryDirectory() as tmp:
        for i, (t, configs) in enumerate(chosen):
            arrays = example_arrays(t.graph)
            for j, c in enumerate(configs):
                log = Path(tmp) / f"{i}-{j}.jsonl"
                log.touch()
                append(log, make_record(t.key, target_key(target), c, [1.0], None))
                built.append((i, build(clone_graph(t.graph), target, tuning_log=str(log), profile=True), arrays,
                              j == 0))
    print(f"{len(built)} candidates of {len(chosen)} tasks built", flush=True)
    costs = {(name, k): [] for name in PROTOCOLS for k in range(args.passes)}
    walls = {name: [] for name in PROTOCOLS}
    names = list(PROTOCOLS)
    for k in range(args.passes):
        for name in names[k % len(names):] + names[:k % len(names)]:      # (no protocol always first)
            measure = PROTOCOLS[name]
            for _, module, arrays, _ in built:
                t0 = time.perf_counter()
                costs[name, k].append(measure(module, arrays))
                walls[name].append(time.perf_counter() - t0)
    tasks = np.array([b[0] for b in built])
    defaults = np.array([b[3] for b in built])
    for name in PROTOCOLS:
        rel = []
        for k in range(args.passes):
            c = np.log(np.array(costs[name, k]))
            rel.append(c - np.array([c[(tasks == tasks[j]) & defaults][0] for j in range(len(c))]))
        keep = ~defaults        # (a default's relative cost is 0 by construction)
        pairs = [(a, b) for a in range(args.passes) for b in range(a + 1, args.passes)]
        pooled = [spearman(rel[a][keep], rel[b][keep]) for a, b in pairs]
        within = [w for a, b in pairs for i in range(len(chosen))
                  for w in [spearman(np.array(costs[name, a])[tasks == i], np.array(costs[name, b])[tasks == i])]
                  if not math.isnan(w)]
        print(f"{name:<24} test-retest pooled {statistics.mean(pooled):5.2f} (pairs of passes: "
              f"{', '.join(f'{r:.2f}' for r in pooled)})  within tasks {statistics.mean(within):5.2f}  "
              f"({len(built)} candidates; {statistics.median(walls[name]) * 1e3:.0f} ms per measurement)")


if __name__ == "__main__":
    main()
