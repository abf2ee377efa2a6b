"""Hostile and damaged artifacts (issue 23, items 1, 3, 7-10): every one is refused with an fxc.errors.ArtifactError
that says what is wrong, before any part is used; extraction writes only inside a new folder; a signed artifact is
checked against trusted keys before its library is loaded; one-bit flips anywhere give an ArtifactError or exactly
the same outputs, never a signal or a different result."""
import hashlib
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
import zipfile
import zlib
from pathlib import Path

import numpy as np
import pytest
import torch

import fxc
from fxc.cli import main as cli
from fxc.errors import ArtifactError, FxcError
from fxc.runtime.artifact.extract import extract, verify_folder
from fxc.runtime.artifact.loader import TMP_PREFIX
from fxc.runtime.artifact.read import C_SOURCE, HEADER, LIBRARY, MANIFEST, PARAMS, read_artifact
from fxc.runtime.artifact.signing import SIGNATURE, SignatureError, generate

ROOT = Path(__file__).resolve().parents[2]


class Residual(torch.nn.Module):
    """relu(conv2(relu(conv1(x))) + x): the first conv runs the second's kernel with the residual input left out,
    a ["null", 0] slot in the plan."""

    def __init__(self, c=16):
        super().__init__()
        self.c1, self.c2 = torch.nn.Conv2d(c, c, 3, padding=1), torch.nn.Conv2d(c, c, 3, padding=1)

    def forward(self, x):
        return torch.relu(self.c2(torch.relu(self.c1(x))) + x)


def _model(seed):
    torch.manual_seed(seed)
    return Residual().eval()


X = np.random.default_rng(0).standard_normal((1, 16, 8, 8)).astype(np.float32)


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    d = tmp_path_factory.mktemp("keys")
    return generate(d / "signer.pem"), generate(d / "other.pem")


@pytest.fixture(scope="module")
def art(tmp_path_factory, keys):
    """(plain artifact, signed artifact, another model's artifact of the same shapes, eager output)."""
    d = tmp_path_factory.mktemp("art")
    (signer, _), _ = keys
    model = _model(0)
    compiled = fxc.from_torch(model, (torch.from_numpy(X),))
    plain = fxc.export(compiled, d / "plain.fxc")
    signed = fxc.export(compiled, d / "signed.fxc", sign_key=signer)
    other = fxc.export(fxc.from_torch(_model(1), (torch.from_numpy(X),)), d / "other.fxc")
    with torch.no_grad():
        expected = model(torch.from_numpy(X)).numpy()
    return plain, signed, other, expected


def _entries(path) -> dict:
    with zipfile.ZipFile(path) as z:
        return {n: z.read(n) for n in z.namelist()}


def _write(dst, entries: dict, infos: dict | None = None) -> Path:
    """A zip of `entries` (name -> bytes); infos: name -> ZipInfo to use instead of a plain one."""
    with zipfile.ZipFile(dst, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in entries.items():
            z.writestr((infos or {}).get(name, name), data)
    return Path(dst)


def _relisted(entries: dict, manifest=None) -> dict:
    """entries with the manifest's parts (and optionally more of it) matching the entries' bytes."""
    m = json.loads(entries[MANIFEST])
    if manifest:
        manifest(m)
    m["parts"] = {n: {"sha256": hashlib.sha256(b).hexdigest(), "bytes": len(b)} for n, b in entries.items()
                  if n not in (MANIFEST, SIGNATURE)}
    return {**entries, MANIFEST: json.dumps(m).encode()}


def _refused(path, *words, kind=ArtifactError, **kw):
    with pytest.raises(kind) as e:
        fxc.load(path, **kw)
    assert all(w in str(e.value) for w in words), str(e.value)
    return str(e.value)


# -- 1. extraction never writes outside its folder ----------------------------------------------------------------
@pytest.mark.parametrize("name", ["../../escape_rel.txt", "/tmp/fxc-escape-test/escape_abs.txt", "sub/part.bin",
                                  "libfxc_model.so/", ".", "manifest.json.bak"])
def test_odd_part_names_are_refused_everywhere(art, tmp_path, name, capsys):
    plain = art[0]
    bad = _write(tmp_path / "bad.fxc", _relisted({**_entries(plain), name: b"hello"}))
    assert name in _refused(bad, "not an fxc artifact part")
    out = tmp_path / "out" / "a" / "b"
    assert cli(["extract", str(bad), str(out)]) == 1
    assert cli(["inspect", str(bad)]) == 1
    assert "fxc: error: ArtifactError" in capsys.readouterr().err
    assert not (tmp_path / "out" / "escape_rel.txt").exists() and not Path("/tmp/fxc-escape-test").exists()
    assert not out.exists()


def test_link_entries_are_refused(art, tmp_path):
    entries = _entries(art[0])
    link = zipfile.ZipInfo(PARAMS)
    link.external_attr = (stat.S_IFLNK | 0o777) << 16
    bad = _write(tmp_path / "link.fxc", entries, {PARAMS: link})
    _refused(bad, "not a plain file")


def test_extract_refuses_links_and_non_empty_folders(art, tmp_path):
    plain = art[0]
    victim = tmp_path / "victim.txt"
    victim.write_text("keep")
    full = tmp_path / "full"
    full.mkdir()
    (full / LIBRARY).symlink_to(victim)                 # a planted link where a part would go
    with pytest.raises(ArtifactError, match="not empty"):
        extract(plain, full)
    (tmp_path / "real").mkdir()
    (tmp_path / "linked").symlink_to(tmp_path / "real", target_is_directory=True)
    with pytest.raises(ArtifactError, match="link"):
        extract(plain, tmp_path / "linked")
    with pytest.raises(ArtifactError, match="not a folder"):
        extract(plain, victim)
    assert victim.read_text() == "keep" and not os.listdir(tmp_path / "real")
    d = extract(plain, tmp_path / "new" / "model")       # a new folder: every part, plain files
    assert sorted(os.listdir(d)) == sorted([MANIFEST, LIBRARY, PARAMS, HEADER, C_SOURCE])
    assert all(not (d / n).is_symlink() for n in os.listdir(d))
    assert (d / MANIFEST).read_bytes() == _entries(plain)[MANIFEST]     # the exact (signable) bytes


# -- 3. signatures ----------------------------------------------------------------------------------------------------
def test_signed_artifact_loads_with_its_key_only(art, keys):
    plain, signed, _, expected = art
    (signer, signer_pub), (_, other_pub) = keys
    np.testing.assert_allclose(fxc.load(signed, trusted_keys=[signer_pub])(X), expected, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(fxc.load(signed, trusted_keys=[other_pub, signer_pub.read_bytes()])(X), expected,
                               rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(fxc.load(signed)(X), expected, rtol=1e-4, atol=1e-5)    # no keys: not checked
    _refused(signed, "not valid for any", kind=SignatureError, trusted_keys=[other_pub])
    _refused(plain, "not signed", kind=SignatureError, trusted_keys=[signer_pub])
    with pytest.raises(FxcError, match="Ed25519 public key"):
        fxc.load(signed, trusted_keys=[b"not a key"])


EVIL_C = r"""
#include <stdio.h>
__attribute__((constructor)) static void evil(void) { FILE *f = fopen(MARK, "w"); if (f) fclose(f); }
const char *fxc_interface(void) { return "{}"; }
"""


def test_a_replaced_library_is_refused_before_it_is_loaded(art, keys, tmp_path):
    """A library swapped in with the manifest's sha256 updated (the manifest then no longer matches its signature):
    with trusted keys its constructor never runs; the signature is checked before dlopen."""
    _, signed, _, _ = art
    (_, signer_pub), _ = keys
    mark = tmp_path / "constructor_ran"
    so = tmp_path / "evil.so"
    (tmp_path / "evil.c").write_text(EVIL_C)
    cc = subprocess.run(["gcc", "-shared", "-fPIC", f'-DMARK="{mark}"', str(tmp_path / "evil.c"), "-o", str(so)],
                        capture_output=True, text=True)
    assert cc.returncode == 0, cc.stderr
    entries = _relisted({**_entries(signed), LIBRARY: so.read_bytes()})      # manifest.sig kept: now invalid
    bad = _write(tmp_path / "evil.fxc", entries)
    _refused(bad, "not valid", kind=SignatureError, trusted_keys=[signer_pub])
    assert cli(["extract", str(bad), str(tmp_path / "x"), "--trusted-key", str(signer_pub)]) == 1
    assert not mark.exists() and not (tmp_path / "x").exists()


def test_c_users_verify_an_extracted_folder(art, keys, tmp_path, capsys):
    """`fxc extract --trusted-key` then `fxc verify DIR --key` (what a C program's deployment runs before it loads
    the library); the signature also verifies with OpenSSL alone (no fxc, no home-made crypto)."""
    _, signed, _, _ = art
    (_, pub), (_, other_pub) = keys
    d = tmp_path / "model"
    assert cli(["extract", str(signed), str(d), "--trusted-key", str(pub)]) == 0
    assert (d / SIGNATURE).exists()
    assert cli(["verify", str(d), "--key", str(pub)]) == 0
    assert cli(["verify", str(signed), "--key", str(pub)]) == 0
    assert cli(["verify", str(d), "--key", str(other_pub)]) == 1
    if shutil.which("openssl"):
        p = subprocess.run(["openssl", "pkeyutl", "-verify", "-pubin", "-inkey", str(pub), "-rawin", "-in",
                            str(d / MANIFEST), "-sigfile", str(d / SIGNATURE)], capture_output=True, text=True)
        assert p.returncode == 0 and "Success" in p.stdout, p.stdout + p.stderr
    params = bytearray((d / PARAMS).read_bytes())
    params[100] ^= 1
    (d / PARAMS).write_bytes(bytes(params))
    capsys.readouterr()
    assert cli(["verify", str(d), "--key", str(pub)]) == 1
    assert "params.bin does not match its sha256" in capsys.readouterr().err
    with pytest.raises(ArtifactError):
        verify_folder(d, [pub])


def test_cli_signs_and_refuses_untrusted(art, keys, tmp_path, capsys):
    plain, signed, _, _ = art
    (_, pub), _ = keys
    np.save(tmp_path / "x.npy", X)
    assert cli(["run", str(signed), "--input", str(tmp_path / "x.npy"), "--trusted-key", str(pub)]) == 0
    assert cli(["run", str(plain), "--input", str(tmp_path / "x.npy"), "--trusted-key", str(pub)]) == 1
    assert "SignatureError" in capsys.readouterr().err
    assert cli(["inspect", str(signed), "--trusted-key", str(pub)]) == 0
    assert "signature verified" in capsys.readouterr().out
    assert cli(["keygen", str(tmp_path / "k.pem")]) == 0 and (tmp_path / "k.pub.pem").exists()
    assert stat.S_IMODE((tmp_path / "k.pem").stat().st_mode) == 0o600
    assert cli(["keygen", str(tmp_path / "k.pem")]) == 1          # never overwrites a key


# -- 7. zip bombs ------------------------------------------------------------------------------------------------------
def test_part_larger_than_declared_is_refused_before_inflating(art, tmp_path):
    entries = _relisted(_entries(art[0]))
    m = json.loads(entries[MANIFEST])
    m["parts"][HEADER] = {"sha256": hashlib.sha256(b"0123456789").hexdigest(), "bytes": 10}
    bomb = _write(tmp_path / "bomb.fxc", {**entries, MANIFEST: json.dumps(m).encode(), HEADER: bytes(64 << 20)})
    assert bomb.stat().st_size < 1 << 20
    t0 = time.perf_counter()
    _refused(bomb, "fxc_model.h", "the manifest says 10")
    assert cli(["inspect", str(bomb)]) == 1
    assert time.perf_counter() - t0 < 2.0


def test_highly_compressed_part_is_refused(art, tmp_path):
    bomb = _write(tmp_path / "bomb.fxc", _relisted({**_entries(art[0]), HEADER: bytes(64 << 20)}))
    t0 = time.perf_counter()
    _refused(bomb, "inflates", "zip bomb")
    assert time.perf_counter() - t0 < 2.0


def test_real_artifacts_compress_far_below_the_limit(art):
    from fxc.runtime.artifact.read import MAX_RATIO
    with zipfile.ZipFile(art[0]) as z:
        for info in z.infolist():
            assert info.file_size <= MAX_RATIO / 4 * max(info.compress_size, 1), (info.filename, info.file_size)


# -- 8. inspect every model the tests export ---------------------------------------------------------------------------
def test_inspect_shows_null_slots(art, capsys):
    for path in art[:3]:
        assert cli(["inspect", str(path)]) == 0
    out = capsys.readouterr().out
    assert "null" in out and "all sha256 verified" in out


def test_inspect_every_exported_test_model(tmp_path, capsys):
    """The models tests/deploy/test_export.py and tests/deploy/test_cli.py export (and a residual block) all inspect."""
    from tests.deploy.test_export import _convnet, _multi_io
    for k, make in enumerate([_convnet, _multi_io, lambda: (_model(2), (torch.from_numpy(X),))]):
        model, inputs = make()
        path = fxc.export(fxc.from_torch(model, inputs), tmp_path / f"m{k}.fxc")
        assert cli(["inspect", str(path)]) == 0
        assert cli(["inspect", "--json", str(path)]) == 0
    assert "Traceback" not in capsys.readouterr().err


# -- 9. params and temporary folders -----------------------------------------------------------------------------------
def test_another_models_params_are_refused(art, tmp_path):
    plain, _, other, _ = art
    swapped = _relisted({**_entries(plain), PARAMS: _entries(other)[PARAMS]})
    _refused(_write(tmp_path / "swapped.fxc", swapped), "params.bin is not the one", "another model")


KILLED = """
import os, signal, sys
import numpy as np
import fxc
m = fxc.load(sys.argv[1])
m(np.zeros((1, 16, 8, 8), np.float32))
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_stale_library_folders_are_removed_on_the_next_load(art, tmp_path):
    tmp = Path(__import__("tempfile").gettempdir())
    before = set(tmp.glob(f"{TMP_PREFIX}*"))
    p = subprocess.Popen([sys.executable, "-c", KILLED, str(art[0])], stderr=subprocess.PIPE, text=True, cwd=ROOT,
                         env=dict(os.environ, PYTHONPATH=str(ROOT)))
    _, err = p.communicate(timeout=120)
    assert p.returncode == -signal.SIGKILL, err
    left = set(tmp.glob(f"{TMP_PREFIX}{p.pid}-*")) - before
    assert left, "the killed process left no folder (nothing to test)"
    mine = fxc.load(art[0])
    assert not any(d.exists() for d in left)
    assert Path(mine.library).exists()                    # a live process's folder stays


# -- 10. malformed manifests and zip headers ---------------------------------------------------------------------------
@pytest.mark.parametrize("edit, words", [
    (lambda m: m["params"].update(byte_order="big"), ["byte_order is 'big'", "little-endian on every machine"]),
    (lambda m: m.update(inputs=[{"name": 1}]), ["'inputs' is not a list"]),
    (lambda m: m["plan"][0]["args"].append(["stack", 0]), ["'plan' is not a list"]),
    (lambda m: m.update(workspace_bytes=-1), ["workspace_bytes"]),
    (lambda m: m["params"]["tensors"][0].update(dtype="object"), ["params tensor"]),
    (lambda m: m.update(target_info=[]), ["target_info"]),
    (lambda m: m.update(kernels=[1]), ["kernels"]),
    (lambda m: m["params"].update(tensors=None), ["params"]),
])
def test_malformed_manifest_is_an_artifact_error(art, tmp_path, edit, words, capsys):
    bad = _write(tmp_path / "bad.fxc", _relisted(_entries(art[0]), edit))
    _refused(bad, "malformed", *words)
    assert cli(["inspect", str(bad)]) == 1
    assert "Traceback" not in capsys.readouterr().err


def test_encrypted_flag_is_an_artifact_error(art, tmp_path):
    data = bytearray(art[0].read_bytes())
    pos = data.find(b"PK\x01\x02")                      # the first central-directory entry's general-purpose flags
    data[pos + 8] |= 1
    (tmp_path / "enc.fxc").write_bytes(bytes(data))
    _refused(tmp_path / "enc.fxc", "export the model again")


def _flip_outcome(data: bytes, bit: int, path: Path, reference) -> str:
    bad = bytearray(data)
    bad[bit // 8] ^= 1 << (bit % 8)
    path.write_bytes(bytes(bad))
    try:
        out = fxc.load(path)(X)
    except ArtifactError as e:
        assert str(e), "an ArtifactError must say what is wrong"
        return "error"
    np.testing.assert_array_equal(out, reference)       # a flip nobody reads (a timestamp): the same result
    return "same"


def test_bit_flips_over_a_whole_artifact(art, tmp_path):
    """160 one-bit flips spread over the whole file, plus every bit of its zip directory and manifest header:
    each is an ArtifactError or exactly the same output (any other exception, or a signal, fails)."""
    data = art[0].read_bytes()
    reference = fxc.load(art[0])(X)
    rng = np.random.default_rng(23)
    bits = set(rng.choice(len(data) * 8, 160, replace=False).tolist())
    tail = data.rfind(b"PK\x05\x06")                    # end of central directory: every bit
    bits |= set(range(tail * 8, len(data) * 8))
    bits |= set(range(0, 30 * 8))                       # the manifest's local header: every bit
    outcomes = [_flip_outcome(data, b, tmp_path / "flip.fxc", reference) for b in sorted(bits)]
    assert outcomes.count("error") > len(outcomes) // 2, outcomes.count("error")


def test_truncations_and_zlib_damage(art, tmp_path):
    data = art[0].read_bytes()
    for n in range(0, len(data), max(len(data) // 40, 1)):
        (tmp_path / "t.fxc").write_bytes(data[:n])
        _refused(tmp_path / "t.fxc")
    assert zlib is not None
    assert read_artifact(art[0])[0]["format"] == "fxc-artifact"
