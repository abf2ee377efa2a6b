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
    fxc compile ... --model-name resnet18 --model-version 1.4 --sign-key signer.pem    # which model, signed
    fxc run model.fxc --trusted-key signer.pub.pem --expect-name resnet18 --min-version 1.4  # no swap or rollback
    fxc run model.fxc --expected-sha256 HEX         # exactly these bytes (docs/deploy.md)
    fxc web model.fxc site/                # a webgl / webgpu / wasm artifact as a static web page (fxc/deploy/web.py)
    fxc serve site/ [--port 8000] [--seconds 600]   # serve it on 127.0.0.1 with COOP/COEP headers
    fxc inspect model.fxc --graph graph.html        # a picture of the fused graph (.svg, .html, .dot)
    fxc explain model.py:make_model --input-shape 1,3,224,224 [--picture graph.html]   # what compiles, what not
    fxc devices                            # the target kinds this host runs, each device with its caps
    fxc ops --frontend onnx [--target opencl]       # every op a frontend converts; whether it compiles there
    fxc cache [clear]                      # the compile cache
    fxc serve-device [--host 0.0.0.0] [--port 9190]  # measure artifacts sent by measure_remote (docs/arm.md)

`run`, `inspect`, `extract` and `verify` use only the deploy runtime (numpy + ctypes; `cryptography` for
signatures): they never import torch. Every failure is one `fxc: error:` line and exit status 1.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import signal
import sys
import time
import warnings

import numpy as np

from .deploy.npy import read_inputs
from .deploy.web import serve, write_package
from .errors import FxcError
from .runtime import store
from .runtime.artifact.extract import extract, verify_folder
from .runtime.artifact.identity import check_identity_fields
from .runtime.artifact.loader import load
from .runtime.artifact.read import UnverifiedSignatureWarning, read_verified
from .runtime.artifact.signing import generate
from .runtime.store import atomic_write
from .target import KINDS
from .tuning import cli as tune_cli
from .version import __version__


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


def _dim(text: str) -> tuple:
    """--dim NAME:AXIS[:MIN:MAX] -> (name, axis, min, max or None)."""
    parts = text.split(":")
    try:
        if len(parts) not in (2, 4) or not parts[0].isidentifier():
            raise ValueError
        axis, lo, hi = int(parts[1]), int(parts[2]) if len(parts) == 4 else 1, \
            int(parts[3]) if len(parts) == 4 else None
        if axis < 0 or lo < 1 or (hi is not None and hi < lo):
            raise ValueError
    except ValueError:
        raise argparse.ArgumentTypeError(f"bad --dim {text!r}; write NAME:AXIS or NAME:AXIS:MIN:MAX, e.g. batch:0 or "
                                         f"seq:1:1:512 (MIN >= 1)") from None
    return parts[0], axis, lo, hi


def _stages():
    """The progress line of `fxc compile`'s own stages (a build shows its own line inside them: driver/progress.py;
    an error ends the process, and the line with it)."""
    from .driver.progress import Progress  # deferred: run/inspect/extract/verify load no compiler module
    return Progress("fxc compile")


def _options(args) -> dict:
    """The build options the compile flags give (only those given: a default build stays the default)."""
    return {"precision": args.precision} if args.precision else {}
def _port(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = -1
    if not 0 <= n <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a TCP port (0 to 65535; 0: a free one)")
    return n


def _version(text: str) -> str:
    try:
        return check_identity_fields(None, text)[1]
    except FxcError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


@contextlib.contextmanager
def _warnings_as_lines():
    """Warnings raised inside (an unverified signature) as `fxc: warning:` lines on stderr, once each."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            yield
        finally:
            for message in dict.fromkeys(str(w.message) for w in caught):
                print(f"fxc: warning: {message}", file=sys.stderr)


def _expected(args) -> dict:
    """The identity a command's artifact must have (--expect-name, --min-version, --expected-sha256)."""
    return {"expected_name": args.expect_name, "min_version": args.min_version,
            "expected_sha256": args.expected_sha256}


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
    """`fxc compile model.onnx`: input shapes from the model, or --input-shape for the dims it leaves open; with
    --dynamic its named dims stay symbolic (one build for every size; --input-shape then gives the sample sizes)."""
    from .capture.onnx import from_onnx, load_model, model_inputs  # deferred: imports onnx, optional
    if args.dim:
        raise FxcError("an ONNX model names its dims itself: --dynamic keeps them symbolic (--dim is for PyTorch "
                       "factories)")
    t0 = time.perf_counter()
    inputs = model_inputs(load_model(args.model))
    open_dims = [(n, dims) for n, _, dims in inputs if dims is None or not all(isinstance(d, int) for d in dims)]
    if open_dims and not args.input_shape and not args.dynamic:
        name, dims = open_dims[0]
        shown = "?" if dims is None else ",".join(str(d) if isinstance(d, int) else d or "?" for d in dims)
        raise FxcError(f"{args.model}: input {name!r} has open dims ({shown}): give --input-shape once per input "
                       f"(e.g. --input-shape {shown.replace('?', '1') if dims else '1,3,224,224'} with sizes for "
                       f"the named dims) for a static build, or --dynamic for one build for every size")
    stages = _stages()
    stages.set("converting the model")
    if args.dynamic:
        if args.input_shape and len(args.input_shape) != len(inputs):
            raise FxcError(f"{args.model} has inputs {[n for n, _, _ in inputs]}: give one --input-shape per input")
        shapes = args.input_shape or [tuple(d if isinstance(d, int) else 1 for d in dims or ()) for _, _, dims in
                                      inputs]
        compiled = from_onnx(args.model, target=args.target, **_options(args))
        compiled(*_sample_arrays(shapes, [dtype for _, dtype, _ in inputs]))     # (the symbolic build)
    else:
        compiled = from_onnx(args.model, shapes=args.input_shape, target=args.target, **_options(args))
    return _write(args, compiled, stages, t0)


def _sample_arrays(shapes, onnx_types) -> list:
    """Random inputs of these shapes and ONNX element types (floats standard normal, integers small)."""
    from onnx import helper  # deferred: onnx is optional
    rng = np.random.default_rng(0)
    out = []
    for shape, t in zip(shapes, onnx_types):
        dt = np.dtype(helper.tensor_dtype_to_np_dtype(t))
        out.append(rng.standard_normal(shape).astype(dt) if dt.kind == "f" else np.zeros(shape, dt))
    return out


def _write(args, compiled, stages, t0: float, what: str = "") -> int:
    """fxc compile's last stage: the artifact written (signed and named as asked) and what was compiled."""
    from .deploy.export import export  # deferred: run/inspect/extract/verify must not load the artifact writer
    stages.set("writing the artifact")
    path = export(compiled, args.output, sign_key=args.sign_key, name=args.model_name, version=args.model_version)
    stages.close()
    print(f"compiled {args.model}{what} for {args.target} in {time.perf_counter() - t0:.1f} s -> {path}")
    _print_compiled(compiled)
    return 0


def cmd_compile(args) -> int:
    _check_output_paths([args.output], "model.fxc")     # before any work: nothing is created but the file
    if args.model.endswith(".onnx"):
        return _compile_onnx(args)
    if not args.input_shape:
        raise FxcError("give --input-shape once per input of the model (e.g. --input-shape 1,3,224,224)")
    dtypes = _dtypes(args)
    from .capture.mxnet.convert import is_checkpoint  # deferred: loads the compiler, which run/inspect must not
    if is_checkpoint(args.model):           # an MXNet checkpoint prefix (prefix-symbol.json + prefix-%04d.params)
        if args.dynamic or args.dim:
            raise FxcError("--dynamic and --dim are for PyTorch factories and ONNX models; an MXNet checkpoint "
                           "builds for the --input-shape given")
        return _compile_mxnet(args, dtypes)
    from .capture.torch.aot import from_torch  # deferred: imports torch
    model, inputs = _torch_model(args, dtypes)
    t0 = time.perf_counter()
    stages = _stages()
    stages.set("tracing the model (torch.export) and converting it")
    compiled = from_torch(model, tuple(inputs), target=args.target, dynamic_shapes=_dynamic_shapes(args, inputs),
                          **_options(args))
    return _write(args, compiled, stages, t0)


def _torch_model(args, dtypes) -> tuple:
    """The model `args.model` (file.py:factory) returns, in eval mode, and random inputs of --input-shape."""
    import torch  # deferred: the CLI's run/inspect/extract/verify start without torch
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
    return model, inputs


def _dtypes(args) -> list:
    """One dtype per --input-shape (--input-dtype once for all, or once per input)."""
    dtypes = args.input_dtype or ["float32"]
    if len(dtypes) == 1:
        dtypes = dtypes * len(args.input_shape)
    if len(dtypes) != len(args.input_shape):
        raise FxcError(f"give one --input-dtype, or one per --input-shape ({len(args.input_shape)})")
    return dtypes


def cmd_explain(args) -> int:
    if not args.input_shape:
        raise FxcError("give --input-shape once per input of the model (e.g. --input-shape 1,3,224,224)")
    if args.picture:
        _check_output_paths([args.picture], "graph.html")
    from .commands.explain import explain_text  # deferred: imports torch
    model, inputs = _torch_model(args, _dtypes(args))
    print(explain_text(model, tuple(inputs), args.target, args.picture))
    return 0


def cmd_devices(args) -> int:
    from .commands.devices import devices_lines  # deferred: opens the devices
    print("\n".join(devices_lines()))
    return 0


def cmd_ops(args) -> int:
    from .commands.ops import ops_lines  # deferred: loads the op registry and the converters
    print("\n".join(ops_lines(args.frontend, args.target)))
    return 0


def _dynamic_shapes(args, inputs):
    """torch.export's dynamic_shapes for --dynamic (the leading dim of every input: "batch") and --dim NAME:AXIS
    (that axis of every input of more dims), or None."""
    dims = list(args.dim or []) + ([("batch", 0, 1, None)] if args.dynamic else [])
    if not dims:
        return None
    import torch  # deferred: the CLI's run/inspect/extract/verify start without torch
    made = {name: torch.export.Dim(name, min=lo, **({"max": hi} if hi else {})) for name, _, lo, hi in dims}
    spec = tuple({axis: made[name] for name, axis, _, _ in dims if axis < x.dim()} or None for x in inputs)
    if not any(spec):
        raise FxcError(f"no input has the axes of --dim/--dynamic ({', '.join(f'{n}:{a}' for n, a, _, _ in dims)})")
    return spec


def _compile_mxnet(args, dtypes) -> int:
    from .capture.mxnet.convert import from_mxnet  # deferred: loads the compiler, which run/inspect must not
    t0 = time.perf_counter()
    stages = _stages()
    stages.set("converting the model")
    probe = from_mxnet(args.model, epoch=args.epoch)        # the input names, in call order
    if len(probe.input_names) != len(args.input_shape):
        raise FxcError(f"{args.model} has inputs {probe.input_names}: give one --input-shape per input")
    compiled = from_mxnet(args.model, shapes=dict(zip(probe.input_names, args.input_shape)),
                          dtype=dict(zip(probe.input_names, dtypes)), target=args.target, epoch=args.epoch,
                          **_options(args))
    return _write(args, compiled, stages, t0, f" (epoch {args.epoch})")


def _print_compiled(compiled) -> None:
    """The signature of a compiled model, with the size symbols of a dynamic build."""
    _print_signature({"inputs": [vars(s) for s in compiled.inputs], "outputs": [vars(s) for s in compiled.outputs],
                      "symbols": list(getattr(compiled.module, "symbols", ()) or ())})


def _print_signature(m: dict) -> None:
    for kind in ("inputs", "outputs"):
        for s in m[kind]:
            print(f"  {kind[:-1]:<6} {s['name']}: {s['dtype']}[{', '.join(map(str, s['shape']))}]")
    for s in m.get("symbols", []):       # format 2: a dynamic build's size symbols
        print(f"  symbol {s['name']} in [{s['min']}, {s['max']}]" + (f", a multiple of {s['divisor']}"
                                                                    if s["divisor"] > 1 else ""))


def _check_output_paths(paths, example: str = "y.npy") -> None:
    """Each -o names a new or existing file in an existing folder (nothing is created but the file)."""
    from pathlib import Path
    for p in paths or ():
        p = Path(p)
        if p.is_dir():
            raise FxcError(f"-o {p}: is a folder; name a file such as {p / example}")
        if not p.parent.is_dir():
            raise FxcError(f"-o {p}: the folder {p.parent} does not exist; create it first")


def cmd_run(args) -> int:
    _check_output_paths(args.output)
    with _warnings_as_lines():
        module = load(args.artifact, trusted_keys=args.trusted_key, **_expected(args))
    arrays = read_inputs(args.input, module)     # each header checked against the signature before its data
    outs = module(*arrays)
    outs = outs if isinstance(outs, list) else [outs]
    if args.output and len(args.output) != len(outs):
        raise FxcError(f"the model has {len(outs)} output(s); give -o once per output")
    if args.repeat > 1:
        times = []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            module(*arrays)
            times.append(1e3 * (time.perf_counter() - t0))
        print(f"latency: median {np.median(times):.3f} ms, min {min(times):.3f} ms, mean {np.mean(times):.3f} ms "
              f"({args.repeat} runs)")
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
    with warnings.catch_warnings():      # an unverified signature: said on the first line instead
        warnings.simplefilter("ignore", UnverifiedSignatureWarning)
        m, parts, _, signature = read_verified(args.artifact, args.trusted_key, **_expected(args))
    if args.graph:
        from pathlib import Path

        from .deploy.picture import manifest_drawing, write_picture  # deferred: only for --graph
        drawing = manifest_drawing(m, f"{Path(args.artifact).name} ({m['target']})")
        print(f"wrote {write_picture(drawing, args.graph)}: {drawing.clusters} fused groups")
        return 0
    if args.json:
        print(json.dumps(m, indent=1))
        return 0
    info = m.get("target_info", {})
    signed = "unsigned" if signature is None else "signature verified" if args.trusted_key else \
        "signature present, not verified (give --trusted-key to verify it)"
    print(f"{args.artifact}: fxc artifact v{m['format_version']} (fxc {m.get('fxc_version', '?')}), all sha256 "
          f"verified, {signed}")
    model = m.get("model")
    if model:
        print(f"model: {model.get('name', '(no name)')} version {model.get('version', '(none)')}"
              + ("" if args.trusted_key else " (as the unverified manifest says)"))
    if "cpu" in info:
        print(f"target: {m['target']} {info.get('triple', '')} cpu={info['cpu']} "
              f"flags={','.join(info.get('cpu_flags', [])) or '-'}")
    else:                   # a device artifact: its kind and what its device must offer
        built = "; ".join(f"{k} {v}" for k, v in sorted(info.items()) if not isinstance(v, (dict, list)))
        print(f"target: {m['target']} (a device artifact" + (f"; built on {built})" if built else ")"))
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
    with _warnings_as_lines():
        d = extract(args.artifact, args.directory, trusted_keys=args.trusted_key, **_expected(args))
    print(f"extracted {args.artifact} -> {d}")
    return 0


def cmd_verify(args) -> int:
    from pathlib import Path
    if Path(args.artifact).is_dir():
        if args.expected_sha256:
            raise FxcError("--expected-sha256 pins an artifact file's bytes; verify the .fxc file with it (a folder's "
                           "parts are checked against its signed manifest)")
        verify_folder(args.artifact, args.key, args.expect_name, args.min_version)
    else:
        read_verified(args.artifact, args.key, **_expected(args))
    print(f"{args.artifact}: signature valid ({len(args.key)} trusted key(s)), every part's sha256 verified")
    return 0


def cmd_keygen(args) -> int:
    private, public = generate(args.key)
    print(f"private key (keep it secret; sign with --sign-key): {private}\npublic key (give it to the loaders: "
          f"--trusted-key / fxc.load(..., trusted_keys=[...])): {public}")
    return 0


def cmd_web(args) -> int:
    inputs = read_inputs(args.input) or None      # headers checked against the files' sizes before the data
    with _warnings_as_lines():
        index = write_package(args.artifact, args.directory, inputs=inputs, runs=args.runs,
                              trusted_keys=args.trusted_key, **_expected(args))
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


def _serve_device(args) -> int:
    from .deploy.device_server import cmd_serve_device  # deferred: the toolchain (fxc.backends) only for this command
    return cmd_serve_device(args)


def cmd_cache(args) -> int:
    if args.action == "clear":
        n, freed = store.clear()
        print(f"removed {n} entries ({freed / 2**20:.1f} MiB) from {store.cache_dir()}")
        return 0
    s = store.stats()
    bound = _bytes(s["max_bytes"]) if s["max_bytes"] else "none"
    print(f"{s['dir']}: {s['entries']} entries, {_bytes(s['bytes'])}; bound {bound} (FXC_CACHE_MAX_BYTES, "
          f"least recently used entries evicted first)")
    return 0


def _bytes(n: int) -> str:
    """A size in the unit that fits it: 512 B, 1.0 MiB, 2.00 GiB."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.2f} {unit}" if unit == "GiB" else f"{n / scale:.1f} {unit}"
    return f"{n} B"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="fxc", description="fxc deep-learning compiler: deploy artifacts")
    p.add_argument("--version", action="version", version=f"fxc {__version__}")
    sub = p.add_subparsers(dest="command", required=True)
    c = sub.add_parser("compile", help="compile a PyTorch model (factory returning an nn.Module) to an artifact")
    c.add_argument("model", help="model.py:factory, package.module:factory, model.onnx or an MXNet checkpoint prefix")
    c.add_argument("--input-shape", type=_shape, action="append",
                   help="e.g. 1,3,224,224; once per input (an ONNX model's stated shapes need none)")
    c.add_argument("--input-dtype", action="append", help="float32 (default), int64, ...; once, or once per input")
    c.add_argument("-o", "--output", required=True, help="artifact file to write (its folder must exist)")
    c.add_argument("--target", default="llvm", help=f"a kind ({', '.join(KINDS)}) with its options, e.g. "
                   "'llvm -mcpu=haswell', 'opencl -device=1' (default: llvm, this CPU); `fxc devices` lists what "
                   "this host runs")
    c.add_argument("--dynamic", action="store_true", help="one build for every batch size: the leading dim of every "
                   "input symbolic (an ONNX model: its named dims)")
    c.add_argument("--dim", type=_dim, action="append", metavar="NAME:AXIS[:MIN:MAX]", help="that axis of every "
                   "input symbolic, e.g. seq:1:1:512 (repeatable; a PyTorch factory's inputs)")
    c.add_argument("--precision", help="fp32 (default), or bf16 on CPUs with AVX-512 BF16 "
                   "(weights are baked in as constants either way, frozen: batch norms fold into the convolutions)")
    c.add_argument("--sign-key", help="Ed25519 private key (PEM, see `fxc keygen`): sign the artifact")
    c.add_argument("--epoch", type=int, default=0, help="the epoch of an MXNet checkpoint prefix given as the model")
    c.add_argument("--model-name", help="the model's name, recorded in the (signed) manifest (loaders check it "
                   "with --expect-name)")
    c.add_argument("--model-version", type=_version, help="the model's version, dot-separated whole numbers like "
                   "1.4.2 (loaders refuse older ones with --min-version)")
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
    i.add_argument("--graph", metavar="PICTURE", help="draw the fused graph instead: out.svg, out.html (a page with a "
                   "legend) or out.dot; every fused group a cluster with its kernel and launch shape")
    i.set_defaults(fn=cmd_inspect)
    e = sub.add_parser("extract", help="verify an artifact and unpack its parts into a directory (for C)")
    e.add_argument("artifact")
    e.add_argument("directory", help="a new (or empty) folder")
    e.set_defaults(fn=cmd_extract)
    w = sub.add_parser("web", help="a webgl, webgpu or wasm artifact as a static web page (index.html, "
                       "runtime, weights)")
    w.add_argument("artifact")
    w.add_argument("directory", help="the folder to write (made if missing)")
    w.add_argument("--input", action="append", default=[], help="the sample input the page runs (.npy; once per "
                   "input; default: standard normal floats, zero integers)")
    w.add_argument("--runs", type=_positive, default=10, help="timed calls the page makes (after one warm-up)")
    w.set_defaults(fn=cmd_web)
    s = sub.add_parser("serve", help="serve a folder (fxc web's) on 127.0.0.1 with COOP/COEP headers")
    s.add_argument("directory")
    s.add_argument("--port", type=_port, default=8000, help="0: a free port")
    s.add_argument("--seconds", type=float, default=None, help="stop after this long (default: at Ctrl-C)")
    s.set_defaults(fn=cmd_serve)
    sd = sub.add_parser("serve-device", help="run artifacts sent by a tuner or benchmark on this machine and return "
                        "their timings (docs/arm.md); with -o, cross-build that server for --target")
    sd.add_argument("--host", default="127.0.0.1", help="address to listen on (0.0.0.0: every network; the "
                    "server runs any library sent to it: trusted networks only)")
    sd.add_argument("--port", type=int, default=9190, help="0: a free port (printed)")
    sd.add_argument("--run-limit", type=int, default=600, help="seconds a model's run may take before it is stopped "
                    "(its answer says so; the server stays free)")
    sd.add_argument("--target", default="llvm", help="with -o: the machine to build the server for (e.g. rasp4b64)")
    sd.add_argument("-o", "--output", help="write the server executable here instead of running it")
    sd.set_defaults(fn=_serve_device)
    for sp in (r, i, e, w):
        sp.add_argument("--trusted-key", action="append", help="Ed25519 public key (PEM): the artifact must be "
                        "signed by it (repeat for several keys)")
    v = sub.add_parser("verify", help="check an artifact's (or an extracted folder's) signature and sha256 values")
    v.add_argument("artifact", help="model.fxc, or a folder written by `fxc extract`")
    v.add_argument("--key", action="append", required=True, help="trusted Ed25519 public key (PEM); repeatable")
    v.set_defaults(fn=cmd_verify)
    for sp in (r, i, e, w, v):
        sp.add_argument("--expect-name", help="the model name the signed manifest must record (needs a trusted key)")
        sp.add_argument("--min-version", type=_version, help="refuse a model version below this one, e.g. 1.4 "
                        "(needs a trusted key)")
        sp.add_argument("--expected-sha256", help="the artifact file's sha256 (sha256sum): exactly these bytes")
    k = sub.add_parser("keygen", help="make an Ed25519 key pair for signing artifacts")
    k.add_argument("key", help="private key file to write (its public key goes to <name>.pub.pem)")
    k.set_defaults(fn=cmd_keygen)
    ca = sub.add_parser("cache", help="the compile cache: its folder, size and entries; `fxc cache clear` empties it")
    ca.add_argument("action", nargs="?", choices=("info", "clear"), default="info")
    ca.set_defaults(fn=cmd_cache)
    tune_cli.add_parser(sub, _shape)
    sub.choices["tune"].set_defaults(fn=lambda args: tune_cli.run(args, _load_factory))
    de = sub.add_parser("devices", help="every target kind this host can run, each OpenCL/GL device with its caps")
    de.set_defaults(fn=cmd_devices)
    op = sub.add_parser("ops", help="every op a frontend converts, and with --target whether it compiles there")
    op.add_argument("--frontend", required=True, choices=("torch", "onnx", "mxnet"))
    op.add_argument("--target", help="also build each op's sample for this target (a minute or more the first time)")
    op.set_defaults(fn=cmd_ops)
    x = sub.add_parser("explain", help="what fxc compiles of a PyTorch model, what runs eagerly and why, the kernels")
    x.add_argument("model", help="model.py:factory or package.module:factory")
    x.add_argument("--input-shape", type=_shape, action="append", help="e.g. 1,3,224,224; once per input")
    x.add_argument("--input-dtype", action="append", help="float32 (default), int64, ...; once, or once per input")
    x.add_argument("--target", default="llvm", help="as for `fxc compile`")
    x.add_argument("--picture", help="also draw the fused graph: graph.svg, graph.html or graph.dot")
    x.set_defaults(fn=cmd_explain)
    return p


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    try:
        return args.fn(args)
    except BrokenPipeError:         # `fxc ... | head` closed the pipe: stop quietly, as a SIGPIPE would
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())     # (nothing more to flush at exit)
        return 128 + signal.SIGPIPE
    except FxcError as e:
        print(f"fxc: error: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    except OSError as e:            # a file the command was given: unreadable, a folder, a full disk...
        print(f"fxc: error: {e.filename or ''}: {e.strerror or e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
