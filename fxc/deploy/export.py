"""`fxc.export`: write a compiled model as one deploy artifact (format in fxc/runtime/artifact/read.py).

Compiler side of deploy: it builds the artifact's library (kernels + plain C entry points) with the
target's backend, lays the constants out as raw bytes, and writes the zip atomically (temp file, fsync,
rename), so a crash mid-write never leaves a broken artifact at the destination.
"""
from __future__ import annotations

import hashlib
import io
import json
import zipfile
from pathlib import Path

import numpy as np

from ..backends.llvm import deploy as llvm_deploy
from ..errors import ArtifactError, FxcError, TargetError
from ..runtime.artifact import signing
from ..runtime.artifact.device import device_interface_line
from ..runtime.artifact.identity import check_identity_fields
from ..runtime.artifact.read import (
    ALIGN,
    C_SOURCE,
    FORMAT,
    FORMAT_VERSION,
    HEADER,
    LIBRARY,
    MANIFEST,
    PARAMS,
    STATIC_FORMAT_VERSION,
    interface,
    program_part,
)
from ..runtime.cpu import dnnl
from ..runtime.cpu.module import Module
from ..runtime.store import atomic_write
from ..runtime.tensors import np_dtype
from ..version import __version__

C_ABI = {
    "header": HEADER,
    "library": LIBRARY,
    "init": "int fxc_init(const char *artifact_dir)",
    "abi_version": 2,
    "entry": "int fxc_main(const void **inputs, void **outputs)",
    "shaped_entry": "int fxc_main_shaped(const int64_t *const *input_dims, const void **inputs, void **outputs)",
    "output_dims": "int fxc_output_dims(const int64_t *const *input_dims, int i, int64_t *dims, size_t *nbytes)",
    "free": "void fxc_free(void)",
    "interface": "const char *fxc_interface(void)",
    "low_level": "int fxc_run(void **inputs, void **outputs, void **consts, void *workspace)",
    "buffers": "contiguous row-major, of the signature's shapes and dtypes (bool: 1 byte); 0 means success",
    "links": ["libgomp.so.1", "libm.so.6", "libc.so.6"],
}


def nbytes(spec) -> int:
    """A tensor's bytes; 0 when a dim is symbolic (known only at call time)."""
    if not all(isinstance(d, int) for d in spec.shape):
        return 0
    return int(np.prod(spec.shape, dtype=np.int64)) * np_dtype(spec.dtype).itemsize


def symbol_facts(module) -> list:
    """A dynamic module's symbols as the manifest records them: {name, min, max, divisor}, an unbounded max
    written as 2**62 - 1 (the largest integer the manifest holds)."""
    return [{"name": s["name"], "min": int(s.get("min", 1)), "max": min(int(s.get("max", 2 ** 62)), 2 ** 62 - 1),
             "divisor": int(s.get("divisor", 1))} for s in module.symbols]


def plan_args(slots) -> list:
    """A plan's arguments as JSON: [kind, index or byte offset]; ["work", [base, header, per]] for a buffer at
    base + symbol x per bytes of the workspace (header: the byte of the symbol's value); ["work", [base, [[coef,
    [header bytes]], ...]]] for one at base + the sum of coef x the product of those symbols (several symbols, s x s).
    ArtifactError for a slot of another form (never written as something the runtime would misread)."""
    def arg(kind, ix):
        if isinstance(ix, (int, np.integer)):
            return [kind, int(ix)]
        if kind == "work" and isinstance(ix, tuple) and len(ix) == 3 and all(isinstance(v, int) for v in ix):
            return [kind, [int(v) for v in ix]]
        if (kind == "work" and isinstance(ix, tuple) and len(ix) == 2 and isinstance(ix[0], int) and all(
                isinstance(c, int) and all(isinstance(h, int) for h in hs) for c, hs in ix[1])):
            return [kind, [int(ix[0]), [[int(c), [int(h) for h in hs]] for c, hs in ix[1]]]]
        raise ArtifactError(f"cannot export a plan slot {(kind, ix)!r}: the artifact format has no form for it; "
                            f"export a build with static shapes (fxc.from_torch without dynamic_shapes)")
    return [arg(kind, ix) for kind, ix in slots]


def workspace_terms(module, symbols: list) -> list:
    """The symbolic region's size as the manifest records it: [[coefficient, [symbol names]], ...] (a product of
    several symbols, or a symbol twice for s x s); ArtifactError when a term names no symbol of the module."""
    terms = [[int(c), list(names)] for c, names in getattr(module, "sym_bytes", None) or []]
    if not terms and getattr(module, "row_bytes", 0):
        terms = [[int(module.row_bytes), [symbols[0]["name"]]]]
    known = {s["name"] for s in symbols}
    if any(c < 0 or not names or not set(names) <= known for c, names in terms):
        raise ArtifactError(f"cannot export the workspace size {terms}: its terms must be products of the module's "
                            f"symbols {sorted(known)}")
    return terms


def check_dims(module) -> None:
    """Every symbolic input/output dim must be 'name' or 'c*name' of one symbol (what C's tables and the runtime
    bind); a product of symbols (a [b*s, 64] input) is refused with an ArtifactError naming the input."""
    known = {s["name"] for s in module.symbols}
    for kind, specs in (("input", module.inputs), ("output", module.outputs)):
        for spec in specs:
            for d in spec.shape:
                c, _, name = d.rpartition("*") if isinstance(d, str) else ("", "", None)
                if not isinstance(d, int) and not (name in known and (c == "" or c.isdigit())):
                    raise ArtifactError(f"cannot export {kind} {spec.name!r} of shape {list(spec.shape)}: its dim "
                                        f"{d} is not a multiple of one size symbol, so the C entry cannot bind it; "
                                        f"give the model inputs whose dims are single symbols (reshape inside it)")


def pack_params(consts: list) -> tuple:
    """(raw bytes, per-const manifest records) with each const at a 64-byte aligned offset."""
    blob, records = bytearray(), []
    for i, c in enumerate(consts):
        c = np.ascontiguousarray(c)
        blob += bytes(-len(blob) % ALIGN)
        records.append({"index": i, "dtype": str(c.dtype),
                        "shape": list(c.shape), "offset": len(blob), "nbytes": c.nbytes})
        blob += c.astype(c.dtype.newbyteorder("<"), copy=False).tobytes()
    return bytes(blob), records


def export(compiled, path, sign_key=None, name=None, version=None) -> Path:
    """Write `compiled` as one deploy artifact at `path` (atomically).

    Parameters
    ----------
    compiled : fxc.capture.torch.aot.CompiledModel or fxc.runtime.cpu.module.Module
        What `fxc.from_torch` (or `fxc.driver.build.build`) returned.
    path : str or os.PathLike
        Destination file; an existing file is replaced only once the new one is complete (a crash or an
        error mid-write leaves it as it was, and no temporary file behind).
    sign_key : optional
        An Ed25519 private key (a cryptography key object, PEM bytes, a PEM file's path; `fxc keygen` makes
        one): the artifact then carries `manifest.sig`, the signature of its manifest, which
        `fxc.load(path, trusted_keys=[public key])` checks before using any part. Needs `cryptography`.
    name, version : str, optional
        Which model this is: a name ("resnet18") and a version of dot-separated whole numbers ("1.4.2"), recorded
        in the (signed) manifest, so `fxc.load(path, trusted_keys=..., expected_name=..., min_version=...)` refuses
        another model or an older release signed by the same key (docs/deploy.md).

    Returns
    -------
    pathlib.Path
        The artifact's path. Load it with `fxc.load`, inspect it with `fxc inspect`.

    Raises
    ------
    TargetError
        The module's target cannot be exported.
    ArtifactError
        `path` cannot be written (missing permission, disk full...).
    """
    module = getattr(compiled, "module", compiled)
    identity = _identity(name, version)
    if hasattr(module, "source") and hasattr(module, "device"):     # a device module (OpenCL): program source
        return export_device(module, path, sign_key, identity)
    if hasattr(compiled, "_orig_mod"):     # torch.compile's model: graphs built per call, weights passed as inputs
        raise FxcError("fxc.export takes an ahead-of-time build, not a torch.compile model; export "
                       "fxc.from_torch(model, example_inputs, dynamic_shapes=...) instead (torch.export.Dim gives "
                       "one build for every size in its range, as torch.compile(dynamic=True) does)")
    if not isinstance(module, Module):
        raise FxcError(f"fxc.export expects what fxc.from_torch returns, got {type(compiled).__name__}")
    if module.target != "llvm":
        raise TargetError(f"export of target {module.target!r} is not implemented; available: llvm")
    key = signing.private_key(sign_key) if sign_key is not None else None     # a bad key fails before the build
    params, records = pack_params(module.consts)
    sig = lambda specs: [{"name": s.name, "shape": list(s.shape), "dtype": s.dtype} for s in specs]  # noqa: E731
    symbols = symbol_facts(module) if module.symbols else []
    if symbols:
        check_dims(module)
    manifest = {
        "format": FORMAT, "format_version": FORMAT_VERSION if symbols else STATIC_FORMAT_VERSION,
        "fxc_version": __version__,
        "target": module.target, "target_info": llvm_deploy.target_info(module.target_spec or None),
        "inputs": sig(module.inputs), "outputs": sig(module.outputs),
        "workspace_bytes": int(module.workspace_bytes),
        "params": {"file": PARAMS, "byte_order": "little", "alignment": ALIGN, "tensors": records},
        "plan": [{"kernel": name, "args": plan_args(slots)} for name, slots in module.plan],
        "library": LIBRARY, "c_abi": C_ABI, "kernels": list(module.kernels), **identity,
        **({"requires": dnnl.requires(module.plan)} if dnnl.requires(module.plan) else {}),   # linked (docs/byoc.md)
    }
    if symbols:     # a dynamic build (format version 2): its sizes' facts and where the kernels read their values
        manifest.update(symbols=symbols, sym_header=int(module.sym_header), row_bytes=int(module.row_bytes),
                        sym_bytes=workspace_terms(module, symbols))
    iface = json.dumps(interface(manifest), sort_keys=True, separators=(",", ":"))
    header, source = llvm_deploy.render_c(module, [r["offset"] for r in records], params, __version__,
                                          nbytes, iface, symbols, manifest.get("sym_bytes", ()))
    parts = {LIBRARY: llvm_deploy.build_deploy_library(module, header, source), PARAMS: params,
             HEADER: header.encode(), C_SOURCE: source.encode()}
    return _write(path, manifest, parts, key)


def _identity(name, version) -> dict:
    """The manifest's "model" entry ({} when neither is given); ArtifactError for a malformed name or version."""
    name, version = check_identity_fields(name, version)
    model = {k: v for k, v in (("name", name), ("version", version)) if v is not None}
    return {"model": model} if model else {}


def _write(path, manifest: dict, parts: dict, key) -> Path:
    """The zip of the manifest (with each part's sha256 and size), its signature by `key` (None: unsigned) and the
    parts, written atomically at `path`."""
    manifest["parts"] = {n: {"sha256": hashlib.sha256(d).hexdigest(), "bytes": len(d)} for n, d in parts.items()}
    raw = json.dumps(manifest, indent=1).encode()
    signature = signing.sign(key, raw) if key is not None else None
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        _add(z, MANIFEST, raw, zipfile.ZIP_DEFLATED)
        if signature is not None:
            _add(z, signing.SIGNATURE, signature, zipfile.ZIP_STORED)
        for name, data in parts.items():
            _add(z, name, data, zipfile.ZIP_STORED if name == PARAMS else zipfile.ZIP_DEFLATED,
                 0o755 if name == LIBRARY else 0o644)
    try:
        atomic_write(path, buf.getvalue())
    except OSError as e:
        raise ArtifactError(f"cannot write the artifact to {path} ({e}); choose a writable folder with enough "
                            f"space (nothing was written there)") from e
    return Path(path)


def _add(z: zipfile.ZipFile, name: str, data: bytes, compression: int, mode: int = 0o644) -> None:
    info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))   # fixed time: same model, same bytes
    info.external_attr = mode << 16
    z.writestr(info, data, compress_type=compression)


def _slot(ix):
    """A device plan slot's index as JSON: an int, or nested lists of ints (["work", [base, per]] of row launches;
    a wasm module's llvm slots [base, header, per] and [base, [[coef, [header bytes]], ...]])."""
    return int(ix) if isinstance(ix, (int, np.integer)) else [_slot(x) for x in ix]


def export_device(module, path, sign_key=None, identity=None) -> Path:
    """Write a device module (fxc.runtime.device_module.DeviceModule) as an artifact: the OpenCL C program (its
    first line the interface's hash), the params and a manifest whose plan carries each launch's geometry; signed
    with `sign_key` when given, naming the model as `identity` says (export's {"model": {name, version}})."""
    key = signing.private_key(sign_key) if sign_key is not None else None     # a bad key fails before the work
    symbols = symbol_facts(module) if getattr(module, "symbols", None) else []
    if symbols and not getattr(module, "exports_symbols", False):
        raise ArtifactError(f"this {module.target} module has size symbols and its runtime cannot run them from an "
                            f"artifact: export the llvm target's dynamic build, or a {module.target} build with static "
                            f"shapes")
    if symbols:
        check_dims(module)
    params, records = pack_params(module.consts)
    sig = lambda specs: [{"name": s.name, "shape": list(s.shape), "dtype": s.dtype} for s in specs]  # noqa: E731
    rows = lambda st: {"rows": list(st.rows), "repeat": list(st.repeat)} if st.repeat else {}  # noqa: E731
    manifest = {
        "format": FORMAT, "format_version": FORMAT_VERSION if symbols else STATIC_FORMAT_VERSION,
        "fxc_version": __version__,
        "target": module.target, "target_info": {"device": module.device.info["name"],
                                                 "driver": module.device.info["driver"]},
        "inputs": sig(module.inputs), "outputs": sig(module.outputs),
        "workspace_bytes": int(module.workspace_bytes),
        "params": {"file": PARAMS, "byte_order": "little", "alignment": ALIGN, "tensors": records},
        "plan": [{"kernel": st.kernel, "args": [[kind, _slot(ix)] for kind, ix in st.args], "grid": list(st.grid),
                  "block": list(st.block), **({"prepack": True} if st.prepack else {}), **rows(st),
                  **({"call": list(st.call)} if st.call else {})}
                 for st in module.plan],
        "requires": sorted({st.kernel.split(":")[0] for st in module.plan if st.call}),   # external libraries
        "resident_inputs": list(module.prepack_inputs), "program": program_part({"target": module.target}),
        "kernels": list(module.kernels), **(identity or {}),
    }
    if symbols:     # format 2: row launches (fxc/driver/rows.py); a device has no symbol header (sym_header 0)
        manifest.update(symbols=symbols, sym_header=0, row_bytes=int(module.row_bytes))
    if symbols and module.target.split(" ")[0] == "wasm":    # the llvm kernels in wasm32: fxc_run reads the header
        manifest.update(sym_header=int(module.sym_header), sym_bytes=workspace_terms(module, symbols))
    parts = {manifest["program"]: (device_interface_line(manifest) + "\n" + module.source).encode(), PARAMS: params}
    return _write(path, manifest, parts, key)
