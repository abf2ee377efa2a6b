"""Reading an artifact: its format (the parts, the manifest's schema) and the verification of the single file that
`fxc.export` writes (fxc/runtime/artifact/loader.py loads it; extract.py writes its parts into a folder).

An artifact is a zip archive with these parts (all listed, with their sha256, in the manifest):

    manifest.json      format version (2: with size symbols), fxc version, target, signature, workspace size,
                       params layout, the execution plan (kernel calls and the buffers each one gets),
                       the C ABI, the kernels, and sha256 + size of every other part
    libfxc_model.so    the kernels, the plan compiled into `fxc_run`, and the plain C entry points
                       (`fxc_init`, `fxc_main`, `fxc_interface`, ...)
    params.bin         constants as raw little-endian bytes, each at a 64-byte aligned offset
                       (dtype, shape and offset in the manifest; never pickle)
    fxc_model.h        the C header of the entry points
    fxc_model.c        the C source of the entry points (for reading; it is already in the library)
    program.*          a device artifact's program instead of the library (PROGRAMS)

`read_artifact` verifies the zip's entries (only the names above and `manifest.sig`: no paths, links or encryption;
inflated as streams bounded by their declared sizes), with `trusted_keys` the manifest's Ed25519 signature before
anything else (signing.py), the manifest's schema and every part's sha256. A signed artifact read without
`trusted_keys` (nor a pinned sha256) warns once (UnverifiedSignatureWarning): nothing vouched for it.

`expected_name`, `min_version`, `expected_sha256`: which model it must be (identity.py, loaded only when asked).
Imports only the standard library, numpy and fxc.runtime / fxc.errors.
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import stat
import struct
import sys
import warnings
import zipfile
import zlib
from pathlib import Path

import numpy as np

from ...errors import ArtifactError
from ..tensors import np_dtype

FORMAT = "fxc-artifact"
FORMAT_VERSION = 2             # 2: size symbols (a dynamic build); an artifact without them is written as 1
STATIC_FORMAT_VERSION = 1
READ_VERSIONS = (1, 2)
MANIFEST = "manifest.json"
LIBRARY = "libfxc_model.so"
PARAMS = "params.bin"
HEADER = "fxc_model.h"
C_SOURCE = "fxc_model.c"
PROGRAM = "program.cl"          # a device artifact's kernels: OpenCL C source, built on the device at load
PROGRAMS = {"opencl": PROGRAM, "opengl": "program.glsl",     # device kind -> its program part (GLSL: shaders,
            "webgl": "program.webgl.json",                    # WebGL: fragment shaders in JSON)
            "wasm": "program.wasm.json",                      # wasm: the .wasm module (base64) in JSON
            "webgpu": "program.wgsl.json"}                    # WebGPU: compute shaders in JSON
PARTS = (LIBRARY, PARAMS, HEADER, C_SOURCE, *PROGRAMS.values())   # the only part names an artifact may have
ALIGN = 64
SIGNATURE = "manifest.sig"       # optional: the Ed25519 signature of the manifest's bytes (signing.py)
SIGNATURE_BYTES = 64
MAX_MANIFEST = 64 << 20          # bytes: a manifest is a few KiB to a few MiB
MAX_RATIO = 200                  # uncompressed / compressed size past which a part is refused before inflating
SLOT_KINDS = ("in", "out", "const", "work", "null")
REQUIRED = ("target", "inputs", "outputs", "workspace_bytes", "parts", "params", "plan")
_REEXPORT = "export the model again with fxc.export (or `fxc compile`)"


class UnverifiedSignatureWarning(UserWarning):
    """A signed artifact was read without trusted keys: its signature was not checked."""


def read_artifact(path, trusted_keys=None, **expected) -> tuple:
    """Open an artifact and verify it; returns (manifest dict, {part name: bytes}).

    trusted_keys: None, or Ed25519 public keys (fxc/runtime/artifact/signing.py): the manifest's signature must then be
    one of theirs, checked before anything else in the file is parsed or read. expected_name, min_version,
    expected_sha256: which model it must be (the module's doc; check_identity).

    Raises ArtifactError for a missing, truncated, corrupt or tampered file, an unknown format version, odd
    part names (a path, a link), a part larger than declared or compressed past MAX_RATIO; SignatureError
    (an ArtifactError) for a missing or untrusted signature; IdentityError for another model than expected.
    """
    return read_verified(path, trusted_keys, **expected)[:2]


def read_verified(path, trusted_keys=None, expected_name=None, min_version=None, expected_sha256=None) -> tuple:
    """read_artifact's (manifest, parts), then the manifest's exact bytes and its signature (or None)."""
    path = Path(path)
    if not path.is_file():
        raise ArtifactError(f"{path}: no such artifact file; write one with fxc.export or `fxc compile`")
    if (expected_name is not None or min_version is not None) and trusted_keys is None:
        raise ArtifactError("expected_name / min_version are vouched for only by the artifact's signature: give "
                            "trusted_keys too (or pin the file's exact bytes with expected_sha256)")
    try:
        if expected_sha256 is not None:
            from .identity import pinned_bytes  # deferred: identity checks only (the load's size budget)
        source = path if expected_sha256 is None else io.BytesIO(pinned_bytes(path, expected_sha256))
        with zipfile.ZipFile(source) as z:
            infos = _check_entries(path, z, {MANIFEST, SIGNATURE, *PARTS})
            if MANIFEST not in infos:
                raise ArtifactError(f"{path}: not an fxc artifact (no {MANIFEST}); {_REEXPORT}")
            raw = _inflate(path, z, infos[MANIFEST], MAX_MANIFEST)
            signature = _inflate(path, z, infos[SIGNATURE], SIGNATURE_BYTES) if SIGNATURE in infos else None
            if trusted_keys is not None:
                from .signing import verify  # deferred: signed loads only (the load's size budget)
                verify(path, raw, signature, trusted_keys)
            elif signature is not None and expected_sha256 is None:
                warnings.warn(UnverifiedSignatureWarning(
                    f"{path} is signed, but its signature was not verified (no trusted keys given): anyone could "
                    f"have changed it; give trusted_keys=[public key] (fxc: --trusted-key) to check it"),
                    stacklevel=_caller())
            manifest = _parse_manifest(path, raw)
            if expected_name is not None or min_version is not None:
                from .identity import check_identity  # deferred: identity checks only (the load's size budget)
                check_identity(path, manifest, expected_name, min_version)
            listed = manifest["parts"]
            extra = sorted(set(infos) - set(listed) - {MANIFEST, SIGNATURE})
            if extra:
                raise ArtifactError(f"{path}: part(s) {extra} are not listed in the manifest; the file was "
                                    f"modified: {_REEXPORT}")
            parts = {name: _read_part(path, z, infos.get(name), name, info) for name, info in listed.items()}
    except (zipfile.BadZipFile, zipfile.LargeZipFile, zlib.error, struct.error, EOFError, NotImplementedError,
            ValueError, RuntimeError, OverflowError) as e:
        raise ArtifactError(f"{path}: not a readable fxc artifact (truncated or corrupt: {e}); {_REEXPORT}") from None
    except MemoryError:
        raise ArtifactError(f"{path}: a part of the artifact does not fit in memory; {_REEXPORT}") from None
    except OSError as e:
        raise ArtifactError(f"{path}: cannot read the artifact ({e}); check the file's permissions") from None
    for name in (program_part(manifest) if is_device_artifact(manifest) else LIBRARY, PARAMS):
        if name not in parts:
            raise ArtifactError(f"{path}: the manifest lists no {name!r} part; {_REEXPORT}")
    return manifest, parts, raw, signature


def _caller() -> int:
    """The stacklevel of the first frame outside fxc (a warning names the user's line)."""
    level, frame, root = 1, sys._getframe(1), str(Path(__file__).parents[2]) + os.sep
    while frame.f_back is not None and frame.f_code.co_filename.startswith(root):
        level, frame = level + 1, frame.f_back
    return level


def _check_entries(path, z: zipfile.ZipFile, allowed: set) -> dict:
    """name -> ZipInfo, once every entry is a plain file of an allowed name, unencrypted, stored or deflated."""
    infos = {}
    for info in z.infolist():
        name = info.filename
        if name not in allowed:
            raise ArtifactError(f"{path}: entry {name!r} is not an fxc artifact part (the parts are "
                                f"{', '.join(sorted(allowed))}); the file was modified: {_REEXPORT}")
        if name in infos:
            raise ArtifactError(f"{path}: entry {name!r} appears twice; the file was modified: {_REEXPORT}")
        if stat.S_IFMT(info.external_attr >> 16) not in (0, stat.S_IFREG):
            raise ArtifactError(f"{path}: entry {name!r} is not a plain file (a link?); {_REEXPORT}")
        if info.flag_bits & 0x1 or info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
            raise ArtifactError(f"{path}: entry {name!r} is encrypted or compressed with an unknown method "
                                f"({info.compress_type}); fxc artifacts are not: {_REEXPORT}")
        infos[name] = info
    return infos


def _inflate(path, z: zipfile.ZipFile, info: zipfile.ZipInfo, limit: int) -> bytes:
    """An entry's bytes, streamed: refused before inflating when it says it is larger than `limit` or compressed
    past MAX_RATIO, and never more than `limit` bytes inflated whatever its headers say."""
    if info.file_size > limit:
        raise ArtifactError(f"{path}: entry {info.filename!r} is {info.file_size} bytes, more than the "
                            f"{limit} expected; {_REEXPORT}")
    if info.compress_type != zipfile.ZIP_STORED and info.file_size > MAX_RATIO * info.compress_size + 4096:
        ratio = info.file_size / max(info.compress_size, 1)
        raise ArtifactError(f"{path}: entry {info.filename!r} inflates {ratio:.0f}-fold (a zip bomb?); fxc "
                            f"artifacts never compress past {MAX_RATIO}x: {_REEXPORT}")
    with z.open(info) as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise ArtifactError(f"{path}: entry {info.filename!r} holds more than the {limit} bytes expected; "
                            f"{_REEXPORT}")
    return data


def _parse_manifest(path, raw: bytes) -> dict:
    try:
        m = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise ArtifactError(f"{path}: {MANIFEST} is not valid JSON ({e}); {_REEXPORT}") from None
    if not isinstance(m, dict) or m.get("format") != FORMAT:
        raise ArtifactError(f"{path}: {MANIFEST} does not describe an {FORMAT}; {_REEXPORT}")
    if m.get("format_version") not in READ_VERSIONS:
        raise ArtifactError(f"{path}: unknown artifact format version {m.get('format_version')!r} "
                            f"(written by fxc {m.get('fxc_version', '?')}); this runtime reads versions "
                            f"{', '.join(map(str, READ_VERSIONS))}: use the fxc version that wrote it, or export "
                            f"the model again with this one")
    missing = [key for key in REQUIRED if key not in m]
    if missing or not isinstance(m["parts"], dict):
        raise ArtifactError(f"{path}: {MANIFEST} has no {missing or 'parts'} entry; {_REEXPORT}")
    problem = _manifest_problem(m)
    if problem:
        raise ArtifactError(f"{path}: {MANIFEST} is malformed: {problem}; {_REEXPORT}")
    return m


def _is_int(v, low: int = 0) -> bool:
    return type(v) is int and low <= v < 1 << 62


def _is_spec(s, dim_ok=_is_int) -> bool:
    return (isinstance(s, dict) and isinstance(s.get("name"), str) and isinstance(s.get("shape"), list)
            and all(map(dim_ok, s["shape"])) and _known_dtype(s.get("dtype")))


def _is_slot(a) -> bool:       # [kind, index or offset]; ["work", [base, header, per]]: base + symbol x per;
    # ["work", [base, per]]: a device plan's (fxc/driver/rows.py: no header, the launch moves it by rows);
    # ["work", [base, [[coef, [header bytes]], ...]]]: base + sum of coef x the product of those symbols
    return isinstance(a, list) and len(a) == 2 and a[0] in SLOT_KINDS and (_is_int(a[1]) or (
        a[0] == "work" and isinstance(a[1], list) and len(a[1]) in (2, 3) and all(map(_is_int, a[1]))) or (
        a[0] == "work" and isinstance(a[1], list) and len(a[1]) == 2 and _is_int(a[1][0])
        and isinstance(a[1][1], list) and all(
            isinstance(t, list) and len(t) == 2 and _is_int(t[0]) and isinstance(t[1], list) and t[1]
            and all(map(_is_int, t[1])) for t in a[1][1])))


def _known_dtype(dtype) -> bool:
    try:
        return isinstance(dtype, str) and np_dtype(dtype).kind in "biuf"
    except TypeError:
        return False


def _manifest_problem(m: dict) -> str:
    """What is wrong with the types and values of the manifest's fields ('' when nothing): everything the loader,
    `fxc inspect` and `fxc extract` read is checked here once."""
    if not isinstance(m["target"], str):
        return "'target' is not a string"
    dim_ok = _is_int
    if "symbols" in m:      # format 2: size symbols (runtime/symbols.py)
        from ..symbols import manifest_problem  # deferred: format 2 only (the load's size budget)
        problem, dim_ok = manifest_problem(m, _is_int)
        if problem:
            return problem
    for kind in ("inputs", "outputs"):
        if not isinstance(m[kind], list) or not all(_is_spec(s, dim_ok) for s in m[kind]):
            return f"'{kind}' is not a list of {{name, shape, dtype}}"
    if not _is_int(m["workspace_bytes"]):
        return "'workspace_bytes' is not a non-negative integer"
    p = m["params"]
    if not isinstance(p, dict) or not isinstance(p.get("tensors"), list):
        return "'params' has no list of tensors"
    if p.get("byte_order", "little") != "little":
        return (f"params byte_order is {p.get('byte_order')!r}, but fxc writes params little-endian on every "
                f"machine (the manifest was edited or damaged)")
    for t in p["tensors"]:
        if not (isinstance(t, dict) and _is_int(t.get("index")) and _known_dtype(t.get("dtype"))
                and isinstance(t.get("shape"), list) and all(_is_int(d) for d in t["shape"])
                and _is_int(t.get("offset")) and _is_int(t.get("nbytes"))):
            return "a params tensor is not {index, dtype, shape, offset, nbytes}"
    for step in m["plan"] if isinstance(m["plan"], list) else [None]:
        if not (isinstance(step, dict) and isinstance(step.get("kernel"), str) and isinstance(step.get("args"), list)
                and all(map(_is_slot, step["args"]))):
            return "'plan' is not a list of {kernel, args: [[slot kind, index]]}"
    for name, info in m["parts"].items():
        if name not in PARTS:
            return f"part {name!r} is not an fxc artifact part ({', '.join(PARTS)})"
        if not (isinstance(info, dict) and isinstance(info.get("sha256"), str) and _is_int(info.get("bytes"))):
            return f"part {name!r} has no {{sha256, bytes}}"
    if not isinstance(m.get("kernels", []), list) or not all(isinstance(k, str) for k in m.get("kernels", [])):
        return "'kernels' is not a list of strings"
    info = m.get("target_info", {})
    flags = info.get("cpu_flags", []) if isinstance(info, dict) else None
    if not isinstance(flags, list) or not isinstance(info.get("triple", ""), str) \
            or not all(isinstance(f, str) for f in flags):
        return "'target_info' is not {triple, cpu, cpu_flags}"
    if not isinstance(m.get("c_abi", {}), dict):
        return "'c_abi' is not an object"
    if "model" in m:        # export's name= and version=
        from .identity import model_problem  # deferred: named artifacts only (the load's size budget)
        return model_problem(m["model"])
    return ""


def _read_part(path, z: zipfile.ZipFile, entry, name: str, info: dict) -> bytes:
    if entry is None:
        raise ArtifactError(f"{path}: part {name!r} is listed in the manifest but missing; {_REEXPORT}")
    if entry.file_size != info["bytes"]:
        raise ArtifactError(f"{path}: part {name!r} is {entry.file_size} bytes, the manifest says {info['bytes']}; "
                            f"the artifact was modified or damaged: {_REEXPORT}")
    data = _inflate(path, z, entry, info["bytes"])
    digest = hashlib.sha256(data).hexdigest()
    if digest != info["sha256"] or len(data) != info["bytes"]:
        raise ArtifactError(f"{path}: part {name!r} does not match its sha256 in the manifest (expected "
                            f"{info['sha256']}, got {digest}); the artifact was modified or damaged: {_REEXPORT}")
    return data



def interface(manifest: dict) -> dict:
    """What the library's `fxc_interface()` must say (as JSON) for this manifest: signature, params
    layout, workspace size and execution plan. `fxc.export` embeds it; `load` compares the two."""
    sig = lambda specs: [[s["name"], s["dtype"], list(s["shape"])] for s in specs]  # noqa: E731
    out = {"inputs": sig(manifest["inputs"]), "outputs": sig(manifest["outputs"]),
           "workspace_bytes": manifest["workspace_bytes"],
           "consts": [[t["dtype"], list(t["shape"]), t["offset"]] for t in manifest["params"]["tensors"]],
           "plan": manifest["plan"]}
    if manifest.get("symbols"):     # the ranges the library checks, its workspace layout
        out.update(symbols=[[s["name"], s["min"], s["max"], s["divisor"]] for s in manifest["symbols"]],
                   sym_header=manifest["sym_header"], row_bytes=manifest["row_bytes"])
        if "sym_bytes" in manifest:     # the workspace's symbolic size (several symbols: a sum of products)
            out.update(sym_bytes=manifest["sym_bytes"])
    return out


def unpack_params(manifest: dict, blob: bytes) -> list:
    """The constants as numpy arrays (64-byte aligned, read-only views of one buffer)."""
    p = manifest["params"]
    if not np.little_endian:
        raise ArtifactError("artifact params are little-endian and this machine is big-endian; fxc cannot run "
                            "this artifact here")
    raw = np.empty(len(blob) + ALIGN, np.uint8)
    start = (-raw.ctypes.data) % ALIGN
    buf = raw[start:start + len(blob)]
    buf[:] = np.frombuffer(blob, np.uint8)
    out = []
    for t in p["tensors"]:
        n = int(np.prod(t["shape"], dtype=np.int64)) * np_dtype(t["dtype"]).itemsize
        if t["offset"] + n > len(blob) or t["offset"] % ALIGN:
            raise ArtifactError(f"param {t['index']} lies outside {PARAMS}; the manifest is inconsistent: "
                                f"{_REEXPORT}")
        a = buf[t["offset"]:t["offset"] + n].view(np_dtype(t["dtype"])).reshape(t["shape"])
        a.flags.writeable = False
        out.append(a)
    return out


def is_device_artifact(manifest: dict) -> bool:
    return str(manifest.get("target", "")).split(" ")[0] in PROGRAMS


def program_part(manifest: dict) -> str:
    """The part holding a device artifact's program (OpenCL C, or GLSL shaders)."""
    return PROGRAMS[str(manifest.get("target", "")).split(" ")[0]]

