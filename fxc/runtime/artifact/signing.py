"""Ed25519 signatures of deploy artifacts (optional; needs the `cryptography` package: pip install 'fxc[sign]').

Takes keys as `cryptography` key objects, PEM bytes, paths of PEM files, or raw 32-byte keys (a trusted key's raw
bytes are a public key's; a private key, as an object or a PEM file, stands for its public key). Produces and checks
`manifest.sig`: the 64-byte Ed25519 signature of the manifest's exact bytes as stored in the artifact. The
manifest holds the sha256 and size of every other part, so a valid signature vouches for the whole artifact.
The artifact reader checks it before any other part is read, and so before the library is loaded.

`cryptography` is imported only here and only when a key is used: `fxc.load` without `trusted_keys` never imports
it (the runtime's imports stay numpy + ctypes).
"""
from __future__ import annotations

import os
from pathlib import Path

from ...errors import ArtifactError, FxcError

SIGNATURE = "manifest.sig"
SIGNATURE_BYTES = 64


class SignatureError(ArtifactError):
    """An artifact that is not signed, or whose signature is invalid or not made by a trusted key."""


def _crypto():
    try:
        from cryptography.hazmat.primitives import serialization  # deferred: cryptography is optional (fxc[sign])
        from cryptography.hazmat.primitives.asymmetric import ed25519
    except ImportError:
        raise FxcError("signed artifacts need the cryptography package: pip install 'fxc[sign]' "
                       "(or pip install cryptography)") from None
    return ed25519, serialization


def _key_bytes(key, what: str) -> bytes:
    if isinstance(key, (str, os.PathLike)):
        try:
            return Path(key).read_bytes()
        except OSError as e:
            raise FxcError(f"cannot read the {what} key file {key}: {e.strerror or e}") from None
    if isinstance(key, (bytes, bytearray)):
        return bytes(key)
    raise FxcError(f"a {what} key must be a cryptography Ed25519 key, PEM bytes, a PEM file's path or 32 raw "
                   f"bytes; got {type(key).__name__}")


def private_key(key):
    """An Ed25519PrivateKey from `key` (see the module's doc)."""
    ed25519, serialization = _crypto()
    if isinstance(key, ed25519.Ed25519PrivateKey):
        return key
    data = _key_bytes(key, "signing")
    try:
        if len(data) == 32:
            return ed25519.Ed25519PrivateKey.from_private_bytes(data)
        k = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as e:
        raise FxcError(f"not an unencrypted Ed25519 private key in PEM ({e}); make one with `fxc keygen`") from None
    if not isinstance(k, ed25519.Ed25519PrivateKey):
        raise FxcError(f"the signing key is a {type(k).__name__}, not Ed25519; make one with `fxc keygen`")
    return k


def public_keys(keys) -> list:
    """Ed25519PublicKeys from a list of keys: public keys, or private keys (objects or PEM files: each stands for
    its public key); raw 32 bytes are a public key."""
    ed25519, serialization = _crypto()
    if isinstance(keys, (str, os.PathLike, bytes, bytearray)) or not hasattr(keys, "__iter__"):
        keys = [keys]
    out = []
    for key in keys:
        if not isinstance(key, (ed25519.Ed25519PublicKey, ed25519.Ed25519PrivateKey)):
            data = _key_bytes(key, "trusted")
            try:
                key = (ed25519.Ed25519PublicKey.from_public_bytes(data) if len(data) == 32
                       else serialization.load_pem_private_key(data, password=None) if b"PRIVATE KEY-" in data
                       else serialization.load_pem_public_key(data))
            except (ValueError, TypeError) as e:
                raise FxcError(f"not an Ed25519 public key in PEM, nor an unencrypted private key ({e}); "
                               f"`fxc keygen` writes both (*.pub.pem: the one to give loaders)") from None
        if isinstance(key, ed25519.Ed25519PrivateKey):
            key = key.public_key()
        if not isinstance(key, ed25519.Ed25519PublicKey):
            raise FxcError(f"a trusted key is a {type(key).__name__}, not Ed25519")
        out.append(key)
    if not out:
        raise FxcError("trusted_keys is empty: give at least one public key (or None to skip the check)")
    return out


def sign(key, manifest: bytes) -> bytes:
    """The signature of the manifest's bytes with the private key `key`."""
    return private_key(key).sign(manifest)


def verify(path, manifest: bytes, signature: bytes | None, keys) -> None:
    """Raise SignatureError unless `signature` is one of `keys`' signatures of `manifest`."""
    from cryptography.exceptions import InvalidSignature  # deferred: cryptography is optional
    trusted = public_keys(keys)
    if signature is None:
        raise SignatureError(f"{path}: the artifact is not signed, and trusted keys were given; export it with "
                             f"fxc.export(..., sign_key=...) (or `fxc compile --sign-key`)")
    if len(signature) == SIGNATURE_BYTES:
        for key in trusted:
            try:
                key.verify(signature, manifest)
                return
            except InvalidSignature:
                pass
    raise SignatureError(f"{path}: the artifact's signature is not valid for any of the {len(trusted)} trusted "
                         f"key(s): it was modified after signing or signed by another key; do not run it")


def generate(path) -> tuple:
    """Write a new Ed25519 private key to `path` (PEM, mode 0600) and its public key to `<path stem>.pub.pem`;
    returns both paths. Existing files are never overwritten."""
    ed25519, serialization = _crypto()
    key = ed25519.Ed25519PrivateKey.generate()
    path = Path(path)
    pub = path.with_name(path.name.removesuffix(".pem") + ".pub.pem")
    data = {path: (key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                     serialization.NoEncryption()), 0o600),
            pub: (key.public_key().public_bytes(serialization.Encoding.PEM,
                                                serialization.PublicFormat.SubjectPublicKeyInfo), 0o644)}
    for p in data:
        if p.exists():
            raise FxcError(f"{p} exists; choose another name (fxc never overwrites a key)")
    for p, (pem, mode) in data.items():
        try:
            fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
        except OSError as e:
            raise FxcError(f"cannot write {p}: {e.strerror or e}") from None
        with os.fdopen(fd, "wb") as f:
            f.write(pem)
    return path, pub
