"""The LLVM IR and the disassembly of a reference model's kernel library, to compare two trees' code for a target.

    python -m benchmarks.llvm_ir OUT_DIR --models resnet18,mobilenet_v2,bert --targets "llvm;llvm -mcpu=haswell"

Writes OUT_DIR/<model>@<target>.ll (the module's IR as the build links it) and .s (`objdump -d` of the library,
addresses and all) and prints their sha256 prefixes; run it from each tree (its checkout on PYTHONPATH) and `cmp`
the files: identical IR on the same target machine is identical code. The module cache is bypassed
(FXC_MODULE_CACHE=0) so every model is built.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
from pathlib import Path


def dump(out_dir: Path, name: str, target: str) -> None:
    import torch

    import fxc
    from fxc.backends.llvm import compile as llvm
    from fxc.testing.models import example_inputs, make_model
    seen = []
    build_library = llvm.build_library

    def keep(ir_text, queue=None, target=None):
        lib, compiled = build_library(ir_text, queue, target)
        seen.append((ir_text, lib))
        return lib, compiled
    llvm.build_library = keep
    try:
        with torch.no_grad():
            fxc.from_torch(make_model(name), example_inputs(name, batch=1, seq_len=64), target=target)
    finally:
        llvm.build_library = build_library
    for i, (ir, lib) in enumerate(seen):
        stem = out_dir / f"{name}@{target.replace(' ', '_')}{'' if i == 0 else f'.{i}'}"
        asm = subprocess.run(["objdump", "-d", "--no-show-raw-insn", str(lib)], capture_output=True, text=True,
                             check=True).stdout
        asm = "\n".join(line for line in asm.splitlines() if "file format" not in line)     # names the file
        stem.with_suffix(".ll").write_text(ir)
        stem.with_suffix(".s").write_text(asm)
        print(f"{name:<13} {target:<22} ir {hashlib.sha256(ir.encode()).hexdigest()[:16]}  "
              f"asm {hashlib.sha256(asm.encode()).hexdigest()[:16]} ({len(asm.splitlines())} lines)")


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
