"""The OpenCL device API (numpy + pyopencl only): devices, programs, buffers, launches, profiling.

    dev = open_device("0")                  # an index or a name substring ("pthread", "NVIDIA"); None: the
                                            # FXC_OPENCL_DEVICE variable, else the first device
    dev.info                                # what the compiler reads (compute units, local memory, ...)
    prog = dev.program(source)              # built once; the binary is cached on disk per device + driver
    buf = dev.buffer(nbytes)

Every failure is a named fxc error: TargetError (no pyopencl, no platform, no device, not enough memory)
or CompileError (the driver rejected a generated program; it carries the source and the build log).
"""
from __future__ import annotations

import functools
import hashlib
import os

from ...errors import CompileError, TargetError
from ...target import Caps, Target
from ..store import atomic_write, cache_dir

INSTALL = ("install an OpenCL runtime: on Debian `apt-get install pocl-opencl-icd ocl-icd-libopencl1` (a CPU "
           "device), or your GPU vendor's OpenCL driver; and `pip install pyopencl` (the fxc[opencl] extra)")


def _cl():
    try:
        import pyopencl as cl  # deferred: pyopencl is optional (the fxc[opencl] extra)
    except ImportError as e:
        raise TargetError(f"the opencl target needs pyopencl ({e}); {INSTALL}") from None
    return cl


def list_devices() -> list:
    """Every OpenCL device of every platform, in platform order."""
    cl = _cl()
    try:
        platforms = cl.get_platforms()
    except cl.Error as e:
        raise TargetError(f"no OpenCL platform found ({e}); {INSTALL}") from None
    if not platforms:
        raise TargetError(f"no OpenCL platform found; {INSTALL}")
    devices = []
    for p in platforms:
        try:
            devices += p.get_devices()
        except cl.Error:        # a platform without devices (its driver finds no hardware)
            continue
    if not devices:
        names = ", ".join(p.name for p in platforms)
        raise TargetError(f"OpenCL platform(s) {names} found, but no device; {INSTALL}")
    return devices


def choose_device(spec: str | None):
    """The device `spec` names (an index, or a substring of its name), else FXC_OPENCL_DEVICE, else the first."""
    devices = list_devices()
    spec = spec if spec not in (None, "") else os.environ.get("FXC_OPENCL_DEVICE", "")
    if spec == "":
        return devices[0]
    names = "; ".join(f"{k}: {d.name.strip()}" for k, d in enumerate(devices))
    if spec.isdigit():
        if int(spec) < len(devices):
            return devices[int(spec)]
        raise TargetError(f"OpenCL device {spec} does not exist; devices here: {names}")
    hits = [d for d in devices if spec.lower() in d.name.lower()]
    if not hits:
        raise TargetError(f"no OpenCL device matches {spec!r}; devices here: {names} (use -device=<index or name>)")
    return hits[0]


class Device:
    """One OpenCL device with its context and an in-order (profiling) queue."""

    def __init__(self, dev):
        cl = _cl()
        self.cl, self.dev = cl, dev
        self.ctx = cl.Context([dev])
        self.queue = cl.CommandQueue(self.ctx, dev, properties=cl.command_queue_properties.PROFILING_ENABLE)
        ext = set(dev.extensions.split())
        self.info = {
            "name": dev.name.strip(), "platform": dev.platform.name.strip(), "driver": dev.driver_version.strip(),
            "version": dev.version.strip(), "compute_units": int(dev.max_compute_units),
            "local_memory_bytes": int(dev.local_mem_size), "max_work_group_size": int(dev.max_work_group_size),
            "preferred_vector_width_float": int(dev.preferred_vector_width_float),
            "fp64": "cl_khr_fp64" in ext or bool(getattr(dev, "double_fp_config", 0)),
            "fp16": "cl_khr_fp16" in ext, "global_memory_bytes": int(dev.global_mem_size),
            "dedicated_local_memory": int(dev.local_mem_type) == int(cl.device_local_mem_type.LOCAL),
            "max_alloc_bytes": int(dev.max_mem_alloc_size), "extensions": sorted(ext),
        }

    def __str__(self):
        return f"{self.info['name']} ({self.info['platform']}, driver {self.info['driver']})"

    def check_memory(self, sizes: list, what: str = "the model"):
        """TargetError when buffers of these byte sizes do not fit the device."""
        total, biggest = sum(sizes), max(sizes, default=0)
        if total > self.info["global_memory_bytes"] or biggest > self.info["max_alloc_bytes"]:
            mib = 2 ** 20
            raise TargetError(f"{what} needs {total / mib:.1f} MiB of device memory (largest buffer {biggest / mib:.1f}"
                              f" MiB) but {self} has {self.info['global_memory_bytes'] / mib:.1f} MiB (at most "
                              f"{self.info['max_alloc_bytes'] / mib:.1f} MiB per buffer); use a smaller batch, or "
                              f"another -device=")

    def buffer(self, nbytes: int):
        cl = self.cl
        try:
            return cl.Buffer(self.ctx, cl.mem_flags.READ_WRITE, max(int(nbytes), 4))
        except cl.Error as e:
            raise TargetError(f"cannot allocate {nbytes} bytes on {self}: {e}") from None

    def program(self, source: str):
        """The built program of `source`: from the on-disk cache (keyed by the source's hash, the device and its
        driver) or built now, and cached."""
        cl = self.cl
        key = hashlib.sha256("\n".join([source, self.info["name"], self.info["platform"], self.info["driver"],
                                        self.info["version"]]).encode()).hexdigest()
        path = _cache_dir() / f"{key}.bin" if _cache_dir() is not None else None
        if path is not None and path.exists():
            try:
                return cl.Program(self.ctx, [self.dev], [path.read_bytes()]).build()
            except (cl.Error, OSError):
                pass            # a stale, damaged or evicted binary: build from source
        prog = cl.Program(self.ctx, source)
        try:
            prog.build(options=["-cl-std=CL1.2"])
        except cl.Error as e:
            try:
                log = prog.get_build_info(self.dev, cl.program_build_info.LOG)
            except cl.Error:
                log = str(e)
            raise CompileError(f"the OpenCL driver of {self} rejected a generated program", source, log) from None
        if path is not None:
            try:
                atomic_write(path, prog.binaries[0])
            except (OSError, IndexError, cl.Error):
                pass            # an unwritable cache only costs the next process a build
        return prog


def _cache_dir():
    try:
        d = cache_dir() / "opencl"
        d.mkdir(parents=True, exist_ok=True)
        return d
    except OSError:
        return None


@functools.lru_cache(maxsize=None)
def _open(key: str) -> Device:
    return Device(choose_device(key))


def open_device(spec: str | None = None) -> Device:
    """The Device for a target's -device= value (one context and queue per device per process)."""
    dev = choose_device(spec)
    return _open(str(list_devices().index(dev)))


def opencl_caps(info: dict) -> Caps:
    """Caps of an OpenCL device from what it reports (Device.info): compute units, local memory (and whether it is
    memory of its own: feature "dedicated_local_memory"; a CPU device's is plain memory), work-group limit,
    preferred vector width, its extensions, float64 only with the fp64 extension, byte stores from OpenCL 1.1 or
    cl_khr_byte_addressable_store (Caps.int8_storage).
    Index width: 32 bits on a GPU (its 64-bit integer arithmetic is emulated); 64 on a CPU device, whose vectoriser
    sees consecutive loads across work-items only through the 64-bit work-item index (there only divisions run in
    32 bits: fxc.backends.cstyle; measured on PoCL by benchmarks/opencl_window.py)."""
    dtypes = set(Caps().dtypes) - {"complex64", "complex128"}
    if not info.get("fp64"):
        dtypes.discard("float64")
    return Caps(vector_bits=32 * max(1, int(info.get("preferred_vector_width_float", 1))), vector_registers=0,
                threads=int(info["compute_units"]),
                features=frozenset(info.get("extensions", ())) | ({"dedicated_local_memory"}
                                                                  if info.get("dedicated_local_memory") else set()),
                local_memory_bytes=int(info["local_memory_bytes"]),
                max_work_group_size=int(info["max_work_group_size"]),
                index_bits=32 if info.get("dedicated_local_memory") else 64, dtypes=frozenset(dtypes), scatter=True,
                math=Caps().math | {"erfc", "lgamma", "expm1", "log1p", "asinh", "acosh", "atanh"},
                vector_widths=frozenset({2, 4, 8, 16}), int8_storage=byte_stores(info))


def byte_stores(info: dict) -> bool:
    """Whether the device stores single bytes (OpenCL 1.0 needs the extension; "OpenCL 1.2 pocl" has them; an info
    without a version is taken as OpenCL 1.2's, the least fxc's kernels are written for)."""
    words = info.get("version", "OpenCL 1.2").split()
    try:
        version = tuple(int(x) for x in words[1].split(".")[:2])
    except (IndexError, ValueError):
        version = (1, 0)
    return version >= (1, 1) or "cl_khr_byte_addressable_store" in info.get("extensions", ())


def open_target(target: Target) -> Target:
    """An opencl target filled: the device its -device= names (or FXC_OPENCL_DEVICE), opened, and its Caps."""
    device = open_device(target.attr("device"))
    return target.with_device(device, opencl_caps(device.info))
