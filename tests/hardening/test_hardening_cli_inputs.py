""".npy inputs and ports the command line refuses without a traceback (issue 41, item 19): an empty file, a
128-byte file whose header declares 29 TiB (refused from its header, never allocated), damaged or pickled files,
files of another dtype or shape than the model's signature (compared before the data is read), for `fxc run` and
`fxc web`; `fxc serve --port` outside 0..65535. Each is one `fxc: error:` line and exit status 1 (2 where argparse
refuses the argument)."""
import numpy as np
import pytest
import torch
from torch.export import Dim

import fxc
from fxc.cli import main as cli
from fxc.deploy.npy import read_inputs
from fxc.errors import FxcError, InputError


def _npy_header(shape, descr="<f4", total=128) -> bytes:
    """A .npy file of `total` bytes: a version 1.0 header declaring `shape`, and no data."""
    header = f"{{'descr': '{descr}', 'fortran_order': False, 'shape': {tuple(shape)}, }}"
    pre = b"\x93NUMPY\x01\x00"
    header = header.ljust(total - len(pre) - 2 - 1) + "\n"
    return pre + len(header).to_bytes(2, "little") + header.encode()


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """(static artifact of x: float32[2, 4], dynamic artifact of x: float32[b, 4], the folder)."""
    d = tmp_path_factory.mktemp("cli_inputs")
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Tanh()).eval()
    static = fxc.export(fxc.from_torch(net, (torch.randn(2, 4),)), d / "static.fxc")
    dynamic = fxc.export(fxc.from_torch(net, (torch.randn(2, 4),), dynamic_shapes=({0: Dim("b", min=1)},)),
                         d / "dynamic.fxc")
    return static, dynamic, d


def _bad_files(d):
    (d / "empty.npy").write_bytes(b"")
    (d / "huge.npy").write_bytes(_npy_header((8 * 2 ** 40, 1)))          # 128 bytes declaring 32 TB (29 TiB)
    assert (d / "huge.npy").stat().st_size == 128
    (d / "garbage.npy").write_bytes(b"not a numpy file at all")
    np.save(d / "objects.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    np.save(d / "cut.npy", np.ones((2, 4), np.float32))
    (d / "cut.npy").write_bytes((d / "cut.npy").read_bytes()[:-4])
    (d / "header_cut.npy").write_bytes(_npy_header((2, 4))[:40])
    return {"empty.npy": "not a .npy file", "huge.npy": "file holds 0", "garbage.npy": "not a .npy file",
            "objects.npy": "Python objects", "cut.npy": "truncated or damaged", "header_cut.npy": "not a .npy file"}


def _fails(capsys, argv, words, status=1):
    if status == 2:
        with pytest.raises(SystemExit) as e:
            cli(argv)
        assert e.value.code == 2
    else:
        assert cli(argv) == status
    err = capsys.readouterr().err
    assert "Traceback" not in err and words in err, err
    assert status == 2 or (err.startswith("fxc: error:") and err.count("\n") == 1), err


def test_run_refuses_bad_npy_files(model, capsys):
    static, dynamic, d = model
    (d / "nodata.npy").write_bytes(_npy_header((2, 4)))               # the signature's header, no data
    cases = {**_bad_files(d), "huge.npy": "expected shape", "nodata.npy": "file holds 0"}
    for name, words in cases.items():
        for artifact in (static, dynamic):
            _fails(capsys, ["run", str(artifact), "--input", str(d / name)], words)
    (d / "huge_rows.npy").write_bytes(_npy_header((2 ** 41, 4)))        # 128 bytes declaring 32 TiB of the signature
    _fails(capsys, ["run", str(dynamic), "--input", str(d / "huge_rows.npy")], "more than this machine's")


def test_web_refuses_bad_npy_files(model, capsys, tmp_path):
    static, _, d = model
    for name, words in _bad_files(d).items():
        _fails(capsys, ["web", str(static), str(tmp_path / "site"), "--input", str(d / name)], words)
    assert not (tmp_path / "site").exists()


def test_run_compares_headers_with_the_signature(model, capsys):
    static, dynamic, d = model
    np.save(d / "f64.npy", np.ones((2, 4)))
    np.save(d / "wide.npy", np.ones((2, 5), np.float32))
    (d / "past.npy").write_bytes(_npy_header((2 ** 61, 4)))            # in the range, past the address space
    _fails(capsys, ["run", str(static), "--input", str(d / "f64.npy")], "expected dtype float32, the file holds "
                                                                        "float64")
    _fails(capsys, ["run", str(static), "--input", str(d / "wide.npy")], "expected shape [2, 4], the file holds [2, 5]")
    _fails(capsys, ["run", str(dynamic), "--input", str(d / "wide.npy")], "expected shape")
    _fails(capsys, ["run", str(dynamic), "--input", str(d / "past.npy")], "address space")
    _fails(capsys, ["run", str(static)], "give --input once per input")


def test_run_reads_good_files_as_numpy_does(model, capsys):
    static, dynamic, d = model
    x = np.random.default_rng(0).standard_normal((2, 4)).astype(np.float32)
    np.save(d / "x.npy", x)
    np.save(d / "xf.npy", np.asfortranarray(x))
    for name in ("x.npy", "xf.npy"):
        (got,) = read_inputs([d / name], fxc.load(static))
        np.testing.assert_array_equal(got, x)
    np.save(d / "x5.npy", np.ones((5, 4), np.float32))
    assert cli(["run", str(dynamic), "--input", str(d / "x5.npy"), "-o", str(d / "y.npy")]) == 0
    assert np.load(d / "y.npy").shape == (5, 3)
    with pytest.raises(InputError):
        read_inputs([d / "x5.npy"], fxc.load(static))
    with pytest.raises(FxcError, match="cannot read input"):
        read_inputs([d / "missing.npy"])


@pytest.mark.parametrize("port", ["-1", "70000", "65536", "http"])
def test_serve_refuses_ports_outside_the_range(port, capsys, tmp_path):
    _fails(capsys, ["serve", str(tmp_path), "--port", port], "is not a TCP port (0 to 65535", status=2)
