"""`tvm.contrib` (its `graph_executor` is graph_executor.py), and the small namespaces scripts import beside it:
`tvm.contrib.utils.tempdir()`, `tvm.testing.assert_allclose`, `tvm.te` (not provided: fxc's tensor expressions are
internal) and `tvm.contrib.download` (the facade downloads nothing)."""
from __future__ import annotations

import shutil
import tempfile
import weakref
from pathlib import Path

import numpy as np

from .finder import module_getattr
from .unsupported import Namespace, UnsupportedAPIError


class TempDirectory:
    """`utils.tempdir()`: a temporary folder removed with the object; `relpath(name)`, `listdir()`."""

    def __init__(self, custom_path=None, keep_for_debug=False):
        self.temp_dir = str(Path(custom_path).resolve()) if custom_path else tempfile.mkdtemp(prefix="fxc-tvm-")
        if custom_path:
            Path(self.temp_dir).mkdir(parents=True, exist_ok=True)
        if not keep_for_debug and not custom_path:
            self._finalizer = weakref.finalize(self, shutil.rmtree, self.temp_dir, True)

    def relpath(self, name: str) -> str:
        return str(Path(self.temp_dir) / name)

    def listdir(self) -> list:
        return sorted(p.name for p in Path(self.temp_dir).iterdir())

    def remove(self) -> None:
        shutil.rmtree(self.temp_dir, ignore_errors=True)

    @property
    def path(self) -> str:
        return self.temp_dir


def _assert_allclose(actual, desired, rtol: float = 1e-7, atol: float = 1e-7) -> None:
    """tvm.testing.assert_allclose: numpy's, on NDArrays too."""
    np.testing.assert_allclose(np.asarray(actual), np.asarray(desired), rtol=rtol, atol=atol, verbose=True)


def _download_testdata(url, relpath, module=None, overwrite=False):
    raise UnsupportedAPIError("tvm.contrib.download.download_testdata", "the facade downloads nothing; fetch the "
                              "file yourself (urllib.request.urlretrieve) and pass its path")


utils = Namespace("tvm.contrib.utils", "Temporary folders.", tempdir=TempDirectory, TempDirectory=TempDirectory)
download = Namespace("tvm.contrib.download", "Not provided.", download_testdata=_download_testdata,
                     default="the facade downloads nothing")
testing = Namespace("tvm.testing", "Comparisons.", assert_allclose=_assert_allclose,
                    default="the facade's tvm.testing has assert_allclose; use numpy.testing for the rest")
te = Namespace("tvm.te", "Not provided.", default="fxc's tensor expressions (fxc/lowering/te.py) are internal: it "
               "defines every op's compute once (fxc/ops) and schedules them itself; write new ops in your framework "
               "and import the model")
__getattr__ = module_getattr("tvm.contrib", default="the facade's tvm.contrib has graph_executor "
                                "(graph_runtime), utils and download")
