"""PyTorch's OpInfo database through `torch.compile(backend="fxc")`, compared with eager.

Every op in `torch.testing._internal.common_methods_invocations.op_db` that supports float32 on CPU
(nondeterministic ones left out) runs its sample inputs compiled and eagerly; outputs, and inputs the op
mutates, are compared with `torch.testing.assert_close` (default tolerances, NaN equal to NaN). Each op
ends in one of:

  compiled   every sample correct and fxc compiled all of it (no eager fallback)
  fallback   every sample correct, some part ran in eager PyTorch (op not supported, graph break, ...)
  wrong      some sample gave a result that differs from eager
  crashed    the compiled call raised where eager did not, or the process died (segfault) or hung

Ops run in a worker process, so a segfault or a hang is recorded against its op and the sweep goes on.

    .venv/bin/python -m fxc.testing.opinfo [--ops add mul ...] [--target llvm] [--max-samples 8] \\
        --json report.json

The JSON report (written atomically after every op) holds per target the totals and, per op, its status,
sample counts, fallback reasons and the first error.
"""
from __future__ import annotations

import argparse
import json
import queue
import subprocess
import sys
import threading
import time

import torch
import torch.utils._pytree as pytree

from ..capture.torch import recorder as fxc_torch
from ..runtime.store import atomic_write
from .fuzz import closer_than_eager

STATUSES = ("compiled", "fallback", "wrong", "crashed")
SKIP_PREFIXES = ("empty", "new_empty", "rand", "normal", "bernoulli", "multinomial", "uniform", "cauchy",
                 "exponential", "geometric", "log_normal", "nn.functional.dropout", "nn.functional.alpha_dropout",
                 "nn.functional.feature_alpha_dropout", "nn.functional.rrelu", "nn.functional.fractional_max_pool",
                 "jiterator", "hash_tensor")
SKIP_NAMES = {"native_dropout_backward", "torch._C._nn._test_warn_in_autograd", "item", "to_sparse",
              "sparse.sampled_addmm", "sparse.mm", "_segment_reduce"}


def op_key(op) -> str:
    return op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")


def select_ops(names=None, dtype: str = "float32") -> list:
    """OpInfos to sweep: `dtype` on CPU, deterministic; `names` (op names or keys) narrows the list."""
    from torch.testing._internal.common_methods_invocations import op_db  # deferred: slow to import (2 s)
    ops = []
    for op in op_db:
        if getattr(torch, dtype) not in op.supported_dtypes("cpu"):
            continue
        if op.name.startswith(SKIP_PREFIXES) or op.name in SKIP_NAMES:
            continue
        if getattr(op, "has_nondeterministic_output", False) \
                or getattr(op, "skip_correctness_check_compile_vs_eager", False):
            continue
        if names and op.name not in names and op_key(op) not in names:
            continue
        ops.append(op)
    return ops


# -- one op, in the worker ----------------------------------------------------------------------------
def _clone(x):
    return pytree.tree_map(lambda t: t.clone() if isinstance(t, torch.Tensor) else t, x)


def _compare(actual, expected, what: str):
    """Raise AssertionError naming `what` when two pytrees of results differ."""
    a_leaves, a_spec = pytree.tree_flatten(actual)
    e_leaves, e_spec = pytree.tree_flatten(expected)
    if len(a_leaves) != len(e_leaves):
        raise AssertionError(f"{what}: {len(a_leaves)} results, eager gives {len(e_leaves)}")
    for k, (a, e) in enumerate(zip(a_leaves, e_leaves)):
        if isinstance(e, torch.Tensor):
            if not isinstance(a, torch.Tensor):
                raise AssertionError(f"{what}[{k}]: got {type(a).__name__}, eager gives a tensor")
            torch.testing.assert_close(a, e, equal_nan=True, msg=lambda m: f"{what}[{k}]: {m}")
        elif isinstance(e, float) and isinstance(a, float) and e != e and a != a:
            continue
        elif a != e:
            raise AssertionError(f"{what}[{k}]: got {a!r}, eager gives {e!r}")


def _float64_run(fn, tensors):
    """The sample run eagerly with its float32 tensors in float64 (None when the op has no float64 kernel)."""
    try:
        return _seeded(fn)(*[t.double() if t.dtype == torch.float32 else t.clone() for t in tensors])
    except Exception:       # noqa: BLE001 - no judge
        return None


def _closer_to_float64(actual, expected, reference) -> bool:
    """True when every float result that differs from eager is as close to the float64 answer as eager is
    (eager's own float32 rounding, not an fxc error: the rule PyTorch's compiler tests use)."""
    if reference is None:
        return False
    a_l, e_l, r_l = (pytree.tree_flatten(x)[0] for x in (actual, expected, reference))
    if not len(a_l) == len(e_l) == len(r_l):
        return False
    for a, e, r in zip(a_l, e_l, r_l):
        if not isinstance(e, torch.Tensor):
            continue
        try:
            torch.testing.assert_close(a, e, equal_nan=True)
            continue
        except AssertionError:
            pass
        if not (e.is_floating_point() and isinstance(a, torch.Tensor) and isinstance(r, torch.Tensor)
                and a.shape == e.shape == r.shape and a.dtype == e.dtype):
            return False
        if not closer_than_eager(a, e, r):
            return False
    return True


def _split_sample(sample):
    """(tensors, rebuild): the sample's tensors become graph inputs; everything else stays constant."""
    leaves, spec = pytree.tree_flatten((sample.input, sample.args, sample.kwargs))
    pos = [i for i, x in enumerate(leaves) if isinstance(x, torch.Tensor)]

    def rebuild(tensors):
        vals = list(leaves)
        for i, t in zip(pos, tensors):
            vals[i] = t
        return pytree.tree_unflatten(vals, spec)
    return [leaves[i] for i in pos], rebuild


def _seed_outside_the_op():
    """OpInfo wraps some ops in `wrapper_set_seed` (seed, run, restore the RNG): Dynamo cannot trace the
    seeding, so it would never capture the op. Seeding is test scaffolding, not the op: the harness seeds
    before every call itself (`_seeded`) and the wrapper becomes a plain call."""
    import sys as _sys

    def plain(op, *args, **kwargs):
        return op(*args, **kwargs)
    for name, mod in list(_sys.modules.items()):
        if name.startswith("torch.testing._internal") and hasattr(mod, "wrapper_set_seed"):
            mod.wrapper_set_seed = plain


def _seeded(f, seed: int = 42):
    def call(*ts):
        torch.manual_seed(seed)
        return f(*ts)
    return call


def run_op(op, target: str, max_samples: int, dtype: str = "float32") -> dict:
    """Run one OpInfo's samples compiled and eagerly; returns its result record."""
    import torch._dynamo  # deferred: torch._dynamo is slow to import
    from torch._dynamo.utils import counters  # deferred: torch._dynamo is slow to import

    _seed_outside_the_op()

    res = {"status": "compiled", "samples": 0, "compiled_samples": 0, "fallback": {}, "error": None}
    torch.manual_seed(0)
    try:
        samples = list(op.sample_inputs("cpu", getattr(torch, dtype), requires_grad=False))
    except Exception as e:
        res.update(status="skipped", error=f"sample_inputs: {type(e).__name__}: {e}")
        return res
    if max_samples:
        samples = samples[:max_samples]
    fn_op = op.op
    for si, sample in enumerate(samples):
        tensors, rebuild = _split_sample(sample)

        def fn(*ts):
            inp, args, kwargs = rebuild(ts)
            return fn_op(inp, *args, **kwargs)
        try:
            ins_e = _clone(tensors)
            expected = _seeded(fn)(*ins_e)
            ins_e2 = _clone(tensors)
            expected2 = _seeded(fn)(*ins_e2)
            _compare(expected2, expected, "eager vs eager")
            _compare(_seeded(fn, 43)(*_clone(tensors)), expected, "eager with another seed")
        except Exception:
            continue   # eager rejects the sample, or it is not reproducible, or its result depends on the RNG
                       # (e.g. a dropout_p > 0 argument): nothing to compare with
        res["samples"] += 1
        torch._dynamo.reset()
        rec = fxc_torch.Explanation()
        fxc_torch._recorders.append(rec)
        breaks = dict(counters["graph_break"])
        ins_c = _clone(tensors)
        try:
            compiled = torch.compile(fn, backend="fxc", dynamic=False, options={"target": target})
            actual = _seeded(compiled)(*ins_c)
        except Exception as e:
            res.update(status="crashed", error=f"sample {si}: {type(e).__name__}: {str(e)[:2000]}")
            return res
        finally:
            fxc_torch._recorders.remove(rec)
        try:
            try:
                _compare(actual, expected, "output")
            except AssertionError:
                if not _closer_to_float64(actual, expected, _float64_run(fn, tensors)):
                    raise
                res["float64_judged"] = res.get("float64_judged", 0) + 1
            _compare(ins_c, ins_e, "input after the call")
        except AssertionError as e:
            shapes = [tuple(t.shape) for t in tensors]
            res.update(status="wrong", error=f"sample {si} (input shapes {shapes}, args {sample.args!r:.300}, "
                                             f"kwargs {sample.kwargs!r:.300}): {str(e)[:2000]}")
            return res
        reasons = {op_: rec.fallback_reasons.get(op_, "") for op_ in rec.fallback_ops}
        reasons.update({f"subgraph failure {k}": str(f) for k, f in enumerate(rec.failures)})
        new_breaks = [k for k, n in counters["graph_break"].items() if n > breaks.get(k, 0)]
        if new_breaks:
            reasons["dynamo graph break"] = " | ".join(" ".join(str(k).split()) for k in new_breaks)[:300]
        if rec.graphs == 0:
            reasons["dynamo captured no graph"] = ""
        if reasons:
            res["fallback"].update({k: str(v)[:300] for k, v in reasons.items()})
        else:
            res["compiled_samples"] += 1
    torch._dynamo.reset()
    if res["samples"] == 0:
        res["status"] = "skipped"
        res["error"] = res["error"] or "eager accepted no sample"
    elif res["compiled_samples"] < res["samples"]:
        res["status"] = "fallback"
    return res


def worker(target: str, max_samples: int, dtype: str = "float32") -> None:
    """Read op keys from stdin, print one `RESULT <json>` line per op to stdout."""
    import logging
    import warnings
    logging.getLogger("fxc").setLevel(logging.ERROR)
    warnings.simplefilter("ignore")
    ops = {op_key(o): o for o in select_ops(dtype=dtype)}
    out = sys.stdout
    sys.stdout = sys.stderr   # ops that print must not garble the protocol
    print("READY", file=out, flush=True)
    for line in sys.stdin:
        key = line.strip()
        if not key:
            continue
        t0 = time.perf_counter()
        try:
            r = run_op(ops[key], target, max_samples, dtype)
        except Exception as e:   # a bug in the harness itself: record it against the op
            r = {"status": "crashed", "samples": 0, "compiled_samples": 0, "fallback": {},
                 "error": f"harness: {type(e).__name__}: {e}"}
        r["seconds"] = round(time.perf_counter() - t0, 2)
        print("RESULT " + json.dumps({"op": key, **r}), file=out, flush=True)


# -- the driver ---------------------------------------------------------------------------------------
class _Worker:
    def __init__(self, target, max_samples, log, dtype):
        cmd = [sys.executable, "-m", "fxc.testing.opinfo", "--worker", "--target", target,
               "--max-samples", str(max_samples), "--dtype", dtype]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True)
        self.lines: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def wait_for(self, prefix, timeout):
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.lines.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                if time.monotonic() >= deadline:
                    return "timeout"
                continue
            if line is None:
                return "died"
            if line.startswith(prefix):
                return line[len(prefix):].strip()

    def kill(self):
        self.proc.kill()
        self.proc.wait()


def totals(ops: dict) -> dict:
    t = {s: 0 for s in STATUSES + ("skipped",)}
    for r in ops.values():
        t[r["status"]] += 1
    n = t["compiled"] + t["fallback"] + t["wrong"] + t["crashed"]
    t["ops"] = n
    t["compiled_pct"] = round(100.0 * t["compiled"] / n, 1) if n else 0.0
    return t


def sweep(keys, targets, max_samples=8, timeout=600, json_path=None, worker_log=None, progress=print,
          dtype="float32", jobs=1) -> dict:
    """Run the OpInfo sweep; returns {"targets": {target: {"totals": ..., "ops": {key: record}}}}.
    `jobs` worker processes run ops side by side (each worker owns one op at a time)."""
    report = {"max_samples": max_samples, "dtype": dtype, "targets": {}}
    log = open(worker_log, "a") if worker_log else subprocess.DEVNULL
    lock = threading.Lock()
    for target in targets:
        ops: dict = {}
        report["targets"][target] = {"totals": {}, "ops": ops}
        todo: queue.Queue = queue.Queue()
        for key in keys:
            todo.put(key)
        t_start = time.perf_counter()
        failure: list = []

        def record(key, r):
            with lock:
                ops[key] = r
                report["targets"][target]["totals"] = totals(ops)
                if json_path:
                    atomic_write(json_path, json.dumps(report, indent=1, sort_keys=True).encode())
                done = len(ops)
                eta = (time.perf_counter() - t_start) / done * (len(keys) - done)
                extra = f": {r['error'][:200]}" if r["status"] in ("wrong", "crashed") else ""
                progress(f"[{target} {done}/{len(keys)} eta {eta / 60:.0f} min] {key}: {r['status']} "
                         f"({r['compiled_samples']}/{r['samples']} samples compiled){extra}")

        def drive():
            w = None
            try:
                while not failure:
                    try:
                        key = todo.get_nowait()
                    except queue.Empty:
                        break
                    if w is None:
                        w = _Worker(target, max_samples, log, dtype)
                        if w.wait_for("READY", 300) != "":
                            raise RuntimeError("the OpInfo worker did not start (see --worker-log)")
                    w.proc.stdin.write(key + "\n")
                    w.proc.stdin.flush()
                    line = w.wait_for("RESULT ", timeout)
                    if line in ("timeout", "died"):
                        rc = w.proc.poll()
                        w.kill()
                        w = None
                        why = f"timed out after {timeout} s" if line == "timeout" else f"worker died (exit code {rc})"
                        r = {"status": "crashed", "samples": 0, "compiled_samples": 0, "fallback": {}, "error": why}
                    else:
                        r = json.loads(line)
                        r.pop("op", None)
                    record(key, r)
            except Exception as e:          # noqa: BLE001 - re-raised in the caller's thread
                failure.append(e)
            finally:
                if w is not None:
                    w.proc.stdin.close()
                    w.kill()

        threads = [threading.Thread(target=drive) for _ in range(max(1, jobs))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if failure:
            raise failure[0]
        order = {k: i for i, k in enumerate(keys)}
        report["targets"][target]["ops"] = dict(sorted(ops.items(), key=lambda kv: order[kv[0]]))
    if json_path:
        atomic_write(json_path, json.dumps(report, indent=1, sort_keys=True).encode())
    return report


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m fxc.testing.opinfo", description=__doc__.split("\n\n")[0])
    p.add_argument("--ops", nargs="*", help="op names or keys (name.variant) to run; default: all")
    p.add_argument("--target", action="append", help="fxc target (repeatable); default: llvm")
    p.add_argument("--max-samples", type=int, default=8, help="samples per op (0: all); default 8")
    p.add_argument("--timeout", type=float, default=600, help="seconds per op before it counts as crashed")
    p.add_argument("--json", help="write the report here (atomically, after every op)")
    p.add_argument("--worker-log", help="append the workers' stderr here")
    p.add_argument("--dtype", default="float32", help="sample dtype (default float32; e.g. int64, float64)")
    p.add_argument("--jobs", type=int, default=1, help="worker processes side by side (default 1)")
    p.add_argument("--list", action="store_true", help="list the selected ops and exit")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    targets = a.target or ["llvm"]
    if a.worker:
        return worker(targets[0], a.max_samples, a.dtype)
    keys = [op_key(o) for o in select_ops(set(a.ops) if a.ops else None, a.dtype)]
    if a.list:
        print("\n".join(keys))
        return 0
    if not keys:
        p.error("no OpInfo matches --ops")
    report = sweep(keys, targets, a.max_samples, a.timeout, a.json, a.worker_log,
                   progress=lambda m: print(m, flush=True), dtype=a.dtype, jobs=a.jobs)
    bad = 0
    for target, r in report["targets"].items():
        t = r["totals"]
        bad += t["wrong"] + t["crashed"]
        print(f"{target}: {t['ops']} ops: {t['compiled']} compiled, {t['fallback']} fell back, {t['wrong']} wrong, "
              f"{t['crashed']} crashed ({t['skipped']} skipped: no usable sample); {t['compiled_pct']}% compiled")
        for key, o in r["ops"].items():
            if o["status"] in ("wrong", "crashed"):
                print(f"  {o['status']}: {key}: {o['error'][:300]}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
