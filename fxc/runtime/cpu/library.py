"""CPU device API: load a compiled shared library and call its `fxc_run` entry with raw pointers.
Imports only numpy and ctypes."""
from __future__ import annotations

import ctypes
import os
import struct
import sys
import threading

import numpy as np

from ...errors import LibraryError
from ..weights import HeldWeights

ELF_MACHINES = {62: "x86_64", 183: "aarch64", 40: "arm"}     # e_machine -> arch


def _elf(path: str, head: bytes) -> tuple:
    """(64-bit, arch) of a little-endian ELF shared library's header."""
    if len(head) < 20 or head[:4] != b"\x7fELF" or head[4] not in (1, 2) or head[5] != 1 or head[16:18] != b"\3\0":
        raise LibraryError(f"{path} is not a little-endian ELF shared library (damaged?)")
    machine = struct.unpack_from("<H", head, 18)[0]
    return head[4] == 2, ELF_MACHINES.get(machine, f"e_machine {machine}")


def elf_arch(path: str) -> str:
    """The arch of an ELF library's code."""
    try:
        with open(path, "rb") as f:
            return _elf(path, f.read(20))[1]
    except OSError as e:
        raise LibraryError(f"cannot read the library {path}: {e}") from None


def arch_of(machine: str) -> str:
    """An ELF_MACHINES arch from a machine's or a triple's first part ("armv7l": "arm", "arm64": "aarch64")."""
    m = machine.lower()
    return "arm" if m.startswith(("arm", "thumb")) and m != "arm64" else {"arm64": "aarch64", "amd64": "x86_64"}.get(
        m, m)


def process_arch() -> str:
    """This process's arch (a 32-bit process on a 64-bit ARM kernel: "arm")."""
    arch = arch_of(os.uname().machine)
    return "arm" if arch == "aarch64" and struct.calcsize("P") == 4 else arch


def check_elf(path: str) -> None:
    """Raise LibraryError unless `path` is a whole little-endian ELF (64- or 32-bit) shared library: every segment
    the loader maps lies inside the file (else mapped past its end: SIGBUS)."""
    try:
        with open(path, "rb") as f:
            size, head = os.fstat(f.fileno()).st_size, f.read(64)
            wide = _elf(path, head)[0]
            # ELF64 (32): e_phoff at 32 (28), e_phentsize/num at 54 (42); p_offset/filesz at 8/32 (4/16)
            word, at, ph_at, off_at, size_at = ("<Q", 32, 54, 8, 32) if wide else ("<I", 28, 42, 4, 16)
            phoff, = struct.unpack_from(word, head.ljust(64, b"\0"), at)
            phentsize, phnum = struct.unpack_from("<HH", head.ljust(64, b"\0"), ph_at)
            if len(head) < (64 if wide else 52) or phentsize < (56 if wide else 32) or phoff + phentsize * phnum > size:
                raise LibraryError(f"{path} is truncated (its program headers lie past its end)")
            f.seek(phoff)
            table = f.read(phentsize * phnum)
    except OSError as e:
        raise LibraryError(f"cannot read the library {path}: {e}") from None
    for k in range(phnum):
        end = sum(struct.unpack_from(word, table, k * phentsize + a)[0] for a in (off_at, size_at))
        if end > size:
            raise LibraryError(f"{path} is truncated ({size} bytes; a segment ends at {end})")


def openmp_mode(training_step: bool = False) -> int:
    """Where kernels run their parallel loops (cpu_parallel.c): 0 on fxc's own pool, 1 on OpenMP's team (beside
    PyTorch, PyTorch's: its libgomp.so.1 is the one the module links), 2 on whichever is awake at the call. FXC_OPENMP=1
    / 0 force 1 / 0. Else a training step's graphs take 1 (their calls follow PyTorch's ops: loss, optimizer), every
    other module 2 when PyTorch is loaded (right after a PyTorch op its team is spinning and takes the loops at once,
    where fxc's workers would get half a core beside it; after idle fxc's pool wakes faster), 0 without it (nothing
    else uses the team)."""
    flag = os.environ.get("FXC_OPENMP", "")
    if flag in ("0", "1"):
        return int(flag)
    return 1 if training_step else 2 if "torch" in sys.modules else 0


_CALL_LOCKS: dict = {}      # library path -> the lock its calls take turns on (one dlopen handle, one set of globals)


class CpuLibrary:
    def __init__(self, path: str):
        self.path = str(path)
        check_elf(self.path)
        try:
            self.lib = ctypes.CDLL(self.path)
            self.run = self.lib.fxc_run
        except (OSError, AttributeError) as e:
            raise LibraryError(f"cannot load the compiled library {self.path}: {e}") from None
        self.run.restype = ctypes.c_int
        self.run.argtypes = [ctypes.c_void_p] * 4
        threads = int(os.environ.get("FXC_NUM_THREADS", "0") or 0) or len(os.sched_getaffinity(0))
        self.lib.fxc_set_num_threads(ctypes.c_int(threads))
        self.use_openmp = getattr(self.lib, "fxc_use_openmp", None)    # absent from older libraries
        if self.use_openmp is not None:
            self.use_openmp.restype, self.use_openmp.argtypes = None, [ctypes.c_int]
            self.use_openmp(openmp_mode())
        try:      # present when the module has a weight-packing step that may be skipped
            self.prepack, self.run_main = self.lib.fxc_prepack, self.lib.fxc_run_main
        except AttributeError:
            self.prepack = self.run_main = None
        for f in (self.prepack, self.run_main):
            if f is not None:
                f.restype, f.argtypes = ctypes.c_int, [ctypes.c_void_p] * 4
        self.wake = getattr(self.lib, "fxc_wake", None)                    # absent from older libraries
        if self.wake is not None:
            self.wake.restype, self.wake.argtypes = None, []
        try:        # the record of an out-of-range index (op, index, size); absent from older libraries
            self.index_record = (ctypes.c_int64 * 3).in_dll(self.lib, "fxc_index_error")
        except ValueError:
            self.index_record = None
        # the kernels record a failed call (an index out of range, a division by zero) in the library's globals:
        # calls into one library take turns, so each reads its own record (they use every core anyway)
        self._lock, self._failed = _CALL_LOCKS.setdefault(self.path, threading.Lock()), threading.local()
        self.run, self.prepack, self.run_main = (None if f is None else self._taking_turns(f)
                                                 for f in (self.run, self.prepack, self.run_main))
        self.fingerprint = getattr(self.lib, "fxc_fingerprint", None)      # absent from older libraries
        if self.fingerprint is not None:
            self.fingerprint.restype = ctypes.c_uint64
            self.fingerprint.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]


    def _taking_turns(self, fn):
        """fn, called under the library's lock; a failed call's index record is kept for this thread."""
        def call(*args):
            with self._lock:
                rc = fn(*args)
                if rc and self.index_record is not None:
                    self._failed.record = tuple(int(v) for v in self.index_record)
            return rc
        return call

    def index_error(self) -> tuple:
        """(op number, index, size) of the out-of-range index this thread's last failed call met
        (fxc.errors.INDEX_OPS)."""
        return getattr(self._failed, "record", (-1, "?", "?"))


class Workspace:
    """A reusable scratch buffer per calling thread (64-byte aligned)."""

    def __init__(self, nbytes: int):
        self.nbytes = nbytes
        self._local = threading.local()

    def held(self) -> HeldWeights:
        """Which weights this thread's workspace holds packed (runtime/weights.py)."""
        held = getattr(self._local, "held", None)
        if held is None:
            held = self._local.held = HeldWeights()
        return held

    def pointer(self) -> int:
        buf = getattr(self._local, "buf", None)
        if buf is None:
            raw = np.empty(self.nbytes + 64, dtype=np.uint8)
            off = (-raw.ctypes.data) % 64
            self._local.buf = buf = (raw, raw.ctypes.data + off)
        return buf[1]


def aligned_array(a: np.ndarray, align: int = 64) -> np.ndarray:
    """`a` contiguous at an `align`-byte aligned address (a copy where it is not): a module's constants start on a
    cache line, as in an exported artifact, so two builds of the same code do not differ by where numpy placed
    their weights (measured: up to ~1% between builds of MobileNetV2, gone when aligned; docs/tuning.md)."""
    a = np.ascontiguousarray(a)
    if a.ctypes.data % align == 0 or a.nbytes == 0:     # (an empty constant has no bytes to read)
        return a
    raw = np.empty(a.nbytes + align, np.uint8)
    off = (-raw.ctypes.data) % align
    out = raw[off:off + a.nbytes].view(a.dtype).reshape(a.shape)
    out[...] = a
    return out


def pointer_array(addresses) -> ctypes.Array:
    return (ctypes.c_void_p * max(len(addresses), 1))(*addresses)
