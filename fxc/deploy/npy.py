"""The command line's .npy inputs (`fxc run --input`, `fxc web --input`), read header first.

Takes .npy paths (format 1.0 or 2.0, what numpy.save writes for plain dtypes) and, for `fxc run`, the module's
input signature; produces numpy arrays. Each header is parsed and checked before a byte of data is read: a
known non-object dtype; given a signature, each input's dtype and shape against it (size symbols bound over all
inputs, and their bytes checked by the module, as a call does); then the file's size against the header's declared
bytes (a 128-byte file that declares 29 TiB is refused, never allocated). Errors: FxcError
for a file that is not a readable .npy (empty, truncated, damaged, pickled objects), InputError for one of
another dtype or shape than the model takes. Standard library and numpy only.
"""
from __future__ import annotations

import math
import os

import numpy as np

from ..errors import FxcError, InputError
from ..runtime.symbols import bind_symbols
from ..runtime.tensors import np_dtype

MAX_HEADER = 10_000         # bytes: numpy's own limit for a header read without allow_pickle


def read_inputs(paths, module=None) -> list:
    """The arrays of .npy files `paths`; with `module`, checked against its inputs before their data is read."""
    files = []
    try:
        for p in paths:
            files.append(_open(p))
        if module is not None:
            _check_signature(module, paths, [(dtype, shape) for _, dtype, shape, _ in files])
        return [_read_data(*f, p) for f, p in zip(files, paths)]
    finally:
        for f in files:
            f[0].close()


def _open(path) -> tuple:
    """(open file at the data, dtype, shape, fortran order) once the header is whole and plain data."""
    try:
        f = open(path, "rb")
    except OSError as e:
        raise FxcError(f"cannot read input {path}: {e.strerror or e}") from None
    try:
        try:
            version = np.lib.format.read_magic(f)
            read_header = {(1, 0): np.lib.format.read_array_header_1_0,
                           (2, 0): np.lib.format.read_array_header_2_0}.get(version)
            if read_header is None:
                raise ValueError(f".npy format version {version} (fxc reads 1.0 and 2.0, what numpy.save writes)")
            shape, fortran, dtype = read_header(f, max_header_size=MAX_HEADER)
        except (ValueError, EOFError, SyntaxError, TypeError) as e:
            raise FxcError(f"input {path} is not a .npy file numpy.save wrote ({e}); save it with "
                           f"numpy.save(path, array)") from None
        if dtype.hasobject:
            raise FxcError(f"input {path} holds Python objects (a pickle), which fxc never loads; save a numeric array")
    except BaseException:
        f.close()
        raise
    return f, dtype, shape, fortran


def _check_signature(module, paths, headers) -> None:
    specs = module.inputs
    if len(headers) != len(specs):
        raise InputError(f"the model takes {len(specs)} input(s) ({', '.join(s.describe() for s in specs)}): give "
                         f"--input once per input, in order; got {len(headers)}")
    for spec, path, (dtype, shape) in zip(specs, paths, headers):
        if dtype != np_dtype(spec.dtype):
            raise InputError(f"input {spec.name!r} ({path}): expected dtype {spec.dtype}, the file holds {dtype}; "
                             f"save it with .astype({spec.dtype!r})")
    symbols = getattr(module, "symbols", ())
    if symbols:         # bound over all inputs; a CPU module also sizes its outputs and workspace (check_sizes)
        sizes = bind_symbols(specs, [h[1] for h in headers], symbols)
        if hasattr(module, "check_sizes"):
            module.check_sizes(sizes)
        return
    for spec, path, (_, shape) in zip(specs, paths, headers):
        if tuple(shape) != tuple(spec.shape):
            raise InputError(f"input {spec.name!r} ({path}): expected shape {list(spec.shape)}, the file holds "
                             f"{list(shape)}")


def _read_data(f, dtype, shape, fortran, path) -> np.ndarray:
    nbytes = math.prod(shape) * dtype.itemsize
    left = os.fstat(f.fileno()).st_size - f.tell()
    if left != nbytes:
        raise FxcError(f"input {path}: its header declares {dtype}{list(shape)} ({nbytes} bytes of data) but the "
                       f"file holds {left}; the file is truncated or damaged: save it again")
    data = f.read(nbytes)
    if len(data) != nbytes:
        raise FxcError(f"input {path} changed while it was read (truncated); save it again")
    return np.frombuffer(data, dtype).reshape(shape, order="F" if fortran else "C")
