"""`tvm.nd` and the devices: `tvm.cpu(0)`, `tvm.cuda(0)` / `tvm.gpu(0)`, `tvm.cl(0)`, `tvm.opengl(0)`, `tvm.nd.array`.

An `NDArray` is a numpy array with the device it was made for: fxc's modules take and return numpy arrays and keep
their weights on the device themselves, so the device only says which compiled modules may run there (`RUNS`).
`tvm.cuda` / `tvm.gpu` is fxc's OpenCL device (fxc has no CUDA backend; target "cuda" builds OpenCL, target.py).
"""
from __future__ import annotations

import io
import sys
import warnings
import zipfile
from pathlib import Path

import numpy as np

from ...errors import InputError, TargetError
from .finder import module_getattr
from .unsupported import UnsupportedAPIError, missing_member

FXC = str(Path(__file__).resolve().parents[2])         # the fxc package's folder
# TVM's device type codes (DLPack's), the facade's name of each, and the fxc target kinds a module runs on it
DEVICE_TYPES = {1: "cpu", 2: "cuda", 4: "opencl", 11: "opengl", 15: "webgpu"}
RUNS = {"cpu": ("llvm", "wasm"), "cuda": ("opencl",), "opencl": ("opencl",), "opengl": ("opengl", "webgl"),
        "webgpu": ("webgpu",)}
NAMES = {"cpu": 1, "llvm": 1, "cuda": 2, "gpu": 2, "nvptx": 2, "cl": 4, "opencl": 4, "opengl": 11, "webgl": 11,
         "webgpu": 15}


class FacadeNote(UserWarning):
    """A note of fxc's TVM facade: a call that runs, on something other than what TVM used (target "cuda")."""


def note(message: str) -> None:
    """A FacadeNote, reported at the script's line that led to it (the first frame outside fxc)."""
    level, frame = 2, sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(FXC):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, FacadeNote, stacklevel=level)


class Device:
    """A device of the facade: `device_type` (TVM's code) and `device_id`."""

    def __init__(self, device_type: int, device_id: int = 0):
        if device_type not in DEVICE_TYPES:
            raise UnsupportedAPIError(f"a device of type {device_type}", f"fxc runs on {', '.join(map(repr, NAMES))}")
        self.device_type, self.device_id = int(device_type), int(device_id)

    @property
    def name(self) -> str:
        return DEVICE_TYPES[self.device_type]

    @property
    def exist(self) -> bool:
        """Whether fxc can open the device here (the CPU always; others: their runtime and device found)."""
        if self.name == "cpu":
            return True
        from ...backends import fill  # deferred: opens the device; `import tvm` stays light
        try:
            fill("opencl" if self.name == "cuda" else self.name)
        except TargetError:
            return False
        return True

    def sync(self) -> None:
        """Nothing to wait for: fxc's module calls return once their outputs are in host memory."""

    def runs(self, kind: str) -> bool:
        return kind in RUNS[self.name]

    def __eq__(self, other):
        return isinstance(other, Device) and (other.device_type, other.device_id) == (self.device_type,
                                                                                      self.device_id)

    def __hash__(self):
        return hash((self.device_type, self.device_id))

    def __repr__(self):
        return f"{self.name}({self.device_id})"

    __getattr__ = missing_member("tvm.runtime.Device")


def device(dev_type, dev_id: int = 0) -> Device:
    """`tvm.device("cuda", 0)` (`tvm.context` before TVM 0.8): a device by name or type code."""
    if isinstance(dev_type, str):
        kind = dev_type.split()[0]
        if kind not in NAMES:
            raise UnsupportedAPIError(f"tvm.device({dev_type!r})", f"fxc's devices: {', '.join(NAMES)}")
        dev_type = NAMES[kind]
    return Device(dev_type, dev_id)


def cpu(dev_id: int = 0) -> Device:
    return Device(1, dev_id)


def cuda(dev_id: int = 0) -> Device:
    """fxc's OpenCL device (what target "cuda" builds for)."""
    return Device(2, dev_id)


gpu = cuda


def cl(dev_id: int = 0) -> Device:
    return Device(4, dev_id)


opencl = cl


def opengl(dev_id: int = 0) -> Device:
    """The OpenGL device: runs modules built for "opengl" (and "webgl", in fxc's browser)."""
    return Device(11, dev_id)


def webgpu(dev_id: int = 0) -> Device:
    return Device(15, dev_id)


class NDArray:
    """A tensor on a facade device: `.numpy()` / `.asnumpy()` give a copy as a numpy array."""

    def __init__(self, data: np.ndarray, dev: Device | None = None):
        self._data, self.device = data, dev or cpu(0)

    @property
    def shape(self) -> tuple:
        return tuple(self._data.shape)

    @property
    def dtype(self) -> str:
        return str(self._data.dtype)

    @property
    def ctx(self) -> Device:
        return self.device

    def numpy(self) -> np.ndarray:
        return self._data.copy()

    asnumpy = numpy

    def __array__(self, dtype=None, copy=None):
        return self._data if dtype is None else self._data.astype(dtype)

    def copyfrom(self, source) -> "NDArray":
        """Copy `source` (an NDArray or a numpy array of this shape) into this array."""
        data = as_numpy(source)
        if data.shape != self._data.shape:
            raise InputError(f"NDArray.copyfrom: a {data.shape} array into a {self.shape} one; give the same shape")
        self._data[...] = data.astype(self._data.dtype, copy=False)
        return self

    def copyto(self, target):
        """A copy on `target` (a Device), or copied into `target` (an NDArray)."""
        if isinstance(target, NDArray):
            return target.copyfrom(self)
        if isinstance(target, Device):
            return NDArray(self._data.copy(), target)
        raise InputError(f"NDArray.copyto takes a device or an NDArray, got {type(target).__name__}")

    def __repr__(self):
        return f"<tvm.nd.NDArray shape={self.shape}, {self.device}>\n{self._data!r}"

    __getattr__ = missing_member("tvm.nd.NDArray", default="the facade's NDArray has shape, dtype, device, "
                                    "numpy(), asnumpy(), copyfrom() and copyto(); use .numpy() for the rest")


def as_numpy(value) -> np.ndarray:
    """A numpy array from an NDArray, a numpy array, a torch tensor or a nested list."""
    if isinstance(value, NDArray):
        return value._data
    if type(value).__module__.startswith("torch"):
        return value.detach().cpu().numpy()
    return np.asarray(value)


def array(arr, device: Device | None = None, ctx: Device | None = None) -> NDArray:
    """`tvm.nd.array(np_array, device)`: a copy of the array on the device (the CPU by default)."""
    return NDArray(np.array(as_numpy(arr)), device or ctx)


def empty(shape, dtype: str = "float32", device: Device | None = None) -> NDArray:
    """An array of zeros (TVM's is uninitialised; zeros never leak another tensor's bytes)."""
    return NDArray(np.zeros(tuple(shape), dtype=dtype), device)


def save_param_dict(params: dict) -> bytes:
    """`relay.save_param_dict(params)` / `tvm.runtime.save_param_dict`: the arrays as bytes (numpy's .npz format,
    which `load_param_dict` reads without pickle; not TVM's binary format)."""
    buf = io.BytesIO()
    np.savez(buf, **{name: as_numpy(v) for name, v in params.items()})
    return buf.getvalue()


def load_param_dict(data) -> dict:
    """The params `save_param_dict` wrote, as NDArrays."""
    try:
        with np.load(io.BytesIO(bytes(data)), allow_pickle=False) as z:
            return {name: NDArray(z[name]) for name in z.files}
    except (ValueError, OSError, zipfile.BadZipFile) as e:
        raise InputError(f"these bytes are not params written by the facade's save_param_dict ({e}); params "
                         f"saved by apache-tvm cannot be read: save them again with the facade") from None


__getattr__ = module_getattr("tvm.nd")
