"""Per-kernel profile of one test model compiled by fxc: which fused kernels take the time.

    .venv/bin/python -m benchmarks.profile_kernels --model mobilenet_v2|convnext|... [--runs 50] [--top 25]
        [--threads 1] [--precision bf16] [--cold] [--int8] [--scaling]

Compiles the model with fxc.from_torch(..., profile=True) and runs it `runs` times; each kernel's time is
the minimum over the runs (robust on a shared machine), its share is of the sum of those minima. With --cold,
each run follows what the harness's timed calls follow (other peers' work, then an idle spell): the caches are
flushed (64 MiB written) and the process sleeps 5 ms; each kernel's time is then its median over the runs.
--int8: the model's PT2E static int8 form (benchmarks/int8.py: the X86 quantizer, calibrated on random inputs; the
conv nets).

--scaling: where a build loses at --threads (2 by default) against 1 thread. The same module runs alternately at 1
thread and at --threads (its runtime's thread count set between calls), `runs` calls each; per kernel the median
of each (and the minimum), and the time lost to the split, median at N threads - median at 1 thread / N; kernels
ranked by it. On a shared host the medians carry the other jobs' preemptions; read the minima beside them.
"""
import argparse
import os
import statistics
import time


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    from fxc.testing.standard import STANDARD_NAMES
    from fxc.testing.zoo import ZOO_NAMES
    ap.add_argument("--model", default="mobilenet_v2",
                    choices=["resnet18", "mobilenet_v2", "bert", *ZOO_NAMES, *STANDARD_NAMES],
                    help="a harness model, one of the zoo's (fxc/testing/zoo.py) or a standard module "
                         "(fxc/testing/standard.py), batch 1")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--threads", type=int, default=0, help="FXC_NUM_THREADS (0: all cores)")
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    ap.add_argument("--cold", action="store_true", help="flush the caches and idle before each run; medians")
    ap.add_argument("--int8", action="store_true", help="the model's PT2E static int8 form (resnet18, mobilenet_v2)")
    ap.add_argument("--scaling", action="store_true",
                    help="per kernel: time at --threads (default 2) against 1 thread, ranked by the time lost")
    args = ap.parse_args()
    if args.scaling and not args.threads:
        args.threads = 2
    if args.threads:
        os.environ["FXC_NUM_THREADS"] = str(args.threads)
    import torch

    import fxc
    from fxc.runtime.cpu.profile import format_profile
    from fxc.testing.models import example_inputs, make_model
    from fxc.testing.standard import make_standard_model, standard_inputs
    from fxc.testing.zoo import make_zoo_model, zoo_inputs
    if args.model in ZOO_NAMES:
        model, inputs = make_zoo_model(args.model), zoo_inputs(args.model)
    elif args.model in STANDARD_NAMES:
        model, inputs = make_standard_model(args.model), standard_inputs(args.model)
    else:
        model, inputs = make_model(args.model), example_inputs(args.model, batch=args.batch)
    if args.int8:
        from benchmarks.int8 import STATIC, pt2e_model  # deferred: torchao, for --int8 only
        if args.model not in STATIC:
            ap.error(f"--int8 takes one of {', '.join(STATIC)}")
        calibration = [example_inputs(args.model, batch=args.batch, seed=1000 + i) for i in range(4)]
        model = pt2e_model(model.eval(), tuple(inputs), calibration, False)
    if args.scaling:
        with torch.no_grad():
            compiled = fxc.from_torch(model, tuple(inputs), profile=True, precision=args.precision)
        print(scaling(compiled, inputs, args.runs, args.threads, args.top))
        return
    with torch.inference_mode():
        compiled = fxc.from_torch(model, inputs, profile=True, precision=args.precision)
        m = compiled.module
        for _ in range(3):
            compiled(*inputs)
        m.profile(reset=True)
        junk = torch.zeros(16 << 20)        # 64 MiB: twice the last-level cache
        runs, walls = [], []
        for _ in range(args.runs):
            if args.cold:
                junk.add_(1.0)
                time.sleep(0.005)
            t0 = time.perf_counter()
            compiled(*inputs)
            walls.append(time.perf_counter() - t0)
            runs.append(m.profile(reset=True))
    pick = statistics.median if args.cold else min
    best = []
    for k, row in enumerate(runs[0]):
        times = [r[k]["total_ms"] for r in runs]
        best.append(min((r[k] for r in runs), key=lambda r: abs(r["total_ms"] - pick(times))))
    total = sum(r["total_ms"] for r in best)
    for r in best:
        r["share"] = r["total_ms"] / max(total, 1e-12)
    print(f"each kernel: its {'median' if args.cold else 'minimum'} over {args.runs} runs"
          + (" (caches flushed, then 5 ms idle, before each)" if args.cold else ""))
    print(format_profile(best, args.top))
    print(f"sum of per-kernel {'medians' if args.cold else 'minima'} {total:.3f} ms; "
          f"end-to-end min {1e3 * min(walls):.3f} ms, "
          f"median {1e3 * sorted(walls)[len(walls) // 2]:.3f} ms; load {os.getloadavg()[0]:.2f}")


def scaling(compiled, inputs, runs: int, threads: int, top: int) -> str:
    """The table of --scaling: compiled (a profiled from_torch build) called alternately at 1 thread and at
    `threads`, `runs` calls each after a warm-up call; kernels ranked by the time the split loses."""
    m = compiled.module
    lib = m._lib.lib
    times: dict = {1: [], threads: []}
    walls: dict = {1: [], threads: []}
    for r in range(runs):
        for nt in ((1, threads) if r % 2 else (threads, 1)):
            lib.fxc_set_num_threads(nt)
            compiled(*inputs)                   # (the pool's workers awake, the caches as the calls leave them)
            m.profile(reset=True)
            t0 = time.perf_counter()
            compiled(*inputs)
            walls[nt].append(1e3 * (time.perf_counter() - t0))
            times[nt].append([row["total_ms"] * 1e3 for row in m.profile(reset=True)])
    lib.fxc_set_num_threads(threads)
    med = {nt: [statistics.median(col) for col in zip(*t)] for nt, t in times.items()}
    low = {nt: [min(col) for col in zip(*t)] for nt, t in times.items()}
    lost = sorted(((med[threads][k] - med[1][k] / threads, k) for k in range(len(m.kernels))), reverse=True)
    w1, wn = walls[1], walls[threads]
    head = f"{threads}t"
    out = [f"{len(m.kernels)} kernels, {runs} calls at each thread count, alternating (load {os.getloadavg()[0]:.2f})",
           f"wall ms, median / min: 1 thread {statistics.median(w1):.3f} / {min(w1):.3f}, {threads} threads "
           f"{statistics.median(wn):.3f} / {min(wn):.3f}; in kernels (sums of medians) {sum(med[1]) / 1e3:.3f} and "
           f"{sum(med[threads]) / 1e3:.3f}, lost to the split {sum(x for x, _ in lost) / 1e3:.3f}",
           f"{'lost us':>8} {'1t med':>8} {'1t min':>8} {head + ' med':>8} {head + ' min':>8} {'speed-up':>8}  kernel"]
    for x, k in lost[:top]:
        out.append(f"{x:8.1f} {med[1][k]:8.1f} {low[1][k]:8.1f} {med[threads][k]:8.1f} {low[threads][k]:8.1f} "
                   f"{med[1][k] / max(med[threads][k], 1e-9):8.2f}  {m.kernels[k][:120]}")
    return "\n".join(out)


if __name__ == "__main__":
    main()
