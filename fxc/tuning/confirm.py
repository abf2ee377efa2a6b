"""The confirmation step: each group's best config re-measured inside the whole model against the default.

A group measured alone can win where the whole model loses (its neighbours leave the caches in another state; its
work split meets the runtime's threads differently; a disturbed round on a shared machine). Takes the tuner's task
states (their best configs), the model's graph, a measurer (fxc/tuning/tuner.py: a child process, Dask or a device
server), the log and ConfirmParams; builds whole models and times them the way the model's user calls them
(measure.py, WholeModel: in a new process, PyTorch loaded for a PyTorch model, each call's wall time), interleaved
call by call. The configs confirmed are the improved groups' best, and the log's records for the model's other
workloads that a compile would apply (another run's, e.g. another model's sharing the workload):
1. per group: the model with that group's config alone against the default model, all in one batch (one call of
   each per round; `rounds` rounds, more while they fit in `seconds`). Its gain is the median over the rounds of
   log(the default's time / its time) in that round; it is kept only where the gain exceeds the noise: twice its
   standard error (from the rounds' spread, or from the spread of runs of consecutive rounds where the gain drifts
   with the host's state: `gain`), and at least `margin`. Where none is, the model with all of
   them at once (measured in the same batch) is kept if it is faster by more than its noise: gains each within the
   noise can add up. Graph-level choices (a conv's Winograd form, which changes the groups) go first, in a batch of
   their own; the groups then against the default with the kept choices.
2. the final check: the whole tuned model as a compile will build it from the log (the kept configs) against the
   default (as many rounds); where it is not faster by more than the noise (and `min_gain`), every one of
   them stays at its default.
Produces one confirmation record per workload confirmed (its kept config, {} where the default stays; "model": the
per-round costs of the whole model without and with it alone; "why": the figures that decided), which compiles
apply before any faster unconfirmed record, and the Confirmation (kept, dropped, the final check's medians, why).
"""
from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass, field

from .log import append, best_for_target, make_record
from .measure import WholeModel
from .payload import MeasuredTask


@dataclass(frozen=True)
class ConfirmParams:
    rounds: int = 20            # rounds of interleaved calls per comparison (a call of each model per round), at least
    seconds: float = 15.0       # ... and more while they fit in this time (measure.py, WholeModel)
    margin: float = 0.005       # the least gain kept (a fraction of the model's time), whatever the noise
    min_gain: float = 0.0       # the least gain of the whole tuned model worth applying its records (final check)


@dataclass
class Confirmation:
    kept: list = field(default_factory=list)        # descs of the groups whose tuned config is confirmed
    dropped: list = field(default_factory=list)     # descs of those left at their default
    default_s: float = float("inf")                 # the final check: the default model's median call
    tuned_s: float = float("inf")                   # the tuned model's (the kept configs)
    noise: float = 0.0                              # the final check's threshold (a fraction)
    why: dict = field(default_factory=dict)         # desc -> what decided it
    errors: list = field(default_factory=list)      # (what, error kind, detail) of whole-model builds that failed
    wall_s: float = 0.0                             # how long the confirmation took

    def __str__(self):
        if not self.kept and not self.dropped:
            return "confirmation: no group improved alone"
        gain = self.default_s / self.tuned_s - 1 if self.tuned_s < float("inf") else 0.0
        return (f"confirmation in the whole model: {self.default_s * 1e3:.4g} ms default -> "
                f"{self.tuned_s * 1e3:.4g} ms ({gain:+.1%}, noise {self.noise:.1%}; medians of interleaved calls); "
                f"{len(self.kept)} tuned group(s) kept, {len(self.dropped)} left at their default; "
                f"{self.wall_s:.0f} s")


def candidates(states: list) -> list:
    """The states whose best config beats their measured default, largest expected end-to-end gain first (graph
    level choices, which change the groups, included: their node's gain is counted once)."""
    better = [s for s in states if s.best_config and s.best_cost < s.default_cost < float("inf")]
    return sorted(better, key=lambda s: -(s.default_cost - s.best_cost) * s.task.count)


BATCHES = 5        # runs of consecutive rounds whose gains give the batch-means standard error (gain, below)


def gain(base: list, trial: list) -> tuple:
    """(gain, standard error) of `trial` over `base`, costs paired by round: the median over the rounds of
    log(base / trial) (> 0: trial is faster), and the larger of two standard errors: the median's from the rounds'
    spread (1.2533 x the robust sigma 1.4826 x MAD / sqrt(rounds)), which holds for independent rounds, and the
    batch means' (`batch_gains`: the standard deviation of the gains of BATCHES runs of consecutive rounds / sqrt(
    BATCHES)), which holds when the gain itself moves with the host's state over seconds (docs/tuning.md: in one
    process the same two MobileNetV2 builds +3.9% .. +5.1% and +7.7% .. +12.0% as the host's cores were slowed or
    not by work outside the VM, where the rounds' spread said 0.3-1%)."""
    d = [math.log(b / t) for b, t in zip(base, trial)]
    med = statistics.median(d)
    mad = statistics.median(abs(x - med) for x in d)
    runs = batch_gains(base, trial)
    return med, max(1.2533 * 1.4826 * mad / math.sqrt(len(d)),
                    statistics.stdev(runs) / math.sqrt(len(runs)) if len(runs) > 1 else 0.0)


def batch_gains(base: list, trial: list, batches: int = BATCHES) -> list:
    """The gain (median log(base / trial)) of each of `batches` runs of consecutive rounds, in order; none with fewer
    than 4 rounds per run."""
    d = [math.log(b / t) for b, t in zip(base, trial)]
    if len(d) < 4 * batches:
        return []
    return [statistics.median(d[len(d) * i // batches:len(d) * (i + 1) // batches]) for i in range(batches)]


def confirm(graph, states: list, measurer, log, tkey: str, target, params: ConfirmParams = ConfirmParams(),
            framework: str | None = None) -> Confirmation:
    """Confirm the improved states' configs in the whole model (see the module doc); framework: "torch" when the
    model is a PyTorch model (its user's process has PyTorch loaded)."""
    t0 = time.perf_counter()
    result = Confirmation()
    applied = {k: r["config"] for k, r in best_for_target(log, tkey)[0].items() if r["config"]}
    state = {s.task.key: s for s in candidates(states)}
    choice = {k: s.best_config for k, s in state.items()}     # workload -> the config confirmed
    for s in states:    # a workload the log tunes (another run's record) that did not improve here: confirmed too
        if s.task.key not in choice and applied.get(s.task.key):
            state[s.task.key], choice[s.task.key] = s, applied[s.task.key]
    if not choice:
        return result
    model = MeasuredTask("model", "the whole model", graph)
    whole = WholeModel(params.rounds, params.seconds, framework)
    alone: dict = {}        # workload -> what its comparison alone measured
    costs: dict = {}        # workload -> the whole model's per-round costs without and with it

    def screen(group: list, base: dict) -> list:
        """The workloads of `group` whose config alone makes the model (with `base`) faster by more than the
        noise; where none does, all of them if together they do (gains each below the noise can add up)."""
        if not group:
            return []
        together = [{**base, **{k: choice[k] for k in group}}] if len(group) > 1 else []
        rs = measurer(model, [base] + [{**base, k: choice[k]} for k in group] + together, whole)
        for k, r in zip([None, *group], rs):
            if r.error is not None:
                result.errors.append((state[k].task.desc if k else "the default", r.error, r.detail))
                alone[k] = f"its whole model failed ({r.error})"
        if rs[0].error is not None:
            return []
        if result.default_s == float("inf"):
            result.default_s = result.tuned_s = statistics.median(rs[0].costs)
        kept = []
        for k, r in zip(group, rs[1:]):
            if r.error is None:
                g, se = gain(rs[0].costs, r.costs)
                noise = max(params.margin, 2 * se)
                costs[k] = {"default": rs[0].costs, "tuned": r.costs}
                alone[k] = f"the whole model {g:+.2%} faster with it alone (noise {noise:.2%}, {len(r.costs)} " \
                           f"calls each)"
                if g > noise:
                    kept.append(k)
        if together and rs[-1].error is not None:
            result.errors.append((f"all {len(group)} at once", rs[-1].error, rs[-1].detail))
        if together and not kept and rs[-1].error is None:
            g, se = gain(rs[0].costs, rs[-1].costs)
            noise = max(params.margin, 2 * se)
            for k in group:
                alone[k] = f"{alone.get(k, 'not measured')}; with the other {len(group) - 1} at once {g:+.2%} " \
                           f"(noise {noise:.2%})"
            if g > noise:
                kept = list(group)
        return kept

    kept = screen([k for k in choice if state[k].task.graph_level], {})
    kept += screen([k for k in choice if not state[k].task.graph_level], {k: choice[k] for k in kept})
    final_why, passed = "", set(kept)
    if kept:        # the model as a compile will build it from the log after these records, against the default
        final = {**applied, **{k: {} for k in choice}, **{k: choice[k] for k in kept}}
        default, tuned = measurer(model, [{}, {k: c for k, c in final.items() if c}], whole)
        for what, r in (("the default", default), ("the tuned model", tuned)):
            if r.error is not None:
                result.errors.append((what, r.error, r.detail))
        if default.error is None and tuned.error is None:
            g, se = gain(default.costs, tuned.costs)
            result.noise = max(params.margin, params.min_gain, 2 * se)
            result.default_s, result.tuned_s = statistics.median(default.costs), statistics.median(tuned.costs)
            runs = " ".join(f"{x:+.1%}" for x in batch_gains(default.costs, tuned.costs))
            final_why = (f"the whole tuned model {g:+.2%} faster than the default (noise {2 * se:.2%}, "
                         f"{len(tuned.costs)} calls each" + (f"; by fifths of the rounds {runs}" if runs else "") + ")")
            if g <= result.noise:
                final_why += f": not faster by {result.noise:.2%}, the defaults stay"
                kept = []
        else:
            final_why = "the final check's whole models failed: the defaults stay"
            kept = []
    for k, config in choice.items():
        s = state[k]
        why = f"{'kept' if k in kept else 'dropped'}: {alone.get(k, 'not measured')}" + \
              (f"; {final_why}" if k in passed else "")
        append(log, make_record(k, tkey, config if k in kept else {},
                                [s.best_cost if k in kept else s.default_cost], None, s.task.desc, str(target),
                                model=costs.get(k, {"default": [], "tuned": []}), why=why))
        result.why[s.task.desc] = why
        (result.kept if k in kept else result.dropped).append(s.task.desc)
        s.best_config, s.best_cost = (config, s.best_cost) if k in kept else ({}, s.default_cost)
    result.wall_s = time.perf_counter() - t0
    return result
