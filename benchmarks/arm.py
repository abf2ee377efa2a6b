"""ARM builds of the reference models: sizes and NEON share here, run times on a board through its device server.

    python -m benchmarks.arm                                # sizes and vector shares: rasp3b64, rasp3b, this host
    python -m benchmarks.arm --device tcp://raspberrypi.local:9190 --target rasp4b64 --runs 20    # times on a Pi

Here (any x86 machine with Debian's cross gcc and binutils): each model (ResNet-18 and MobileNetV2 at 224x224, BERT's
encoder at 128 tokens, batch 1) is exported for each target, and the table gives the runtime library's size (the
plain C entry point + the thread pool + the kernels, no weights: `libfxc_model.so`, and stripped), the params, the
artifact file, and the share of the hot loops' instructions that are vector (NEON; AVX on x86) instructions: the
instructions of the innermost loops (a backward branch's span that holds no other) of the kernels, counted
statically in the disassembly (aarch64-linux-gnu-objdump, arm-linux-gnueabihf-objdump, objdump).

With --device: the board runs `fxc serve-device --host 0.0.0.0` (or the cross-built server, docs/arm.md); each
model's artifact for --target is sent to it and timed there (measure_remote: --runs calls after a warm-up; median and
minimum in ms). On the board itself, with Python and PyTorch there, fxc against PyTorch is
`python -m benchmarks.run --models resnet18:1,mobilenet_v2:1,bert:1 --peers eager --threads 4`.
"""
from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import tempfile
import zipfile
from pathlib import Path

MODELS = ("resnet18", "mobilenet_v2", "bert")
TARGETS = ("rasp3b64", "rasp3b", "llvm")

# what makes an instruction a vector one, per architecture (objdump's AT&T syntax on x86)
VECTOR = {
    "aarch64": lambda op, args: bool(re.search(r"\bv\d+\.\d*[bhsd]\b|\bq\d+\b", args)),
    "arm": lambda op, args: op.startswith("v") and bool(re.search(r"\bq\d+\b|\bd\d+\[|\{d\d+", args)),
    "x86_64": lambda op, args: bool(re.search(r"%[yz]mm", args)) or ("%xmm" in args and re.search(
        r"(ps|pd)$|broadcast|^vp|^p", op) is not None),
}
BRANCH = re.compile(r"^\s*([0-9a-f]+):\s+(\S+)\s*(.*)$")


def hot_loop_share(disassembly: str, arch: str) -> tuple:
    """(vector instructions, instructions) in the innermost loops of the kernel functions (fxc_k...) of an objdump
    -d listing: a loop is the span from a backward branch's target to the branch; innermost holds no other."""
    is_vector, total, vector = VECTOR[arch], 0, 0
    for func in re.split(r"\n(?=[0-9a-f]+ <)", disassembly):
        if not re.match(r"[0-9a-f]+ <fxc_k", func):
            continue
        insns = [(int(m.group(1), 16), m.group(2), m.group(3)) for m in map(BRANCH.match, func.split("\n")) if m]
        loops, start = [], insns[0][0] if insns else 0
        for addr, op, args in insns:        # a branch back into the function (calls leave it)
            target = re.search(r"\b([0-9a-f]+) <", args)
            if target and op.startswith(("b", "j", "cb", "tb")) and start <= int(target.group(1), 16) < addr:
                loops.append((int(target.group(1), 16), addr))
        inner = [(a, b) for a, b in loops if not any((c, d) != (a, b) and a <= c and d <= b for c, d in loops)]
        for a, b in inner:
            body = [(op, args) for addr, op, args in insns if a <= addr <= b]
            total += len(body)
            vector += sum(is_vector(op, args) for op, args in body)
    return vector, total


def report(models=MODELS, targets=TARGETS) -> list:
    """One row per model and target: sizes in bytes and the hot loops' vector share."""
    import fxc
    from fxc.backends.llvm.toolchain import CROSS
    from fxc.target import Target, triple_arch
    from fxc.testing.models import example_inputs, make_model
    rows = []
    with tempfile.TemporaryDirectory() as d:
        for name in models:
            model, inputs = make_model(name), example_inputs(name, batch=1, seq_len=128)
            for target in targets:
                arch = triple_arch(Target.parse(target).triple)
                path = fxc.export(fxc.from_torch(model, inputs, target=target), Path(d) / f"{name}-{target}.fxc")
                lib, params = Path(d) / f"{name}-{target}.so", Path(d) / "params.bin"
                with zipfile.ZipFile(path) as z:
                    lib.write_bytes(z.read("libfxc_model.so"))
                    params.write_bytes(z.read("params.bin"))
                prefix = CROSS[arch].cc[:-3] if arch in CROSS and arch != triple_arch(Target.parse("llvm").triple) \
                    else ""
                listing = subprocess.run([f"{prefix}objdump", "-d", "--no-show-raw-insn", str(lib)],
                                         capture_output=True, text=True, check=True).stdout
                stripped = Path(d) / "stripped.so"
                subprocess.run([f"{prefix}strip", "-o", str(stripped), str(lib)], check=True)
                vector, total = hot_loop_share(listing, arch)
                rows.append({"model": name, "target": target, "library": lib.stat().st_size,
                             "stripped": stripped.stat().st_size, "params": params.stat().st_size,
                             "artifact": path.stat().st_size, "vector": vector, "hot": total})
    return rows


def measure_on_device(address: str, target: str, runs: int, models=MODELS) -> list:
    """(model, median ms, min ms) of each model's artifact for `target`, run on the device server at `address`."""
    import fxc
    from fxc.runtime.remote import measure_remote
    from fxc.testing.models import example_inputs, make_model
    rows = []
    with tempfile.TemporaryDirectory() as d:
        for name in models:
            model, inputs = make_model(name), example_inputs(name, batch=1, seq_len=128)
            path = fxc.export(fxc.from_torch(model, inputs, target=target), Path(d) / f"{name}.fxc")
            costs = [1e3 * c for c in measure_remote(path, address, number=1, repeat=runs)]
            rows.append((name, statistics.median(costs), min(costs)))
    return rows


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", help="tcp://host:port of a board's fxc device server: time the models there")
    p.add_argument("--target", default="rasp4b64", help="with --device: the board's target (rasp3b, rasp4b64...)")
    p.add_argument("--runs", type=int, default=20)
    p.add_argument("--models", default=",".join(MODELS))
    args = p.parse_args(argv)
    models = args.models.split(",")
    if args.device:
        print(f"{'model':14} {'median ms':>10} {'min ms':>10}   ({args.target} at {args.device})")
        for name, med, low in measure_on_device(args.device, args.target, args.runs, models):
            print(f"{name:14} {med:10.2f} {low:10.2f}")
        return
    print(f"{'model':14} {'target':10} {'library KB':>10} {'stripped KB':>11} {'params MB':>9} {'artifact MB':>11} "
          f"{'hot-loop vector share':>22}")
    for r in report(models):
        print(f"{r['model']:14} {r['target']:10} {r['library'] / 1e3:10.0f} {r['stripped'] / 1e3:11.0f} "
              f"{r['params'] / 1e6:9.1f} {r['artifact'] / 1e6:11.1f} "
              f"{r['vector']:>8} / {r['hot']:<6} = {r['vector'] / max(r['hot'], 1):4.0%}")


if __name__ == "__main__":
    main()
