"""Two symbols at once (issue 26 item 3): the BERT encoder built once with a batch and a sequence Dim against a
static build per (batch, sequence) pair and eager PyTorch.

    python -m benchmarks.dynamic --pairs "1x16,2x16,4x64,4x128,8x128" --threads 1 --runs 20 [--small]

Builds `fxc.from_torch(bert, ..., dynamic_shapes=({0: batch, 1: seq}, {0: batch, 1: seq}))` once (batch in
[1, 8], sequence in [2, 128]: the position table stops at 128), then at each pair a static build, and times the
three round robin (one call of each per round, after 3 warm-up calls), so all see the same machine load. Prints per
pair the median (min) ms of each and dynamic / static. `--small` is the 2-layer hidden-64 config of the tests
(tests/capture/torch/test_dynamic_seq.py), the default the zoo's BERT (4 layers, hidden 256).
"""
from __future__ import annotations

import os
import statistics
import time


def _model(small: bool):
    import torch

    from fxc.testing.models import bert_encoder, make_model
    if small:
        torch.manual_seed(0)
        return bert_encoder(vocab=1000, hidden=64, layers=2, heads=2, intermediate=128).eval(), 1000
    return make_model("bert"), 30522


def _inputs(vocab: int, b: int, s: int):
    import torch
    g = torch.Generator().manual_seed(b * 1000 + s)
    ids = torch.randint(0, vocab, (b, s), generator=g)
    mask = torch.ones(b, s, dtype=torch.long)
    mask[0, s - s // 4:] = 0
    return ids, mask


def measure(pairs: list, runs: int, small: bool) -> tuple:
    """([(b, s, dynamic ms list, static ms list, eager ms list, max |dynamic - eager|)], dynamic compile s)."""
    import torch
    from torch.export import Dim

    import fxc
    model, vocab = _model(small)
    batch, seq = Dim("batch", min=1, max=8), Dim("seq", min=2, max=128)
    t0 = time.perf_counter()
    dynamic = fxc.from_torch(model, _inputs(vocab, 2, 16), dynamic_shapes=({0: batch, 1: seq}, {0: batch, 1: seq}))
    dyn_compile = time.perf_counter() - t0
    rows = []
    with torch.no_grad():
        for b, s in pairs:
            inputs = _inputs(vocab, b, s)
            static = fxc.from_torch(model, inputs)
            variants = (("d", dynamic), ("s", static), ("e", model))
            for _ in range(3):
                for _, fn in variants:
                    fn(*inputs)
            err = float((torch.as_tensor(dynamic(*inputs)) - model(*inputs)).abs().max())
            times: dict = {k: [] for k, _ in variants}
            for _ in range(runs):
                for key, fn in variants:
                    t0 = time.perf_counter()
                    fn(*inputs)
                    times[key].append(1e3 * (time.perf_counter() - t0))
            rows.append((b, s, times["d"], times["s"], times["e"], err))
    return rows, dyn_compile


def main(a) -> None:
    """Run from `python -m benchmarks.dynamic --pairs ...` (its parsed arguments)."""
    threads = a.threads or len(os.sched_getaffinity(0))
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "FXC_NUM_THREADS"):    # before fxc's runtime starts its pool
        os.environ[var] = str(threads)
    import torch
    torch.set_num_threads(threads)
    pairs = [tuple(int(x) for x in p.split("x")) for p in a.pairs.split(",") if p]
    load0 = os.getloadavg()[0]
    rows, dyn_compile = measure(pairs, a.runs or 20, a.small)
    print(f"BERT ({'2 layers, hidden 64' if a.small else 'zoo: 4 layers, hidden 256'}), {threads} thread(s), "
          f"dynamic build {dyn_compile:.1f} s, load average {load0:.1f} -> {os.getloadavg()[0]:.1f}")
    print("| batch x seq | fxc dynamic ms | fxc static ms | eager ms | dynamic / static (minima) "
          "| max abs err vs eager |")
    print("|---|---|---|---|---|---|")
    for b, s, d, st, e, err in rows:
        md, ms, me = statistics.median(d), statistics.median(st), statistics.median(e)
        print(f"| {b} x {s} | {md:.2f} ({min(d):.2f}) | {ms:.2f} ({min(st):.2f}) | {me:.2f} ({min(e):.2f}) "
              f"| {md / ms:.3f} ({min(d) / min(st):.3f}) | {err:.1e} |", flush=True)
