"""The `fxc` command line never answers with a traceback (issue 23, item 12): each mistake is one `fxc: error:` line
and exit status 1 (2 for arguments argparse rejects), and nothing is created that the user did not ask for."""
import os
from pathlib import Path

import numpy as np
import pytest
import torch

import fxc
from fxc.cli import main as cli


@pytest.fixture(scope="module")
def artifact(tmp_path_factory):
    d = tmp_path_factory.mktemp("cli_hardening")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Tanh()).eval()
    path = fxc.export(fxc.from_torch(model, (torch.randn(2, 4),)), d / "a.fxc")
    np.save(d / "x.npy", np.ones((2, 4), np.float32))
    return path, d / "x.npy"


def _error(capsys, argv, *words, status=1):
    if status == 2:
        with pytest.raises(SystemExit) as e:
            cli(argv)
        assert e.value.code == 2
    else:
        assert cli(argv) == status
    err = capsys.readouterr().err
    assert "Traceback" not in err and all(w in err for w in words), err
    assert status == 2 or err.startswith("fxc: error:"), err
    return err


def test_run_output_is_a_folder(artifact, capsys, tmp_path):
    path, x = artifact
    _error(capsys, ["run", str(path), "--input", str(x), "-o", str(tmp_path)], "is a folder")


def test_run_output_in_a_missing_folder_creates_nothing(artifact, capsys, tmp_path):
    path, x = artifact
    _error(capsys, ["run", str(path), "--input", str(x), "-o", str(tmp_path / "nonexistent" / "y.npy")],
           "does not exist")
    assert not (tmp_path / "nonexistent").exists()


def test_run_repeat_must_be_positive(artifact, capsys):
    path, x = artifact
    for bad in ("-5", "0", "two"):
        _error(capsys, ["run", str(path), "--input", str(x), "--repeat", bad], "positive", status=2)
    assert cli(["run", str(path), "--input", str(x), "--repeat", "2"]) == 0


def test_extract_onto_itself_or_into_proc(artifact, capsys, tmp_path):
    path, _ = artifact
    before = path.read_bytes()
    _error(capsys, ["extract", str(path), str(path)], "not a folder")
    assert path.read_bytes() == before
    _error(capsys, ["extract", str(path), "/proc/fxc-test/model"], "cannot extract")


@pytest.mark.parametrize("shape", ["-1,4", "2,-3", "a,b"])
def test_compile_rejects_bad_shapes(capsys, shape, tmp_path):
    (tmp_path / "m.py").write_text("import torch\ndef make():\n    return torch.nn.Linear(4, 3)\n")
    _error(capsys, ["compile", f"{tmp_path / 'm.py'}:make", f"--input-shape={shape}", "-o", str(tmp_path / "m.fxc")],
           "bad shape", status=2)


@pytest.mark.parametrize("source, words", [
    (None, ["is not a model file"]),                                         # a folder
    ("def make(:\n", ["SyntaxError"]),
    ("import torch\ndef make():\n    raise ValueError('no weights here')\n", ["raised ValueError", "no weights here"]),
    ("import no_such_package_fxc\n", ["ModuleNotFoundError"]),
    ("make = 3\n", ["has no 'make'"]),
    ("def make():\n    return 3\n", ["not a model"]),
])
def test_compile_reports_model_reference_problems(capsys, tmp_path, source, words):
    ref = tmp_path / "pkg_dir"
    if source is None:
        ref.mkdir()
    else:
        ref = tmp_path / "model.py"
        ref.write_text(source)
    _error(capsys, ["compile", f"{ref}:make", "--input-shape", "2,4", "-o", str(tmp_path / "m.fxc")], *words)
    assert not (tmp_path / "m.fxc").exists()


def test_unreadable_artifact_and_missing_input(artifact, capsys, tmp_path):
    path, x = artifact
    _error(capsys, ["inspect", str(tmp_path)], "no such artifact")
    _error(capsys, ["run", str(path), "--input", str(tmp_path / "missing.npy")], "cannot read input")
    os.symlink("/nonexistent", tmp_path / "dangling.fxc")
    _error(capsys, ["run", str(tmp_path / "dangling.fxc"), "--input", str(x)], "no such artifact")
    assert Path(path).exists()
