"""The cost model replayed on a tuning log: the held-out rank correlation the tuner would have reported, measuring
nothing again.

    .venv/bin/python -m benchmarks.tune_model --log tune.jsonl --model resnet18 [--target "llvm -mcpu=znver4"]
        [--options '{"winograd": false}'] [--seeds 3]

Takes a log fxc.tune wrote and the harness model it tuned (fxc.testing.models; or --onnx a file); rebuilds each
logged candidate's features as the tuner does (the same tasks, with the log's graph-level choices applied; the same
feature code, fxc/tuning/features.py), replays the log's rounds in their order with the tuner's online protocol
(each round predicted by the model trained on the rounds before it, then learnt: CostModel.update) and prints the
held-out Spearman correlations (the latest 200 held-out predictions): pooled over the tasks on log(cost / the task's
default cost), the figure fxc.tune reports, and within each task on its costs, averaged over the tasks with at
least 5 held-out candidates; each after 200 measurements and at the end. A model change is judged here on logs
already measured, without tuning again.

A log's rounds: the tuner appends one round at a time (a task's default alone first; later rounds its candidates
then the default again as a control), so a round ends after each default record and where the workload changes.
"""
from __future__ import annotations

import argparse
import json
import statistics
from dataclasses import dataclass, field

from fxc.backends import fill
from fxc.errors import FxcError
from fxc.target import Target
from fxc.tuning.cost_model import CostModel
from fxc.tuning.features import analyse
from fxc.tuning.log import best_records, cost, read
from fxc.tuning.search import config_id
from fxc.tuning.tasks import extract_tasks
from fxc.tuning.workload import target_key


@dataclass
class Round:
    """One measured round of one group task, as the tuner learnt it."""
    task: str               # workload key
    feats: list             # each candidate's feature vector (features.analyse)
    base: object            # the task's default config's feature vector
    costs: list             # seconds (inf: an error)
    default_cost: float     # the task's fastest default so far, this round's control included


@dataclass
class Replay:
    rounds: list = field(default_factory=list)
    records: int = 0        # the log's measurements for this target
    graph_level: int = 0    # records of graph-level knobs (not learnt by the model: the tuner does not either)
    unmatched: int = 0      # records of workloads this model's tasks lack


def rounds_of(records: list) -> list:
    """The log's records grouped into the tuner's rounds (see the module doc)."""
    out: list = []
    for r in records:
        if not out or out[-1][-1]["workload"] != r["workload"] or out[-1][-1]["config"] == {}:
            out.append([])
        out[-1].append(r)
    return out


def prepare(graph, records: list, target: str | None = None, options: dict | None = None) -> Replay:
    """The log's rounds with their features (the costly part: every candidate lowered once, as the tuner does)."""
    records = [r for r in records if not r.get("confirmed")]
    if not records:
        raise FxcError("the tuning log holds no measurements to replay")
    target = fill(Target.parse(target or records[0]["target_str"]))
    tkey = target_key(target)
    mine = [r for r in records if r["target"] == tkey]
    if not mine:
        raise FxcError(f"none of the log's records is for {target} on this machine (its targets: "
                       f"{sorted({r['target_str'] for r in records})}); give --target the target string it was "
                       f"tuned for, and FXC_NUM_THREADS its thread count")
    target, tasks = extract_tasks(graph, target, options, best_records(mine, tkey))
    by_key = {t.key: t for t in tasks}
    out = Replay(records=len(mine))
    cache: dict = {}
    defaults: dict = {}

    def feats(task, config):
        k = (task.key, config_id(config))
        if k not in cache:
            cache[k] = analyse(task, target, config)[0]
        return cache[k]
    for rnd in rounds_of(mine):
        task = by_key.get(rnd[0]["workload"])
        if task is None:
            out.unmatched += len(rnd)
            continue
        if task.graph_level:
            out.graph_level += len(rnd)
            continue
        for r in rnd:
            if r["config"] == {}:
                defaults[task.key] = min(defaults.get(task.key, float("inf")), cost(r))
        d = defaults.get(task.key, float("inf"))
        if d < float("inf"):        # (the tuner learns a task's rounds once its default is measured)
            out.rounds.append(Round(task.key, [feats(task, r["config"]) for r in rnd], feats(task, {}),
                                    [cost(r) for r in rnd], d))
    return out


def run(replay: Replay, model: CostModel | None = None) -> CostModel:
    """The model after learning the rounds in order, its held-out correlations filled as in the tuner."""
    model = model or CostModel()
    for r in replay.rounds:
        model.update(r.task, r.feats, r.costs, r.default_cost, r.base)
    return model


def at(correlations: list, n: int = 200) -> float:
    """The first correlation reported after n measurements (nan: none)."""
    return next((rho for m, rho in correlations if m >= n), float("nan"))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--log", required=True, action="append", help="a tuning log (repeat: one replay per log)")
    ap.add_argument("--model", action="append", default=[],
                    help="the harness model each log tuned (fxc.testing.models), in --log order")
    ap.add_argument("--onnx", action="append", default=[], help="or the ONNX file each log tuned")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--target", default=None, help="the target it was tuned for (default: the log's first record's)")
    ap.add_argument("--options", default="{}", help="the build options the tuning used (JSON)")
    ap.add_argument("--seeds", type=int, default=1, help="replay with this many model seeds (mean and range)")
    args = ap.parse_args(argv)
    models = args.model or args.onnx
    if len(models) != len(args.log):
        ap.error("give one --model (or --onnx) per --log")
    from fxc.testing.models import example_inputs, make_model
    from fxc.tuning.frontends import graph_of
    for log, name in zip(args.log, models):
        if args.onnx:
            graph = graph_of(name)
        else:
            graph = graph_of(make_model(name), example_inputs(name, batch=args.batch))
        rep = prepare(graph, read(log), args.target, json.loads(args.options))
        n = sum(len(r.costs) for r in rep.rounds)
        print(f"{log}: {rep.records} records; {len(rep.rounds)} rounds of group tasks ({n} measurements) replayed, "
              f"{rep.graph_level} graph-level records, {rep.unmatched} of workloads the model lacks")
        rows = []
        for seed in range(args.seeds):
            m = run(rep, CostModel(seed))
            rows.append((at(m.correlations), at(m.task_correlations), m.correlations[-1][1] if m.correlations
                         else float("nan"), m.task_correlations[-1][1] if m.task_correlations else float("nan")))
        for i, what in enumerate(("pooled, after 200", "per task, after 200", "pooled, at the end",
                                  "per task, at the end")):
            vals = [r[i] for r in rows]
            spread = f" (seeds: {min(vals):.3f}..{max(vals):.3f})" if len(vals) > 1 else ""
            print(f"  held-out Spearman {what:<22} {statistics.mean(vals):.3f}{spread}")


if __name__ == "__main__":
    main()
