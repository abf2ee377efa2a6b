"""Deploy artifacts: read, verify and load the single file that `fxc.export` writes.

An artifact is a zip archive with these parts (all listed, with their sha256, in the manifest):

    manifest.json      format version, fxc version, target, input/output signature, workspace size,
                       params layout, the execution plan (kernel calls and the buffers each one gets),
                       the C ABI, the kernels, and sha256 + size of every other part
    libfxc_model.so    the kernels, the plan compiled into `fxc_run`, and the plain C entry points
                       (`fxc_init`, `fxc_main`, `fxc_interface`, ...)
    params.bin         constants as raw little-endian bytes, each at a 64-byte aligned offset
                       (dtype, shape and offset in the manifest; never pickle)
    fxc_model.h        the C header of the entry points
    fxc_model.c        the C source of the entry points (for reading; it is already in the library)

`load` verifies the zip's CRCs, every part's sha256, the format version, the target (and CPU features),
and that the library's own description of itself (`fxc_interface()`: signature, params layout,
workspace, plan) equals the manifest's, so an edited manifest cannot make the kernels read or write
out of bounds. Any failure is an `ArtifactError`/`TargetError` that says what to do.

This module is the deploy runtime: it imports only the standard library, numpy, ctypes and
`fxc.runtime`/`fxc.errors` — never torch, llvmlite or the compiler (tests/test_export.py enforces it).
"""
from __future__ import annotations

import ctypes
import hashlib
import json
import os
import shutil
import struct
import tempfile
import weakref
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import ArtifactError, TargetError
from .module import Module, TensorSpec, np_dtype

FORMAT = "fxc-artifact"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
LIBRARY = "libfxc_model.so"
PARAMS = "params.bin"
HEADER = "fxc_model.h"
C_SOURCE = "fxc_model.c"
ALIGN = 64
PROGRAM = "program.cl"          # a device artifact's kernels: OpenCL C source, built on the device at load
PROGRAMS = {"opencl": PROGRAM, "opengl": "program.glsl",     # device kind -> its program part (GLSL: shaders,
            "webgl": "program.webgl.json"}                    # WebGL: fragment shaders in JSON)

RUNTIME_TARGETS = ("llvm", "opencl", "opengl", "webgl")     # targets this runtime can run (devices: with their library)
DEVICE_TARGETS = ("clml",)                                   # known targets whose device runtime is not here
REQUIRED = ("target", "inputs", "outputs", "workspace_bytes", "parts", "params", "plan")
_REEXPORT = "export the model again with fxc.export (or `fxc compile`)"


def read_artifact(path) -> tuple:
    """Open an artifact and verify it; returns (manifest dict, {part name: bytes}).

    Raises ArtifactError for a missing, truncated, corrupt or tampered file or an unknown format version.
    """
    path = Path(path)
    if not path.is_file():
        raise ArtifactError(f"{path}: no such artifact file; write one with fxc.export or `fxc compile`")
    try:
        with zipfile.ZipFile(path) as z:
            names = z.namelist()
            if MANIFEST not in names:
                raise ArtifactError(f"{path}: not an fxc artifact (no {MANIFEST}); {_REEXPORT}")
            manifest = _parse_manifest(path, z.read(MANIFEST))
            listed = manifest["parts"]
            extra = sorted(set(names) - set(listed) - {MANIFEST})
            if extra:
                raise ArtifactError(f"{path}: part(s) {extra} are not listed in the manifest; the file was "
                                    f"modified: {_REEXPORT}")
            parts = {name: _read_part(path, z, name, info) for name, info in listed.items()}
    except (zipfile.BadZipFile, zipfile.LargeZipFile, zlib.error, struct.error, EOFError, NotImplementedError,
            ValueError) as e:
        raise ArtifactError(f"{path}: not a readable fxc artifact (truncated or corrupt: {e}); {_REEXPORT}") from None
    except OSError as e:
        raise ArtifactError(f"{path}: cannot read the artifact ({e}); check the file's permissions") from None
    for name in (program_part(manifest) if is_device_artifact(manifest) else LIBRARY, PARAMS):
        if name not in parts:
            raise ArtifactError(f"{path}: the manifest lists no {name!r} part; {_REEXPORT}")
    return manifest, parts


def _parse_manifest(path, raw: bytes) -> dict:
    try:
        m = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ArtifactError(f"{path}: {MANIFEST} is not valid JSON ({e}); {_REEXPORT}") from None
    if not isinstance(m, dict) or m.get("format") != FORMAT:
        raise ArtifactError(f"{path}: {MANIFEST} does not describe an {FORMAT}; {_REEXPORT}")
    if m.get("format_version") != FORMAT_VERSION:
        raise ArtifactError(f"{path}: unknown artifact format version {m.get('format_version')!r} "
                            f"(written by fxc {m.get('fxc_version', '?')}); this runtime reads version "
                            f"{FORMAT_VERSION}: use the fxc version that wrote it, or export the model again "
                            f"with this one")
    missing = [key for key in REQUIRED if key not in m]
    if missing or not isinstance(m["parts"], dict):
        raise ArtifactError(f"{path}: {MANIFEST} has no {missing or 'parts'} entry; {_REEXPORT}")
    return m


def _read_part(path, z: zipfile.ZipFile, name: str, info) -> bytes:
    try:
        data = z.read(name)
    except KeyError:
        raise ArtifactError(f"{path}: part {name!r} is listed in the manifest but missing; {_REEXPORT}") from None
    digest = hashlib.sha256(data).hexdigest()
    if not isinstance(info, dict) or digest != info.get("sha256") or len(data) != info.get("bytes"):
        expected = info.get("sha256") if isinstance(info, dict) else None
        raise ArtifactError(f"{path}: part {name!r} does not match its sha256 in the manifest (expected "
                            f"{expected}, got {digest}); the artifact was modified or damaged: {_REEXPORT}")
    return data


def check_target(manifest: dict) -> None:
    """Raise TargetError unless this machine can run the artifact's target."""
    target = manifest["target"]
    if target in DEVICE_TARGETS:
        raise TargetError(f"artifact target {target!r} needs its device runtime, which is missing here (this fxc "
                          f"runtime runs: {', '.join(RUNTIME_TARGETS)}); run it on a machine with the {target} "
                          f"device and its fxc runtime, or export the model for target 'llvm'")
    if target not in RUNTIME_TARGETS:
        raise TargetError(f"unknown artifact target {target!r} (this fxc runtime runs: {', '.join(RUNTIME_TARGETS)}); "
                          f"use the fxc version that wrote it, or export the model for target 'llvm'")
    info = manifest.get("target_info") or {}
    arch = str(info.get("triple", "")).split("-")[0]
    here = {"arm64": "aarch64", "amd64": "x86_64"}.get(os.uname().machine.lower(), os.uname().machine.lower())
    if arch and arch != here:
        raise TargetError(f"artifact was built for {info['triple']}, this machine is {here}; "
                          f"export it on (or for) a {here} machine")
    flags = _cpu_flags()
    missing = sorted(set(info.get("cpu_flags", ())) - flags)
    if missing and flags:
        raise TargetError(f"artifact was built for a CPU with {', '.join(missing)}, which this CPU lacks; "
                          f"export it on a machine like the deploy machine")


def _cpu_flags() -> set:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def interface(manifest: dict) -> dict:
    """What the library's `fxc_interface()` must say (as JSON) for this manifest: signature, params
    layout, workspace size and execution plan. `fxc.export` embeds it; `load` compares the two."""
    sig = lambda specs: [[s["name"], s["dtype"], list(s["shape"])] for s in specs]  # noqa: E731
    return {"inputs": sig(manifest["inputs"]), "outputs": sig(manifest["outputs"]),
            "workspace_bytes": manifest["workspace_bytes"],
            "consts": [[t["dtype"], list(t["shape"]), t["offset"]] for t in manifest["params"]["tensors"]],
            "plan": manifest["plan"]}


def unpack_params(manifest: dict, blob: bytes) -> list:
    """The constants as numpy arrays (64-byte aligned, read-only views of one buffer)."""
    p = manifest["params"]
    if p.get("byte_order", "little") != "little" or not np.little_endian:
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


def extract(path, directory) -> Path:
    """Verify an artifact and write its parts into `directory` (for C programs: fxc_init(directory))."""
    manifest, parts = read_artifact(path)
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    for name, data in {MANIFEST: json.dumps(manifest, indent=1).encode(), **parts}.items():
        (d / name).write_bytes(data)
    if LIBRARY in parts:        # a device artifact has its program instead
        (d / LIBRARY).chmod(0o755)
    return d


@dataclass
class ArtifactModule(Module):
    """A Module loaded from an artifact: numpy in, numpy out, plus its `manifest`."""
    manifest: dict = field(default_factory=dict)


def load(path) -> ArtifactModule:
    """Load a deploy artifact written by `fxc.export`, checking every part's sha256.

    Parameters
    ----------
    path : str or os.PathLike
        The artifact file.

    Returns
    -------
    ArtifactModule
        Callable on numpy arrays of the exported shapes/dtypes; returns an array (a list of arrays for
        several outputs). `.inputs`/`.outputs` hold the signature, `.manifest` the manifest.

    Raises
    ------
    ArtifactError
        Truncated, corrupt or tampered file, or an unknown format version.
    TargetError
        The artifact's target (or CPU) is not available on this machine.
    InputError
        (when called) an input of another shape or dtype than the exported signature.
    """
    manifest, parts = read_artifact(path)
    if is_device_artifact(manifest):
        return load_device(path, manifest, parts)
    check_target(manifest)
    try:
        consts = unpack_params(manifest, parts[PARAMS])
        inputs = [TensorSpec(str(s["name"]), tuple(int(d) for d in s["shape"]), str(s["dtype"]))
                  for s in manifest["inputs"]]
        outputs = [TensorSpec(str(s["name"]), tuple(int(d) for d in s["shape"]), str(s["dtype"]))
                   for s in manifest["outputs"]]
        for spec in inputs + outputs:
            np_dtype(spec.dtype)
        expected = interface(manifest)
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise ArtifactError(f"{path}: {MANIFEST} is inconsistent ({type(e).__name__}: {e}); {_REEXPORT}") from None
    tmp = tempfile.mkdtemp(prefix="fxc-artifact-")   # private (mode 0700), removed with the module
    try:
        lib = Path(tmp) / LIBRARY
        lib.write_bytes(parts[LIBRARY])
        _check_interface(path, lib, expected)
        mod = ArtifactModule(target=manifest["target"], library=str(lib), inputs=inputs, outputs=outputs,
                             consts=consts, workspace_bytes=int(manifest["workspace_bytes"]),
                             kernels=list(manifest.get("kernels", [])), manifest=manifest)
    except OSError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        raise TargetError(f"cannot load the artifact's library on this machine ({e}); it needs libgomp, libm "
                          f"and libc (Debian: apt-get install libgomp1) and a temporary folder that allows "
                          f"executables (set TMPDIR if {tempfile.gettempdir()} is mounted noexec)") from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    weakref.finalize(mod, shutil.rmtree, tmp, True)
    return mod


def _check_interface(path, lib: Path, expected: dict) -> None:
    """Raise ArtifactError unless the library describes itself exactly as the manifest does."""
    fn = getattr(ctypes.CDLL(str(lib)), "fxc_interface", None)
    if fn is None:
        raise ArtifactError(f"{path}: the library has no fxc_interface(); {_REEXPORT}")
    fn.restype = ctypes.c_char_p
    try:
        actual = json.loads(fn().decode())
    except (UnicodeDecodeError, json.JSONDecodeError, AttributeError):
        actual = None
    if actual != json.loads(json.dumps(expected)):
        raise ArtifactError(f"{path}: the manifest's signature, params layout or plan differs from the one "
                            f"compiled into {LIBRARY}; the manifest was edited: {_REEXPORT}")


# -- device (OpenCL) artifacts: program source + plan + params, run by fxc.runtime.device_module ------------------
def is_device_artifact(manifest: dict) -> bool:
    return str(manifest.get("target", "")).split(" ")[0] in PROGRAMS


def program_part(manifest: dict) -> str:
    """The part holding a device artifact's program (OpenCL C, or GLSL shaders)."""
    return PROGRAMS[str(manifest.get("target", "")).split(" ")[0]]


def device_interface_line(manifest: dict) -> str:
    """The first line of a device artifact's program: the sha256 of its interface (signature, params layout,
    workspace, plan with launch shapes), so a manifest edited apart from the program is refused."""
    iface = json.dumps(interface(manifest), sort_keys=True, separators=(",", ":"))
    return f"/* fxc_interface {hashlib.sha256(iface.encode()).hexdigest()} */"


def load_device(path, manifest: dict, parts: dict):
    """A DeviceModule from a verified device artifact (numpy and pyopencl only)."""
    from .device_module import DeviceModule, Launch
    try:
        source = parts[program_part(manifest)].decode()
        if source.split("\n", 1)[0] != device_interface_line(manifest):
            raise ArtifactError(f"{path}: the manifest's signature, params layout or plan differs from the one the "
                                f"program was exported with; the manifest was edited: {_REEXPORT}")
        consts = unpack_params(manifest, parts[PARAMS])
        spec = lambda s: TensorSpec(str(s["name"]), tuple(int(d) for d in s["shape"]), str(s["dtype"]))  # noqa: E731
        inputs, outputs = [spec(s) for s in manifest["inputs"]], [spec(s) for s in manifest["outputs"]]
        plan = [Launch(str(st["kernel"]), [(str(k), int(i)) for k, i in st["args"]], tuple(map(int, st["grid"])),
                       tuple(map(int, st["block"]))) for st in manifest["plan"]]
        workspace = int(manifest["workspace_bytes"])
    except (KeyError, TypeError, ValueError, AttributeError, UnicodeDecodeError) as e:
        raise ArtifactError(f"{path}: {MANIFEST} is inconsistent ({type(e).__name__}: {e}); {_REEXPORT}") from None
    if str(manifest["target"]).split(" ")[0] == "opengl":      # numpy and moderngl only
        from .opengl import GLModule as DeviceModule
    elif str(manifest["target"]).split(" ")[0] == "webgl":     # numpy and playwright (the browser) only
        from .webgl import WebGLModule as DeviceModule  # noqa: F811
    return DeviceModule(manifest["target"], source, inputs, outputs, consts, workspace, plan,
                        kernels=list(manifest.get("kernels", [])),
                        prepack_inputs=[int(i) for i in manifest.get("resident_inputs", [])])
