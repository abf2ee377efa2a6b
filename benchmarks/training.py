"""One training step (forward, backward, SGD step) of each test model: eager PyTorch against torch.compile with fxc
(and, with --peers, with inductor), timed interleaved in one process.

    .venv/bin/python -m benchmarks.training [--models resnet18,mobilenet_v2,bert] [--steps 20]
        [--peers eager,fxc,inductor]

Every peer trains its own copy of the same model (same weights) on the same batch. Before timing, the gradients of
one step of each peer on a copy with its dropout off (fxc draws its own masks) are compared with eager PyTorch's in
float64 ("grad err": the max abs difference over all parameters, relative to the largest gradient; batch norm over
batch 1 makes some models' gradients ill-conditioned, so eager float32 has an error of its own there). Then each
round runs one step of every peer, the order rotated each round, and the medians of the phases are printed with each
peer's step time divided by fxc's. The loss is out.pow(2).mean(), so every output takes part.
"""
import argparse
import copy
import statistics
import time

import torch

PEERS = {"eager": lambda m: m, "fxc": lambda m: torch.compile(m, backend="fxc"), "inductor": torch.compile}


def _step(fn, model, opt, inputs, times=None):
    t0 = time.perf_counter()
    out = fn(*inputs)
    loss = out.float().pow(2).mean()
    t1 = time.perf_counter()
    loss.backward()
    t2 = time.perf_counter()
    opt.step()
    opt.zero_grad(set_to_none=False)
    t3 = time.perf_counter()
    if times is not None:
        for k, v in zip(("forward", "backward", "optimizer"), (t1 - t0, t2 - t1, t3 - t2)):
            times[k].append(v)


def _no_dropout(model):
    m = copy.deepcopy(model)
    for mod in m.modules():
        if isinstance(mod, torch.nn.modules.dropout._DropoutNd):
            mod.eval()
    return m


def bench(name: str, peers: list, steps: int, batch: int) -> None:
    from fxc.testing.models import example_inputs, make_model
    torch.manual_seed(0)
    base = make_model(name).train()
    inputs = example_inputs(name, batch)
    runs = {}
    for p in peers:
        model = copy.deepcopy(base)
        runs[p] = (PEERS[p](model), model, torch.optim.SGD(model.parameters(), lr=1e-4))
    grads = {}
    for p in peers:                                     # one step of a copy without dropout (whose masks no two
        model = _no_dropout(base)                       # generators share): the gradients to check
        torch.manual_seed(1)
        PEERS[p](model)(*inputs).float().pow(2).mean().backward()
        grads[p] = [q.grad for q in model.parameters()]
    ref64 = _no_dropout(base).double()                  # the gradients' reference: eager in float64
    ref64(*[t.double() if t.is_floating_point() else t for t in inputs]).pow(2).mean().backward()
    grads["fp64"] = [q.grad for q in ref64.parameters()]
    scale = max(float(g.abs().max()) for g in grads["fp64"]) or 1.0
    times = {p: {"forward": [], "backward": [], "optimizer": []} for p in peers}
    for r in range(steps + 2):
        for p in peers[r % len(peers):] + peers[:r % len(peers)]:
            fn, model, opt = runs[p]
            _step(fn, model, opt, inputs, times[p] if r >= 2 else None)
    med = {p: {k: statistics.median(v) * 1e3 for k, v in t.items()} for p, t in times.items()}
    ref = sum(med["fxc"].values()) if "fxc" in med else None
    print(f"\n{name} batch {batch}, {steps} steps; medians in ms")
    print(f"{'peer':<10}{'forward':>10}{'backward':>10}{'optimizer':>11}{'step':>9}{'step/fxc':>10}{'grad err':>10}")
    for p in peers:
        m = med[p]
        total = sum(m.values())
        err = max(float((a.double() - b).abs().max()) for a, b in zip(grads[p], grads["fp64"])) / scale
        ratio = f"{total / ref:10.2f}" if ref else f"{'':>10}"
        print(f"{p:<10}{m['forward']:10.2f}{m['backward']:10.2f}{m['optimizer']:11.2f}{total:9.2f}{ratio}{err:10.1e}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="resnet18,mobilenet_v2,bert")
    ap.add_argument("--peers", default="eager,fxc", help="of: " + ", ".join(PEERS))
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    peers = [p for p in a.peers.split(",") if p]
    unknown = set(peers) - set(PEERS)
    if unknown:
        ap.error(f"unknown peers {sorted(unknown)}; known: {', '.join(PEERS)}")
    for name in a.models.split(","):
        bench(name, peers, a.steps, a.batch)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
