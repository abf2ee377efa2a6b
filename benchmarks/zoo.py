"""Architectures beyond the harness's three (fxc/testing/zoo.py): eager PyTorch against
torch.compile(backend="fxc"), batch 1, inference, timed interleaved in one process.

    .venv/bin/python -m benchmarks.zoo [--models convnext,efficientnet,vit,gpt,unet,lstm] [--runs 30] [--threads N]

Per model: the median of --runs calls of each (one call of each per round, after warm-up), eager / fxc, the max abs
error relative to the output's largest value, the first call's time (compile included, in this process, on fxc's
cache as it stands) and the ops that ran in eager PyTorch (Dynamo itself does not capture nn.LSTM unless
torch._dynamo.config.allow_rnn is set: that model then runs in eager whole). A check across families rather than a
peer comparison: a model much slower than eager points at an op or shape without a schedule of its own.
"""
import argparse
import os
import statistics
import time


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="convnext,efficientnet,vit,gpt,unet,lstm")
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    args = ap.parse_args(argv)
    os.environ.setdefault("FXC_NUM_THREADS", str(args.threads))
    import torch

    import fxc
    from fxc.testing.zoo import ZOO_NAMES, make_zoo_model, zoo_inputs
    torch.set_num_threads(args.threads)
    names = args.models.split(",")
    unknown = set(names) - set(ZOO_NAMES)
    if unknown:
        ap.error(f"unknown model(s) {sorted(unknown)}; known: {', '.join(ZOO_NAMES)}")
    print(f"{args.threads} threads, batch 1, medians of {args.runs} interleaved calls")
    print(f"{'model':<14}{'eager ms':>10}{'fxc ms':>10}{'eager/fxc':>11}{'max|err|':>10}{'first call s':>14}"
          "  eager ops")
    for name in names:
        model, x = make_zoo_model(name), zoo_inputs(name)
        compiled = torch.compile(model, backend="fxc")
        with torch.inference_mode():
            t0 = time.perf_counter()
            out = compiled(*x)
            first = time.perf_counter() - t0
            ref = model(*x)
            err = ((out - ref).abs().max() / ref.abs().max().clamp_min(1e-12)).item()
            for _ in range(3):
                model(*x), compiled(*x)
            times = {"eager": [], "fxc": []}
            for r in range(args.runs):
                for peer, fn in (("eager", model), ("fxc", compiled))[::1 if r % 2 else -1]:
                    t = time.perf_counter()
                    fn(*x)
                    times[peer].append(time.perf_counter() - t)
        e, f = (1e3 * statistics.median(times[k]) for k in ("eager", "fxc"))
        rep = fxc.explain(model, *x)        # (after the timing: it resets Dynamo)
        eager_ops = ", ".join(sorted(str(k).replace("aten.", "") for k in rep.fallback_ops)) or "-"
        if not rep.graphs:
            eager_ops = "all: Dynamo captured no graph"
        print(f"{name:<14}{e:>10.2f}{f:>10.2f}{e / f:>11.2f}{err:>10.1e}{first:>14.2f}  {eager_ops}", flush=True)


if __name__ == "__main__":
    main()
