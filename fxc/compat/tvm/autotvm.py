"""`tvm.autotvm` over fxc's tuner (fxc.tune, fxc/tuning/): tasks, tuners, measure options, callbacks and
`apply_history_best`.

    extract_from_program(mod, params, target, ops=)   fxc's tuning tasks of the built model (its fused groups with
                                                      knobs), those holding one of `ops` (relay.op.get names, OPS)
    XGBTuner(task).tune(n_trial, measure_option, callbacks)
                                                      fxc's tuner on that task's group: `n_trial` measurements in
                                                      child processes, recorded in the `log_to_file` callback's log
                                                      (none: a temporary log, dropped as TVM drops the results)
    RandomTuner, GridSearchTuner, GATuner             the same tuner (fxc's search is the cost-model-guided
                                                      evolutionary one whatever the class; a FacadeNote says so)
    apply_history_best(log)                           the builds inside use the log's best configs (fxc's
                                                      `tuning_log=` build option)
    measure_option(builder=LocalBuilder(), runner=LocalRunner(number=, repeat=, min_repeat_ms=, timeout=))
                                                      fxc's MeasureParams

Tuning changes speed only: a build with or without a log computes the same outputs (fxc checks every measured
candidate against the default schedule). The graph tuner (DPTuner, PBQPTuner, apply_graph_best) and RPC runners
are not provided.
"""
from __future__ import annotations

import tempfile
from pathlib import Path

from .build import TUNING_LOGS
from .finder import module_getattr
from .ir import main_function, to_graph
from .ndarray import note
from .target import Target
from .unsupported import Namespace, UnsupportedAPIError, missing_member

# Relay op -> the fxc ops (by name prefix) whose groups are its tasks
OPS = {"nn.conv2d": ("conv2d", "depthwise", "winograd"), "nn.dense": ("matmul", "dense"),
       "nn.batch_matmul": ("matmul", "bmm"), "nn.conv2d_transpose": ("conv_transpose",)}


class ConfigSpace:
    """`task.config_space`: `len()` is the number of configurations of the task's knobs."""

    def __init__(self, space):
        self.space = space

    def __len__(self):
        return self.space.size()

    def __repr__(self):
        return "ConfigSpace(" + ", ".join(f"{k}: {len(v.choices)}" for k, v in self.space.knobs.items()) + ")"


class Task:
    """A tuning task: one fused group of the model (`.fxc` is fxc's tuning Task; `.target` the fxc target)."""

    def __init__(self, fxc_task, target: str):
        self.fxc, self.target = fxc_task, target
        self.name, self.workload = fxc_task.desc, fxc_task.key
        self.config_space = ConfigSpace(fxc_task.space)

    @property
    def args(self) -> tuple:
        return tuple((v.shape, v.dtype) for v in self.fxc.graph.inputs)

    def __repr__(self):
        return f"Task({self.name}, {len(self.config_space)} configs, {self.target})"

    __getattr__ = missing_member("autotvm.task.Task", default="the facade's Task has name, workload, args, target "
                                 "and config_space")


def extract_from_program(mod, params, target, target_host=None, ops=None) -> list:
    """The tunable tasks of `mod` built with `params` for `target` (see the module doc)."""
    from ...tuning.tasks import extract_tasks  # deferred: the tuner loads only for autotvm
    graph, _ = to_graph(main_function(mod), params)
    target = Target(target, host=target_host)
    _, tasks = extract_tasks(graph, target.fxc, {})
    wanted = None
    if ops is not None:
        names = [getattr(o, "name", o) for o in ops]
        unknown = [n for n in names if n not in OPS]
        if unknown:
            raise UnsupportedAPIError(f"extract_from_program(ops={unknown})", f"fxc's tasks are filtered by "
                                      f"{', '.join(OPS)}")
        wanted = tuple(p for n in names for p in OPS[n])
    return [Task(t, target.fxc) for t in tasks if t.tunable and (
        wanted is None or any(node.op.startswith(wanted) for node in t.graph.nodes))]


class MeasureOption(dict):
    """`autotvm.measure_option(builder=, runner=)`: fxc's MeasureParams from the runner's settings."""


class LocalBuilder:
    def __init__(self, timeout: float = 10, n_parallel=None, build_func="default", **options):
        self.timeout = timeout


class LocalRunner:
    """`autotvm.LocalRunner(number=, repeat=, min_repeat_ms=, timeout=)`: how each candidate is timed."""

    def __init__(self, timeout: float = 10, number: int = 4, repeat: int = 3, min_repeat_ms: float = 0,
                 cooldown_interval: float = 0.1, enable_cpu_cache_flush: bool = False, module_loader=None):
        if module_loader is not None:
            raise UnsupportedAPIError("LocalRunner(module_loader=...)", "fxc measures in its own child processes")
        self.timeout, self.number, self.repeat, self.min_repeat_ms = timeout, number, repeat, min_repeat_ms


def _rpc_runner(*args, **kwargs):
    raise UnsupportedAPIError("autotvm.RPCRunner", "fxc measures on this machine's devices; for several machines "
                              "pass a Dask cluster to fxc.tune(model, ..., dask=client)")


def measure_option(builder=None, runner=None) -> MeasureOption:
    if runner is not None and not isinstance(runner, LocalRunner):
        raise UnsupportedAPIError(f"measure_option(runner={type(runner).__name__})", "use autotvm.LocalRunner")
    runner = runner or LocalRunner()
    timeout = max(runner.timeout, getattr(builder, "timeout", 0))
    return MeasureOption(number=runner.number, repeat=runner.repeat, min_repeat_ms=runner.min_repeat_ms,
                         timeout_s=float(timeout))


class _LogToFile:
    def __init__(self, path):
        self.path = str(path)


class _ProgressBar:
    def __init__(self, total=None, prefix: str = "", si_prefix: str = "G"):
        self.total, self.prefix = total, prefix


class Tuner:
    """A task's tuner: `tune(n_trial, measure_option, early_stopping, callbacks)` runs fxc's tuner on the task."""

    def __init__(self, task: Task, **options):
        if not isinstance(task, Task):
            raise UnsupportedAPIError(f"{type(self).__name__}({type(task).__name__})", "pass a task of "
                                      "autotvm.task.extract_from_program")
        self.task = task
        if type(self) is not XGBTuner:
            note(f"{type(self).__name__}: fxc tunes with its own cost-model-guided evolutionary search")

    def tune(self, n_trial: int, measure_option=None, early_stopping=None, callbacks=()):
        from ...tuning.measure import MeasureParams  # deferred: the tuner loads only for autotvm
        from ...tuning.tuner import tune  # deferred: as above
        if early_stopping is not None:
            note(f"early_stopping={early_stopping}: fxc's tuner runs the n_trial measurements (its scheduler "
                 f"stops a task whose space is exhausted)")
        logs = [c.path for c in callbacks if isinstance(c, _LogToFile)]
        unknown = [c for c in callbacks if not isinstance(c, (_LogToFile, _ProgressBar))]
        if unknown:
            raise UnsupportedAPIError(f"tune(callbacks=[{type(unknown[0]).__name__}])", "the facade's callbacks "
                                      "are autotvm.callback.log_to_file and progress_bar")
        params = MeasureParams(**dict(measure_option or measure_option_default()))
        progress = any(isinstance(c, _ProgressBar) for c in callbacks)
        with tempfile.TemporaryDirectory(prefix="fxc-autotvm-") as tmp:
            log = logs[-1] if logs else str(Path(tmp) / "dropped.log")
            return tune(self.task.fxc.graph, target=self.task.target, trials=int(n_trial), log=log, params=params,
                        progress=progress)

    __getattr__ = missing_member("autotvm.tuner.Tuner", default="the facade's tuners have tune(n_trial, "
                                 "measure_option, early_stopping, callbacks)")


def measure_option_default() -> MeasureOption:
    return measure_option()


class XGBTuner(Tuner):
    """fxc's tuner (its cost model is gradient-boosted trees too); loss_type / feature_type are fxc's own."""


class RandomTuner(Tuner):
    pass


class GridSearchTuner(Tuner):
    pass


class GATuner(Tuner):
    pass


class apply_history_best:       # noqa: N801  (TVM's name)
    """`with autotvm.apply_history_best(log):` builds inside apply the log's best configs."""

    def __init__(self, records):
        if not isinstance(records, (str, Path)):
            raise UnsupportedAPIError(f"apply_history_best({type(records).__name__})", "pass the log file's path")
        self.log = str(records)

    def __enter__(self):
        TUNING_LOGS.append(self.log)
        return self

    def __exit__(self, *exc):
        TUNING_LOGS.remove(self.log)


def _no_graph_tuner(name):
    def refuse(*args, **kwargs):
        raise UnsupportedAPIError(f"autotvm.graph_tuner.{name}", "fxc chooses layouts itself (its blocked-layout "
                                  "pass); tune the kernels and build inside apply_history_best")
    return refuse


def apply_graph_best(*args, **kwargs):
    return _no_graph_tuner("apply_graph_best")()


task = Namespace("tvm.autotvm.task", "Tasks.", extract_from_program=extract_from_program, Task=Task)
tuner = Namespace("tvm.autotvm.tuner", "Tuners.", XGBTuner=XGBTuner, RandomTuner=RandomTuner,
                  GridSearchTuner=GridSearchTuner, GATuner=GATuner, Tuner=Tuner)
callback = Namespace("tvm.autotvm.callback", "Callbacks.", log_to_file=_LogToFile, progress_bar=_ProgressBar)
measure = Namespace("tvm.autotvm.measure", "Measurement.", measure_option=measure_option, LocalBuilder=LocalBuilder,
                    LocalRunner=LocalRunner, RPCRunner=_rpc_runner)
graph_tuner = Namespace("tvm.autotvm.graph_tuner", "Not provided.", DPTuner=_no_graph_tuner("DPTuner"),
                        PBQPTuner=_no_graph_tuner("PBQPTuner"))
RPCRunner = _rpc_runner
__getattr__ = module_getattr("tvm.autotvm", default="the facade's autotvm has task.extract_from_program, the "
                             "tuners, measure_option, LocalBuilder, LocalRunner, callback and apply_history_best")
