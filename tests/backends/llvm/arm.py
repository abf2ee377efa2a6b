"""Scaffolding of the ARM tests: a compiled model exported for an ARM target, its extracted folder, examples/c's
run_model.c built against it with the target's cross gcc, and that program run under qemu-user (natively on an ARM
host of the same architecture) on numpy inputs: the outputs as numpy arrays."""
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

import fxc
from fxc.backends.llvm.toolchain import toolchain
from fxc.errors import TargetError
from fxc.runtime.artifact.extract import extract
from fxc.runtime.tensors import np_dtype
from fxc.target import Target

ROOT = Path(__file__).resolve().parents[3]
ARM_TARGETS = ("rasp3b64", "rasp3b")        # aarch64 (Cortex-A53) and 32-bit armv7 (NEON): qemu-aarch64, qemu-arm


def require_cross(target: str):
    """The target's toolchain with its emulator, or a skip naming what to install (a failure in CI, which installs
    them: scripts/setup.sh)."""
    try:
        chain = toolchain(Target.parse(target).triple)
        chain.emulator()
        return chain
    except TargetError as e:
        if os.environ.get("CI"):
            pytest.fail(str(e))
        pytest.skip(str(e))


def build_runner(folder: Path, target: str, exe: Path) -> Path:
    """examples/c/run_model.c built with the target's cross gcc (-Wall -Wextra -Werror) against an extracted ARM
    artifact in `folder`."""
    cc = require_cross(target).cc
    p = subprocess.run([cc, "-std=c11", "-O2", "-Wall", "-Wextra", "-Werror", str(ROOT / "examples/c/run_model.c"),
                        "-I", str(folder), "-L", str(folder), "-lfxc_model", f"-Wl,-rpath,{folder}", "-o", str(exe)],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    return exe


def export_for(compiled, target: str, tmp: Path) -> tuple:
    """(artifact path, extracted folder, run_model built for it) of a module compiled for an ARM target."""
    tmp.mkdir(parents=True, exist_ok=True)
    artifact = fxc.export(compiled, tmp / "model.fxc")
    folder = tmp / "model"
    extract(artifact, folder)
    return artifact, folder, build_runner(folder, target, tmp / "run_model")


def run_emulated(folder: Path, exe: Path, target: str, arrays: list, manifest_outputs: list, tmp: Path) -> list:
    """Run `exe` (run_model for the artifact in `folder`) under the target's emulator on numpy `arrays`: the
    outputs as numpy arrays of the manifest's output specs."""
    chain = require_cross(target)
    ins, outs = [], []
    for i, a in enumerate(arrays):
        ins.append(tmp / f"in{i}.bin")
        np.ascontiguousarray(a).tofile(ins[-1])
    outs = [tmp / f"out{i}.bin" for i in range(len(manifest_outputs))]
    p = subprocess.run([*chain.emulator(), str(exe), str(folder), *map(str, ins), *map(str, outs)],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr + p.stdout
    return [np.fromfile(o, np_dtype(s["dtype"])).reshape(s["shape"]) for o, s in zip(outs, manifest_outputs)]

