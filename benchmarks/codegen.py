"""Every generated program of the reference models, to compare two trees' code target by target.

    python -m benchmarks.codegen OUT_DIR --models resnet18,mobilenet_v2,bert \
        --targets "llvm;llvm -mcpu=haswell;opencl;opengl;webgl;webgpu;wasm"

Writes OUT_DIR/<model>@<target>.src (the module's program: LLVM IR, OpenCL C, GLSL, WGSL, the wasm program), .plan
(its kernels' lines and launch plan) and, for a CPU library, .s (`objdump -d` of it, addresses and all), and prints
their sha256 prefixes. Run it from each tree (its checkout first on PYTHONPATH) with the same arguments and `cmp` the
files: kernels' variable numbers count across the process, so compare runs of the same model and target list. The
module cache is bypassed (FXC_MODULE_CACHE=0) so every model is built.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
from pathlib import Path


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def dump(out_dir: Path, name: str, target: str) -> None:
    import torch

    import fxc
    from fxc.testing.models import example_inputs, make_model
    torch.manual_seed(0)
    with torch.no_grad():
        module = fxc.from_torch(make_model(name), example_inputs(name, batch=1, seq_len=64), target=target).module
    stem = str(out_dir / f"{name}@{target.replace(' ', '_')}")
    src = module.source
    plan = "\n".join(map(str, module.kernels)) + "\n" + "\n".join(map(repr, module.plan))
    Path(stem + ".src").write_text(src)
    Path(stem + ".plan").write_text(plan)
    line = f"{name:<13} {target:<22} src {_sha(src)}  plan {_sha(plan)}"
    if getattr(module, "library", None):
        asm = subprocess.run(["objdump", "-d", "--no-show-raw-insn", str(module.library)], capture_output=True,
                             text=True, check=True).stdout
        asm = "\n".join(x for x in asm.splitlines() if "file format" not in x)     # names the file
        Path(stem + ".s").write_text(asm)
        line += f"  asm {_sha(asm)}"
    print(line, flush=True)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("out_dir")
    p.add_argument("--models", default="resnet18,mobilenet_v2,bert")
    p.add_argument("--targets", default="llvm", help="';'-separated")
    a = p.parse_args(argv)
    os.environ["FXC_MODULE_CACHE"] = "0"
    out = Path(a.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for name in a.models.split(","):
        for t in filter(None, (t.strip() for t in a.targets.split(";"))):
            dump(out, name, t)


if __name__ == "__main__":
    main()
