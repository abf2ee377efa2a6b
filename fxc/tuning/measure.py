"""Measurement: a task's candidate configs built and timed in a child process that cannot hurt the tuner.

Takes a Task (the group alone as a graph), the target's string, candidate configs and MeasureParams; produces one
Result per config: costs (seconds per call, one per repeat) or an error kind: "build" (the compile raised), "run"
(the call raised), "wrong" (its outputs differ from the default schedule's), "crash" (the child died), "hang" (past
the timeout). A batch runs in one child (`python -m fxc.tuning.child`); when that child dies or hangs, each
candidate of the batch is run again in a child of its own, so the error is recorded against the one that caused it.
With a device (tcp://host:port, an fxc device server: `fxc serve-device`), the child builds each candidate for the
target, exports it and has the server run it (fxc/runtime/remote.py): its outputs checked as here, its costs the
server's timings of whole calls; no answer within timeout_s is "hang", a server that cannot be reached "lost". The
server runs one request at a time, so measurements on one device never overlap.

Timing is TVM's: `warmup` calls, then `repeat` repeats of `number` calls each, `number` raised until one repeat
takes min_repeat_ms; a cost is a repeat's kernel time (the module's kernel timers, profile=True) over its calls.

A whole model (the confirmation step, fxc/tuning/confirm.py: `whole_model=WholeModel(...)`) is timed as its user
calls it: every config of the batch is built first, then their calls interleave, round by round (one timed call of
each per round, right after an untimed call of the same model, the order rotated; at least `rounds` rounds, more
while they fit in `seconds`), each cost a call's wall time: one cost per round, so two configs' costs pair up by
round (through a device server: `rounds` repeats of each config in one request). A whole model runs in a new child
(fxc/tuning/tuner.py): a process like its user's, not one that has loaded hundreds of candidates' libraries. With
framework="torch" the child loads PyTorch first and calls with tensors, as a PyTorch user's process does (beside
PyTorch, the runtime's parallel loops may run on PyTorch's OpenMP team: fxc/runtime/cpu/library.py, openmp_mode).
"""
from __future__ import annotations

import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np

from ..deploy.export import export
from ..driver.build import build
from ..runtime.remote import DeviceTimeout, DeviceUnreachable, run_remote
from . import payload as payload_files
from .log import append, make_record
from .tasks import clone_graph

RUNNER = "fxc.tuning.measure:run_batch"     # what a child runs (a test may name its own, e.g. one that crashes)


@dataclass(frozen=True)
class MeasureParams:
    number: int = 1             # calls per repeat (raised until a repeat takes min_repeat_ms)
    repeat: int = 3             # repeats: one cost each
    min_repeat_ms: float = 20.0
    warmup: int = 1             # calls before timing
    timeout_s: float = 120.0    # a child's limit per candidate (its builds and runs)
    rtol: float = 1e-3          # the check against the default schedule's outputs: |diff| <= rtol x max |default|
    atol: float = 1e-5          # + atol


@dataclass(frozen=True)
class WholeModel:
    """How the confirmation times whole models (see the module doc)."""
    rounds: int = 20                # rounds of interleaved calls (one cost per round), at least
    seconds: float = 5.0            # ... and more while the rounds take no longer than this (up to MAX_ROUNDS)
    framework: str | None = None    # "torch": the child loads PyTorch and calls with tensors (the user's process)
    warm: bool = True               # a turn calls the model once untimed first (its weights in the caches, as a
                                    # user's next call of the same model finds them), then the timed call


MAX_ROUNDS = 400


@dataclass
class Result:
    config: dict
    costs: list = field(default_factory=list)
    error: str | None = None
    detail: str = ""
    wall_s: float = 0.0

    @property
    def cost(self) -> float:
        """The fastest repeat (the least disturbed by other work on the machine); inf for an error."""
        return float(min(self.costs)) if self.error is None and self.costs else float("inf")


def example_arrays(graph, seed: int = 0) -> list:
    """Inputs for a task's graph: random normals (integers in [0, 4) for integer inputs: indices stay in range)."""
    rng = np.random.default_rng(seed)
    out = []
    for v in graph.inputs:
        if v.dtype.startswith(("int", "uint")):
            out.append(rng.integers(0, 4, size=v.shape).astype(v.dtype))
        elif v.dtype == "bool":
            out.append(rng.integers(0, 2, size=v.shape).astype(bool))
        else:
            out.append(rng.standard_normal(v.shape).astype(v.dtype))
    return out


def calls_per_repeat(module, arrays: list, p: MeasureParams) -> int:
    """After p.warmup calls: the calls a repeat makes, p.number raised until a repeat's wall time reaches
    p.min_repeat_ms (TVM's number / min_repeat_ms)."""
    for _ in range(p.warmup):
        module(*arrays)
    number = max(1, p.number)
    while True:
        t0 = time.perf_counter()
        for _ in range(number):
            module(*arrays)
        dt = time.perf_counter() - t0
        if dt * 1e3 >= p.min_repeat_ms or number >= 1 << 16:
            return number
        number = min(1 << 16, max(number * 2, int(number * p.min_repeat_ms / max(dt * 1e3, 1e-3)) + 1))


def time_module(module, arrays: list, p: MeasureParams) -> list:
    """Seconds per call of `module` on `arrays`, one per repeat: its kernels' own time where it was built with
    profile=True (the kernel timers: no call overhead), else the calls' wall time."""
    number = calls_per_repeat(module, arrays, p)
    costs = []
    for _ in range(p.repeat):
        if module.profiled:
            module.profile(reset=True)
        t0 = time.perf_counter()
        for _ in range(number):
            module(*arrays)
        wall = (time.perf_counter() - t0) / number
        costs.append(sum(r["total_ms"] for r in module.profile()) / 1e3 / number if module.profiled else wall)
    return costs


def time_interleaved(calls: list, rounds: int, seconds: float = 0.0, warm: bool = True) -> list:
    """Seconds of each call of `calls` (no-argument callables), one per round: after two warm-up calls of each (the
    second timed), every round gives each a turn, the order rotated from round to round (none always follows the
    same one); a turn is one timed call, after an untimed one with `warm`; at least `rounds` rounds, more (up to
    MAX_ROUNDS) while they fit in `seconds`. (One timed call per turn: turns of several calls measured a 2-thread
    model's comparison 3x noisier on a loaded host in the same time, 54 rounds of 5 ms turns against 353 calls.)"""
    took = 0.0
    for f in calls:
        f()
        t0 = time.perf_counter()
        f()
        took += time.perf_counter() - t0
    rounds = max(rounds, min(MAX_ROUNDS, int(seconds / max(took * (2 if warm else 1), 1e-9))))
    out = [[] for _ in calls]
    n = len(calls)
    for r in range(rounds):
        for i in [(r + k) % n for k in range(n)]:
            if warm:
                calls[i]()
            t0 = time.perf_counter()
            calls[i]()
            out[i].append(time.perf_counter() - t0)
    return out


def _outputs(result) -> list:
    return [np.asarray(r) for r in (result if isinstance(result, (list, tuple)) else [result])]


_references: dict = {}     # (workload, target) -> the default schedule's outputs, in a (persistent) child


def _differs(k: int, got: np.ndarray, ref: np.ndarray, p: MeasureParams) -> str:
    """Why output k differs from the default schedule's ('' when it agrees): its shape, NaNs or infinities where
    the reference has none, or a largest difference above rtol x the reference's largest magnitude + atol (a
    schedule reorders sums: Winograd's transforms round at the scale of the whole output, not of each element)."""
    if got.shape != ref.shape:
        return f"output {k}: shape {got.shape}, the default's {ref.shape}"
    if got.dtype.kind not in "fc":
        return "" if np.array_equal(got, ref) else f"output {k}: differs from the default's"
    g, r = got.astype(np.float64), ref.astype(np.float64)
    if not np.array_equal(np.isfinite(g), np.isfinite(r)):
        return f"output {k}: non-finite values where the default has none (or the reverse)"
    fin = np.isfinite(r)
    err = float(np.max(np.abs(g[fin] - r[fin]), initial=0.0))
    bound = p.rtol * float(np.max(np.abs(r[fin]), initial=0.0)) + p.atol
    return f"output {k}: max |diff| {err:.3g} > {bound:.3g}" if err > bound else ""


def run_batch(payload: dict) -> list:
    """In the child: build and time every config of the payload (a list of result dicts). The default config's
    outputs are the reference every candidate is checked against (built once per workload in this process).
    With payload["device"] (tcp://host:port), each build is exported and run by that fxc device server instead.
    With payload["whole_model"] (a WholeModel's fields), the task is a whole model, each config {workload: config}
    the records its build applies (fxc/tuning/confirm.py), and the builds are timed interleaved once all are built."""
    task, target, p = payload["task"], payload["target"], MeasureParams(**payload["params"])
    whole = WholeModel(**payload["whole_model"]) if payload.get("whole_model") else None
    if whole is not None and whole.framework == "torch":
        import torch  # deferred: the user's process has PyTorch loaded (the modules loaded now see it) # noqa: F401
    arrays = example_arrays(task.graph)
    device = payload.get("device")
    out: list = []
    with tempfile.TemporaryDirectory(prefix="fxc-tune-") as tmp:
        run = _remote_runner(device, arrays, p, task.threads, tmp) if device else _local_runner(arrays, p)
        ref_key = (task.key, target, device)
        if ref_key not in _references:
            try:
                _references[ref_key] = run(build(clone_graph(task.graph), target, tuning_log=False), None)[0]
            except (DeviceTimeout, DeviceUnreachable) as e:     # the device, not a candidate: each gets its kind
                kind = "hang" if isinstance(e, DeviceTimeout) else "lost"
                return [asdict(Result(c, error=kind, detail=f"the default's reference run: {e}"[:300]))
                        for c in payload["configs"]]
        reference = _references[ref_key]
        timers = {"profile": True} if payload.get("kernel_time", True) and not device and whole is None else {}
        built: dict = {}
        timed: dict = {}        # (whole models) index in out -> the module, timed once all are built
        for i, config in enumerate(payload["configs"]):
            t0 = time.perf_counter()
            log = Path(tmp) / f"c{i}.jsonl"
            log.touch()
            for workload, c in config.items() if whole is not None else [(task.key, config)]:
                append(log, make_record(workload, payload["target_key"], c, [1.0], None, task.desc, target))
            same = json.dumps(config, sort_keys=True)
            try:
                module = built[same] if same in built else \
                    build(clone_graph(task.graph), target, tuning_log=str(log), **timers)  # (a build rewrites the
                # graph it takes; timers: the kernels' time, without the call's overhead)
                built[same] = module        # (a config twice in a batch: built once)
            except Exception as e:      # noqa: BLE001 - a candidate's compile error is its result, not the tuner's
                out.append(asdict(Result(config, error="build", detail=f"{type(e).__name__}: {e}"[:300])))
                continue
            try:
                got, costs = run(module, None if whole is not None else p)
            except Exception as e:      # noqa: BLE001 - likewise for its run (a device's errors: by kind)
                kind = "hang" if isinstance(e, DeviceTimeout) else "lost" if isinstance(e, DeviceUnreachable) \
                    else "run"
                out.append(asdict(Result(config, error=kind, detail=f"{type(e).__name__}: {e}"[:300])))
                continue
            bad = next((why for k, (g, r) in enumerate(zip(got, reference)) for why in [_differs(k, g, r, p)] if why),
                       None)
            if whole is not None and not bad:
                timed[len(out)] = module
            out.append(asdict(Result(config, [] if bad else costs, "wrong" if bad else None, bad or "",
                                     time.perf_counter() - t0)))
        if timed:
            try:
                costs = _time_whole(list(timed.values()), run, arrays, p, whole, bool(device))
            except Exception as e:      # noqa: BLE001 - a call that fails while timed: the run's error kind
                kind = "hang" if isinstance(e, DeviceTimeout) else "lost" if isinstance(e, DeviceUnreachable) \
                    else "run"
                costs = None
                for i in timed:
                    out[i].update(error=kind, detail=f"{type(e).__name__}: {e}"[:300])
            for i, c in zip(timed, costs or []):
                out[i]["costs"] = c
    return out


def _time_whole(modules: list, run, arrays: list, p: MeasureParams, whole: WholeModel, remote: bool) -> list:
    """Per module, its seconds per call, one per round of interleaved calls (see the module doc): here, as the
    user's process calls it (through fxc.from_torch's CompiledModel on tensors with framework="torch"); on a device
    server (a board that runs nothing else), `rounds` repeats of each in one request (a request sends the whole
    artifact)."""
    if remote:
        return [run(m, replace(p, repeat=whole.rounds))[1] for m in modules]
    if whole.framework == "torch":
        import torch  # deferred: as in run_batch
        import torch.utils._pytree as pytree  # deferred: as above

        from ..capture.torch.aot import CompiledModel  # deferred: the user's torch entry point
        tensors = [torch.from_numpy(a) for a in arrays]
        calls = []
        for m in modules:
            cm = CompiledModel(m, pytree.tree_flatten(list(range(len(m.outputs))))[1])
            calls.append(lambda cm=cm: cm(*tensors))
    else:
        calls = [lambda m=m: m(*arrays) for m in modules]
    return time_interleaved(calls, whole.rounds, whole.seconds, whole.warm)


def _local_runner(arrays: list, p: MeasureParams):
    """run(module, params) -> (outputs, costs) here (params None: outputs only)."""
    def run(module, params):
        got = _outputs(module(*arrays))
        return got, (time_module(module, arrays, params) if params is not None else [])
    return run


def _remote_runner(device: str, arrays: list, p: MeasureParams, threads: int, tmp: str):
    """run(module, params) -> (outputs, costs) on the fxc device server at `device`: the module exported and sent
    (fxc/runtime/remote.py); costs are its whole runs' (the device server times fxc_main), `number` calls each,
    number chosen once per workload from the default's first run so a repeat takes min_repeat_ms; the server's
    one warm-up call stands for `warmup`. Each module is exported once (a whole model's rounds run it again)."""
    number = [max(1, p.number)]
    artifacts: dict = {}        # id(module) -> (the module, kept alive so its id stays its own; its artifact)

    def run(module, params):
        if id(module) not in artifacts:
            artifacts[id(module)] = (module, export(module, Path(tmp) / f"candidate{len(artifacts)}.fxc"))
        artifact = artifacts[id(module)][1]
        if params is None:      # the reference: its outputs, and one timed run that sets `number`
            got, costs = run_remote(artifact, device, arrays, 1, 1, threads, p.timeout_s)
            number[0] = max(number[0], min(1 << 16, int(p.min_repeat_ms / 1e3 / max(costs[0], 1e-9)) + 1))
            return got, costs
        got, costs = run_remote(artifact, device, arrays, number[0], params.repeat, threads, p.timeout_s)
        return got, costs
    return run


def measure(task, target: str, target_key: str, configs: list, params: MeasureParams, runner: str = RUNNER,
            child: "Child | None" = None, device: str | None = None,
            whole_model: "WholeModel | None" = None) -> list:
    """Results of `configs` for `task`, measured in a child process (child: a persistent one, else a new one; see
    the module doc); a batch whose child dies or hangs is measured again one candidate per new child.
    whole_model: the task is a whole model, each config the records its build applies, timed as WholeModel says."""
    payload = dict(task=task, target=target, target_key=target_key, configs=list(configs), params=asdict(params),
                   device=device, whole_model=asdict(whole_model) if whole_model is not None else None)
    timeout = params.timeout_s * max(1, len(configs))
    results = child.run(payload, runner, timeout) if child is not None else _once(payload, runner, timeout)
    if isinstance(results, list):
        return results
    if len(configs) == 1:
        return [Result(configs[0], error=results[0], detail=results[1])]
    return [r for c in configs for r in measure(task, target, target_key, [c], params, runner, device=device,
                                                whole_model=whole_model)]


def _env() -> dict:
    """The child's environment: this fxc first on its path (the child runs in a folder of its own, so no `fxc` of
    the parent's working directory shadows it), the module cache off (candidates are not worth caching)."""
    env = dict(os.environ, FXC_MODULE_CACHE="0")
    env["PYTHONPATH"] = os.pathsep.join(p for p in [str(Path(__file__).resolve().parents[2]),
                                                    env.get("PYTHONPATH", "")] if p)
    return env


def _once(payload: dict, runner: str, timeout: float):
    """The runner's results from a new child process, or (error kind, detail) when it died or hung."""
    with tempfile.TemporaryDirectory(prefix="fxc-measure-") as tmp:
        src, dst = Path(tmp) / "in", Path(tmp) / "out.json"
        payload_files.write(src, payload)
        try:
            proc = subprocess.run([sys.executable, "-m", "fxc.tuning.child", runner, str(src), str(dst)],
                                  env=_env(), cwd=tmp, timeout=timeout, capture_output=True, text=True)
        except subprocess.TimeoutExpired:
            return ("hang", f"no result in {timeout:.0f} s")
        if proc.returncode != 0 or not dst.exists():
            return ("crash", f"child exit code {proc.returncode}: {proc.stderr.strip()[-300:]}")
        return [Result(**r) for r in json.loads(dst.read_text())]


class Child:
    """A persistent measurement child (`python -m fxc.tuning.child --serve`): batches one after another without a
    new interpreter each; one that dies or hangs is killed and replaced at the next batch, and after `renew`
    batches it is replaced anyway (the libraries its builds loaded stay loaded)."""

    def __init__(self, renew: int = 40):
        self.proc, self.done, self.renew = None, 0, renew
        self.tmp = tempfile.TemporaryDirectory(prefix="fxc-measure-")

    def run(self, payload: dict, runner: str, timeout: float):
        """The runner's results, or (error kind, detail) when the child died or hung."""
        if self.proc is None or self.proc.poll() is not None or self.done >= self.renew:
            self.close()
            self.proc = subprocess.Popen([sys.executable, "-m", "fxc.tuning.child", "--serve"], env=_env(),
                                         cwd=self.tmp.name,
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                         text=True, bufsize=1)
            self.done = 0
        self.done += 1
        src, dst = Path(self.tmp.name) / f"in{self.done}", Path(self.tmp.name) / f"out{self.done}.json"
        payload_files.write(src, payload)
        try:
            self.proc.stdin.write(f"{runner}\t{src}\t{dst}\n")
            self.proc.stdin.flush()
        except OSError:
            self.close()
            return ("crash", "the measurement child had exited")
        deadline = time.monotonic() + timeout
        ready = select.poll()       # (poll, not select: a long-lived process may hold descriptors past FD_SETSIZE)
        ready.register(self.proc.stdout, select.POLLIN)
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not ready.poll(left * 1000):
                self.close()
                return ("hang", f"no result in {timeout:.0f} s")
            line = self.proc.stdout.readline()
            if not line:
                code = self.proc.wait()
                self.close()
                return ("crash", f"child exit code {code}")
            if line.strip() == f"done\t{dst}":
                break
        shutil.rmtree(src, ignore_errors=True)
        results = [Result(**r) for r in json.loads(dst.read_text())]
        dst.unlink(missing_ok=True)
        return results

    def close(self) -> None:
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait()
            for f in (self.proc.stdin, self.proc.stdout):
                f.close()
            self.proc = None
