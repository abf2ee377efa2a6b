"""Input sizes past memory or the address space, through the C ABI 2 and fxc.load (issue 41, items 9 and 20): dims
whose bytes wrap 64 bits are FXC_ERR_SHAPE in `fxc_main_shaped` / `fxc_output_dims` and in examples/c/run_shaped.c
(never a read past the caller's buffer), and the same sizes in Python are fxc errors found before anything is
allocated or copied: InputError outside the compiled range or past the address space, OutOfMemoryError (a
MemoryError, C's FXC_ERR_NO_MEMORY) for outputs or a workspace that do not fit."""
import ctypes
import subprocess

import numpy as np
import pytest
import torch
from torch.export import Dim

import fxc
from fxc.errors import InputError, OutOfMemoryError
from fxc.runtime.artifact.extract import extract

from ..helpers_export import build_c_example

FXC_ERR_SHAPE = -5
FXC_ERR_NO_MEMORY = -3
WRAPS = 2 ** 56          # rows of 64 float32: 2**64 bytes, 0 once wrapped


class ColumnSum(torch.nn.Module):
    def forward(self, x):
        return x.sum(0)


class Double(torch.nn.Module):
    def forward(self, x):
        return x * 2


class Pairwise(torch.nn.Module):
    """[b, s] -> [b, s] through a [b, s, s] softmax: its workspace grows with b * s * s."""

    def forward(self, x):
        return (torch.softmax(x.unsqueeze(2) * x.unsqueeze(1), -1) @ x.unsqueeze(2)).squeeze(2)


@pytest.fixture(scope="module")
def sums(tmp_path_factory):
    """(artifact, extracted folder) of x.sum(0) for x: float32[s, 64], s unbounded (1 .. 2**62 - 1)."""
    d = tmp_path_factory.mktemp("sums")
    path = fxc.export(fxc.from_torch(ColumnSum(), (torch.randn(4, 64),), dynamic_shapes=({0: Dim("rows", min=1)},)),
                      d / "sum.fxc")
    return path, extract(path, d / "dir")


@pytest.fixture(scope="module")
def pairwise(tmp_path_factory):
    d = tmp_path_factory.mktemp("pairwise")
    compiled = fxc.from_torch(Pairwise(), (torch.randn(2, 8),),
                              dynamic_shapes=({0: Dim("b", min=1, max=1024), 1: Dim("s", min=1, max=1 << 20)},))
    path = fxc.export(compiled, d / "pairwise.fxc")
    return path, extract(path, d / "dir")


def _library(folder):
    lib = ctypes.CDLL(str(folder / "libfxc_model.so"))
    lib.fxc_last_error.restype = ctypes.c_char_p
    assert lib.fxc_init(str(folder).encode()) == 0
    return lib


def _dims(*shapes):
    rows = [(ctypes.c_int64 * len(s))(*s) for s in shapes]
    return (ctypes.POINTER(ctypes.c_int64) * len(rows))(*[ctypes.cast(r, ctypes.POINTER(ctypes.c_int64))
                                                          for r in rows]), rows


def test_c_entry_refuses_input_bytes_that_wrap(sums):
    _, folder = sums
    lib = _library(folder)
    x, y = np.ones((3, 64), np.float32), np.zeros(64, np.float32)
    ins = (ctypes.c_void_p * 1)(x.ctypes.data)
    outs = (ctypes.c_void_p * 1)(y.ctypes.data)
    for rows in (WRAPS, WRAPS + 1, 2 ** 61):          # wraps to 0, wraps to 256 bytes, past PTRDIFF_MAX
        dims, _keep = _dims((rows, 64))
        assert lib.fxc_main_shaped(dims, ins, outs) == FXC_ERR_SHAPE
        assert b"more bytes than the address space holds" in lib.fxc_last_error()
        n, out = ctypes.c_size_t(), (ctypes.c_int64 * 1)()
        assert lib.fxc_output_dims(dims, 0, out, ctypes.byref(n)) == FXC_ERR_SHAPE
    assert not y.any()                                 # nothing ran
    dims, _keep = _dims((3, 64))
    assert lib.fxc_main_shaped(dims, ins, outs) == 0
    np.testing.assert_array_equal(y, np.full(64, 3, np.float32))


def test_c_example_refuses_wrapping_dims(sums, tmp_path):
    _, folder = sums
    exe = build_c_example("run_shaped", folder, tmp_path / "run_shaped")
    (tmp_path / "empty.bin").write_bytes(b"")
    p = subprocess.run([str(exe), str(folder), f"{WRAPS}x64", str(tmp_path / "empty.bin"), str(tmp_path / "y.bin")],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 1 and "more bytes than the address space holds" in p.stderr, (p.returncode, p.stderr)
    np.ones((5, 64), np.float32).tofile(tmp_path / "x.bin")
    p = subprocess.run([str(exe), str(folder), "5x64", str(tmp_path / "x.bin"), str(tmp_path / "y.bin")],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    np.testing.assert_array_equal(np.fromfile(tmp_path / "y.bin", np.float32), np.full(64, 5, np.float32))


def test_c_workspace_past_memory_is_no_memory(pairwise):
    _, folder = pairwise
    lib = _library(folder)
    x, y = np.zeros((1, 131072), np.float32), np.zeros((1, 131072), np.float32)   # 512 KiB in, 2 TiB of workspace
    dims, _keep = _dims(x.shape)
    rc = lib.fxc_main_shaped(dims, (ctypes.c_void_p * 1)(x.ctypes.data), (ctypes.c_void_p * 1)(y.ctypes.data))
    assert rc == FXC_ERR_NO_MEMORY, lib.fxc_last_error()


def _strided(rows: int, cols: int, dtype=np.float32) -> np.ndarray:
    """A [rows, cols] view of one row (stride 0): huge shapes without memory."""
    return np.lib.stride_tricks.as_strided(np.zeros(cols, dtype), (rows, cols), (0, np.dtype(dtype).itemsize))


def test_python_refuses_before_copying_or_allocating(sums):
    path, _ = sums
    module = fxc.load(path)
    with pytest.raises(OutOfMemoryError, match="does not fit in this machine's memory") as e:
        module(_strided(2 ** 40, 64))               # 256 TiB to copy: refused, not numpy's bare MemoryError
    assert isinstance(e.value, MemoryError)
    np.testing.assert_array_equal(module(np.ones((3, 64), np.float32)), np.full(64, 3, np.float32))


def test_python_range_is_checked_before_the_copy(tmp_path):
    compiled = fxc.from_torch(ColumnSum(), (torch.randn(4, 64),), dynamic_shapes=({0: Dim("rows", min=1, max=64)},))
    module = fxc.load(fxc.export(compiled, tmp_path / "bounded.fxc"))
    with pytest.raises(InputError, match="outside the compiled range"):
        module(_strided(2 ** 54, 64))              # 4 EiB: the range refuses it, no copy is tried


def test_python_workspace_past_memory_is_named(pairwise):
    path, _ = pairwise
    module = fxc.load(path)
    with pytest.raises(OutOfMemoryError, match="workspace") as e:
        module(np.zeros((1, 131072), np.float32))   # 512 KiB in; C says FXC_ERR_NO_MEMORY for the same
    assert isinstance(e.value, MemoryError)
    x = np.random.default_rng(0).standard_normal((2, 8)).astype(np.float32)
    with torch.no_grad():
        expected = Pairwise()(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(module(x), expected, rtol=1e-5, atol=1e-5)


def test_check_sizes_names_inputs_past_the_address_space(sums):
    path, _ = sums
    module = fxc.load(path)
    with pytest.raises(InputError, match="more bytes than the address space holds"):
        module.check_sizes({module.symbols[0]["name"]: 2 ** 61})


def test_device_artifacts_check_the_range_before_copying(tmp_path):
    compiled = fxc.from_torch(Double(), (torch.randn(4, 64),), target="opencl",
                              dynamic_shapes=({0: Dim("rows", min=1, max=2 ** 50)},))
    module = fxc.load(fxc.export(compiled, tmp_path / "cl.fxc"))
    with pytest.raises(OutOfMemoryError, match="does not fit in this machine's memory"):
        module(_strided(2 ** 40, 64))               # in range: the copy cannot be made, and says so
    with pytest.raises(InputError, match="outside the compiled range"):
        module(_strided(2 ** 52, 64))               # out of range: refused before a copy is tried
    np.testing.assert_array_equal(module(np.ones((3, 64), np.float32)), np.full((3, 64), 2, np.float32))
