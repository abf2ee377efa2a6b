"""Per-kernel profile of one test model compiled by fxc: which fused kernels take the time.

    .venv/bin/python -m benchmarks.profile_kernels --model mobilenet_v2|convnext|... [--runs 50] [--top 25]
        [--threads 1] [--precision bf16] [--cold]

Compiles the model with fxc.from_torch(..., profile=True) and runs it `runs` times; each kernel's time is
the minimum over the runs (robust on a shared machine), its share is of the sum of those minima. With --cold,
each run follows what the harness's timed calls follow (other peers' work, then an idle spell): the caches are
flushed (64 MiB written) and the process sleeps 5 ms; each kernel's time is then its median over the runs.
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
    args = ap.parse_args()
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


if __name__ == "__main__":
    main()
