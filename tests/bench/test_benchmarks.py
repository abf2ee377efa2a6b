"""Smoke test of the benchmark harness (benchmarks/run.py): --quick, eager + fxc, one model; checks the JSON."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _run_harness(tmp_path, *args):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    p = subprocess.run([sys.executable, "-m", "benchmarks.run", "--out", str(tmp_path), *args],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    files = sorted(tmp_path.glob("bench-*.json"))
    assert len(files) == 1, list(tmp_path.iterdir())
    return json.loads(files[0].read_text()), p.stdout


@pytest.mark.slow
def test_quick_run_eager_and_fxc(tmp_path):
    report, out = _run_harness(tmp_path, "--quick", "--models", "resnet18:1", "--peers", "eager,fxc_aot",
                               "--runs", "3", "--no-subprocess-compile")
    meta = report["meta"]
    assert meta["threads"] >= 1 and "threads" in meta["notes"][0]
    [wl] = report["workloads"]
    assert (wl["model"], wl["batch"], wl["dtype"]) == ("resnet18", 1, "float32")
    assert 3.0 < wl["gflop"] < 4.5                      # ResNet-18 at 224x224: ~3.6 GFLOP (2 per MAC)
    assert set(wl["peers"]) == {"eager", "fxc_aot", "fxc"}     # fxc_aot: fxc.from_torch, weights baked in
    for name, r in wl["peers"].items():
        assert r["available"], r
        assert r["runs"] == 3
        assert 0 < r["min_ms"] <= r["median_ms"]
        assert r["compile_s"] > 0 and r["gflops"] > 0
        assert r["max_abs_err"] < 1e-3
    assert wl["peers"]["eager"]["max_abs_err"] == 0.0
    assert wl["peers"]["fxc"]["time_vs_fxc"] == 1.0
    eager = wl["peers"]["eager"]
    assert eager["time_vs_fxc"] == pytest.approx(eager["median_ms"] / wl["peers"]["fxc"]["median_ms"])
    mem = wl["fxc_memory"]
    assert 0 < mem["workspace_bytes"] <= mem["intermediate_bytes"], mem
    assert "PyTorch eager" in out and "time/fxc" in out and "fxc.from_torch (frozen)" in out
    try:
        import matplotlib  # noqa: F401
        assert len(list(tmp_path.glob("bench-*.png"))) == 1
    except ImportError:
        assert "matplotlib is not installed" in out


def test_compile_time_subprocess_and_unavailable_peer(tmp_path):
    # the cold-process compile measurement, on the cheapest peer; a peer without a twin is reported, not fatal
    sys.path.insert(0, str(ROOT))
    from benchmarks.run import compile_in_subprocess, parse_args
    args = parse_args(["--quick"])
    res = compile_in_subprocess("eager", "resnet18", 1, args, tmp_path)
    assert res.get("compile_cold_s", 0) > 0 and "compile_warm_s" not in res, res
    res = compile_in_subprocess("mxnet", "bert", 1, args, tmp_path)
    assert "compile_cold_s" not in res and "compile_cold_error" in res, res


def test_harness_takes_the_zoo_models_at_batch_1():
    """`--models efficientnet:1` (any zoo name) meets the peers with the zoo's own model and input; another batch
    is refused by name rather than run on a batch-1 input."""
    sys.path.insert(0, str(ROOT))
    import torch

    from benchmarks.run import make_workload, parse_workloads
    from fxc.testing.zoo import make_zoo_model, zoo_inputs
    assert parse_workloads("gpt,unet:1", False) == [("gpt", 1), ("unet", 1)]
    model, inputs = make_workload("gpt", 1, 128)
    ref_model, ref_inputs = make_zoo_model("gpt"), zoo_inputs("gpt")
    assert len(inputs) == len(ref_inputs) and all(torch.equal(a, b) for a, b in zip(inputs, ref_inputs))
    with torch.inference_mode():
        assert torch.equal(model(*inputs), ref_model(*ref_inputs))
    with pytest.raises(SystemExit, match="batch 1 only"):
        make_workload("gpt", 8, 128)


def test_winograd_layers_times_every_form(capsys, monkeypatch):
    """benchmarks/winograd_layers.py builds each form of a 3x3 conv as asked (a wrong form is left out, not timed
    as another) and compares every output with the float32 direct kernel's."""
    from benchmarks import winograd_layers
    monkeypatch.setenv("FXC_MODULE_CACHE", "0")        # what the tool would set for itself, undone after the test
    monkeypatch.setattr(sys, "argv", ["winograd_layers", "--runs", "2", "1x64x64x14x14"])
    winograd_layers.main()
    line = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("1x64x64x14x14:"))
    cells = dict((c.split()[0].rstrip("*"), c) for c in line.split(": ", 1)[1].split(" | "))
    from fxc.backends.llvm.compile import target_machine
    bf16 = "+avx512bf16" in target_machine()[3].split(",")
    assert list(cells) == ["direct", "F4", "F2"] + (["direct-bf16", "F2-bf16"] if bf16 else []), line
    errs = {f: float(c.split("err ")[1]) for f, c in cells.items()}
    assert errs["direct"] == 0 and 0 < errs["F4"] < 1e-4 and 0 < errs["F2"] < 1e-4
    if bf16:
        assert 1e-4 < errs["direct-bf16"] < 2e-2 and 1e-4 < errs["F2-bf16"] < 2e-2


def test_dynamo_alone_peer_computes_nothing():
    """The `dynamo_alone` peer (the per-call floor under every torch.compile backend) returns eager's result of the
    first call and runs no model code after it: the same tensor object comes back, whatever the input holds."""
    import torch
    sys.path.insert(0, str(ROOT))
    from benchmarks.peers import build_dynamo_alone
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.ReLU())
    x = torch.randn(2, 8)
    runner = build_dynamo_alone(model, [x], torch.get_num_threads())
    first = runner.run()
    with torch.no_grad():
        assert torch.equal(first, model(x))
    x.zero_()                        # a compute would now give relu(bias); the floor peer hands back the same object
    assert runner.run() is first
    torch._dynamo.reset()


def test_profile_kernels_cold(capsys, monkeypatch):
    """benchmarks/profile_kernels.py --cold: caches flushed and an idle spell before each run, medians per kernel."""
    from benchmarks import profile_kernels
    monkeypatch.setattr(sys, "argv", ["profile_kernels", "--model", "bert", "--runs", "3", "--top", "3", "--cold"])
    profile_kernels.main()
    out = capsys.readouterr().out
    assert "its median over 3 runs (caches flushed, then 5 ms idle, before each)" in out, out
    assert "sum of per-kernel medians" in out and "more kernels" in out, out


def test_profile_kernels_scaling(capsys, monkeypatch):
    """benchmarks/profile_kernels.py --scaling: one module at 1 thread and at 2, per kernel the medians, minima and the
    time the split loses (2-thread median - 1-thread median / 2), ranked by it; the rows consistent with their own
    columns (the figures themselves are the host's). --int8 takes the conv nets only."""
    from benchmarks import profile_kernels
    monkeypatch.setattr(sys, "argv", ["profile_kernels", "--model", "bert", "--runs", "3", "--top", "4", "--scaling"])
    profile_kernels.main()
    out = capsys.readouterr().out
    lines = out.splitlines()
    head = next(i for i, ln in enumerate(lines) if ln.split()[:2] == ["lost", "us"])
    assert "3 calls at each thread count" in out and "2 threads" in out, out
    rows = [ln.split() for ln in lines[head + 1:head + 5]]
    assert len(rows) == 4 and all(r[6].startswith("k") for r in rows), out
    lost = [float(r[0]) for r in rows]
    assert lost == sorted(lost, reverse=True), out
    for r in rows:
        one, two = float(r[1]), float(r[3])
        assert abs(float(r[0]) - (two - one / 2)) < 0.11 and float(r[2]) <= one + 0.05 and float(r[4]) <= two + 0.05, r
    monkeypatch.setattr(sys, "argv", ["profile_kernels", "--model", "bert", "--int8", "--scaling"])
    with pytest.raises(SystemExit):
        profile_kernels.main()
    assert "--int8 takes one of resnet18, mobilenet_v2" in capsys.readouterr().err


def test_training_benchmark_checks_gradients(capsys):
    """benchmarks/training.py: one timed step of the BERT-style encoder, eager and fxc, gradients against float64."""
    from benchmarks import training
    assert training.main(["--models", "bert", "--steps", "1", "--peers", "eager,fxc"]) == 0
    out = capsys.readouterr().out
    rows = {ln.split()[0]: ln.split() for ln in out.splitlines() if ln.split()[:1] in (["eager"], ["fxc"])}
    assert set(rows) == {"eager", "fxc"}, out
    assert float(rows["fxc"][5]) == 1.0                 # step/fxc of fxc itself
    for r in rows.values():
        assert 0 < float(r[4]) and float(r[6]) < 1e-4   # step time; grad err of both against float64


def test_target_option_reaches_the_fxc_peers(monkeypatch):
    """benchmarks.run --target compiles the fxc peers for that CPU (here haswell code, which this x86 host runs) and
    leaves the other peers alone; the result still matches eager."""
    import torch

    import fxc
    sys.path.insert(0, str(ROOT))
    from benchmarks.peers import peers_for
    from benchmarks.run import parse_args, peer_builder
    assert parse_args(["--target", "llvm -mcpu=haswell"]).target == "llvm -mcpu=haswell"
    table = peers_for("resnet18")
    assert peer_builder(table["eager"], "llvm -mcpu=haswell") is table["eager"].build
    assert peer_builder(table["fxc"], None) is table["fxc"].build
    seen = []
    real = fxc.from_torch
    monkeypatch.setattr(fxc, "from_torch", lambda *a, **k: seen.append(k["target"]) or real(*a, **k))
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.ReLU())
    x = torch.randn(2, 8)
    runner = peer_builder(table["fxc_aot"], "llvm -mcpu=haswell")(model, [x], 1)
    assert seen == ["llvm -mcpu=haswell"]
    with torch.no_grad():
        torch.testing.assert_close(runner.run(), model(x))
