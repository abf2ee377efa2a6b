"""The `fxc` command line: compile a PyTorch model to a deploy artifact, run it, inspect it.

    fxc compile model.py:make_model --input-shape 1,3,224,224 -o model.fxc [--target llvm]
    fxc compile model.onnx -o model.fxc              # input shapes from the model (--input-shape where it names dims)
    fxc run model.fxc --input x.npy [-o y.npy]
    fxc inspect model.fxc
    fxc extract model.fxc model_dir        # verified parts, for C programs (fxc_init("model_dir"))

`run`, `inspect` and `extract` use only the deploy runtime (numpy + ctypes): they never import torch.
"""
from __future__ import annotations

import argparse
import io
import json
import sys
import time

import numpy as np

from .cache import atomic_write
from .errors import FxcError


def _shape(text: str) -> tuple:
    try:
        return tuple(int(s) for s in text.split(",") if s.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"bad shape {text!r}; write it like 1,3,224,224") from None


def _load_factory(ref: str):
    """'path/to/file.py:name' or 'package.module:name' -> the object."""
    import importlib
    import importlib.util
    from pathlib import Path
    mod_ref, sep, name = ref.rpartition(":")
    if not sep or not mod_ref or not name:
        raise FxcError(f"model reference {ref!r} should look like model.py:make_model or pkg.module:make_model")
    if mod_ref.endswith(".py") or Path(mod_ref).is_file():
        spec = importlib.util.spec_from_file_location(Path(mod_ref).stem, mod_ref)
        if spec is None or not Path(mod_ref).is_file():
            raise FxcError(f"no such model file {mod_ref!r}")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    else:
        module = importlib.import_module(mod_ref)
    if not hasattr(module, name):
        raise FxcError(f"{mod_ref} has no {name!r}")
    return getattr(module, name)


def _compile_onnx(args) -> int:
    """`fxc compile model.onnx`: input shapes from the model, or --input-shape for the dims it leaves open."""
    from .capture.onnx import from_onnx
    from .export_artifact import export
    t0 = time.perf_counter()
    compiled = from_onnx(args.model, shapes=args.input_shape, target=args.target)
    path = export(compiled, args.output)
    print(f"compiled {args.model} for {args.target} in {time.perf_counter() - t0:.1f} s -> {path}")
    _print_signature({"inputs": [vars(s) for s in compiled.inputs], "outputs": [vars(s) for s in compiled.outputs]})
    return 0


def cmd_compile(args) -> int:
    if args.model.endswith(".onnx"):
        return _compile_onnx(args)
    if not args.input_shape:
        raise FxcError("give --input-shape once per input of the model (e.g. --input-shape 1,3,224,224)")
    import torch

    from .capture.torch_aot import from_torch
    from .export_artifact import export
    dtypes = args.input_dtype or ["float32"]
    if len(dtypes) == 1:
        dtypes = dtypes * len(args.input_shape)
    if len(dtypes) != len(args.input_shape):
        raise FxcError(f"give one --input-dtype, or one per --input-shape ({len(args.input_shape)})")
    model = _load_factory(args.model)()
    if isinstance(model, torch.nn.Module):
        model.eval()
    gen = torch.Generator().manual_seed(0)
    inputs = []
    for shape, dt in zip(args.input_shape, dtypes):
        dtype = getattr(torch, dt, None)
        if not isinstance(dtype, torch.dtype):
            raise FxcError(f"unknown dtype {dt!r}")
        if dtype.is_floating_point:
            inputs.append(torch.randn(shape, generator=gen).to(dtype))
        else:
            inputs.append(torch.randint(0, 2 if dtype == torch.bool else 10, shape, generator=gen).to(dtype))
    t0 = time.perf_counter()
    compiled = from_torch(model, tuple(inputs), target=args.target)
    path = export(compiled, args.output)
    print(f"compiled {args.model} for {args.target} in {time.perf_counter() - t0:.1f} s -> {path}")
    _print_signature({"inputs": [vars(s) for s in compiled.inputs], "outputs": [vars(s) for s in compiled.outputs]})
    return 0


def _print_signature(m: dict) -> None:
    for kind in ("inputs", "outputs"):
        for s in m[kind]:
            print(f"  {kind[:-1]:<6} {s['name']}: {s['dtype']}{list(s['shape'])}")


def cmd_run(args) -> int:
    from .runtime.artifact import load
    module = load(args.artifact)
    arrays = []
    for p in args.input:
        try:
            arrays.append(np.load(p, allow_pickle=False))
        except (OSError, ValueError) as e:
            raise FxcError(f"cannot read input {p}: {e}") from None
    outs = module(*arrays)
    outs = outs if isinstance(outs, list) else [outs]
    if args.output and len(args.output) != len(outs):
        raise FxcError(f"the model has {len(outs)} output(s); give -o once per output")
    if args.repeat > 1:
        t0 = time.perf_counter()
        for _ in range(args.repeat):
            module(*arrays)
        print(f"latency: {1e3 * (time.perf_counter() - t0) / args.repeat:.3f} ms (mean of {args.repeat})")
    for i, (spec, o) in enumerate(zip(module.outputs, outs)):
        if args.output:
            buf = io.BytesIO()
            np.save(buf, o, allow_pickle=False)
            atomic_write(args.output[i], buf.getvalue())
            print(f"{spec.name}: {o.dtype}{list(o.shape)} -> {args.output[i]}")
        else:
            summary = "" if o.size == 0 else (f" min {o.min():.6g} max {o.max():.6g} mean {o.mean():.6g}"
                                              if o.dtype != np.bool_ else f" true {int(o.sum())}/{o.size}")
            print(f"{spec.name}: {o.dtype}{list(o.shape)}{summary}")
    return 0


def cmd_inspect(args) -> int:
    from .runtime.artifact import read_artifact
    m, parts = read_artifact(args.artifact)
    if args.json:
        print(json.dumps(m, indent=1))
        return 0
    info = m.get("target_info", {})
    print(f"{args.artifact}: fxc artifact v{m['format_version']} (fxc {m.get('fxc_version', '?')}), all sha256 verified")
    print(f"target: {m['target']} {info.get('triple', '')} cpu={info.get('cpu', '?')} "
          f"flags={','.join(info.get('cpu_flags', [])) or '-'}")
    _print_signature(m)
    tensors = m["params"].get("tensors", [])
    print(f"params: {len(tensors)} tensors, {sum(t['nbytes'] for t in tensors)} bytes; "
          f"workspace: {m['workspace_bytes']} bytes")
    print("parts:")
    for name, p in m["parts"].items():
        print(f"  {name:<18} {p['bytes']:>10} bytes  sha256 {p['sha256'][:16]}…")
    abi = m.get("c_abi", {})
    if abi:
        print(f"C ABI ({abi.get('header')}): {abi.get('init')}; {abi.get('entry')}")
    names = {"in": [s["name"] for s in m["inputs"]], "out": [s["name"] for s in m["outputs"]]}

    def slot(kind, ix):
        return f"work+{ix}" if kind == "work" else f"const{ix}" if kind == "const" else names[kind][ix]
    kernels = m.get("kernels", [])
    print(f"plan ({len(m['plan'])} kernel calls; arguments: outputs, then inputs):")
    for i, step in enumerate(m["plan"]):
        what = kernels[i].split(":", 1)[1].strip() if i < len(kernels) else ""
        print(f"  {step['kernel']}({', '.join(slot(k, ix) for k, ix in step['args'])})  {what}")
    return 0


def cmd_extract(args) -> int:
    from .runtime.artifact import extract
    d = extract(args.artifact, args.directory)
    print(f"extracted {args.artifact} -> {d}")
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="fxc", description="fxc deep-learning compiler: deploy artifacts")
    sub = p.add_subparsers(dest="command", required=True)
    c = sub.add_parser("compile", help="compile a PyTorch model (factory returning an nn.Module) to an artifact")
    c.add_argument("model", help="model.py:factory, package.module:factory or model.onnx")
    c.add_argument("--input-shape", type=_shape, action="append",
                   help="e.g. 1,3,224,224; once per input (an ONNX model's stated shapes need none)")
    c.add_argument("--input-dtype", action="append", help="float32 (default), int64, ...; once, or once per input")
    c.add_argument("-o", "--output", required=True, help="artifact file to write")
    c.add_argument("--target", default="llvm")
    c.set_defaults(fn=cmd_compile)
    r = sub.add_parser("run", help="run an artifact on .npy inputs")
    r.add_argument("artifact")
    r.add_argument("--input", action="append", default=[], help=".npy file; once per input, in order")
    r.add_argument("-o", "--output", action="append", help=".npy file; once per output")
    r.add_argument("--repeat", type=int, default=1, help="also time this many runs")
    r.set_defaults(fn=cmd_run)
    i = sub.add_parser("inspect", help="verify an artifact and print its manifest")
    i.add_argument("artifact")
    i.add_argument("--json", action="store_true", help="print the raw manifest")
    i.set_defaults(fn=cmd_inspect)
    e = sub.add_parser("extract", help="verify an artifact and unpack its parts into a directory (for C)")
    e.add_argument("artifact")
    e.add_argument("directory")
    e.set_defaults(fn=cmd_extract)
    return p


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    try:
        return args.fn(args)
    except FxcError as e:
        print(f"fxc: error: {type(e).__name__}: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
