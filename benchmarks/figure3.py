"""The seed's Figure 3 reproduced: ResNet-18 end to end on every fxc target, model execution only.

    .venv/bin/python -m benchmarks.figure3                          # every target, 100 runs each (the seed's count)
    .venv/bin/python -m benchmarks.figure3 --runs 5 --targets llvm,opengl
    .venv/bin/python -m benchmarks.figure3 --chart docs/img/figure3.png

The TVM post (seeds/003) timed ResNet-18 compiled for LLVM, OpenCL, OpenGL and WebGL, 100 runs each, model
execution only (no model, input or parameter loading). Here every target kind `fxc.target.KINDS` names is tried
(llvm, opencl, opengl, webgl, webgpu, wasm, ...): the model is built once per target with `fxc.from_torch`
(weights baked in, as the seed's deployed graph held them) and checked against eager PyTorch (max abs error, and
that error over the output's scale: above 1e-4 the row says WRONG); a target this branch cannot build or run yet
is printed with the reason and left out of the chart, so the harness picks up new targets as they land. The
built targets are then timed round-robin (one call of each per round, so a shared machine's noise falls on all
alike) until each has `--runs` calls or has used `--budget` seconds (at least 5 calls; such rows are marked `*`).
A call is the compiled model's own call: torch tensor in, torch tensor out (device targets upload the input and
read the output back; the browser targets also pass them to the page over Playwright).

Prints a table (median, min and mean ms, runs, max error, the device: CPU model, OpenCL device, GL renderer,
browser renderer / adapter) and writes benchmarks/results/figure3-<UTC time>.json and .png: bars of the median
on a linear axis from zero, a tick at the minimum (benchmarks/charts.py).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WRONG = 1e-4            # max abs error over the output's scale above which a target's answer is wrong (issue 28)


@dataclass
class Row:
    """One target's result: built and timed (status "ok" or "WRONG"), or not ("not built", "failed") with why."""
    target: str
    status: str = "ok"
    reason: str = ""
    device: str = ""
    build_s: float = 0.0
    max_abs_err: float | None = None
    rel_err: float | None = None
    times_ms: list = field(default_factory=list)
    capped: bool = False                    # stopped by --budget before --runs calls

    @property
    def timed(self) -> bool:
        return bool(self.times_ms)

    def stats(self) -> dict:
        t = self.times_ms
        return {"runs": len(t), "median_ms": statistics.median(t), "min_ms": min(t),
                "mean_ms": statistics.fmean(t)} if t else {"runs": 0}


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.figure3", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--targets", default="", help="comma-separated target strings (default: every kind in "
                                                 "fxc.target.KINDS)")
    p.add_argument("--model", default="resnet18", help="a model of fxc.testing.models (default resnet18, as the seed)")
    p.add_argument("--runs", type=int, default=100, help="timed calls per target (default 100, as the seed)")
    p.add_argument("--warmup", type=int, default=2, help="untimed calls per target first (default 2)")
    p.add_argument("--budget", type=float, default=600.0, help="seconds of timed calls per target at most "
                                                               "(default 600; at least 5 calls)")
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results"), help="folder of the JSON and PNG")
    p.add_argument("--chart", default="", help="also write the chart to this path (e.g. docs/img/figure3.png)")
    p.add_argument("--from-json", default="", help="measure nothing: print the table and draw the chart of an "
                                                   "earlier run's JSON")
    return p.parse_args(argv)


def candidate_targets(spec: str = "") -> list[str]:
    """The targets to try: `spec`'s comma-separated list, else every target kind fxc knows."""
    from fxc.target import KINDS
    return [t.strip() for t in spec.split(",") if t.strip()] if spec else list(KINDS)


def cpu_name() -> str:
    from benchmarks.run import cpu_name as name
    return name()


def describe_device(target: str, compiled) -> str:
    """The device a compiled model runs on, named as its device API reports it (the CPU for llvm)."""
    if target.split()[0] == "llvm":
        from fxc.target import Target
        t = Target.parse(target)
        return f"{cpu_name()} (LLVM -mcpu={t.mcpu}, {t.caps.threads} threads)"
    dev = getattr(getattr(compiled, "module", None), "device", None)
    if dev is None:
        return "?"
    if type(dev).__str__ is not object.__str__:
        return str(dev)
    info = getattr(dev, "info", None) or {}
    named = [str(info[k]) for k in ("name", "adapter", "version", "driver") if info.get(k)]
    return "; ".join(named) or type(dev).__name__


def build_target(model, inputs, reference, target: str) -> tuple[Row, object]:
    """Build `model` for `target` with fxc.from_torch and check one call against `reference` (eager's output)."""
    import numpy as np

    import fxc
    from fxc.errors import TargetError
    row = Row(target)
    t0 = time.perf_counter()
    try:
        compiled = fxc.from_torch(model, inputs, target=target)
        row.build_s = time.perf_counter() - t0
        row.device = describe_device(target, compiled)
        out = compiled(*inputs)
    except TargetError as e:            # the kind exists in fxc.target but this branch cannot build or run it
        row.status, row.reason = "not built", f"TargetError: {e}"
        return row, None
    except Exception as e:  # noqa: BLE001 -- a harness reports every failure and goes on
        row.status, row.reason = "failed", f"{type(e).__name__}: {e}"
        return row, None
    out = out[0] if isinstance(out, (list, tuple)) else out
    got, ref = np.asarray(out, dtype=np.float64), np.asarray(reference, dtype=np.float64)
    row.max_abs_err = float(np.abs(got - ref).max())
    row.rel_err = row.max_abs_err / max(float(np.abs(ref).max()), 1e-30)
    if not row.rel_err <= WRONG:
        row.status = "WRONG"
        row.reason = f"max abs error {row.max_abs_err:.3g} is {row.rel_err:.3g} of the output's scale"
    return row, compiled


def time_round_robin(runners: dict, rows: dict, runs: int, warmup: int, budget: float) -> None:
    """Call each runner once per round (order rotated) until each has `runs` timed calls or used `budget` s."""
    for name, fn in runners.items():
        for _ in range(warmup):
            fn()
    spent = dict.fromkeys(runners, 0.0)
    order = list(runners)
    while True:
        live = [n for n in order if len(rows[n].times_ms) < runs
                and not (spent[n] >= budget and len(rows[n].times_ms) >= min(5, runs))]
        if not live:
            break
        for name in live:
            t0 = time.perf_counter()
            runners[name]()
            dt = time.perf_counter() - t0
            spent[name] += dt
            rows[name].times_ms.append(dt * 1e3)
        order = order[1:] + order[:1]
    for name in runners:
        rows[name].capped = len(rows[name].times_ms) < runs


def _fmt(v, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def format_table(rows: list[Row], model: str) -> str:
    head = f"{'target':<10} {'median ms':>10} {'min ms':>9} {'mean ms':>9} {'runs':>5} {'max|err|':>9}  device"
    lines = [f"{model}, batch 1, fp32, model execution only", head, "-" * len(head)]
    for r in rows:
        if r.timed:
            s = r.stats()
            lines.append(f"{r.target:<10} {s['median_ms']:>10.1f} {s['min_ms']:>9.1f} {s['mean_ms']:>9.1f} "
                         f"{s['runs']:>4}{'*' if r.capped else ' '} {_fmt(r.max_abs_err, '9.1e')}  {r.device}"
                         + (f"  [{r.status}: {r.reason}]" if r.status != "ok" else ""))
        else:
            lines.append(f"{r.target:<10} {r.status}: {r.reason}"[:400])
    if any(r.capped for r in rows):
        lines.append("* stopped by --budget before --runs calls")
    return "\n".join(lines)


def write_chart(rows: list[Row], path: Path, title: str) -> str:
    """Bars of each timed target's median (linear axis from zero), a tick at its minimum; WRONG rows in gray."""
    from benchmarks.charts import ChartUnavailable, latency_bars, new_figure, save
    timed = [r for r in rows if r.timed]
    if not timed:
        return "chart not written: no target was timed"
    try:
        fig, [ax] = new_figure(1, width=8.5, height=1.2 + 0.55 * len(timed))
    except ChartUnavailable as e:
        return str(e)
    latency_bars(ax, [f"{r.target}\n{_short_device(r.device)}" for r in timed], [r.stats()["median_ms"] for r in timed],
                 colors=["tab:gray" if r.status != "ok" else "tab:blue" for r in timed],
                 mins=[r.stats()["min_ms"] for r in timed],
                 notes=[(" ms" + (" WRONG" if r.status != "ok" else "")) for r in timed])
    ax.tick_params(axis="y", labelsize=7)
    untimed = [f"{r.target} ({r.status}: {r.reason.split(':')[0]})" for r in rows if not r.timed]
    save(fig, path, title, footer=("not timed: " + ", ".join(untimed)) if untimed else "")
    return f"chart: {path}"


def _short_device(device: str, width: int = 38) -> str:
    return device if len(device) <= width else device[:width - 3] + "..."


def _title(meta: dict) -> str:
    return (f"{meta['model']} b1 fp32, model execution only, {meta['cpu']} ({meta['cores_available']} cores, load "
            f"average {meta['load_average_start']:.0f}-{meta.get('load_average_end', 0):.0f}), {meta['date_utc'][:10]}")


def replot(path: Path, chart: str) -> int:
    """The table and chart of an earlier run's JSON (no measurement)."""
    report = json.loads(Path(path).read_text())
    names = {f.name for f in Row.__dataclass_fields__.values()}
    rows = [Row(**{k: v for k, v in r.items() if k in names}) for r in report["rows"]]
    print(format_table(rows, report["meta"]["model"]))
    print(write_chart(rows, Path(chart or Path(path).with_suffix(".png")), _title(report["meta"])))
    return 0


def main(argv=None) -> int:
    args = parse_args(argv)
    sys.path.insert(0, str(ROOT))
    if args.from_json:
        return replot(Path(args.from_json), args.chart)
    import torch

    from fxc.runtime.store import atomic_write
    from fxc.testing.models import example_inputs, make_model
    model, inputs = make_model(args.model), example_inputs(args.model)
    with torch.inference_mode():
        reference = model(*inputs).numpy()
    meta = {"command": " ".join(["python -m benchmarks.figure3"] + (sys.argv[1:] if argv is None else list(argv))),
            "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "model": args.model, "cpu": cpu_name(),
            "cores_available": len(os.sched_getaffinity(0)), "load_average_start": os.getloadavg()[0],
            "runs": args.runs, "warmup": args.warmup, "budget_s": args.budget}
    print(f"Figure 3: {args.model}, {meta['cpu']}, {meta['cores_available']} cores, load average "
          f"{meta['load_average_start']:.1f}; {args.runs} runs per target (budget {args.budget:.0f} s)", flush=True)
    rows, runners = {}, {}
    for target in candidate_targets(args.targets):
        row, compiled = build_target(model, inputs, reference, target)
        rows[target] = row
        print(f"  {target}: " + (f"built in {row.build_s:.1f} s on {row.device}, max|err| {row.max_abs_err:.2e}"
                                 if compiled is not None else f"{row.status}: {row.reason}")[:400], flush=True)
        if compiled is not None:
            runners[target] = (lambda c: lambda: c(*inputs))(compiled)
    time_round_robin(runners, rows, args.runs, args.warmup, args.budget)
    meta["load_average_end"] = os.getloadavg()[0]
    table = format_table(list(rows.values()), args.model)
    print("\n" + table)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    report = {"meta": meta, "rows": [dict(asdict(r), **r.stats()) for r in rows.values()]}
    atomic_write(out / f"figure3-{stamp}.json", (json.dumps(report, indent=1) + "\n").encode())
    print(f"results: {out / f'figure3-{stamp}.json'}")
    title = _title(meta)
    for path in [out / f"figure3-{stamp}.png"] + ([Path(args.chart)] if args.chart else []):
        print(write_chart(list(rows.values()), path, title))
    return 0


if __name__ == "__main__":
    sys.exit(main())
