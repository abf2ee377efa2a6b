"""Folders of artifact parts for C programs: `extract` writes a verified artifact's parts into a new folder (what
`fxc_init(dir)` reads), `verify_folder` checks such a folder again (its signature and every sha256) before a C
program loads the library in it. Imports only the standard library and fxc.runtime / fxc.errors.
"""
from __future__ import annotations

import errno
import hashlib
import os
from pathlib import Path

from ...errors import ArtifactError
from .identity import check_identity
from .read import (
    LIBRARY,
    MANIFEST,
    MAX_MANIFEST,
    SIGNATURE,
    SIGNATURE_BYTES,
    _parse_manifest,
    read_verified,
)
from .signing import verify


def extract(path, directory, trusted_keys=None, **expected) -> Path:
    """Verify an artifact and write its parts into `directory` (for C programs: fxc_init(directory)).

    The manifest is written as the exact bytes stored (and signed), with `manifest.sig` when the artifact is
    signed, so `fxc verify DIR` can check the folder later. `directory` must not exist, or be an empty folder
    that is not a link; files are created new (never through a link, never over an existing file). `expected`:
    expected_name, min_version, expected_sha256 (read.py: which model it must be).
    """
    manifest, parts, raw, signature = read_verified(path, trusted_keys, **expected)
    d = Path(directory)
    try:
        d.mkdir(parents=True, exist_ok=True)
        fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except FileExistsError:
        raise ArtifactError(f"cannot extract into {d}: it exists and is not a folder; name a new folder") from None
    except OSError as e:
        what = "it is a link" if e.errno == errno.ELOOP else e.strerror or str(e)
        raise ArtifactError(f"cannot extract into {d} ({what}); name a new folder you can write") from None
    try:
        if os.listdir(fd):
            raise ArtifactError(f"cannot extract into {d}: the folder is not empty; name a new or empty folder")
        files = {MANIFEST: raw, **({SIGNATURE: signature} if signature is not None else {}), **parts}
        for name, data in files.items():
            _write_new(fd, name, data, 0o755 if name == LIBRARY else 0o644)
    except OSError as e:
        raise ArtifactError(f"cannot extract into {d} ({e.strerror or e}); name a new folder you can write") from None
    finally:
        os.close(fd)
    return d


def verify_folder(directory, trusted_keys, expected_name=None, min_version=None) -> dict:
    """Check a folder written by `extract` before a C program loads it: the manifest's signature by one of
    `trusted_keys` (and its model name and version, when asked), then every listed part's size and sha256, and that
    nothing else (no link) is there. Returns the manifest; raises ArtifactError (SignatureError for the signature,
    IdentityError for another model)."""
    d = Path(directory)

    def read(name: str, limit: int) -> bytes:
        try:
            fd = os.open(d / name, os.O_RDONLY | os.O_NOFOLLOW)
            with os.fdopen(fd, "rb") as f:
                data = f.read(limit + 1)
        except OSError as e:
            raise ArtifactError(f"{d}: cannot read {name} ({e.strerror or e}; a link?); extract the artifact "
                                f"again") from None
        if len(data) > limit:
            raise ArtifactError(f"{d}: {name} is larger than the manifest says; extract the artifact again")
        return data
    raw = read(MANIFEST, MAX_MANIFEST)
    verify(d, raw, read(SIGNATURE, SIGNATURE_BYTES) if (d / SIGNATURE).exists() else None, trusted_keys)
    manifest = _parse_manifest(d, raw)
    check_identity(d, manifest, expected_name, min_version)
    extra = sorted(set(os.listdir(d)) - set(manifest["parts"]) - {MANIFEST, SIGNATURE})
    if extra:
        raise ArtifactError(f"{d}: {extra} are not parts of the artifact; extract it again into a new folder")
    for name, info in manifest["parts"].items():
        data = read(name, info["bytes"])
        if len(data) != info["bytes"] or hashlib.sha256(data).hexdigest() != info["sha256"]:
            raise ArtifactError(f"{d}: {name} does not match its sha256 in the signed manifest (modified after "
                                f"extraction); extract the artifact again")
    return manifest


def _write_new(dir_fd: int, name: str, data: bytes, mode: int) -> None:
    """Create the file `name` in the folder dir_fd (never following or replacing anything) and write data."""
    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode, dir_fd=dir_fd)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
