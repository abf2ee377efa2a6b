"""Default against tuned: fxc.tune on a harness model, then both builds timed interleaved in this process.

    .venv/bin/python -m benchmarks.tune --model resnet18 --target llvm --trials 500 [--log tune.jsonl]
        [--runs 30] [--plot curve.png] [--scheduler tcp://host:port]

Prints the tuning's trials and wall time, the time to reach within 5% of its final end-to-end estimate, the cost
model's held-out rank correlation, and the model's latency with the default schedules (tuning_log=False) and with
the tuned log: median and minimum over --runs interleaved calls (one of each per round; a shared host is noisy, so
read the minimum too), and the median over the rounds of log(default / tuned), paired by round as the confirmation
compares, with twice its standard error and the gains of the rounds' five consecutive fifths (--aa adds a second
build of the default against the first: the comparison's own noise).
--trials 0 times an existing --log without tuning; --confirm-only runs the confirmation step on it first (fxc.tune
with 0 trials: the log's records confirmed inside this model, docs/tuning.md). --seed-log copies another model's log
into a new --log first (ResNet-34 reusing ResNet-18's records: its shared workloads start from them).
`--model resnet34` is fxc.testing.models.ResNet((3, 4, 6, 3)). TVM MetaSchedule side by side:
benchmarks/tune_tvm.py (run with a venv that has apache-tvm).
The long runs of the issue are commands of this script, e.g. on PoCL:
    .venv/bin/python -m benchmarks.tune --model resnet18 --target opencl --trials 1000
"""
import argparse
import shutil
import statistics
import time
from pathlib import Path


def _latencies(fns: dict, inputs, runs: int) -> dict:
    times = {k: [] for k in fns}
    for f in fns.values():
        f(*inputs)
    for i in range(runs):
        for k in list(fns)[i % len(fns):] + list(fns)[:i % len(fns)]:
            t0 = time.perf_counter()
            fns[k](*inputs)
            times[k].append(time.perf_counter() - t0)
    return times


def _within(curve: list, final: float, frac: float = 0.05):
    return next((t for t, c in curve if c <= final * (1 + frac)), None)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="resnet18")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--target", default="llvm")
    ap.add_argument("--trials", type=int, default=200)
    ap.add_argument("--log", default=None, help="tuning log (default: a new one per model and target)")
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--plot", default=None)
    ap.add_argument("--scheduler", default=None)
    ap.add_argument("--device", default=None, help="an fxc device server, tcp://host:port (--target names its board)")
    ap.add_argument("--seed-log", default=None, help="records to start from (copied into --log when it is new)")
    ap.add_argument("--no-confirm", action="store_true")
    ap.add_argument("--confirm-only", action="store_true", help="no trials: confirm the log's records, then time")
    ap.add_argument("--aa", action="store_true", help="time the default twice (A/A: the comparison's own noise)")
    args = ap.parse_args(argv)
    import torch

    import fxc
    from fxc.testing.models import ResNet, example_inputs, make_model, randomize_batchnorm
    from fxc.tuning.confirm import batch_gains, gain
    torch.manual_seed(0)
    model = (randomize_batchnorm(ResNet((3, 4, 6, 3))) if args.model == "resnet34" else make_model(args.model)).eval()
    inputs = example_inputs("resnet18" if args.model == "resnet34" else args.model, batch=args.batch)
    log = args.log or f"tune-{args.model}-{args.target.replace(' ', '_')}.jsonl"
    if args.seed_log and not Path(log).exists():
        shutil.copyfile(args.seed_log, log)
    if args.trials or args.confirm_only:
        t0 = time.perf_counter()
        r = fxc.tune(model, inputs, target=args.target, trials=0 if args.confirm_only else args.trials, log=log,
                     plot=args.plot, dask=args.scheduler, device=args.device, confirm=not args.no_confirm)
        wall = time.perf_counter() - t0
        print(r)
        for desc, why in (r.confirmation.why.items() if r.confirmation else ()):
            print(f"  {desc}: {why}")
        reach = _within(r.e2e_curve, r.tuned_s)
        at200 = next((f"{rho:.2f} after {n} measurements" for n, rho in r.correlations if n >= 200), "n/a")
        task200 = next((f"{rho:.2f}" for n, rho in r.task_correlations if n >= 200), "n/a")
        covered = sum(1 for s in r.states if s.resumed)
        print(f"tuning: {r.trials} trials in {wall:.0f} s; within 5% of the final estimate after {reach} trials; "
              f"rank correlation (held out, last 200 predictions) {at200} (at the end: "
              f"{[round(c, 2) for _, c in r.correlations[-3:]]}; within tasks, averaged: {task200} after 200, "
              f"{[round(c, 2) for _, c in r.task_correlations[-1:]]} at the end); {covered} of {len(r.states)} "
              f"workloads started "
              f"from records already in the log")
    with torch.inference_mode():
        fns = {"default": fxc.from_torch(model, inputs, target=args.target, tuning_log=False),
               "tuned": fxc.from_torch(model, inputs, target=args.target, tuning_log=log)}
        if args.aa:     # a build of its own (its constants and workspace), not the default's object again:
            # that one was called twice in a row in two rounds of three
            fns["default again"] = fxc.from_torch(model, inputs, target=args.target, tuning_log=False)
        times = _latencies(fns, inputs, args.runs)
    for k, ts in times.items():
        print(f"{args.model} b{args.batch} {args.target:<10} {k:<13} median {statistics.median(ts) * 1e3:8.3f} ms  "
              f"min {min(ts) * 1e3:8.3f} ms  ({args.runs} interleaved calls)")
    d, t = (statistics.median(times[k]) for k in ("default", "tuned"))
    print(f"speed-up (medians): {d / t:.2f}x; minima: {min(times['default']) / min(times['tuned']):.2f}x")
    for k in [k for k in times if k != "default"]:      # paired by round, as the confirmation compares
        g, se = gain(times["default"], times[k])
        runs = " ".join(f"{x:+.1%}" for x in batch_gains(times["default"], times[k]))
        print(f"{k} against default, paired by round: {g:+.2%} faster (2 standard errors: {2 * se:.2%}"
              + (f"; by fifths of the rounds: {runs}" if runs else "") + ")")


if __name__ == "__main__":
    main()
