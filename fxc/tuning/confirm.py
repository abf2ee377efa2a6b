"""The confirmation step: each group's best config re-measured inside the whole model against the default.

A group measured alone can win where the whole model loses (another group's input now arrives in a layout or cache
state the measurement did not see; a disturbed round on a shared machine). Takes the tuner's task states (their best
configs), the model's graph and a measurer (fxc/tuning/tuner.py: a child process, Dask or a device server); builds
and times the whole model (its calls' wall time, what a user sees; `number`/`repeat` as for groups), A/B
interleaved in one batch:
1. every improved group's best at once against the defaults: not slower -> all are confirmed;
2. else one group at a time, largest expected gain first, each against what is confirmed so far: kept where the
   whole model is not slower, else its default; then the kept set once more against the defaults (kept only if
   the whole model is not slower).
Produces one confirmation record per improved workload in the log (its kept config, {} where the default stays;
"model": the whole model's costs), which compiles apply before any faster unconfirmed record, and the Confirmation
(kept, dropped, the whole model's cost before and after).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .log import append, make_record
from .payload import MeasuredTask


@dataclass
class Confirmation:
    kept: list = field(default_factory=list)        # descs of the groups whose tuned config is confirmed
    dropped: list = field(default_factory=list)     # descs of those left at their default (the model was slower)
    default_s: float = float("inf")                 # the whole model's cost: defaults (fastest repeat)
    tuned_s: float = float("inf")                   # with the confirmed configs
    errors: list = field(default_factory=list)      # (what, error kind, detail) of whole-model builds that failed

    def __str__(self):
        if not self.kept and not self.dropped:
            return "confirmation: no group improved alone"
        return (f"confirmation in the whole model: {self.default_s * 1e3:.4g} ms default -> "
                f"{self.tuned_s * 1e3:.4g} ms; {len(self.kept)} tuned group(s) kept, {len(self.dropped)} left at "
                f"their default")


def candidates(states: list) -> list:
    """The states whose best config beats their measured default, largest expected end-to-end gain first (graph
    level choices, which change the groups, included: their node's gain is counted once)."""
    better = [s for s in states if s.best_config and s.best_cost < s.default_cost < float("inf")]
    return sorted(better, key=lambda s: -(s.default_cost - s.best_cost) * s.task.count)


def confirm(graph, states: list, measurer, log, tkey: str, target, rounds: int = 2) -> Confirmation:
    """Confirm the improved states' configs in the whole model (see the module doc); `rounds`: A/B pairs per
    comparison (interleaved in one batch, each side's cost its fastest run)."""
    result = Confirmation()
    todo = candidates(states)
    if not todo:
        return result
    model = MeasuredTask("model", "the whole model", graph)
    records = lambda chosen: {s.task.key: s.best_config for s in chosen}  # noqa: E731

    def compare(base: list, trial: list) -> tuple:
        """(base's cost, trial's cost) of the whole model, A/B interleaved."""
        rs = measurer(model, [records(base), records(trial)] * rounds, True)
        for r in rs:
            if r.error is not None:
                result.errors.append(([s.task.desc for s in trial], r.error, r.detail))
        a = min(r.cost for r in rs[0::2])
        b = min(r.cost for r in rs[1::2])
        return a, b

    default, everything = compare([], todo)
    result.default_s = default
    if default == float("inf"):
        return result           # (the whole model failed with its defaults: nothing to compare; errors say why)
    if everything <= default:
        kept, result.tuned_s = list(todo), everything
    else:
        kept = []
        for s in todo:
            base, trial = compare(kept, kept + [s])
            if trial <= base:
                kept.append(s)
        result.default_s, result.tuned_s = compare([], kept) if kept else (default, default)
        if result.tuned_s > result.default_s:       # (one by one each looked no slower; together they are)
            kept, result.tuned_s = [], result.default_s
    for s in todo:
        config = s.best_config if s in kept else {}
        cost = s.best_cost if s in kept else s.default_cost
        append(log, make_record(s.task.key, tkey, config, [cost], None, s.task.desc, str(target),
                                model={"default": [result.default_s], "tuned": [result.tuned_s]}))
        (result.kept if s in kept else result.dropped).append(s.task.desc)
        if s not in kept:
            s.best_config, s.best_cost = {}, s.default_cost
    return result
