"""Per-kernel profile of one test model compiled by fxc: which fused kernels take the time.

    .venv/bin/python -m benchmarks.profile_kernels --model mobilenet_v2 [--runs 50] [--top 25] [--threads 1] [--precision bf16]

Compiles the model with fxc.from_torch(..., profile=True) and runs it `runs` times; each kernel's time is
the minimum over the runs (robust on a shared machine), its share is of the sum of those minima.
"""
import argparse
import os
import time


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="mobilenet_v2", choices=["resnet18", "mobilenet_v2", "bert"])
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--threads", type=int, default=0, help="FXC_NUM_THREADS (0: all cores)")
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    args = ap.parse_args()
    if args.threads:
        os.environ["FXC_NUM_THREADS"] = str(args.threads)
    import torch
    import fxc
    from fxc.runtime.profile import format_profile
    from fxc.testing.models import example_inputs, make_model
    model = make_model(args.model)
    inputs = example_inputs(args.model, batch=args.batch)
    with torch.inference_mode():
        compiled = fxc.from_torch(model, inputs, profile=True, precision=args.precision)
        m = compiled.module
        for _ in range(3):
            compiled(*inputs)
        m.profile(reset=True)
        best, walls = None, []
        for _ in range(args.runs):
            t0 = time.perf_counter()
            compiled(*inputs)
            walls.append(time.perf_counter() - t0)
            rows = m.profile(reset=True)
            if best is None:
                best = rows
            else:
                for b, r in zip(best, rows):
                    if r["total_ms"] < b["total_ms"]:
                        b.update(r)
    total = sum(r["total_ms"] for r in best)
    for r in best:
        r["share"] = r["total_ms"] / max(total, 1e-12)
    print(f"each kernel: its minimum over {args.runs} runs")
    print(format_profile(best, args.top))
    print(f"sum of per-kernel minima {total:.3f} ms; end-to-end min {1e3 * min(walls):.3f} ms, "
          f"median {1e3 * sorted(walls)[len(walls) // 2]:.3f} ms; load {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
