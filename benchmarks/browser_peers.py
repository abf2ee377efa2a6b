"""fxc's browser targets against TensorFlow.js and onnxruntime-web, in the same headless Chromium.

    bash scripts/bench.sh --browser                 # npm-installs the peers into benchmarks/web once, then this
    .venv/bin/python -m benchmarks.browser_peers [--models resnet18,mobilenet_v2,bert] [--runs 20] [--peers ...]
        [--fxc-targets webgl,webgpu,wasm] [--budget 120] [--chart docs/img/browser_peers.png]

The same three models with the same weights (fxc.testing.models, batch 1, BERT at sequence length 128):
- onnxruntime-web (npm `onnxruntime-web`, `ort.all.min.js`) runs `torch.onnx.export`'s ONNX file with its webgl,
  webgpu and wasm execution providers, wasm at 1 and 2 threads;
- TensorFlow.js (npm `@tensorflow/tfjs` with `@tensorflow/tfjs-backend-wasm`) runs the same architectures written
  with tf ops (benchmarks/web/tfjs_models.js), their weights set from a plain binary export of the PyTorch
  state dict (`export_weights`: a JSON manifest and little-endian float32s, never pickle), on its webgl backend
  and its wasm backend at 1 and 2 threads;
- fxc runs `fxc.from_torch(model, inputs, target=T)` for each browser target T this branch has (a target not
  built yet is reported with the reason), through its RPC runtime in its own page of the same Chromium build
  with the same flags (fxc.runtime.browser.page.FLAGS).
Every peer's output is checked against eager PyTorch before timing is trusted (max abs error, and over the
output's scale; above 1e-4 the row says WRONG). The pages are served on 127.0.0.1 with COOP/COEP headers, so
`crossOriginIsolated` holds and wasm threads (SharedArrayBuffer) work; a peer page per run, so no two peers share
a WebGL context or a wasm heap. A peer's timed run is in-page (performance.now): input tensors made, model run,
output read back; fxc's is the Python call (the same, plus Playwright's round trip with the input in base64).
A peer that fails to load, run or answer correctly is reported with its error; the run goes on. A wasm row whose
runtime reports another thread count than it was asked for shows both (`2>1`: asked for 2, uses 1).

Writes benchmarks/results/browser-<UTC time>.json and .png (one panel per model, bars on a linear axis from 0).
npm is never run here (nor by the tests): scripts/bench.sh --browser installs benchmarks/web/node_modules.
"""
from __future__ import annotations

import argparse
import functools
import http.server
import json
import os
import shutil
import statistics
import sys
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
WEB = ROOT / "benchmarks" / "web"
WRONG = 1e-4
# name -> (framework, backend, threads, label)
PEERS = {
    "tfjs_webgl": ("tfjs", "webgl", 1, "TF.js WebGL"),
    "tfjs_wasm_1t": ("tfjs", "wasm", 1, "TF.js WASM, 1 thread"),
    "tfjs_wasm_2t": ("tfjs", "wasm", 2, "TF.js WASM, 2 threads"),
    "ort_webgl": ("ort", "webgl", 1, "ORT-web WebGL"),
    "ort_webgpu": ("ort", "webgpu", 1, "ORT-web WebGPU"),
    "ort_wasm_1t": ("ort", "wasm", 1, "ORT-web wasm, 1 thread"),
    "ort_wasm_2t": ("ort", "wasm", 2, "ORT-web wasm, 2 threads"),
}
FXC_TARGETS = ("webgl", "webgpu", "wasm")
# fxc's goals (issue 28 item 7): fxc row, peer row it should beat
GOALS = (("fxc_webgl", "tfjs_webgl"), ("fxc_wasm", "ort_wasm_1t"), ("fxc_wasm", "ort_wasm_2t"),
         ("fxc_webgpu", "ort_webgpu"))
MIME = {".html": "text/html", ".js": "text/javascript", ".mjs": "text/javascript", ".wasm": "application/wasm",
        ".json": "application/json"}


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.browser_peers", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default="resnet18,mobilenet_v2,bert")
    p.add_argument("--peers", default=",".join(PEERS), help=f"comma-separated, from {', '.join(PEERS)}")
    p.add_argument("--fxc-targets", default=",".join(FXC_TARGETS), help="fxc targets to run (target strings)")
    p.add_argument("--runs", type=int, default=20, help="timed runs per peer (default 20)")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--budget", type=float, default=120.0, help="seconds of timed runs per peer at most (>= 5 runs)")
    p.add_argument("--timeout", type=float, default=900.0, help="seconds a peer may take in all before it is "
                                                                "reported as failed")
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    p.add_argument("--chart", default="", help="also write the chart here (e.g. docs/img/browser_peers.png)")
    p.add_argument("--from-json", default="", help="measure nothing: tables and chart of earlier runs' JSON files "
                                                   "(comma-separated; a later file's row replaces an earlier one's)")
    p.add_argument("--fxc-worker", default="", help=argparse.SUPPRESS)     # run_fxc_subprocess's child
    return p.parse_args(argv)


# ------------------------------------------------------------------ the models' files for the pages
def tfjs_layout(model) -> dict:
    """The state dict as float32 numpy arrays in TF.js's layouts: a conv's OIHW weight as HWIO, a depthwise conv's
    (C, 1, kh, kw) as HWC1, a Linear's (out, in) as (in, out); everything else as it is (num_batches_tracked,
    an integer counter no inference reads, is left out)."""
    import torch
    layout = {}
    for name, m in model.named_modules():
        if isinstance(m, torch.nn.Conv2d):
            depthwise = m.groups > 1 and m.groups == m.in_channels == m.out_channels
            if m.groups > 1 and not depthwise:
                raise ValueError(f"{name}: grouped conv (groups={m.groups}) has no TF.js op")
            layout[f"{name}.weight"] = (2, 3, 0, 1) if depthwise else (2, 3, 1, 0)
        elif isinstance(m, torch.nn.Linear):
            layout[f"{name}.weight"] = (1, 0)
    out = {}
    for name, t in model.state_dict().items():
        if name.endswith("num_batches_tracked"):
            continue
        a = t.detach().cpu().numpy().astype(np.float32)
        out[name] = np.ascontiguousarray(a.transpose(layout[name]) if name in layout else a)
    return out


def export_weights(model, stem: Path) -> None:
    """Write `stem`.json (a list of {name, shape, offset}: offsets in float32 elements) and `stem`.bin (the
    tensors' little-endian float32 values one after another) from tfjs_layout(model)."""
    from fxc.runtime.store import atomic_write
    manifest, blobs, offset = [], [], 0
    for name, a in tfjs_layout(model).items():
        manifest.append({"name": name, "shape": list(a.shape), "offset": offset})
        blobs.append(a.astype("<f4").tobytes())
        offset += a.size
    stem = Path(stem)
    atomic_write(stem.parent / f"{stem.name}.bin", b"".join(blobs))
    atomic_write(stem.parent / f"{stem.name}.json", json.dumps(manifest).encode())


def prepare_model(name: str, folder: Path | None) -> dict:
    """Export `name`'s ONNX file, TF.js weights and inputs into `folder` (None: write nothing, fxc's child needs
    none); returns the model, its inputs, eager's output and the page configuration parts (URLs under /models/)."""
    import torch

    from benchmarks.peers import export_onnx
    from fxc.testing.models import example_inputs, make_model
    model, inputs = make_model(name), example_inputs(name)
    with torch.inference_mode():
        reference = model(*inputs).numpy()
    if folder is not None:
        export_onnx(model, inputs, str(folder / f"{name}.onnx"))
        export_weights(model, folder / f"{name}.weights")
    ort_inputs, tfjs_inputs = [], []
    for i, t in enumerate(inputs):
        a = t.numpy()
        b = a.transpose(0, 2, 3, 1) if a.ndim == 4 else a.astype(np.int32) if a.dtype == np.int64 else a
        for kind, arr, lst in (("ort", a, ort_inputs), ("tfjs", np.ascontiguousarray(b), tfjs_inputs)):
            if folder is not None:
                (folder / f"{name}.{kind}.in{i}.bin").write_bytes(arr.tobytes())
            lst.append({"url": f"/models/{name}.{kind}.in{i}.bin", "dtype": str(arr.dtype), "shape": list(arr.shape)})
    meta = {}
    if name == "bert":
        layer = model.layers[0]
        meta = {"heads": layer.attention.heads, "eps": layer.attn_norm.eps}
    return {"model": model, "inputs": inputs, "reference": reference, "ort_inputs": ort_inputs,
            "tfjs_inputs": tfjs_inputs, "meta": meta}


# ------------------------------------------------------------------ serving and the browser
class _Handler(http.server.SimpleHTTPRequestHandler):
    """Static files: /models/ from the export folder, /node_modules/ and the rest from benchmarks/web; every
    response with the COOP/COEP headers that make the page cross-origin isolated (wasm threads)."""
    models: Path = WEB

    def translate_path(self, path):
        path = path.split("?", 1)[0]
        if path.startswith("/models/"):
            return str(self.models / Path(path).name)
        return super().translate_path(path)

    def guess_type(self, path):
        return MIME.get(Path(path).suffix, "application/octet-stream")

    def end_headers(self):
        self.send_header("Cross-Origin-Opener-Policy", "same-origin")
        self.send_header("Cross-Origin-Embedder-Policy", "require-corp")
        self.send_header("Cross-Origin-Resource-Policy", "same-origin")
        self.send_header("Cache-Control", "no-store")
        super().end_headers()

    def log_message(self, *args):
        pass


def serve(models: Path) -> http.server.ThreadingHTTPServer:
    """A server on 127.0.0.1 (a free port) for benchmarks/web and `models`, running on a daemon thread."""
    handler = type("Handler", (_Handler,), {"models": Path(models)})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(handler, directory=str(WEB)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def launch_browser(pw):
    """Chromium with fxc's own flags (fxc.runtime.browser.page.FLAGS: headless, SwiftShader WebGL 2), plus WebGPU."""
    from fxc.runtime.browser.page import FLAGS
    flags = list(FLAGS) + [f for f in ("--enable-unsafe-webgpu",) if f not in FLAGS]
    return pw.chromium.launch(executable_path=os.environ.get("FXC_CHROMIUM", "/usr/bin/chromium"), headless=True,
                              args=flags)


# ------------------------------------------------------------------ running the peers
def _row(name: str, label: str, threads, times: list, output, reference, info: str, error: str = "") -> dict:
    row = {"peer": name, "label": label, "threads": threads, "info": info, "status": "ok", "error": error}
    if error:
        row["status"] = "failed"
        return row
    got = np.asarray(output, dtype=np.float64).reshape(-1)
    ref = np.asarray(reference, dtype=np.float64).reshape(-1)
    if got.size != ref.size:
        row.update(status="WRONG", error=f"{got.size} output values, eager has {ref.size}")
    else:
        err = float(np.abs(got - ref).max())
        rel = err / max(float(np.abs(ref).max()), 1e-30)
        row.update(max_abs_err=err, rel_err=rel)
        if not rel <= WRONG:
            row.update(status="WRONG", error=f"max abs error {err:.3g} ({rel:.3g} of the output's scale)")
    row.update(runs=len(times), median_ms=statistics.median(times), min_ms=min(times), times_ms=times)
    return row


def run_page_peer(browser, base: str, name: str, model: str, prep: dict, args) -> dict:
    """One peer on one model in a fresh page: runPeer's in-page times and output, checked against eager."""
    framework, backend, threads, label = PEERS[name]
    shown = threads if backend == "wasm" else "-"           # a GPU backend's threads are the browser's own
    cfg = {"framework": framework, "backend": backend, "threads": threads, "model": model, "runs": args.runs,
           "warmup": args.warmup, "budgetMs": args.budget * 1e3, "meta": prep["meta"],
           "inputs": prep["ort_inputs" if framework == "ort" else "tfjs_inputs"],
           "onnx": f"/models/{model}.onnx", "weights": f"/models/{model}.weights"}
    page = browser.new_page()
    try:
        page.goto(f"{base}/peers.html", timeout=args.timeout * 1e3)
        res = page.evaluate("""([cfg, ms]) => Promise.race([runPeer(cfg), new Promise((_, no) => setTimeout(
            () => no(new Error(`no answer in ${ms / 1000} s`)), ms))])""", [cfg, args.timeout * 1e3])
    except Exception as e:  # noqa: BLE001 -- a peer's failure is a result
        return _row(name, label, shown, [], None, None, "", f"{type(e).__name__}: {str(e).splitlines()[0]}"[:300])
    finally:
        page.close()
    info = res["info"]
    if backend == "wasm" and info.get("threads") not in (None, threads):       # TF.js: tensorflow/tfjs#8513
        shown = f"{threads}>{info['threads']}"
    device = info.get("renderer") or info.get("adapter") or ""
    desc = ", ".join(f"{k} {v}" for k, v in info.items() if k not in ("renderer", "adapter"))
    return _row(name, label, shown, res["times"], res["output"], prep["reference"],
                f"{desc}{'; ' + device if device else ''}")


def run_fxc(target: str, prep: dict, args) -> dict:
    """fxc.from_torch for a browser target, checked and timed through Python (benchmarks.figure3)."""
    from benchmarks.figure3 import build_target, time_round_robin
    row, compiled = build_target(prep["model"], prep["inputs"], prep["reference"], target)
    name = "fxc_" + target.split()[0]
    threads = "-" if name != "fxc_wasm" else dict(t.lstrip("-").split("=", 1) for t in target.split()[1:]
                                                  if "=" in t).get("num-threads", "default").strip("'\"")
    if compiled is None:
        return _row(name, f"fxc {target}", threads, [], None, None, "", f"{row.status}: {row.reason}"[:300])
    time_round_robin({target: lambda: compiled(*prep["inputs"])}, {target: row}, args.runs, args.warmup, args.budget)
    return _row(name, f"fxc {target}", threads, row.times_ms, compiled(*prep["inputs"]), prep["reference"],
                row.device)


def run_fxc_subprocess(model: str, target: str, args) -> dict:
    """run_fxc in a child process (its own browser), stopped after --timeout s: a build or a run that hangs is a
    failed row, not a hung harness."""
    import subprocess
    cmd = [sys.executable, "-m", "benchmarks.browser_peers", "--fxc-worker", target, "--models", model,
           "--runs", str(args.runs), "--warmup", str(args.warmup), "--budget", str(args.budget)]
    label = f"fxc {target}"
    p = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=dict(os.environ, PYTHONPATH=str(ROOT)), start_new_session=True)
    try:
        stdout, stderr = p.communicate(timeout=args.timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, 9)         # the child's own group: its Playwright driver and Chromium go with it
        p.communicate()
        return _row("fxc_" + target.split()[0], label, "-", [], None, None, "",
                    f"no answer in {args.timeout:.0f} s (build and {args.runs} runs)")
    for line in stdout.splitlines():
        if line.startswith(WORKER_TAG):
            return json.loads(line[len(WORKER_TAG):])
    return _row("fxc_" + target.split()[0], label, "-", [], None, None, "",
                f"worker exited {p.returncode}: {(stderr or stdout).strip()[-300:]}")


WORKER_TAG = "FXC_BROWSER_ROW "


def format_table(model: str, rows: list) -> str:
    head = f"{'peer':<26} {'threads':>7} {'median ms':>10} {'min ms':>9} {'runs':>5} {'max|err|':>9}  device / note"
    lines = [f"{model}, batch 1, fp32", head, "-" * len(head)]
    for r in rows:
        if "median_ms" in r:
            lines.append(f"{r['label']:<26} {r['threads']!s:>7} {r['median_ms']:>10.1f} {r['min_ms']:>9.1f} "
                         f"{r['runs']:>5} {r.get('max_abs_err', float('nan')):>9.1e}  "
                         + (f"[{r['status']}: {r['error']}] " if r["status"] != "ok" else "") + r["info"][:90])
        else:
            lines.append(f"{r['label']:<26} {r['threads']!s:>7} failed: {r['error']}"[:300])
    by = {r["peer"]: r for r in rows}
    for ours, theirs in GOALS:
        b = by.get(theirs, {})
        mine = [r for r in rows if r["peer"] == ours]      # fxc's row at the peer's threads (1 with 1, 2 with 2)
        a = ([r for r in mine if str(r["threads"]).strip("'") == str(b.get("threads", "")).split(">")[0]] or mine
             or [{}])[-1]
        if a.get("status") == "ok" and b.get("status") == "ok":
            at = f" ({str(a['threads']).strip(chr(39))} threads)" if str(a["threads"]).strip("'").isdigit() else ""
            lines.append(f"{theirs} / {ours}{at}: {b['median_ms'] / a['median_ms']:.2f} (> 1: fxc faster)")
        elif ours in by or theirs in by:
            lines.append(f"{theirs} / {ours}: no ratio ({ours}: {a.get('status', 'not run')}, "
                         f"{theirs}: {b.get('status', 'not run')})")
    return "\n".join(lines)


def _chart_label(row: dict) -> str:
    """The row's label, with the threads its runtime reports where that differs from those asked for."""
    import re
    used = re.search(r"\bthreads (\d+)", row.get("info", ""))
    asked = str(row.get("threads", "")).split(">")[0]
    return row["label"] + (f" (uses {used.group(1)})" if used and asked.isdigit() and used.group(1) != asked else "")


def write_chart(report: dict, path: Path) -> str:
    from benchmarks.charts import ChartUnavailable, latency_bars, new_figure, save
    models = [m for m in report["models"] if any("median_ms" in r for r in m["rows"])]
    if not models:
        return "chart not written: nothing was timed"
    try:
        fig, axes = new_figure(len(models), width=5.0, height=4.2)
    except ChartUnavailable as e:
        return str(e)
    for ax, m in zip(axes, models):
        rows = [r for r in m["rows"] if "median_ms" in r]
        latency_bars(ax, [_chart_label(r) for r in rows], [r["median_ms"] for r in rows],
                     colors=["tab:gray" if r["status"] != "ok" else "tab:red" if r["peer"].startswith("fxc")
                             else "tab:blue" for r in rows],
                     mins=[r["min_ms"] for r in rows],
                     notes=[" WRONG" if r["status"] != "ok" else "" for r in rows])
        ax.set_title(f"{m['model']} b1 fp32", fontsize=9)
        ax.tick_params(axis="y", labelsize=7)
    failed = sorted({r["label"] for m in report["models"] for r in m["rows"] if "median_ms" not in r})
    meta = report["meta"]
    save(fig, path, f"In headless Chromium {meta['chromium']} on {meta['cpu']} ({meta['cores_available']} cores, load "
                    f"average {meta['load_average_start']:.0f}), {meta['date_utc'][:10]}; gray: wrong output"
                    + ("; some rows from reruns (see the JSON)" if len(meta.get("merged_from", ())) > 1 else ""),
         footer=("not timed (failed): " + ", ".join(failed)) if failed else "")
    return f"chart: {path}"


def merge_reports(paths: list) -> dict:
    """Earlier runs' reports as one: the first file's meta, rows keyed by (model, label), later files winning."""
    reports = [json.loads(Path(p).read_text()) for p in paths]
    models: dict = {}
    for rep in reports:
        for m in rep["models"]:
            rows = models.setdefault(m["model"], {})
            # keyed by label: fxc's wasm rows at 1 and 2 threads are one peer
            rows.update({r.get("label") or r["peer"]: r for r in m["rows"]})
    meta = dict(reports[0]["meta"], merged_from=[str(p) for p in paths])
    return {"meta": meta, "models": [{"model": k, "rows": list(v.values())} for k, v in models.items()]}


def main(argv=None) -> int:
    args = parse_args(argv)
    sys.path.insert(0, str(ROOT))
    import tempfile
    if args.from_json:
        report = merge_reports([p for p in args.from_json.split(",") if p])
        for m in report["models"]:
            print(format_table(m["model"], m["rows"]) + "\n")
        print(write_chart(report, Path(args.chart or "browser-merged.png")))
        return 0

    from benchmarks.figure3 import cpu_name
    from fxc.runtime.store import atomic_write
    if args.fxc_worker:
        prep = prepare_model(args.models, None)
        print(WORKER_TAG + json.dumps(run_fxc(args.fxc_worker, prep, args)), flush=True)
        return 0
    if not (WEB / "node_modules" / "onnxruntime-web").is_dir():
        print("the browser peers are not installed: run `bash scripts/bench.sh --browser` (npm install in "
              "benchmarks/web)", file=sys.stderr)
        return 2
    from playwright.sync_api import sync_playwright
    peers = [p.strip() for p in args.peers.split(",") if p.strip()]
    unknown = [p for p in peers if p not in PEERS]
    if unknown:
        print(f"unknown peer(s) {unknown}; choose from {', '.join(PEERS)}", file=sys.stderr)
        return 2
    folder = Path(tempfile.mkdtemp(prefix="fxc-browser-peers-"))
    server = serve(folder)
    base = f"http://127.0.0.1:{server.server_address[1]}"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    json_path = out / f"browser-{stamp}.json"
    with sync_playwright() as pw:
        browser = launch_browser(pw)
        meta = {"command": " ".join(["python -m benchmarks.browser_peers"] + (sys.argv[1:] if argv is None
                                                                              else list(argv))),
                "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "cpu": cpu_name(),
                "cores_available": len(os.sched_getaffinity(0)), "chromium": browser.version,
                "load_average_start": os.getloadavg()[0], "runs": args.runs, "budget_s": args.budget,
                "packages": _npm_versions()}
        print(f"browser peers: Chromium {meta['chromium']}, {meta['cpu']}, {meta['cores_available']} cores, load "
              f"average {meta['load_average_start']:.1f}; {', '.join(f'{k} {v}' for k, v in meta['packages'].items())}",
              flush=True)
        report = {"meta": meta, "models": []}
        for model in [m.strip() for m in args.models.split(",") if m.strip()]:
            prep = prepare_model(model, folder)
            rows = []
            for name in peers:
                rows.append(run_page_peer(browser, base, name, model, prep, args))
                _progress(model, rows[-1])
            for target in [t.strip() for t in args.fxc_targets.split(",") if t.strip()]:
                rows.append(run_fxc_subprocess(model, target, args))
                _progress(model, rows[-1])
            report["models"].append({"model": model, "rows": rows})
            atomic_write(json_path, (json.dumps(report, indent=1) + "\n").encode())
            print("\n" + format_table(model, rows) + "\n", flush=True)
        browser.close()
    server.shutdown()
    shutil.rmtree(folder, ignore_errors=True)
    meta["load_average_end"] = os.getloadavg()[0]
    atomic_write(json_path, (json.dumps(report, indent=1) + "\n").encode())
    print(f"results: {json_path}")
    for path in [out / f"browser-{stamp}.png"] + ([Path(args.chart)] if args.chart else []):
        print(write_chart(report, path))
    return 0


def _progress(model: str, row: dict) -> None:
    what = (f"median {row['median_ms']:.1f} ms over {row['runs']}, max|err| {row.get('max_abs_err', float('nan')):.1e}"
            if "median_ms" in row else "")
    print(f"  {model} {row['label']}: {row['status']} {what} {row['error']}"[:300], flush=True)


def _npm_versions() -> dict:
    got = {}
    for pkg in ("@tensorflow/tfjs", "@tensorflow/tfjs-backend-wasm", "onnxruntime-web"):
        try:
            got[pkg] = json.loads((WEB / "node_modules" / pkg / "package.json").read_text())["version"]
        except (OSError, ValueError, KeyError):
            got[pkg] = "?"
    return got


if __name__ == "__main__":
    sys.exit(main())
