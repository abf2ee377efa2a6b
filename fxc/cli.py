"""The `fxc` command line: compile a PyTorch model to a deploy artifact, run it, inspect it.

    fxc compile model.py:make_model --input-shape 1,3,224,224 -o model.fxc [--target llvm]
    fxc compile prefix --epoch 3 --input-shape 1,3,224,224 -o model.fxc     # an MXNet checkpoint
    fxc compile model.onnx -o model.fxc              # input shapes from the model (--input-shape where it names dims)
    fxc run model.fxc --input x.npy [-o y.npy]
    fxc inspect model.fxc
    fxc extract model.fxc model_dir        # verified parts, for C programs (fxc_init("model_dir"))
    fxc keygen signer.pem                  # an Ed25519 key pair: signer.pem (private) and signer.pub.pem
    fxc compile ... --sign-key signer.pem  # a signed artifact
    fxc verify model.fxc --key signer.pub.pem      # (or an extracted folder) signature and every sha256
    fxc run / inspect / extract ... --trusted-key signer.pub.pem   # refuse what that key did not sign
    fxc web model.fxc site/                # a webgl / webgpu artifact as a static web page (fxc/deploy/web.py)
    fxc serve site/ [--port 8000] [--seconds 600]   # serve it on 127.0.0.1 with COOP/COEP headers

`run`, `inspect`, `extract` and `verify` use only the deploy runtime (numpy + ctypes; `cryptography` for
signatures): they never import torch. Every failure is one `fxc: error:` line and exit status 1.
"""
from __future__ import annotations

import argparse
import io
import json
import sys
import time

import numpy as np

from .deploy.web import serve, write_package
from .errors import FxcError
from .runtime import store
from .runtime.artifact.extract import extract, verify_folder
from .runtime.artifact.loader import load
from .runtime.artifact.read import read_verified
from .runtime.artifact.signing import generate
from .runtime.store import atomic_write
from .tuning import cli as tune_cli


def _shape(text: str) -> tuple:
    try:
        shape = tuple(int(s) for s in text.split(",") if s.strip())
    except ValueError:
        shape = (-1,)
    if any(d < 0 for d in shape):
        raise argparse.ArgumentTypeError(f"bad shape {text!r}; write non-negative sizes like 1,3,224,224")
    return shape


def _positive(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive whole number")
    return n


def _load_factory(ref: str):
    """'path/to/file.py:name' or 'package.module:name' -> the object."""
    import importlib
    import importlib.util
    from pathlib import Path
    mod_ref, sep, name = ref.rpartition(":")
    if not sep or not mod_ref or not name:
        raise FxcError(f"model reference {ref!r} should look like model.py:make_model or pkg.module:make_model")
    try:
        if mod_ref.endswith(".py") or Path(mod_ref).exists():
            if not Path(mod_ref).is_file():
                raise FxcError(f"{mod_ref!r} is not a model file (a folder, or missing); give file.py:factory")
            spec = importlib.util.spec_from_file_location(Path(mod_ref).stem, mod_ref)
            if spec is None:
                raise FxcError(f"cannot import {mod_ref!r} as Python; give file.py:factory")
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
        else:
            module = importlib.import_module(mod_ref)
    except FxcError:
        raise
    except Exception as e:         # the user's file: a syntax error, a failing import...
        raise FxcError(f"cannot import the model {mod_ref!r}: {type(e).__name__}: {e}") from None
    if not callable(getattr(module, name, None)):
        raise FxcError(f"{mod_ref} has no {name!r} (a function that returns the model)")
    return getattr(module, name)


def _compile_onnx(args) -> int:
    """`fxc compile model.onnx`: input shapes from the model, or --input-shape for the dims it leaves open."""
    from .capture.onnx import from_onnx  # deferred: fxc.capture.onnx imports onnx, optional
    from .deploy.export import export  # deferred: run/inspect/extract/verify must not load the artifact writer
    t0 = time.perf_counter()
    compiled = from_onnx(args.model, shapes=args.input_shape, target=args.target)
    path = export(compiled, args.output, sign_key=args.sign_key)
    print(f"compiled {args.model} for {args.target} in {time.perf_counter() - t0:.1f} s -> {path}")
    _print_signature({"inputs": [vars(s) for s in compiled.inputs], "outputs": [vars(s) for s in compiled.outputs]})
    return 0


def cmd_compile(args) -> int:
    if args.model.endswith(".onnx"):
        return _compile_onnx(args)
    if not args.input_shape:
        raise FxcError("give --input-shape once per input of the model (e.g. --input-shape 1,3,224,224)")
    from .deploy.export import export  # deferred: run/inspect/extract/verify must not load the artifact writer
    dtypes = args.input_dtype or ["float32"]
    if len(dtypes) == 1:
        dtypes = dtypes * len(args.input_shape)
    if len(dtypes) != len(args.input_shape):
        raise FxcError(f"give one --input-dtype, or one per --input-shape ({len(args.input_shape)})")
    from .capture.mxnet.convert import is_checkpoint  # deferred: loads the compiler, which run/inspect must not
    if is_checkpoint(args.model):           # an MXNet checkpoint prefix (prefix-symbol.json + prefix-%04d.params)
        return _compile_mxnet(args, dtypes)
    import torch  # deferred: the CLI's run/inspect/extract/verify start without torch

    from .capture.torch.aot import from_torch  # deferred: imports torch
    factory = _load_factory(args.model)
    try:
        model = factory()
    except Exception as e:
        raise FxcError(f"the factory {args.model} raised {type(e).__name__}: {e}") from None
    if not callable(model):
        raise FxcError(f"the factory {args.model} returned a {type(model).__name__}, not a model")
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
    path = export(compiled, args.output, sign_key=args.sign_key)
    print(f"compiled {args.model} for {args.target} in {time.perf_counter() - t0:.1f} s -> {path}")
    _print_signature({"inputs": [vars(s) for s in compiled.inputs], "outputs": [vars(s) for s in compiled.outputs]})
    return 0


def _compile_mxnet(args, dtypes) -> int:
    from .capture.mxnet.convert import from_mxnet  # deferred: loads the compiler, which run/inspect must not
    from .deploy.export import export  # deferred: run/inspect/extract/verify must not load the artifact writer
    t0 = time.perf_counter()
    probe = from_mxnet(args.model, epoch=args.epoch)        # the input names, in call order
    if len(probe.input_names) != len(args.input_shape):
        raise FxcError(f"{args.model} has inputs {probe.input_names}: give one --input-shape per input")
    compiled = from_mxnet(args.model, shapes=dict(zip(probe.input_names, args.input_shape)),
                          dtype=dict(zip(probe.input_names, dtypes)), target=args.target, epoch=args.epoch)
    path = export(compiled, args.output, sign_key=args.sign_key)
    print(f"compiled {args.model} (epoch {args.epoch}) for {args.target} in {time.perf_counter() - t0:.1f} s -> {path}")
    _print_signature({"inputs": [vars(s) for s in compiled.inputs], "outputs": [vars(s) for s in compiled.outputs]})
    return 0


def _print_signature(m: dict) -> None:
    for kind in ("inputs", "outputs"):
        for s in m[kind]:
            print(f"  {kind[:-1]:<6} {s['name']}: {s['dtype']}[{', '.join(map(str, s['shape']))}]")
    for s in m.get("symbols", []):       # format 2: a dynamic build's size symbols
        print(f"  symbol {s['name']} in [{s['min']}, {s['max']}]" + (f", a multiple of {s['divisor']}"
                                                                    if s["divisor"] > 1 else ""))


def _check_output_paths(paths) -> None:
    """Each -o names a new or existing file in an existing folder (nothing is created but the file)."""
    from pathlib import Path
    for p in paths or ():
        p = Path(p)
        if p.is_dir():
            raise FxcError(f"-o {p}: is a folder; name a file such as {p / 'y.npy'}")
        if not p.parent.is_dir():
            raise FxcError(f"-o {p}: the folder {p.parent} does not exist; create it first")


def cmd_run(args) -> int:
    _check_output_paths(args.output)
    module = load(args.artifact, trusted_keys=args.trusted_key)
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
            try:
                atomic_write(args.output[i], buf.getvalue())
            except OSError as e:
                raise FxcError(f"cannot write {args.output[i]}: {e.strerror or e}") from None
            print(f"{spec.name}: {o.dtype}{list(o.shape)} -> {args.output[i]}")
        else:
            summary = "" if o.size == 0 else (f" min {o.min():.6g} max {o.max():.6g} mean {o.mean():.6g}"
                                              if o.dtype != np.bool_ else f" true {int(o.sum())}/{o.size}")
            print(f"{spec.name}: {o.dtype}{list(o.shape)}{summary}")
    return 0


def cmd_inspect(args) -> int:
    m, parts, _, signature = read_verified(args.artifact, args.trusted_key)
    if args.json:
        print(json.dumps(m, indent=1))
        return 0
    info = m.get("target_info", {})
    signed = ("signed, signature verified" if args.trusted_key else "signed (give --trusted-key to verify)") \
        if signature is not None else "unsigned"
    print(f"{args.artifact}: fxc artifact v{m['format_version']} (fxc {m.get('fxc_version', '?')}), all sha256 "
          f"verified, {signed}")
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
        print(f"C ABI {abi.get('abi_version', 1)} ({abi.get('header')}): {abi.get('init')}; {abi.get('entry')}"
              + (f"; {abi['shaped_entry']}" if "shaped_entry" in abi else ""))
    names = {"in": [s["name"] for s in m["inputs"]], "out": [s["name"] for s in m["outputs"]]}

    def slot(kind, ix):
        if kind in names:
            return names[kind][ix] if ix < len(names[kind]) else f"{kind}{ix}?"
        if kind == "work" and isinstance(ix, list) and len(ix) == 2 and isinstance(ix[1], int):    # a device's row
            return f"work+{ix[0]}+{m['symbols'][0]['name']}*{ix[1]}"                           # launches: s x per
        if kind == "work" and isinstance(ix, list) and len(ix) == 2:    # base + sum of coef x symbols (s x s)
            sym = lambda h: (m["symbols"][k]["name"] if 0 <= (k := (h - m.get("sym_header", 0)) // 8)  # noqa: E731
                             < len(m["symbols"]) else f"[work+{h}]")
            return f"work+{ix[0]}" + "".join(f"+{c}*{'*'.join(map(sym, hs))}" for c, hs in ix[1])
        if kind == "work" and isinstance(ix, list):         # base + symbol x per (format 2)
            k = (ix[1] - m.get("sym_header", 0)) // 8
            sym = m["symbols"][k]["name"] if 0 <= k < len(m.get("symbols", [])) else f"[work+{ix[1]}]"
            return f"work+{ix[0]}+{sym}*{ix[2]}"
        return {"work": f"work+{ix}", "const": f"const{ix}", "null": "null"}.get(kind, f"{kind}{ix}")
    kernels = m.get("kernels", [])
    print(f"plan ({len(m['plan'])} kernel calls; arguments: outputs, then inputs):")
    group = -1
    for i, step in enumerate(m["plan"]):
        g = step["repeat"][0] if step.get("repeat") else i     # row launches: several steps of one group's line
        line = kernels[g] if g != group and g < len(kernels) else ""
        group, what = g, line.split(":", 1)[1].strip() if line.startswith(step["kernel"] + ":") else line
        print(f"  {step['kernel']}({', '.join(slot(k, ix) for k, ix in step['args'])})  {what}")
    return 0


def cmd_extract(args) -> int:
    d = extract(args.artifact, args.directory, trusted_keys=args.trusted_key)
    print(f"extracted {args.artifact} -> {d}")
    return 0


def cmd_verify(args) -> int:
    from pathlib import Path
    if Path(args.artifact).is_dir():
        verify_folder(args.artifact, args.key)
    else:
        read_verified(args.artifact, args.key)
    print(f"{args.artifact}: signature valid ({len(args.key)} trusted key(s)), every part's sha256 verified")
    return 0


def cmd_keygen(args) -> int:
    private, public = generate(args.key)
    print(f"private key (keep it secret; sign with --sign-key): {private}\npublic key (give it to the loaders: "
          f"--trusted-key / fxc.load(..., trusted_keys=[...])): {public}")
    return 0


def cmd_web(args) -> int:
    inputs = [np.load(f, allow_pickle=False) for f in args.input] or None
    index = write_package(args.artifact, args.directory, inputs=inputs, runs=args.runs,
                          trusted_keys=args.trusted_key)
    names = ", ".join(sorted(p.name for p in index.parent.iterdir()))
    print(f"wrote {index.parent}/ ({names}); serve it with: fxc serve {index.parent}")
    return 0


def cmd_serve(args) -> int:
    server = serve(args.directory, args.port)
    print(f"serving {args.directory} at {server.url} (127.0.0.1 only; Ctrl-C stops"
          + (f", or after {args.seconds} s)" if args.seconds else ")"), flush=True)
    try:
        server.wait(args.seconds)
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0


def cmd_cache(args) -> int:
    if args.action == "clear":
        n, freed = store.clear()
        print(f"removed {n} entries ({freed / 2**20:.1f} MiB) from {store.cache_dir()}")
        return 0
    s = store.stats()
    bound = f"{s['max_bytes'] / 2**30:.2f} GiB" if s["max_bytes"] else "none"
    print(f"{s['dir']}: {s['entries']} entries, {s['bytes'] / 2**20:.1f} MiB; bound {bound} (FXC_CACHE_MAX_BYTES, "
          f"least recently used entries evicted first)")
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="fxc", description="fxc deep-learning compiler: deploy artifacts")
    sub = p.add_subparsers(dest="command", required=True)
    c = sub.add_parser("compile", help="compile a PyTorch model (factory returning an nn.Module) to an artifact")
    c.add_argument("model", help="model.py:factory, package.module:factory, model.onnx or an MXNet checkpoint prefix")
    c.add_argument("--input-shape", type=_shape, action="append",
                   help="e.g. 1,3,224,224; once per input (an ONNX model's stated shapes need none)")
    c.add_argument("--input-dtype", action="append", help="float32 (default), int64, ...; once, or once per input")
    c.add_argument("-o", "--output", required=True, help="artifact file to write")
    c.add_argument("--target", default="llvm")
    c.add_argument("--sign-key", help="Ed25519 private key (PEM, see `fxc keygen`): sign the artifact")
    c.add_argument("--epoch", type=int, default=0, help="the epoch of an MXNet checkpoint prefix given as the model")
    c.set_defaults(fn=cmd_compile)
    r = sub.add_parser("run", help="run an artifact on .npy inputs")
    r.add_argument("artifact")
    r.add_argument("--input", action="append", default=[], help=".npy file; once per input, in order")
    r.add_argument("-o", "--output", action="append", help=".npy file; once per output")
    r.add_argument("--repeat", type=_positive, default=1, help="also time this many runs")
    r.set_defaults(fn=cmd_run)
    i = sub.add_parser("inspect", help="verify an artifact and print its manifest")
    i.add_argument("artifact")
    i.add_argument("--json", action="store_true", help="print the raw manifest")
    i.set_defaults(fn=cmd_inspect)
    e = sub.add_parser("extract", help="verify an artifact and unpack its parts into a directory (for C)")
    e.add_argument("artifact")
    e.add_argument("directory", help="a new (or empty) folder")
    e.set_defaults(fn=cmd_extract)
    w = sub.add_parser("web", help="a webgl or webgpu artifact as a static web page (index.html, runtime, weights)")
    w.add_argument("artifact")
    w.add_argument("directory", help="the folder to write (made if missing)")
    w.add_argument("--input", action="append", default=[], help="the sample input the page runs (.npy; once per "
                   "input; default: standard normal floats, zero integers)")
    w.add_argument("--runs", type=_positive, default=10, help="timed calls the page makes (after one warm-up)")
    w.set_defaults(fn=cmd_web)
    s = sub.add_parser("serve", help="serve a folder (fxc web's) on 127.0.0.1 with COOP/COEP headers")
    s.add_argument("directory")
    s.add_argument("--port", type=int, default=8000, help="0: a free port")
    s.add_argument("--seconds", type=float, default=None, help="stop after this long (default: at Ctrl-C)")
    s.set_defaults(fn=cmd_serve)
    for sp in (r, i, e, w):
        sp.add_argument("--trusted-key", action="append", help="Ed25519 public key (PEM): the artifact must be "
                        "signed by it (repeat for several keys)")
    v = sub.add_parser("verify", help="check an artifact's (or an extracted folder's) signature and sha256 values")
    v.add_argument("artifact", help="model.fxc, or a folder written by `fxc extract`")
    v.add_argument("--key", action="append", required=True, help="trusted Ed25519 public key (PEM); repeatable")
    v.set_defaults(fn=cmd_verify)
    k = sub.add_parser("keygen", help="make an Ed25519 key pair for signing artifacts")
    k.add_argument("key", help="private key file to write (its public key goes to <name>.pub.pem)")
    k.set_defaults(fn=cmd_keygen)
    ca = sub.add_parser("cache", help="the compile cache: its folder, size and entries; `fxc cache clear` empties it")
    ca.add_argument("action", nargs="?", choices=("info", "clear"), default="info")
    ca.set_defaults(fn=cmd_cache)
    tune_cli.add_parser(sub, _shape)
    sub.choices["tune"].set_defaults(fn=lambda args: tune_cli.run(args, _load_factory))
    return p


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    try:
        return args.fn(args)
    except FxcError as e:
        print(f"fxc: error: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    except OSError as e:            # a file the command was given: unreadable, a folder, a full disk...
        print(f"fxc: error: {e.filename or ''}: {e.strerror or e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
