"""Signatures that say what they vouch for (issue 41, items 14-16): a signed artifact read without trusted keys
warns once that nothing was verified (also with a 64-zero-byte manifest.sig) and `fxc inspect` says "signature
present, not verified"; a private key given as a trusted key stands for its public key, as the docs say; the signed
manifest names the model and its version, so `fxc.load(..., expected_name=, min_version=)` refuses another model
signed by the same key or an older release, and `expected_sha256=` pins a file's exact bytes; device artifacts are
signed too."""
import hashlib
import json
import warnings
import zipfile

import numpy as np
import pytest

import fxc
from fxc.cli import main as cli
from fxc.driver.build import build
from fxc.errors import ArtifactError
from fxc.relay_like.builder import Builder
from fxc.runtime.artifact.identity import IdentityError
from fxc.runtime.artifact.read import MANIFEST, UnverifiedSignatureWarning
from fxc.runtime.artifact.signing import SIGNATURE, SignatureError, generate

X = np.linspace(-2, 2, 8, dtype=np.float32)


def _module(op: str, target: str = "llvm"):
    b = Builder()
    v = b.graph.input((8,), "float32")
    b.graph.outputs = [b.call(op, [v])]
    return build(b.graph, target=target)


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    d = tmp_path_factory.mktemp("keys")
    return generate(d / "signer.pem"), generate(d / "other.pem")


@pytest.fixture(scope="module")
def arts(tmp_path_factory, keys):
    """Artifacts signed by one key: exp as 'scorer' 1.9 and 1.10, tanh as 'other-model' 2.0; plus exp unsigned."""
    d = tmp_path_factory.mktemp("signed")
    (signer, _), _ = keys
    exp, tanh = _module("exp"), _module("tanh")
    return {"v1.9": fxc.export(exp, d / "v1.9.fxc", sign_key=signer, name="scorer", version="1.9"),
            "v1.10": fxc.export(exp, d / "v1.10.fxc", sign_key=signer, name="scorer", version="1.10"),
            "other": fxc.export(tanh, d / "other.fxc", sign_key=signer, name="other-model", version=2),
            "plain": fxc.export(exp, d / "plain.fxc")}


def _with_entries(src, dst, **replace):
    with zipfile.ZipFile(src) as z:
        entries = {n: z.read(n) for n in z.namelist()}
    entries.update({k.replace("_", "."): v for k, v in replace.items()})
    with zipfile.ZipFile(dst, "w") as z:
        for n, data in entries.items():
            z.writestr(n, data)
    return dst


def _load_warnings(path, **kw) -> list:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module = fxc.load(path, **kw)
    np.testing.assert_allclose(module(X), np.exp(X) if "other" not in str(path) else np.tanh(X), rtol=1e-6)
    return [w for w in caught if issubclass(w.category, UnverifiedSignatureWarning)]


def test_unverified_signature_warns_once(arts, keys):
    (_, public), _ = keys
    (w,) = _load_warnings(arts["v1.10"])
    assert "signature was not verified" in str(w.message) and "trusted_keys" in str(w.message)
    assert _load_warnings(arts["v1.10"], trusted_keys=[public]) == []
    assert _load_warnings(arts["plain"]) == []        # unsigned: nothing claimed, nothing to warn about


def test_zero_signature_warns_and_inspect_says_not_verified(arts, keys, tmp_path, capsys):
    (_, public), _ = keys
    zeros = _with_entries(arts["v1.10"], tmp_path / "zeros.fxc", manifest_sig=bytes(64))
    assert len(_load_warnings(zeros)) == 1
    with pytest.raises(SignatureError):
        fxc.load(zeros, trusted_keys=[public])
    assert cli(["inspect", str(zeros)]) == 0
    out = capsys.readouterr()
    assert "signature present, not verified" in out.out and "signed (" not in out.out and out.err == ""
    assert cli(["inspect", str(arts["v1.10"]), "--trusted-key", str(public)]) == 0
    out = capsys.readouterr().out
    assert "signature verified" in out and "model: scorer version 1.10" in out
    assert cli(["run", str(zeros), "--input", str(_npy(tmp_path))]) == 0
    err = capsys.readouterr().err
    assert err.count("fxc: warning:") == 1 and "not verified" in err and "Traceback" not in err


def _npy(tmp_path):
    np.save(tmp_path / "x.npy", X)
    return tmp_path / "x.npy"


def test_a_private_key_file_stands_for_its_public_key(arts, keys):
    (private, _), (other_private, _) = keys
    assert _load_warnings(arts["v1.10"], trusted_keys=[private]) == []
    with pytest.raises(SignatureError):
        fxc.load(arts["v1.10"], trusted_keys=[other_private])
    with pytest.raises(fxc.errors.FxcError, match="not an Ed25519 public key in PEM, nor an unencrypted private"):
        fxc.load(arts["v1.10"], trusted_keys=[b"-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"])


def test_expected_name_refuses_another_model_signed_by_the_same_key(arts, keys):
    (_, public), _ = keys
    fxc.load(arts["v1.10"], trusted_keys=[public], expected_name="scorer")
    with pytest.raises(IdentityError, match="'other-model', not 'scorer'"):
        fxc.load(arts["other"], trusted_keys=[public], expected_name="scorer")
    with pytest.raises(IdentityError, match="names none"):
        fxc.load(_unnamed_signed(arts, keys), trusted_keys=[public], expected_name="scorer")


def _unnamed_signed(arts, keys):
    (signer, _), _ = keys
    return fxc.export(_module("exp"), arts["plain"].parent / "unnamed.fxc", sign_key=signer)


def test_min_version_refuses_a_rollback(arts, keys):
    (_, public), _ = keys
    fxc.load(arts["v1.10"], trusted_keys=[public], expected_name="scorer", min_version="1.10")
    fxc.load(arts["v1.10"], trusted_keys=[public], min_version="1.9.0")      # numeric: 1.10 > 1.9
    with pytest.raises(IdentityError, match="older than the minimum '1.10'"):
        fxc.load(arts["v1.9"], trusted_keys=[public], expected_name="scorer", min_version="1.10")
    with pytest.raises(ArtifactError, match="dot-separated whole numbers"):
        fxc.load(arts["v1.10"], trusted_keys=[public], min_version="1.x")


def test_name_and_version_need_a_signature(arts):
    with pytest.raises(ArtifactError, match="give trusted_keys too"):
        fxc.load(arts["v1.10"], expected_name="scorer")


def test_an_edited_name_breaks_the_signature(arts, keys, tmp_path):
    (_, public), _ = keys
    with zipfile.ZipFile(arts["v1.9"]) as z:
        m = json.loads(z.read(MANIFEST))
    m["model"]["version"] = "9.0"
    forged = _with_entries(arts["v1.9"], tmp_path / "forged.fxc", manifest_json=json.dumps(m, indent=1).encode())
    with pytest.raises(SignatureError):
        fxc.load(forged, trusted_keys=[public], min_version="1.10")


def test_expected_sha256_pins_the_bytes(arts, tmp_path, capsys):
    digest = hashlib.sha256(arts["v1.10"].read_bytes()).hexdigest()
    assert _load_warnings(arts["v1.10"], expected_sha256=digest.upper()) == []    # pinned bytes: nothing to warn
    with pytest.raises(IdentityError, match="not the expected"):
        fxc.load(arts["v1.9"], expected_sha256=digest)
    with pytest.raises(ArtifactError, match="64 hex digits"):
        fxc.load(arts["v1.9"], expected_sha256="abc")
    x = _npy(tmp_path)
    assert cli(["run", str(arts["v1.9"]), "--input", str(x), "--expected-sha256", digest]) == 1
    err = capsys.readouterr().err
    assert err.startswith("fxc: error: IdentityError") and "Traceback" not in err


def test_cli_checks_name_and_version(arts, keys, tmp_path, capsys):
    (_, public), _ = keys
    x = _npy(tmp_path)
    ok = ["--trusted-key", str(public), "--expect-name", "scorer", "--min-version", "1.10"]
    assert cli(["run", str(arts["v1.10"]), "--input", str(x), *ok]) == 0
    assert cli(["run", str(arts["v1.9"]), "--input", str(x), *ok]) == 1
    assert "older than the minimum" in capsys.readouterr().err
    folder = tmp_path / "dir"
    assert cli(["extract", str(arts["v1.10"]), str(folder), *ok]) == 0
    assert cli(["verify", str(folder), "--key", str(public), "--expect-name", "scorer", "--min-version", "1.10"]) == 0
    assert cli(["verify", str(folder), "--key", str(public), "--expect-name", "other-model"]) == 1
    assert "not 'other-model'" in capsys.readouterr().err


def test_export_refuses_malformed_names_and_versions(tmp_path):
    module = _module("exp")
    for bad in ({"name": ""}, {"name": "a\nb"}, {"version": "1.2-beta"}, {"version": -1}, {"version": "1..2"}):
        with pytest.raises(ArtifactError):
            fxc.export(module, tmp_path / "bad.fxc", **bad)
    assert not (tmp_path / "bad.fxc").exists()


def test_an_untouched_export_has_no_model_entry(arts):
    with zipfile.ZipFile(arts["plain"]) as z:
        assert "model" not in json.loads(z.read(MANIFEST)) and SIGNATURE not in z.namelist()


def test_device_artifacts_are_signed_too(keys, tmp_path):
    (signer, public), (_, other) = keys
    path = fxc.export(_module("exp", "opencl"), tmp_path / "cl.fxc", sign_key=signer, name="scorer-cl", version="1")
    with zipfile.ZipFile(path) as z:
        assert SIGNATURE in z.namelist()
    module = fxc.load(path, trusted_keys=[public], expected_name="scorer-cl", min_version="1")
    np.testing.assert_allclose(module(X), np.exp(X), rtol=1e-5)
    with pytest.raises(SignatureError):
        fxc.load(path, trusted_keys=[other])


def test_cli_compile_names_and_signs(keys, tmp_path, capsys):
    (signer, public), _ = keys
    (tmp_path / "tiny.py").write_text("import torch\n\ndef make():\n    torch.manual_seed(0)\n"
                                      "    return torch.nn.Sequential(torch.nn.Linear(8, 2))\n")
    out = tmp_path / "tiny.fxc"
    assert cli(["compile", f"{tmp_path / 'tiny.py'}:make", "--input-shape", "3,8", "-o", str(out), "--sign-key",
                str(signer), "--model-name", "tiny", "--model-version", "3"]) == 0
    assert cli(["inspect", str(out), "--trusted-key", str(public), "--expect-name", "tiny", "--min-version", "3"]) == 0
    assert "model: tiny version 3" in capsys.readouterr().out
    with pytest.raises(SystemExit) as e:         # refused before anything is compiled
        cli(["compile", f"{tmp_path / 'tiny.py'}:make", "--input-shape", "3,8", "-o", str(tmp_path / "b.fxc"),
             "--model-version", "v3"])
    assert e.value.code == 2 and "dot-separated whole numbers" in capsys.readouterr().err
    assert not (tmp_path / "b.fxc").exists()
