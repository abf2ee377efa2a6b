"""Deploy artifacts: `load` the single file that `fxc.export` writes, verified (read.py: the format, the zip, the
signature, the manifest's schema, every part's sha256), as a module.

A CPU artifact's checks go further: the format version, the target (and CPU features), that the library's own
description of itself (`fxc_interface()`: signature, params layout, workspace, plan) equals the manifest's, so an
edited manifest cannot make the kernels read or write out of bounds, and that the library accepts the params
(`fxc_check_params`, as its C `fxc_init` does). A device artifact is loaded by device.py. Any failure is an
`ArtifactError`/`TargetError` that says what to do.

This module is the deploy runtime: it imports only the standard library, numpy, ctypes and
`fxc.runtime`/`fxc.errors` — never torch, llvmlite or the compiler (tests/deploy/test_export.py enforces it).
"""
from __future__ import annotations

import ctypes
import json
import os
import shutil
import tempfile
import weakref
from dataclasses import dataclass, field
from pathlib import Path

from ...errors import ArtifactError, LibraryError, TargetError
from ..cpu.library import arch_of, check_elf, process_arch
from ..cpu.module import Module
from ..tensors import TensorSpec
from .read import _REEXPORT, LIBRARY, MANIFEST, PARAMS, interface, is_device_artifact, read_artifact, unpack_params

# targets this runtime can run (devices: with their library)
RUNTIME_TARGETS = ("llvm", "opencl", "opengl", "webgl", "wasm", "webgpu")
DEVICE_TARGETS = ("clml",)                                   # known targets whose device runtime is not here


def check_target(manifest: dict) -> None:
    """Raise TargetError unless this machine can run the artifact's target (and its "requires": docs/byoc.md)."""
    target = manifest["target"]
    for name in manifest.get("requires", ()) if target not in DEVICE_TARGETS else ():
        if name != "dnnl":
            raise TargetError(f"the artifact calls the external library {name!r}, which this fxc runtime does not "
                              f"know; use the fxc that wrote it")
        from ..cpu.dnnl import check  # deferred: artifacts linking oneDNN only (size budget)
        check()
    if target in DEVICE_TARGETS:
        raise TargetError(f"artifact target {target!r} needs its device runtime, which is missing here (this fxc "
                          f"runtime runs: {', '.join(RUNTIME_TARGETS)}); run it on a machine with the {target} "
                          f"device and its fxc runtime, or export the model for target 'llvm'")
    if target not in RUNTIME_TARGETS:
        raise TargetError(f"unknown artifact target {target!r} (this fxc runtime runs: {', '.join(RUNTIME_TARGETS)}); "
                          f"use the fxc version that wrote it, or export the model for target 'llvm'")
    info = manifest.get("target_info") or {}
    triple, here = str(info.get("triple", "")), process_arch()
    if triple and arch_of(triple.split("-")[0]) != here:
        raise TargetError(f"artifact was built for {triple}; this machine runs {here} code. Run it on such a machine "
                          f"(fxc.load, or the C entry point), or here under qemu-user: a C program built by the cross "
                          f"gcc, run by qemu-{arch_of(triple.split('-')[0])} -L <sysroot> (docs/arm.md)")
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



@dataclass
class ArtifactModule(Module):
    """A Module loaded from an artifact: numpy in, numpy out, plus its `manifest`."""
    manifest: dict = field(default_factory=dict)


TMP_PREFIX = "fxc-artifact-"


def load(path, trusted_keys=None, expected_name=None, min_version=None, expected_sha256=None) -> ArtifactModule:
    """Load a deploy artifact written by `fxc.export`, checking every part's sha256.

    Parameters
    ----------
    path : str or os.PathLike
        The artifact file.
    trusted_keys : list, optional
        Ed25519 public keys (cryptography key objects, PEM bytes, PEM file paths or raw 32-byte keys; a private
        key, object or PEM file, stands for its public key). When given, the artifact must be signed by one of
        them (`fxc.export(..., sign_key=...)`); the signature is checked before any part is read and before the
        library is loaded. Without them a signed artifact loads with an UnverifiedSignatureWarning.
    expected_name : str, optional
        The model name the signed manifest must record (`fxc.export(..., name=...)`); needs trusted_keys.
    min_version : str, optional
        The lowest model version accepted ("1.4.2", compared numerically; `fxc.export(..., version=...)`), so an
        older release signed by the same key cannot be rolled back in; needs trusted_keys.
    expected_sha256 : str, optional
        The sha256 of the artifact file (what `sha256sum` prints): exactly these bytes, signed or not.

    Returns
    -------
    ArtifactModule
        Callable on numpy arrays of the exported shapes/dtypes (format 2: any size in the symbols' ranges,
        runtime/symbols.py); returns an array (a list of arrays for
        several outputs). `.inputs`/`.outputs` hold the signature, `.manifest` the manifest.

    Raises
    ------
    ArtifactError
        Truncated, corrupt or tampered file, an unknown format version, params that are not the library's.
    SignatureError
        (an ArtifactError) trusted_keys given, and the artifact is unsigned or not signed by one of them.
    IdentityError
        (an ArtifactError) another model name, a version below min_version, or other bytes than expected_sha256.
    TargetError
        The artifact's target (or CPU) is not available on this machine.
    InputError
        (when called) an input of another shape or dtype than the exported signature.
    """
    manifest, parts = read_artifact(path, trusted_keys, expected_name=expected_name, min_version=min_version,
                                    expected_sha256=expected_sha256)
    if is_device_artifact(manifest):
        from .device import load_device  # deferred: a CPU load stays small (tests/deploy/test_export.py's budget)
        return load_device(path, manifest, parts)
    check_target(manifest)
    try:
        consts = unpack_params(manifest, parts[PARAMS])
        inputs = [TensorSpec(s["name"], tuple(s["shape"]), s["dtype"]) for s in manifest["inputs"]]
        outputs = [TensorSpec(s["name"], tuple(s["shape"]), s["dtype"]) for s in manifest["outputs"]]
        expected = interface(manifest)
    except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as e:
        raise ArtifactError(f"{path}: {MANIFEST} is inconsistent ({type(e).__name__}: {e}); {_REEXPORT}") from None
    _remove_stale_folders()
    tmp = tempfile.mkdtemp(prefix=f"{TMP_PREFIX}{os.getpid()}-")   # private (0700), removed with the module
    try:
        lib = Path(tmp) / LIBRARY
        lib.write_bytes(parts[LIBRARY])
        _check_library(path, lib, expected, parts[PARAMS])
        cls, extra = ArtifactModule, {}
        if manifest.get("symbols"):
            from ..cpu.dynamic import DynamicArtifactModule as cls  # deferred: format 2 only (the load's size budget)
            extra = cls.fields(manifest)
        mod = cls(target=manifest["target"], library=str(lib), inputs=inputs, outputs=outputs, consts=consts,
                  workspace_bytes=int(manifest["workspace_bytes"]), kernels=list(manifest.get("kernels", [])),
                  manifest=manifest, **extra)
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


def _remove_stale_folders() -> None:
    """Remove the library folders of loads by processes that are gone (killed before they could clean up):
    fxc-artifact-<pid>-* folders of this user whose process no longer exists."""
    root = Path(tempfile.gettempdir())
    try:
        entries = list(root.glob(f"{TMP_PREFIX}*-*"))
    except OSError:
        return
    for d in entries:
        pid = d.name[len(TMP_PREFIX):].split("-", 1)[0]
        try:
            if not pid.isdigit() or int(pid) == os.getpid() or d.lstat().st_uid != os.geteuid() or d.is_symlink():
                continue
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(d, ignore_errors=True)
        except (OSError, ValueError):
            continue


def _check_library(path, lib: Path, expected: dict, params: bytes) -> None:
    """Raise ArtifactError unless the library describes itself exactly as the manifest does and accepts the params
    (fxc_check_params: the same size and checksum test as its C fxc_init)."""
    try:
        check_elf(str(lib))
    except LibraryError as e:
        raise ArtifactError(f"{path}: {e}; {_REEXPORT}") from None
    handle = ctypes.CDLL(str(lib))
    fn = getattr(handle, "fxc_interface", None)
    check = getattr(handle, "fxc_check_params", None)
    if fn is None or check is None:
        raise ArtifactError(f"{path}: the library has no fxc_interface() or fxc_check_params() (written by an older "
                            f"fxc); {_REEXPORT}")
    fn.restype = ctypes.c_char_p
    try:
        actual = json.loads(fn().decode())
    except (UnicodeDecodeError, json.JSONDecodeError, AttributeError):
        actual = None
    if actual != json.loads(json.dumps(expected)):
        raise ArtifactError(f"{path}: the manifest's signature, params layout or plan differs from the one "
                            f"compiled into {LIBRARY}; the manifest was edited: {_REEXPORT}")
    check.restype, check.argtypes = ctypes.c_int, [ctypes.c_char_p, ctypes.c_size_t]
    if check(params, len(params)) != 0:
        raise ArtifactError(f"{path}: {PARAMS} is not the one this library was exported with (size or checksum "
                            f"differs: another model's params?); {_REEXPORT}")

