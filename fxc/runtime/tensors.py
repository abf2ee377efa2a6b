"""The tensors a compiled module takes and returns (numpy only): `TensorSpec` (name, shape, dtype), the numpy dtype
of an fxc dtype, their byte sizes, and the checks of a call's arrays against the specs. Every module (CPU, device,
artifact) and every frontend's wrapper reads its signature through these."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import InputError, OutOfMemoryError


@dataclass(frozen=True)
class TensorSpec:
    name: str
    shape: tuple
    dtype: str

    def describe(self) -> str:
        return f"{self.name}: {self.dtype}{list(self.shape)}"


def np_dtype(dtype: str):
    if dtype == "bfloat16":      # numpy has no bfloat16: its buffers are the raw 16-bit patterns
        return np.dtype(np.uint16)
    return np.dtype(np.bool_) if dtype == "bool" else np.dtype(dtype)


def nbytes(spec: TensorSpec) -> int:
    """The bytes of a tensor of a static `spec`."""
    return int(np.prod(spec.shape, dtype=np.int64)) * np_dtype(spec.dtype).itemsize


def check_shape(spec, shape) -> None:
    if tuple(shape) != tuple(spec.shape):
        raise InputError(f"input {spec.name!r}: expected shape {list(spec.shape)}, got {list(shape)}; "
                         f"recompile for the new shape")


def check_inputs(specs, arrays, symbols=()) -> list:
    """The arrays as contiguous numpy arrays, once their count, dtypes and shapes are those of `specs` (InputError
    naming the input and the fix otherwise)."""
    if len(arrays) != len(specs):
        raise InputError(f"expected {len(specs)} inputs ({', '.join(s.describe() for s in specs)}), "
                         f"got {len(arrays)}")
    out = []
    for spec, a in zip(specs, arrays):
        a = np.asarray(a)
        if a.dtype != np_dtype(spec.dtype):
            raise InputError(f"input {spec.name!r}: expected dtype {spec.dtype}, got {a.dtype}; "
                             f"convert it with .astype({spec.dtype!r})")
        if not symbols:
            check_shape(spec, a.shape)
        out.append(np.ascontiguousarray(a))
    return out


def allocate(make):
    """make() (a call's input copies and outputs), numpy's MemoryError named: OutOfMemoryError, nothing ran yet."""
    try:
        return make()
    except MemoryError as e:
        raise OutOfMemoryError(f"{e}: the call does not fit in this machine's memory; call the model with smaller "
                               f"sizes (nothing ran)") from None
