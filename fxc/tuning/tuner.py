"""fxc.tune: search each workload's schedule knobs on the real device and log every measurement.

Takes a model (a torch.nn.Module with example inputs, an ONNX model or path, a model fxc.from_mxnet compiled, or a
graph IR), a target, a trial budget and a log path; produces a TuneResult (per-task best configs, the end-to-end
estimate before and after, trials, wall time, the cost model's held-out rank correlations, the curves) and, in the
log, one record per measurement, which later compiles for the same target apply by themselves.

The loop: extract the tasks (fxc/tuning/tasks.py); resume what the log already holds for them; measure each task's
default; then, round by round, the scheduler picks the task with the most expected end-to-end gain, the search
proposes a batch from the cost model's predictions, the batch is measured (a child process; or Dask tasks), every
result is appended to the log and trains the model.
"""
from __future__ import annotations

import json
import random
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..backends import fill
from ..errors import FxcError
from ..runtime.remote import parse_address
from ..target import BOARDS, Target
from .confirm import Confirmation, ConfirmParams, confirm as confirm_in_model
from .cost_model import CostModel
from .features import analyse as features_of
from .frontends import framework_of, graph_of
from .log import append, best_for_target, cost, default_log_path, make_record, read
from .measure import RUNNER, Child, MeasureParams, Result, measure
from .progress import Progress
from .scheduler import TaskState, end_to_end, next_task
from .search import config_id, propose
from .tasks import extract_tasks
from .workload import target_key

GRAPH_SAMPLES = 2      # measurements of each choice of a graph-level knob (in different rounds: one disturbed round
                       # on a shared machine must not decide a model's layout)


@dataclass
class TuneResult:
    target: str
    log: Path
    states: list
    trials: int = 0
    resumed: int = 0            # records of these workloads the log already held
    wall_s: float = 0.0
    default_s: float = 0.0      # end-to-end estimate, default schedules
    tuned_s: float = 0.0        # end-to-end estimate, best configs
    errors: dict = field(default_factory=dict)      # error kind -> count
    correlations: list = field(default_factory=list)    # (measurements, Spearman rho of held-out predictions)
    task_correlations: list = field(default_factory=list)   # (measurements, mean over tasks of each task's rho)
    e2e_curve: list = field(default_factory=list)   # (trials, end-to-end estimate)
    confirmation: Confirmation | None = None        # the whole model's A/B of the tuned configs (confirm.py)

    def best_configs(self) -> dict:
        return {s.task.key: s.best_config for s in self.states}

    def __str__(self):
        errs = ", ".join(f"{k} {v}" for k, v in sorted(self.errors.items())) or "none"
        rho = f"; cost model rank correlation {self.correlations[-1][1]:.2f}" if self.correlations else ""
        return (f"fxc.tune on {self.target}: {len(self.states)} workloads, {self.trials} trials "
                f"(+{self.resumed} from the log) in {self.wall_s:.1f} s; end to end (estimate) "
                f"{self.default_s * 1e3:.4g} ms default -> {self.tuned_s * 1e3:.4g} ms tuned; errors: {errs}{rho}; "
                f"log {self.log}" + (f"\n{self.confirmation}" if self.confirmation else ""))


def tune(model, example_inputs=None, target="llvm", trials: int = 64, log=None, options: dict | None = None,
         dask=None, batch: int = 4, params: MeasureParams | None = None, progress: bool | None = None,
         plot=None, seed: int = 0, runner: str = RUNNER, device: str | None = None,
         confirm: "bool | ConfirmParams" = True) -> TuneResult:
    """Tune `model` for `target` with `trials` measurements; see the module doc and docs/tuning.md.

    log: the tuning log to append to (default: the log beside the compile cache, which compiles read by
    themselves); options: the build options the model will be compiled with; dask: a dask.distributed Client (or
    a scheduler address "tcp://host:port"); batch: candidates per round; params: MeasureParams (number, repeat,
    min_repeat_ms, warmup, timeout_s); progress: the bar (None: when stderr is a terminal); plot: a PNG path for
    the tuning curves; device: "tcp://host:port" of an fxc device server (`fxc serve-device`) on the machine
    the target describes (a Raspberry Pi: target="rasp4b64"), which then runs every measurement; confirm: the
    improved groups re-measured inside the whole model (True, or ConfirmParams: rounds, margin; confirm.py), False
    to skip it.
    """
    if not isinstance(trials, int) or trials < 0:
        raise FxcError(f"trials={trials!r}: give a number of measurements (an int >= 0)")
    t0 = time.perf_counter()
    params = params or MeasureParams()
    graph = graph_of(model, example_inputs)
    log = Path(log) if log is not None else default_log_path()
    if device is not None:
        _check_device(target, device)
    target = fill(Target.parse(target))
    tkey = target_key(target)
    target, tasks = extract_tasks(graph, target, options, best_for_target(log, tkey)[0])
    states = [TaskState(t) for t in tasks]
    result = TuneResult(str(target), log, states)
    result.resumed = _resume(states, read(log), tkey)
    layout_done = not any(s.task.graph_level and not _tried_all(s) for s in states)
    model_ = CostModel(seed)
    rng = random.Random(seed)
    analysed: dict = {}         # (workload, config id) -> (features, code digest)
    codes: dict = {}            # workload -> the code digests measured

    def analyse(state, config):
        k = (state.task.key, config_id(config))
        if k not in analysed:
            analysed[k] = features_of(state.task, target, config)
        return analysed[k]

    measurer, close = _measurer(dask, target, tkey, params, runner, device)
    bar = Progress(trials, progress)
    try:
        while result.trials < trials:
            state = next_task(states)
            if not layout_done and (state is None or not state.task.graph_level):
                # the graph-level choices are made: the groups they give, with what the log knows of them
                layout_done = True
                target, tasks = extract_tasks(graph, target, options, best_for_target(log, tkey)[0])
                done = [s for s in states if s.task.graph_level]
                states[:] = done + [TaskState(t) for t in tasks if not t.graph_level]
                result.resumed += _resume(states[len(done):], read(log), tkey)
                continue
            if state is None:
                break
            if state.task.graph_level:
                configs = [c for c in state.task.space.all()
                           if state.samples.get(config_id(c), 0) < GRAPH_SAMPLES][:min(batch, trials - result.trials)]
                if not configs:
                    state.exhausted = True
                    continue
            elif "{}" not in state.measured:
                configs = [{}]
            else:
                n = min(batch, trials - result.trials)
                seen = codes.setdefault(state.task.key, {analyse(state, json.loads(cid))[1] for cid in state.measured})
                configs = propose(state.task, state.measured, model_, lambda c, s=state: analyse(s, c),
                                  n - 1 if n > 1 else n, rng, seen_code=seen)
                seen.update(analyse(state, c)[1] for c in configs)
                if not configs:
                    state.exhausted = True
                    continue
                if n > 1:
                    configs.append({})      # a control: the default again, under the same load as the candidates
            results = measurer(state.task, configs)
            _record(state, results, log, tkey, target, result)
            _check_default(state, results, target, log)
            if state.default_cost < float("inf") and not state.task.graph_level:
                model_.update(state.task.key, [analyse(state, r.config)[0] for r in results],
                              [r.cost for r in results], state.default_cost, analyse(state, {})[0])
            if all("{}" in s.measured for s in states if not s.task.graph_level):
                result.e2e_curve.append((result.trials, end_to_end(states)))
            bar.update(len(results), state.task.desc, state.best_cost, end_to_end(states), end_to_end(states, True))
        if confirm:     # (also after 0 trials: the log's records, e.g. another model's, confirmed on this one)
            bar.close()
            result.confirmation = confirm_in_model(graph, states, measurer, log, tkey, target,
                                                   confirm if isinstance(confirm, ConfirmParams) else ConfirmParams(),
                                                   None if device else framework_of(model))
    finally:
        bar.close()
        close()
    result.wall_s = time.perf_counter() - t0
    result.default_s, result.tuned_s = end_to_end(states, True), end_to_end(states)
    result.correlations, result.task_correlations = model_.correlations, model_.task_correlations
    if plot is not None:
        from .plot import plot_curves  # deferred: matplotlib, only for a picture
        plot_curves(result, plot)
    return result


def _check_device(spec, device: str) -> None:
    """A device server runs CPU libraries of the machine it is on: the target must say which machine that is (its
    triple, CPU and features are the records' target key, so they apply to that kind of board only)."""
    parse_address(device)
    target = Target.parse(spec)
    words = str(spec or "llvm").split()
    if target.kind != "llvm":
        raise FxcError(f"device={device!r}: an fxc device server runs llvm (CPU) artifacts; {target} is not one. "
                       f"Measure {target.kind} on this machine (leave device out)")
    if not (isinstance(spec, Target) or words[0] in BOARDS or any(w.startswith(("-mtriple=", "-mcpu="))
                                                                   for w in words)):
        raise FxcError(f"device={device!r} with target {str(target)!r}: name the device's machine, e.g. "
                       f"target='rasp4b64' or 'llvm -mtriple=aarch64-linux-gnu -mcpu=cortex-a72' (the host's CPU "
                       f"would key the records to this machine, not the device)")


def _measurer(dask, target, tkey, params, runner, device=None):
    """(measure(task, configs, whole_model=None) -> [Result], close()): in a child process here (a persistent one;
    a whole model in a new one, a process like its user's), or as Dask tasks."""
    if dask is None:
        child = Child()
        return (lambda task, configs, whole=None: measure(task, str(target), tkey, configs, params, runner,
                                                          child if whole is None else None, device,
                                                          whole)), child.close
    from .dask import DaskMeasurer, connect  # deferred: dask is optional (fxc[tune])
    client = connect(dask) if isinstance(dask, str) else dask
    dm = DaskMeasurer(client, target, tkey, params, runner, device)
    return (lambda task, configs, whole=None: dm.gather(dm.submit(task, configs, whole), configs)), (lambda: None)


def _record(state: TaskState, results: list, log: Path, tkey: str, target, result: TuneResult) -> None:
    improved = False
    for r in results:
        append(log, make_record(state.task.key, tkey, r.config, r.costs, r.error, state.task.desc, str(target),
                                r.detail if r.error else ""))
        c = r.cost
        cid = config_id(r.config)
        state.measured[cid] = min(c, state.measured.get(cid, float("inf")))
        state.samples[cid] = state.samples.get(cid, 0) + 1
        if r.config == {}:
            state.default_cost = min(c, state.default_cost)
        if r.error is not None:
            result.errors[r.error] = result.errors.get(r.error, 0) + 1
        if c < state.best_cost:
            improved = improved or state.best_cost < float("inf")
            state.best_cost, state.best_config = c, r.config
        result.trials += 1
    state.stale = 0 if improved else state.stale + 1
    state.curve.append((result.trials, state.best_cost if state.best_cost < float("inf") else 0.0))


def _check_default(state: TaskState, results: list, target, log: Path) -> None:
    """A default schedule that fails is no candidate's fault: the device went away, or fxc cannot build the
    workload at all. Tuning stops with an error that says so (the log keeps what was measured: a rerun resumes)."""
    for r in results:
        if r.config == {} and r.error is not None:
            raise FxcError(f"fxc.tune: the default schedule of {state.task.desc} failed on {target} ({r.error}: "
                           f"{r.detail[:200]}); the device may have disappeared or stopped answering. The log "
                           f"{log} keeps every measurement so far: run fxc.tune again to resume")


def _tried_all(state: TaskState) -> bool:
    return all(state.samples.get(config_id(c), 0) >= GRAPH_SAMPLES for c in state.task.space.all())


def _resume(states: list, records: list, tkey: str) -> int:
    """Fill the states from the log's records of their workloads on this target; returns how many there were."""
    by_key = {s.task.key: s for s in states}
    n = 0
    for r in records:
        s = by_key.get(r["workload"])
        if s is None or r["target"] != tkey or r.get("confirmed"):     # (a confirmation is no measurement)
            continue
        n += 1
        s.resumed += 1
        c = cost(r)
        cid = config_id(r["config"])
        s.measured[cid] = min(c, s.measured.get(cid, np.inf))
        s.samples[cid] = s.samples.get(cid, 0) + 1
        if r["config"] == {}:
            s.default_cost = min(s.default_cost, c)
        if c < s.best_cost:
            s.best_cost, s.best_config = c, r["config"]
    for s in states:
        s.exhausted = s.task.graph_level and _tried_all(s)
    return n


__all__ = ["tune", "TuneResult", "MeasureParams", "Result"]
