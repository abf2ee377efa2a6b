"""The benchmark harnesses' own logic, without timing a model: charts start at zero on a linear axis (issue 28: bars on
a log axis that starts near the smallest value make a 1.2x gap look like 10x), Figure 3's table and round-robin, and
the browser peers' weight export (a plain binary the TF.js twins read)."""
import json
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def _bar_axes(monkeypatch):
    """Capture the axes a harness draws on (save() closes the figure)."""
    from benchmarks import charts
    seen = []
    real_save = charts.save

    def save(fig, path, title="", footer=""):
        seen.extend(fig.axes)
        real_save(fig, path, title, footer)
    monkeypatch.setattr(charts, "save", save)
    return seen


def test_latency_bars_linear_from_zero(tmp_path):
    from benchmarks.charts import latency_bars, new_figure, save
    fig, [ax] = new_figure(1)
    latency_bars(ax, ["a", "b"], [100.0, 120.0], mins=[90.0, 110.0])
    assert ax.get_xscale() == "linear" and ax.get_xlim()[0] == 0
    widths = sorted(p.get_width() for p in ax.patches)
    assert widths == [100.0, 120.0]                  # a 1.2x gap is drawn as 1.2x
    save(fig, tmp_path / "c.png", "t")
    assert (tmp_path / "c.png").stat().st_size > 1000


def test_run_chart_is_linear_from_zero(tmp_path, monkeypatch):
    from benchmarks.run import write_chart
    axes = _bar_axes(monkeypatch)
    peers = {"eager": {"label": "PyTorch eager", "median_ms": 12.0, "time_vs_fxc": 1.2},
             "fxc": {"label": "fxc", "median_ms": 10.0, "time_vs_fxc": 1.0},
             "tvm": {"label": "TVM", "median_ms": None}}
    report = {"meta": {"threads": 2, "cpu": "a CPU"}, "workloads": [{"model": "resnet18", "batch": 1, "peers": peers}]}
    assert write_chart(report, tmp_path / "b.png").startswith("chart:")
    [ax] = axes
    assert ax.get_xscale() == "linear" and ax.get_xlim()[0] == 0
    assert [t.get_text() for t in ax.get_yticklabels()] == ["PyTorch eager", "fxc"]


def test_figure3_table_chart_and_round_robin(tmp_path, monkeypatch):
    from benchmarks.figure3 import Row, candidate_targets, format_table, time_round_robin, write_chart
    from fxc.target import KINDS
    assert candidate_targets() == list(KINDS) and candidate_targets("llvm, opengl") == ["llvm", "opengl"]
    calls = []
    runners = {"llvm": lambda: calls.append("llvm"), "opengl": lambda: calls.append("opengl")}
    rows = {n: Row(n, device=f"{n} device") for n in runners}
    time_round_robin(runners, rows, runs=3, warmup=1, budget=60)
    assert calls.count("llvm") == calls.count("opengl") == 4 and calls[2:4] == ["llvm", "opengl"]
    assert calls[4:6] == ["opengl", "llvm"]             # the order rotates each round
    assert all(len(r.times_ms) == 3 and not r.capped for r in rows.values())
    rows["llvm"].times_ms = [40.0, 30.0, 50.0]
    rows["wasm"] = Row("wasm", status="not built", reason="TargetError: no device backend yet")
    table = format_table(list(rows.values()), "resnet18")
    line = next(x for x in table.splitlines() if x.startswith("llvm"))
    assert line.split()[1:5] == ["40.0", "30.0", "40.0", "3"] and "llvm device" in line
    assert "wasm       not built: TargetError: no device backend yet" in table
    axes = _bar_axes(monkeypatch)
    assert write_chart(list(rows.values()), tmp_path / "f.png", "t").startswith("chart:")
    [ax] = axes
    assert ax.get_xscale() == "linear" and ax.get_xlim()[0] == 0
    assert sorted(p.get_width() for p in ax.patches) == sorted([40.0, rows["opengl"].stats()["median_ms"]])


def test_round_robin_budget_keeps_five_calls():
    import time

    from benchmarks.figure3 import Row, time_round_robin
    rows = {"slow": Row("slow")}
    time_round_robin({"slow": lambda: time.sleep(0.002)}, rows, runs=50, warmup=0, budget=0.001)
    assert len(rows["slow"].times_ms) == 5 and rows["slow"].capped


def test_weight_export_is_plain_binary(tmp_path):
    import torch

    from benchmarks.browser_peers import export_weights
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, bias=False), torch.nn.BatchNorm2d(4), torch.nn.Conv2d(4, 4, 3,
                              groups=4), torch.nn.Flatten(), torch.nn.Linear(4, 2))
    export_weights(net, tmp_path / "w")
    manifest = json.loads((tmp_path / "w.json").read_text())
    blob = np.fromfile(tmp_path / "w.bin", dtype="<f4")
    got = {e["name"]: blob[e["offset"]:e["offset"] + int(np.prod(e["shape"]))].reshape(e["shape"]) for e in manifest}
    w0 = net[0].weight.detach().numpy()
    np.testing.assert_array_equal(got["0.weight"], w0.transpose(2, 3, 1, 0))           # OIHW -> HWIO
    np.testing.assert_array_equal(got["2.weight"], net[2].weight.detach().numpy().transpose(2, 3, 0, 1))  # HWC1
    np.testing.assert_array_equal(got["4.weight"], net[4].weight.detach().numpy().T)   # (in, out)
    np.testing.assert_array_equal(got["1.running_var"], net[1].running_var.numpy())
    assert "1.num_batches_tracked" not in got


def test_peer_rows_checked_against_eager_and_goal_ratios():
    from benchmarks.browser_peers import _row, format_table
    ref = np.linspace(-2, 2, 10)
    ok = _row("tfjs_webgl", "TF.js WebGL", "-", [30.0, 10.0, 20.0], ref + 1e-6, ref, "SwiftShader")
    assert ok["status"] == "ok" and ok["median_ms"] == 20.0 and ok["min_ms"] == 10.0
    assert ok["max_abs_err"] == pytest.approx(1e-6)
    bad = _row("ort_webgl", "ORT-web WebGL", "-", [5.0], ref + 0.01, ref, "")
    assert bad["status"] == "WRONG" and "0.005 of the output's scale" in bad["error"]
    short = _row("ort_webgl", "ORT-web WebGL", "-", [5.0], ref[:3], ref, "")
    assert short["status"] == "WRONG" and "3 output values" in short["error"]
    fxc = _row("fxc_webgl", "fxc webgl", "default", [10.0], ref, ref, "")
    failed = _row("fxc_wasm", "fxc wasm", "default", [], None, None, "", "not built: TargetError: no backend")
    table = format_table("resnet18", [ok, bad, fxc, failed])
    assert "tfjs_webgl / fxc_webgl: 2.00 (> 1: fxc faster)" in table
    assert "ort_wasm_1t / fxc_wasm: no ratio (fxc_wasm: failed, ort_wasm_1t: not run)" in table
    assert "[WRONG:" in table
    # wasm compared at the same threads, whatever the rows' order: 1 with 1, 2 with 2
    ort1 = _row("ort_wasm_1t", "ORT-web wasm, 1 thread", 1, [60.0], ref, ref, "")
    ort2 = _row("ort_wasm_2t", "ORT-web wasm, 2 threads", 2, [40.0], ref, ref, "")
    fxc1 = _row("fxc_wasm", "fxc wasm -num-threads=1", "1", [30.0], ref, ref, "")
    fxc2 = _row("fxc_wasm", "fxc wasm -num-threads=2", "2", [10.0], ref, ref, "")
    table = format_table("resnet18", [ort1, ort2, fxc1, fxc2])
    assert "ort_wasm_1t / fxc_wasm (1 threads): 2.00" in table and "ort_wasm_2t / fxc_wasm (2 threads): 4.00" in table


def test_peer_server_isolates_the_page(tmp_path):
    """The pages are served on 127.0.0.1 with COOP/COEP (wasm threads need crossOriginIsolated) and wasm's MIME."""
    import urllib.request

    from benchmarks.browser_peers import serve
    (tmp_path / "m.wasm").write_bytes(b"\0asm")
    server = serve(tmp_path)
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}"
        with urllib.request.urlopen(f"{base}/peers.html") as r:
            assert r.headers["Cross-Origin-Opener-Policy"] == "same-origin"
            assert r.headers["Cross-Origin-Embedder-Policy"] == "require-corp"
            assert b"peers.js" in r.read()
        with urllib.request.urlopen(f"{base}/models/m.wasm") as r:
            assert r.headers["Content-Type"] == "application/wasm" and r.read() == b"\0asm"
    finally:
        server.shutdown()
        server.server_close()


def test_merge_reports_later_rows_win(tmp_path):
    from benchmarks.browser_peers import merge_reports
    a = {"meta": {"cpu": "x"}, "models": [{"model": "resnet18", "rows": [{"peer": "p", "status": "failed"},
                                                                           {"peer": "q", "status": "ok"}]}]}
    b = {"meta": {"cpu": "y"}, "models": [{"model": "resnet18", "rows": [{"peer": "p", "status": "ok"}]},
                                          {"model": "bert", "rows": [{"peer": "p", "status": "ok"}]}]}
    (tmp_path / "a.json").write_text(json.dumps(a))
    (tmp_path / "b.json").write_text(json.dumps(b))
    got = merge_reports([tmp_path / "a.json", tmp_path / "b.json"])
    assert got["meta"]["cpu"] == "x" and [m["model"] for m in got["models"]] == ["resnet18", "bert"]
    assert [(r["peer"], r["status"]) for r in got["models"][0]["rows"]] == [("p", "ok"), ("q", "ok")]
    wasm = [{"peer": "fxc_wasm", "label": f"fxc wasm -num-threads={n}", "status": "ok"} for n in (1, 2)]
    (tmp_path / "c.json").write_text(json.dumps({"meta": {}, "models": [{"model": "bert", "rows": wasm}]}))
    got = merge_reports([tmp_path / "c.json"])
    assert [r["label"] for r in got["models"][0]["rows"]] == [r["label"] for r in wasm]     # both threads kept


def test_chart_label_names_the_threads_used():
    from benchmarks.browser_peers import _chart_label
    tfjs = {"label": "TF.js WASM, 2 threads", "threads": "2>1", "info": "backend wasm, threads 1"}
    assert _chart_label(tfjs) == "TF.js WASM, 2 threads (uses 1)"
    assert _chart_label({"label": "ORT", "threads": 2, "info": "ort 1.30.0, threads 2"}) == "ORT"


def test_fxc_row_from_child_process_names_the_failure():
    """fxc's browser rows run in a child (killed with its browser after --timeout); a target that cannot be built
    comes back as a failed row with fxc's error, not as a crash of the harness."""
    from benchmarks.browser_peers import parse_args, run_fxc_subprocess
    args = parse_args(["--runs", "1", "--timeout", "300"])
    row = run_fxc_subprocess("mobilenet_v2", "llvm -mcpu=no-such-cpu", args)
    assert row["status"] == "failed" and "TargetError" in row["error"] and "no-such-cpu" in row["error"], row
