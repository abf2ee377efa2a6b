"""Scaffolding the artifact tests share (test_export, test_export_dynamic, the device targets' export tests).

Takes an exported artifact; produces runs of it in a fresh interpreter where torch, llvmlite and the compiler
cannot be imported (`BLOCKER`, `LOAD_AND_RUN`, `run_blocked`, `check_runtime_report`, `run_cli_blocked`) and the C
examples built against its extracted folder (`build_c_example`)."""
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

BLOCKER = """
import importlib.abc, sys
BLOCKED = ("torch", "llvmlite", "onnx", "mxnet", "fxc.capture", "fxc.ops", "fxc.lowering", "fxc.relay_like",
           "fxc.backends", "fxc.driver.build", "fxc.deploy.export", "fxc.testing")
class Blocker(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in BLOCKED or any(name == b or name.startswith(b + ".") for b in BLOCKED):
            raise ImportError(f"the deploy runtime imported {name}")
sys.meta_path.insert(0, Blocker())
"""

LOAD_AND_RUN = BLOCKER + """
import json, os
import numpy as np
import fxc
module = fxc.load(sys.argv[1])
outs = module(*[np.load(p) for p in sys.argv[2:-1]])
np.savez(sys.argv[-1], *(outs if isinstance(outs, list) else [outs]))
mods = sorted(n for n in sys.modules if n == "fxc" or n.startswith("fxc."))
bad = sorted(n for n in sys.modules if any(n == b or n.startswith(b + ".") for b in BLOCKED))
print(json.dumps({"modules": mods, "bytes": sum(os.path.getsize(sys.modules[n].__file__) for n in mods),
                  "blocked_loaded": bad}))
"""

CLI = BLOCKER + "import runpy; runpy.run_module('fxc.cli', run_name='__main__', alter_sys=True)"


def run_blocked(script: str, *argv, timeout: int = 300) -> dict:
    """Runs `script` (BLOCKER + ...) with `argv` in a fresh interpreter; it must succeed and print a JSON report
    last, which is returned."""
    p = subprocess.run([sys.executable, "-c", script, *map(str, argv)], capture_output=True, text=True, cwd=ROOT,
                       timeout=timeout)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout.strip().splitlines()[-1])


def check_runtime_report(report: dict, allowed=("fxc", "fxc.errors", "fxc.version")) -> None:
    """Nothing blocked was imported, and every fxc module imported is the runtime's (or one of `allowed`)."""
    assert report["blocked_loaded"] == [], report
    assert all(n in allowed or n.startswith("fxc.runtime") for n in report["modules"]), report


def run_cli_blocked(argv: list, timeout: int = 120) -> subprocess.CompletedProcess:
    """`fxc ARGV` (fxc.cli) in a fresh interpreter where torch, llvmlite and the compiler cannot be imported."""
    p = subprocess.run([sys.executable, "-c", CLI, *map(str, argv)], capture_output=True, text=True, cwd=ROOT,
                       timeout=timeout)
    assert p.returncode == 0, p.stderr
    return p


def build_c_example(name: str, folder: Path, exe: Path, strict: bool = True) -> Path:
    """examples/c/NAME.c built with gcc against an extracted artifact `folder` into `exe` (with -Wall -Wextra -Werror
    unless not `strict`)."""
    warnings = ["-Wall", "-Wextra", "-Werror"] if strict else []
    cc = subprocess.run(["gcc", "-std=c11", "-O2", *warnings, str(ROOT / f"examples/c/{name}.c"), "-I", str(folder),
                         "-L", str(folder), "-lfxc_model", f"-Wl,-rpath,{folder}", "-o", str(exe)],
                        capture_output=True, text=True)
    assert cc.returncode == 0, cc.stderr
    return exe


def onnx_with_named_batch(model, example):
    """`model` exported to ONNX (the TorchScript exporter) with input x and output y whose dim 0 is named "batch":
    the onnx ModelProto."""
    import io

    import onnx
    import torch
    f = io.BytesIO()
    torch.onnx.export(model, (example,), f, input_names=["x"], output_names=["y"],
                      dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}}, dynamo=False)
    return onnx.load_from_string(f.getvalue())
