"""Which model an artifact is: the signed name and version, and the pinned bytes (read.py calls these only when asked).

`fxc.export(..., name=, version=)` records {"name", "version"} under "model" in the manifest, which the signature
covers. A reader asks `expected_name` (another model signed by the same key is refused: substitution) and
`min_version` (an older release signed by the same key is refused: rollback), or `expected_sha256` (exactly one
file's bytes, signed or not). A version is dot-separated whole numbers ("3", "1.4.2"), compared numerically with
trailing zeros ignored ("1.10" > "1.9", "1.4" == "1.4.0"). Errors: IdentityError (an ArtifactError) for another
model, ArtifactError for a malformed name, version or sha256. Standard library only.
"""
from __future__ import annotations

import hashlib
import re
from pathlib import Path

from ...errors import ArtifactError

VERSION = re.compile(r"[0-9]{1,9}(\.[0-9]{1,9}){0,7}")
MAX_NAME = 200


class IdentityError(ArtifactError):
    """An artifact that is not the model asked for: another name, a version below the minimum, other bytes."""


def check_identity_fields(name, version) -> tuple:
    """(name, version) as an export records them: a name of 1..MAX_NAME printable characters, a version of
    dot-separated whole numbers (a non-negative int is taken as its digits); ArtifactError otherwise."""
    if name is not None and not (isinstance(name, str) and 0 < len(name) <= MAX_NAME and name.isprintable()):
        raise ArtifactError(f"model name {name!r}: give a non-empty printable string of at most {MAX_NAME} "
                            f"characters (e.g. 'resnet18')")
    if isinstance(version, int) and not isinstance(version, bool) and version >= 0:
        version = str(version)
    if version is not None and not (isinstance(version, str) and VERSION.fullmatch(version)):
        raise ArtifactError(f"model version {version!r}: give dot-separated whole numbers like '3' or '1.4.2' "
                            f"(compared numerically: '1.10' is newer than '1.9')")
    return name, version


def model_problem(model) -> str:
    """What is wrong with a manifest's "model" entry ('' when nothing)."""
    if not isinstance(model, dict) or set(model) - {"name", "version"} or \
            not isinstance(model.get("version", ""), str):
        return "'model' is not {name, version}"
    try:
        check_identity_fields(model.get("name"), model.get("version"))
    except ArtifactError as e:
        return f"'model': {e}"
    return ""


def _version_key(version: str) -> tuple:
    parts = [int(p) for p in version.split(".")]
    while parts and parts[-1] == 0:
        parts.pop()
    return tuple(parts)


def check_identity(path, manifest: dict, expected_name=None, min_version=None) -> None:
    """IdentityError unless the manifest's model name is `expected_name` and its version at least `min_version`
    (each when given)."""
    _, min_version = check_identity_fields(None, min_version)
    model = manifest.get("model") or {}
    name, version = model.get("name"), model.get("version")
    if expected_name is not None and name != expected_name:
        raise IdentityError(f"{path}: the artifact is the model {name!r}, not {expected_name!r}"
                            + ("" if name else " (it names none: export it with fxc.export(..., name=, version=))")
                            + "; do not run it in its place")
    if min_version is not None and (version is None or _version_key(version) < _version_key(min_version)):
        raise IdentityError(f"{path}: the artifact's model version is {version!r}, older than the minimum "
                            f"{min_version!r} (a rollback?)"
                            + ("" if version else " (export it with fxc.export(..., version=))") + "; do not run it")


def pinned_bytes(path: Path, expected_sha256) -> bytes:
    """The artifact file's bytes, once their sha256 is `expected_sha256` (IdentityError otherwise)."""
    if not (isinstance(expected_sha256, str) and re.fullmatch(r"[0-9a-fA-F]{64}", expected_sha256)):
        raise ArtifactError(f"expected_sha256 {expected_sha256!r} is not a sha256 (64 hex digits; `sha256sum "
                            f"model.fxc` prints it)")
    data = Path(path).read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    if digest != expected_sha256.lower():
        raise IdentityError(f"{path}: its sha256 is {digest}, not the expected {expected_sha256.lower()}: another "
                            f"artifact (another model, another release, or modified); do not run it")
    return data
