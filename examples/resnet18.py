"""The main job: compile ResNet-18 with torch.compile(backend="fxc"); print latency vs eager and accuracy.

    .venv/bin/python examples/resnet18.py [--batch 1] [--runs 30]
"""
import argparse
import statistics
import time

import torch

from fxc.testing.models import example_inputs, make_model


def median_ms(fn, inputs, runs):
    for _ in range(3):
        fn(*inputs)
    ts = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn(*inputs)
        ts.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(ts), 1e3 * min(ts)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="resnet18", choices=["resnet18", "mobilenet_v2", "bert"])
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--runs", type=int, default=30)
    args = ap.parse_args()
    torch.set_num_threads(len(__import__("os").sched_getaffinity(0)))
    model = make_model(args.model)
    inputs = example_inputs(args.model, batch=args.batch)
    with torch.inference_mode():
        expected = model(*inputs)
        t0 = time.perf_counter()
        compiled = torch.compile(model, backend="fxc")
        actual = compiled(*inputs)
        compile_s = time.perf_counter() - t0
        err = (actual - expected).abs().max().item()
        scale = expected.abs().max().item()
        eager_med, eager_min = median_ms(model, inputs, args.runs)
        fxc_med, fxc_min = median_ms(compiled, inputs, args.runs)
    print(f"{args.model} batch {args.batch}: compile {compile_s:.2f} s (includes first run)")
    print(f"  eager  median {eager_med:8.2f} ms   min {eager_min:8.2f} ms")
    print(f"  fxc    median {fxc_med:8.2f} ms   min {fxc_min:8.2f} ms   speed-up vs eager {eager_med / fxc_med:.2f}x")
    print(f"  max abs error vs eager {err:.3e} (output max |y| {scale:.3e}, relative {err / max(scale, 1e-30):.1e})")
    assert err <= 1e-4 * max(scale, 1.0), "fxc result differs from eager"


if __name__ == "__main__":
    main()
