"""fxc against its peers on the CPU: one process, interleaved, same threads for everyone.

    .venv/bin/python -m benchmarks.run                       # everything (or: bash scripts/bench.sh)
    .venv/bin/python -m benchmarks.run --quick --models resnet18 --peers eager,fxc

For every workload (model x batch, fp32; models and inputs from fxc.testing.models) every selected peer
(benchmarks/peers.py) is compiled, then all of them are timed round-robin: one call of each peer per round,
the order rotated every round, so that the noise of this shared machine is spread over all peers alike.
Per peer: min/median latency over >= --runs calls after warm-up (fewer only when a cell would exceed
--budget seconds; the table marks those), compile time (in this process, and in fresh subprocesses with a
cold and then a warm compile cache for the peers that have one: fxc's FXC_CACHE_DIR, inductor's
TORCHINDUCTOR_CACHE_DIR), max abs error against PyTorch eager, achieved GFLOP/s (FLOPs counted once with
torch.utils.flop_counter) and median time divided by fxc's (> 1: fxc is faster). Also fxc's peak
intermediate bytes (its memory plan's workspace) next to the sum of all intermediate tensor sizes.

Writes benchmarks/results/bench-<UTC time>.json and a bar chart .png next to it (matplotlib; linear axis from 0).
A peer that is not installed or fails is reported as unavailable with the reason; the run goes on.
"""
from __future__ import annotations

import argparse
import functools
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_WORKLOADS = (("resnet18", 1), ("mobilenet_v2", 1), ("bert", 1), ("resnet18", 8))
COMPILE_TAG = "FXC_BENCH_COMPILE "


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.run", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default=None,
                   help="comma list of MODEL or MODEL:BATCH (models: resnet18, mobilenet_v2, bert, and at batch 1 the "
                        "zoo's convnext, efficientnet, vit, gpt, unet, lstm, and the standard modules of "
                        "fxc/testing/standard.py: transformer_encoder, transformer_decoder, mha, lstm_classifier, "
                        "gru_classifier); "
                        "default: resnet18:1,mobilenet_v2:1,bert:1,resnet18:8 (--quick: resnet18:1)")
    p.add_argument("--peers", default=None, help="comma list of peers (default: all); fxc is always added")
    p.add_argument("--runs", type=int, default=None, help="timed calls per peer after warm-up (default 30; --quick 5)")
    p.add_argument("--warmup", type=int, default=3, help="warm-up calls per peer after the first (default 3)")
    p.add_argument("--budget", type=float, default=None,
                   help="seconds of timed calls per peer and workload before it stops early, keeping at least "
                        "5 runs (default 120; --quick 20)")
    p.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)),
                   help="threads for every peer (default: all cores this process may use)")
    p.add_argument("--seq-len", type=int, default=128, help="sequence length of the BERT inputs (default 128)")
    p.add_argument("--quick", action="store_true", help="smoke mode: few runs, short budget, one model")
    p.add_argument("--no-subprocess-compile", action="store_true",
                   help="skip the cold-process / warm-cache compile-time subprocesses")
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results"), help="folder for the JSON and PNG")
    p.add_argument("--target", default=None,
                   help="CPU target string for the fxc peers (fxc, fxc_aot and their bf16 forms), e.g. "
                        "'llvm -mcpu=cascadelake' or 'llvm -mcpu=haswell': code for a lower ISA run on this host "
                        "(default: the host's CPU)")
    p.add_argument("--compile-worker", nargs=3, metavar=("PEER", "MODEL", "BATCH"), help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    a.runs = a.runs or (5 if a.quick else 30)
    a.budget = a.budget or (20.0 if a.quick else 120.0)
    if a.quick:
        a.warmup = min(a.warmup, 1)
    return a


def pin_threads(threads: int) -> None:
    """Before any runtime is imported: the same thread count for every peer's thread pool."""
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "TVM_NUM_THREADS",
                "FXC_NUM_THREADS", "MXNET_CPU_WORKER_NTHREADS"):
        os.environ[var] = str(threads)


def parse_workloads(spec: str | None, quick: bool) -> list[tuple[str, int]]:
    if not spec:
        return [("resnet18", 1)] if quick else list(DEFAULT_WORKLOADS)
    out = []
    for item in spec.split(","):
        name, _, batch = item.strip().partition(":")
        if batch:
            out.append((name, int(batch)))
        else:
            out += [w for w in DEFAULT_WORKLOADS if w[0] == name] or [(name, 1)]
    return out


def _short(e: BaseException) -> str:
    msg = str(e).strip().splitlines()
    return f"{type(e).__name__}: {msg[0][:300] if msg else ''}".rstrip(": ")


# -- one workload ----------------------------------------------------------------------------------------
def make_workload(name: str, batch: int, seq_len: int):
    from fxc.testing.models import example_inputs, make_model
    from fxc.testing.standard import STANDARD_NAMES, make_standard_model, standard_inputs
    from fxc.testing.zoo import ZOO_NAMES, make_zoo_model, zoo_inputs
    if name in ZOO_NAMES or name in STANDARD_NAMES:     # the zoo's and the standard modules: batch 1, their own input
        if batch != 1:
            raise SystemExit(f"{name}: the zoo's and the standard modules run at batch 1 only")
        model, inputs = (make_zoo_model(name), zoo_inputs(name)) if name in ZOO_NAMES else \
            (make_standard_model(name), standard_inputs(name))
        allow_rnn(model)
        return model, inputs
    model = make_model(name)
    inputs = example_inputs(name, batch, seq_len=seq_len) if name == "bert" else example_inputs(name, batch)
    return model, inputs


def allow_rnn(model) -> None:
    """A model with recurrent modules: Dynamo captures them only with torch._dynamo.config.allow_rnn, which a user
    compiling such a model turns on; so does the harness, for every peer that goes through Dynamo."""
    import torch
    import torch._dynamo
    if any(isinstance(m, torch.nn.RNNBase) for m in model.modules()):
        torch._dynamo.config.allow_rnn = True


def count_flops(model, inputs) -> int:
    import torch
    from torch.utils.flop_counter import FlopCounterMode
    counter = FlopCounterMode(display=False)
    fast = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)      # fused fast paths have no FLOP formula: count their parts
    try:
        with torch.inference_mode(), counter:
            model(*inputs)
    finally:
        torch.backends.mha.set_fastpath_enabled(fast)
    return int(counter.get_total_flops())


def fxc_memory(model, inputs) -> dict:
    """fxc's memory plan for the whole graph: peak intermediate bytes vs the sum of all intermediates."""
    try:
        import fxc
        module = fxc.from_torch(model, inputs).module
        return {"workspace_bytes": int(module.workspace_bytes), "intermediate_bytes": int(module.intermediate_bytes)}
    except Exception as e:
        return {"unavailable": f"fxc.from_torch failed: {_short(e)}"}


def peer_builder(peer, target: str | None):
    """The peer's build function, with fxc's CPU target (--target) bound for the peers it applies to."""
    from benchmarks.peers import CPU_TARGETED
    if target is None or peer.name not in CPU_TARGETED:
        return peer.build
    return functools.partial(peer.build, target=target)


def compile_worker(peer_name: str, model_name: str, batch: int, seq_len: int, threads: int,
                   target: str | None = None) -> None:
    """Subprocess entry: build one peer once and print its compile time (build + first call) as JSON; for fxc
    also the part of it spent in fxc's own build (fxc.driver.build.build: passes, lowering, LLVM, link), the rest being
    Dynamo, AOT autograd, fxc's partitioning and the first call."""
    try:
        from benchmarks.peers import peers_for
        model, inputs = make_workload(model_name, batch, seq_len)
        peer = peers_for(model_name)[peer_name]
        in_build = [0.0]
        if peer_name.startswith("fxc"):
            import fxc.driver.build
            real = fxc.driver.build.build

            def timed(*a, **k):
                t = time.perf_counter()
                try:
                    return real(*a, **k)
                finally:
                    in_build[0] += time.perf_counter() - t
            fxc.driver.build.build = timed
        t0 = time.perf_counter()
        runner = peer_builder(peer, target)(model, inputs, threads)
        runner.run()
        result = {"compile_s": time.perf_counter() - t0}
        if peer_name.startswith("fxc"):
            result["fxc_build_s"] = in_build[0]
    except Exception as e:
        result = {"error": _short(e)}
    print(COMPILE_TAG + json.dumps(result), flush=True)


CACHE_VARS = ("FXC_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR")


def cache_env(cache_root: Path, peer: str, name: str, batch: int) -> dict:
    """The compile caches of one peer and workload (empty at first; the cold subprocess fills them)."""
    cache = cache_root / f"{peer}-{name}-{batch}"
    return {"FXC_CACHE_DIR": str(cache / "fxc"), "TORCHINDUCTOR_CACHE_DIR": str(cache / "inductor")}


def compile_in_subprocess(peer: str, name: str, batch: int, args, cache_root: Path) -> dict:
    """Cold process + cold cache, then (peers with a persistent cache) a cold process on the warm cache."""
    from benchmarks.peers import peers_for
    env = dict(os.environ, **cache_env(cache_root, peer, name, batch),
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    cmd = [sys.executable, "-m", "benchmarks.run", "--compile-worker", peer, name, str(batch),
           "--threads", str(args.threads), "--seq-len", str(args.seq_len)] + \
        (["--target", args.target] if args.target else [])
    out = {}
    rounds = ("cold", "warm") if peers_for(name)[peer].cached else ("cold",)
    for kind in rounds:
        try:
            p = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=900)
            lines = [ln for ln in p.stdout.splitlines() if ln.startswith(COMPILE_TAG)]
            if not lines:
                tail = (p.stderr.strip().splitlines() or ["no output"])[-1]
                out[f"compile_{kind}_error"] = f"worker exited {p.returncode}: {tail[:300]}"
                break
            res = json.loads(lines[-1][len(COMPILE_TAG):])
        except subprocess.TimeoutExpired:
            res = {"error": "compile worker timed out after 900 s"}
        if "error" in res:
            out[f"compile_{kind}_error"] = res["error"]
            break
        out[f"compile_{kind}_s"] = res["compile_s"]
        if "fxc_build_s" in res:
            out[f"compile_{kind}_fxc_build_s"] = res["fxc_build_s"]
    return out


def wait_until_idle(window: float = 0.005, limit: float = 0.25) -> None:
    """Sleep until this process uses (almost) no CPU for one `window`: a runtime's worker threads that
    keep spinning after its call returns (ONNX Runtime's spin for ~40 ms, OpenMP's for a few) must not
    take cores from the next peer's timed call. Gives up after `limit` seconds."""
    end = time.perf_counter() + limit
    while True:
        c0 = time.process_time()
        time.sleep(window)
        if time.process_time() - c0 < 0.1 * window or time.perf_counter() > end:
            return


def time_interleaved(runners: dict, results: dict, args) -> None:
    """Warm up each runner, then time one call per peer per round (rotating order) until --runs or --budget."""
    for name, r in list(runners.items()):
        t_start = time.perf_counter()
        try:
            for _ in range(args.warmup):
                r.run()
                if time.perf_counter() - t_start > args.budget / 8:
                    break
        except Exception as e:
            results[name].update(available=False, reason=f"failed at run time: {_short(e)}")
            del runners[name]
    times = {name: [] for name in runners}
    order = list(runners)
    for rnd in range(args.runs):
        rot = order[rnd % len(order):] + order[:rnd % len(order)] if order else []
        for name in rot:
            if name not in runners:
                continue
            ts = times[name]
            if sum(ts) > args.budget and len(ts) >= 5:
                continue
            wait_until_idle()
            try:
                t0 = time.perf_counter()
                runners[name].run()
                ts.append(time.perf_counter() - t0)
            except Exception as e:
                results[name].update(available=False, reason=f"failed at run time: {_short(e)}")
                del runners[name]
    for name, ts in times.items():
        if name in runners and ts:
            results[name].update(min_ms=min(ts) * 1e3, median_ms=statistics.median(ts) * 1e3, runs=len(ts))


def run_workload(name: str, batch: int, peer_names: list[str], args, cache_root: Path) -> dict:
    import numpy as np
    import torch
    import torch._dynamo

    from benchmarks.peers import CPU_TARGETED, peers_for

    print(f"\n== {name}, batch {batch} ==", flush=True)
    torch._dynamo.reset()   # no state from the previous workload (it would make the batch dimension dynamic)
    model, inputs = make_workload(name, batch, args.seq_len)
    with torch.inference_mode():
        ref = model(*inputs).detach().float().numpy()
    flops = count_flops(model, inputs)
    table = peers_for(name)
    results, runners = {}, {}
    for pname in peer_names:
        peer, res = table[pname], {"label": table[pname].label}
        if args.target and pname in CPU_TARGETED:
            res["target"] = args.target       # also in meta["fxc_target"] and the header line
        results[pname] = res
        try:
            res["version"] = peer.versions()
        except Exception as e:
            res.update(available=False, reason=f"not installed ({_short(e)})")
            print(f"  {pname}: unavailable: {res['reason']}", flush=True)
            continue
        if not args.no_subprocess_compile:
            res.update(compile_in_subprocess(pname, name, batch, args, cache_root))
        saved = {k: os.environ[k] for k in CACHE_VARS}
        if peer.cached and "compile_warm_s" in res:    # build on the cache the subprocesses populated
            os.environ.update(cache_env(cache_root, pname, name, batch))
        try:
            t0 = time.perf_counter()
            runner = peer_builder(peer, args.target)(model, inputs, args.threads)
            out = runner.run()
            res["compile_s"] = time.perf_counter() - t0
            os.environ.update(saved)
            got = runner.to_numpy(out)
            if got.shape != ref.shape:
                raise ValueError(f"output shape {got.shape}, eager gives {ref.shape}")
            res["max_abs_err"] = float(np.max(np.abs(got.astype(np.float64) - ref)))
        except Exception as e:
            os.environ.update(saved)
            res.update(available=False, reason=_short(e))
            print(f"  {pname}: unavailable: {res['reason']}", flush=True)
            if os.environ.get("FXC_BENCH_DEBUG"):
                traceback.print_exc()
            continue
        res["available"] = True
        if runner.note:
            res["note"] = runner.note
        runners[pname] = runner
        print(f"  {pname}: compiled in {res['compile_s']:.1f} s", flush=True)
    time_interleaved(runners, results, args)
    fxc_med = results.get("fxc", {}).get("median_ms")
    for pname, res in results.items():
        if res.get("median_ms"):
            if table[pname].computes:
                res["gflops"] = flops / (res["median_ms"] * 1e-3) / 1e9
            if fxc_med:
                res["time_vs_fxc"] = res["median_ms"] / fxc_med
    return {"model": name, "batch": batch, "dtype": "float32", "gflop": flops / 1e9,
            "inputs": [list(t.shape) for t in inputs], "fxc_memory": fxc_memory(model, inputs), "peers": results}


# -- report ----------------------------------------------------------------------------------------------
def _fmt(v, spec: str, missing: str = "-") -> str:
    return missing if v is None else format(v, spec)


def format_table(wl: dict, runs: int) -> str:
    head = (f"{'peer':<26}{'min ms':>10}{'median ms':>11}{'runs':>6}{'compile s':>11}{'cold s':>9}{'warm s':>9}"
            f"{'max|err|':>10}{'GFLOP/s':>9}{'time/fxc':>10}")
    lines = [f"{wl['model']} batch {wl['batch']} fp32 ({wl['gflop']:.2f} GFLOP)", head, "-" * len(head)]
    for pname, r in wl["peers"].items():
        if not r.get("available"):
            lines.append(f"{r['label']:<26}unavailable: {r.get('reason', '')}"[:160])
            continue
        n = r.get("runs")
        lines.append(
            f"{r['label']:<26}{_fmt(r.get('min_ms'), '10.2f'):>10}{_fmt(r.get('median_ms'), '11.2f'):>11}"
            f"{(str(n) + ('*' if n and n < runs else '')) if n else '-':>6}"
            f"{_fmt(r.get('compile_s'), '11.2f'):>11}{_fmt(r.get('compile_cold_s'), '9.2f'):>9}"
            f"{_fmt(r.get('compile_warm_s'), '9.2f'):>9}{_fmt(r.get('max_abs_err'), '10.1e'):>10}"
            f"{_fmt(r.get('gflops'), '9.2f'):>9}{_fmt(r.get('time_vs_fxc'), '10.2f'):>10}"
            + (f"  [{r['note']}]" if r.get("note") else ""))
        if r.get("compile_cold_fxc_build_s") is not None:
            # torch.compile's build runs on a thread from the backend on, beside Dynamo's guard building, so the
            # two parts can overlap (fxc.from_torch builds on the caller's thread)
            lines.append(f"{'':<26}cold compile {r['compile_cold_s']:.2f} s, of which fxc's build "
                         f"{r['compile_cold_fxc_build_s']:.2f} s (the rest: Dynamo or torch.export, AOT autograd, "
                         f"the first call; under torch.compile they overlap the build in part)")
        for kind in ("cold", "warm"):
            if r.get(f"compile_{kind}_error"):
                lines.append(f"{'':<26}{kind} compile subprocess failed: {r[f'compile_{kind}_error']}"[:160])
    mem = wl["fxc_memory"]
    if "workspace_bytes" in mem:
        lines.append(f"fxc memory: peak intermediates {mem['workspace_bytes'] / 2**20:.2f} MiB "
                     f"(planned workspace) vs {mem['intermediate_bytes'] / 2**20:.2f} MiB for all intermediates")
    else:
        lines.append(f"fxc memory: unavailable ({mem['unavailable']})"[:200])
    return "\n".join(lines)


def write_chart(report: dict, path: Path) -> str:
    """One panel per workload: each peer's median as a bar on a linear axis from zero (benchmarks/charts.py)."""
    from benchmarks.charts import ChartUnavailable, latency_bars, new_figure, save
    wls = report["workloads"]
    peers = list(dict.fromkeys(p for wl in wls for p in wl["peers"]))
    try:
        fig, axes = new_figure(len(wls))
    except ChartUnavailable as e:
        return str(e)
    for ax, wl in zip(axes, wls):
        rows = [(p, wl["peers"][p]) for p in peers if wl["peers"].get(p, {}).get("median_ms")]
        latency_bars(ax, [r["label"] for _, r in rows], [r["median_ms"] for _, r in rows],
                     colors=["tab:red" if p == "fxc" else "tab:gray" if p == "dynamo_alone" else "tab:blue"
                             for p, _ in rows],
                     notes=[f" ({r['time_vs_fxc']:.2f}x fxc)" if r.get("time_vs_fxc") not in (None, 1.0) else ""
                            for _, r in rows])
        ax.set_title(f"{wl['model']} b{wl['batch']} fp32")
    save(fig, path, f"CPU inference, {report['meta']['threads']} threads, {report['meta']['cpu']}")
    return f"chart: {path}"


def cpu_name() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform
    return platform.processor() or "unknown CPU"


def main(argv=None) -> int:
    args = parse_args(argv)
    pin_threads(args.threads)
    if args.compile_worker:
        peer, name, batch = args.compile_worker
        compile_worker(peer, name, int(batch), args.seq_len, args.threads, args.target)
        return 0
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    cache_root = Path(tempfile.mkdtemp(prefix="fxc-bench-cache-"))
    # this process's own caches start empty (used as they are with --no-subprocess-compile)
    os.environ["FXC_CACHE_DIR"] = str(cache_root / "main" / "fxc")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(cache_root / "main" / "inductor")
    sys.path.insert(0, str(ROOT))
    import numpy as np
    import torch

    from benchmarks.peers import PEER_NAMES
    torch.set_num_threads(args.threads)

    peer_names = list(PEER_NAMES) if not args.peers else [p.strip() for p in args.peers.split(",") if p.strip()]
    unknown = [p for p in peer_names if p not in PEER_NAMES]
    if unknown:
        print(f"unknown peer(s) {unknown}; choose from {', '.join(PEER_NAMES)}", file=sys.stderr)
        return 2
    peer_names = [p for p in PEER_NAMES if p in peer_names or p == "fxc"]
    workloads = parse_workloads(args.models, args.quick)
    meta = {
        "command": " ".join([Path(sys.executable).name, "-m", "benchmarks.run"] + sys.argv[1:] if argv is None
                            else ["benchmarks.run"] + list(argv)),
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "cpu": cpu_name(), "cores_available": len(os.sched_getaffinity(0)), "threads": args.threads,
        "torch": torch.__version__, "numpy": np.__version__, "python": sys.version.split()[0],
        "runs": args.runs, "warmup": args.warmup, "budget_s": args.budget, "seq_len": args.seq_len,
        "fxc_target": args.target or "llvm (the host's CPU)",
        "fxc_bf16": "fxc_bf16: torch.compile(backend='fxc', options={'precision': 'bf16'}), fxc_aot_bf16: "
                    "fxc.from_torch(..., precision='bf16'); their max|err| is vs eager fp32",
        "notes": [f"every peer pinned to {args.threads} threads (torch.set_num_threads, ORT intra_op_num_threads, "
                  f"OpenVINO INFERENCE_NUM_THREADS, TVM_NUM_THREADS, OMP_NUM_THREADS for MXNet, FXC_NUM_THREADS)",
                  "peers timed round-robin in one process, order rotated each round; each call starts once the process "
                  "is idle (no thread of the previous peer still spinning)",
                  "time/fxc = peer median / fxc median (> 1: fxc faster); max|err| vs PyTorch eager fp32",
                  "compile: build + first call; cold s / warm s: in a fresh subprocess with an empty / the populated "
                  "FXC_CACHE_DIR or TORCHINDUCTOR_CACHE_DIR (peers without a persistent cache: cold only); "
                  "compile s: in this process, on that populated cache where there is one",
                  "shared machine: numbers are noisy"],
    }
    print(f"fxc benchmarks: {meta['cpu']}, {args.threads} threads for every peer; runs={args.runs} "
          f"(budget {args.budget:.0f} s per cell), warm-up {args.warmup}; peers: {', '.join(peer_names)}; "
          f"fxc target: {meta['fxc_target']}", flush=True)
    report = {"meta": meta, "workloads": []}
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    json_path, png_path = out_dir / f"bench-{stamp}.json", out_dir / f"bench-{stamp}.png"
    for name, batch in workloads:
        report["workloads"].append(run_workload(name, batch, peer_names, args, cache_root / "sub"))
        _write_json(report, json_path)        # after every workload: a long run that is cut short keeps its data
    print()
    for wl in report["workloads"]:
        print(format_table(wl, args.runs), end="\n\n")
    for note in meta["notes"] + [meta["fxc_bf16"]]:
        print(f"note: {note}")
    print(f"results: {json_path}")
    print(write_chart(report, png_path))
    shutil.rmtree(cache_root, ignore_errors=True)
    return 0


def _write_json(report: dict, path: Path) -> None:
    sys.path.insert(0, str(ROOT))
    from fxc.runtime.store import atomic_write
    atomic_write(path, (json.dumps(report, indent=1) + "\n").encode())


if __name__ == "__main__":
    sys.exit(main())
