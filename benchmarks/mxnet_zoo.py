"""MXNet's Gluon model zoo: MXNet itself (hybridized, its oneDNN backend) against fxc on the same weights.

    .venv/bin/python -m benchmarks.mxnet_zoo                     # all nine networks, batch 1, their full input size
    .venv/bin/python -m benchmarks.mxnet_zoo --models resnet18_v1,mobilenet1.0 --runs 30

Networks and weights come from `fxc.testing.mxnet_zoo` (random MSRAPrelu weights, randomised BatchNorm statistics;
nothing is downloaded). Peers, all on NDArrays in and out, timed round-robin in one process (one call of each per
round, the order rotated every round, each call once the process is idle: `benchmarks.run.wait_until_idle`):

- `mxnet`: the Gluon network hybridized with `static_alloc` and `static_shape` (MXNet's fastest inference mode;
  "Subgraph backend MKLDNN is activated": oneDNN fuses its convs);
- `fxc`: `fxc.from_mxnet(sym, params)` (the whole network compiled, weights baked in);
- `fxc_optimize_for`: the same Gluon network after `net.optimize_for(x, backend="fxc")` (fxc's subgraphs inside
  MXNet's executor, run through the artifact's C entry point).

Per network: median and min latency per peer, mxnet / fxc of both (> 1: fxc faster), max abs error against MXNet
relative to its output's scale, fxc's compile time. Writes benchmarks/results/mxnet-<UTC time>.json; the CPU model
is lscpu's. Threads: --threads for every peer (OMP_NUM_THREADS for MXNet, set before it is imported).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PEERS = ("mxnet", "fxc", "fxc_optimize_for")


def lscpu_model() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10, check=False).stdout
        for line in out.splitlines():
            if line.startswith("Model name:"):
                return line.split(":", 1)[1].strip()
    except (OSError, subprocess.SubprocessError):
        pass
    from benchmarks.run import cpu_name
    return cpu_name()


def build_peers(name: str, size: int | None, peers: list):
    """({peer: () -> NDArray}, input, MXNet's output, {peer: seconds to compile})."""
    import fxc
    from fxc.testing.mxnet_zoo import make_gluon, symbol_and_params
    net, x = make_gluon(name, size)
    ref = net(x).asnumpy()
    sym, params = symbol_and_params(net)
    runners, compile_s = {}, {}
    if "fxc" in peers:
        t = time.perf_counter()
        compiled = fxc.from_mxnet(sym, params, shapes={"data": x.shape})
        compiled(x).wait_to_read()
        compile_s["fxc"] = time.perf_counter() - t
        runners["fxc"] = lambda: compiled(x)
    if "fxc_optimize_for" in peers:
        import fxc.mxnet
        from fxc.testing.mxnet_zoo import make_gluon as again
        part, _ = again(name, size)
        part.hybridize(static_alloc=True, static_shape=True)
        t = time.perf_counter()
        part.optimize_for(x, backend="fxc", static_alloc=True, static_shape=True)
        part(x).wait_to_read()
        compile_s["fxc_optimize_for"] = time.perf_counter() - t
        runners["fxc_optimize_for"] = lambda: part(x)
    if "mxnet" in peers:
        net.hybridize(static_alloc=True, static_shape=True)
        net(x).wait_to_read()
        runners["mxnet"] = lambda: net(x)
    return runners, x, ref, compile_s


def time_round_robin(runners: dict, runs: int, warmup: int) -> dict:
    from benchmarks.run import wait_until_idle
    for fn in runners.values():
        for _ in range(warmup):
            fn().wait_to_read()
    times = {k: [] for k in runners}
    order = list(runners)
    for r in range(runs):
        for k in order[r % len(order):] + order[:r % len(order)]:
            wait_until_idle()
            t = time.perf_counter()
            fn = runners[k]
            fn().wait_to_read()
            times[k].append(time.perf_counter() - t)
    return times


def run_network(name: str, args) -> dict:
    from fxc.testing.mxnet_zoo import GLUON_ZOO
    size = args.size or GLUON_ZOO[name][0]
    runners, x, ref, compile_s = build_peers(name, size, args.peers)
    scale = float(abs(ref).max())
    errors = {k: float(abs(fn().asnumpy() - ref).max()) / scale for k, fn in runners.items()}
    times = time_round_robin(runners, args.runs, args.warmup)
    row = {"model": name, "input": list(x.shape), "peers": {}}
    for k, ts in times.items():
        row["peers"][k] = {"median_ms": 1e3 * statistics.median(ts), "min_ms": 1e3 * min(ts), "runs": len(ts),
                           "max_err_rel": errors[k], "compile_s": compile_s.get(k)}
    mx_ = row["peers"].get("mxnet")
    for k, p in row["peers"].items():
        if mx_ and k != "mxnet":
            p["mxnet_over_this_median"] = mx_["median_ms"] / p["median_ms"]
            p["mxnet_over_this_min"] = mx_["min_ms"] / p["min_ms"]
    return row


def format_row(row: dict) -> str:
    lines = [f"{row['model']} {tuple(row['input'])}"]
    for k, p in row["peers"].items():
        ratio = (f"  mxnet/this median {p['mxnet_over_this_median']:.2f} min {p['mxnet_over_this_min']:.2f}"
                 if "mxnet_over_this_median" in p else "")
        comp = f"  compile {p['compile_s']:.1f} s" if p.get("compile_s") is not None else ""
        lines.append(f"  {k:<18}{p['median_ms']:>9.2f} ms median{p['min_ms']:>9.2f} ms min  "
                     f"err {p['max_err_rel']:.1e}{ratio}{comp}")
    return "\n".join(lines)


def main(argv=None) -> int:
    from fxc.testing.mxnet_zoo import GLUON_ZOO
    ap = argparse.ArgumentParser(prog="python -m benchmarks.mxnet_zoo", description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default=",".join(GLUON_ZOO), help=f"comma list of {', '.join(GLUON_ZOO)}")
    ap.add_argument("--peers", default=",".join(PEERS), help=f"comma list of {', '.join(PEERS)}")
    ap.add_argument("--runs", type=int, default=20, help="timed calls per peer (default 20)")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--size", type=int, default=None, help="input size (default: each network's own, 224 or 299)")
    ap.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    args = ap.parse_args(argv)
    args.peers = [p for p in args.peers.split(",") if p]
    names = [m for m in args.models.split(",") if m]
    bad = sorted(set(names) - set(GLUON_ZOO)) + sorted(set(args.peers) - set(PEERS))
    if bad:
        ap.error(f"unknown model(s)/peer(s) {bad}")
    os.environ["OMP_NUM_THREADS"] = os.environ["FXC_NUM_THREADS"] = str(args.threads)
    sys.path.insert(0, str(ROOT))
    from fxc.runtime.store import atomic_write
    from fxc.target import host_cpu
    from fxc.testing.mxnet_zoo import import_mxnet
    mx = import_mxnet()
    meta = {"command": " ".join(["python -m benchmarks.mxnet_zoo"] + (sys.argv[1:] if argv is None else list(argv))),
            "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "cpu": lscpu_model(),
            "llvm_cpu": host_cpu(), "load_average": os.getloadavg(),
            "threads": args.threads, "mxnet": mx.__version__, "runs": args.runs, "batch": 1,
            "notes": ["mxnet_over_this > 1: that peer is faster than MXNet",
                      "max_err_rel: max abs error against MXNet's output / max abs of MXNet's output",
                      "NDArrays in and out for every peer"]}
    print(f"MXNet Gluon zoo: {meta['cpu']} ({meta['llvm_cpu']}), {args.threads} threads, {args.runs} interleaved "
          f"runs, load average {meta['load_average'][0]:.1f}", flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"mxnet-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}.json"
    report = {"meta": meta, "networks": []}
    for name in names:
        row = run_network(name, args)
        report["networks"].append(row)
        print(format_row(row), flush=True)
        atomic_write(path, (json.dumps(report, indent=1) + "\n").encode())
    print(f"results: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
