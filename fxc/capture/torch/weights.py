"""The torch.compile backend's per-call checks of the weights (fxc/capture/torch/partition.py).

`WeightCheck` takes the weights' positions among a partition's arguments, their tensors, versions and addresses;
it says of a call's arguments whether the weights are still those tensors at those versions and addresses (one C
pass, weight_check.cpp built with g++ against the installed torch, once per torch version, in a background thread
at first use; in Python until that is ready, or when it cannot be built). `WeightSampler` takes the weights read
through a copy (non-contiguous ones, e.g. the conv weights of a channels_last model) and a compiled library's
fxc_fingerprint; its `unchanged()` says whether sampled words of them still hold the values they held when it was
made.
"""
from __future__ import annotations

import ctypes
import hashlib
import logging
import operator
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import threading
from pathlib import Path

from ...runtime.cpu.library import pointer_array
from ...runtime.module import FINGERPRINT_WORDS

log = logging.getLogger("fxc")

SOURCE = Path(__file__).with_name("weight_check.cpp")
PREBUILT = SOURCE.parent / "_prebuilt"
_VERSION = operator.attrgetter("_version")
_native: dict = {"fn": None, "thread": None}
_start = threading.Lock()          # one build thread per process


def _picker(positions):
    """A function of the arguments that returns those at `positions` as a sequence (one C call: operator.itemgetter,
    whose result for a single position is the item itself)."""
    if len(positions) == 1:
        return lambda args, i=positions[0]: (args[i],)
    return operator.itemgetter(*positions) if positions else lambda args: ()


class WeightCheck:
    """Whether the weights at `positions` of a call's arguments are still `tensors` at `versions` and `addresses`
    (an optimizer step changes a version, `p.data = t` an address, a new Parameter the object)."""

    def __init__(self, positions, tensors, versions, addresses):
        import torch
        self.pick, self.tensors, self.versions, self.addresses = _picker(positions), tensors, versions, addresses
        self._data_ptr = torch.Tensor.data_ptr
        n = len(tensors)
        self.c_args = (n, (ctypes.c_longlong * n)(*positions), (ctypes.py_object * n)(*tensors),
                       (ctypes.c_longlong * n)(*versions), (ctypes.c_void_p * n)(*addresses))

    def __call__(self, args) -> bool:
        fn = _native["fn"]
        if fn is not None:
            same = fn(args, *self.c_args)
            if same >= 0:
                return same == 1
        elif _native["thread"] is None:
            native()
        weights = self.pick(args)
        return all(map(operator.is_, weights, self.tensors)) and list(map(_VERSION, weights)) == self.versions \
            and list(map(self._data_ptr, weights)) == self.addresses


def native(wait: bool = False):
    """The C check (fxc_weights_same), or None while it builds (in a thread started by the first call) or when it
    cannot be built (then the checks stay in Python: slower, as right). wait: build now, in this thread."""
    with _start:
        if _native["fn"] is None and _native["thread"] is None:
            _native["thread"] = threading.Thread(target=_load, name="fxc-weight-check-build", daemon=True)
            _native["thread"].start()
    if wait:
        _native["thread"].join()
    return _native["fn"]


def _load() -> None:
    try:
        lib = ctypes.PyDLL(str(library_path()))     # PyDLL: called with the GIL held (it reads Python objects)
        fn = lib.fxc_weights_same
        fn.restype = ctypes.c_int
        fn.argtypes = [ctypes.py_object, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                       ctypes.c_void_p]
        _native["fn"] = fn
    except Exception as e:      # noqa: BLE001 (no g++, no headers, a compile or load error: the Python check stays)
        log.info("fxc: the weights' per-call check stays in Python (its C pass did not build: %s: %s)",
                 type(e).__name__, str(e)[:500])


def library_path(where: Path | None = None) -> Path:
    """weight_check.cpp as a shared library for the installed torch: the one built at setup beside this file
    (`_prebuilt/`) when there is one, else the cache's (checked, fxc/runtime/store.py) or one built now with g++ into
    the
    cache (or into `where`), by the hash of the source, torch's version and build, Python's and g++'s versions."""
    import torch

    from ...errors import CompileError
    from ...runtime.store import checked_file, write_entry
    gxx = shutil.which("g++")
    if gxx is None:
        raise CompileError("g++ is not installed (apt-get install g++)")
    version = subprocess.run([gxx, "--version"], capture_output=True, text=True, check=False).stdout.splitlines()[:1]
    h = hashlib.sha256()
    for part in (SOURCE.read_bytes(), torch.__version__, str(torch.version.git_version), sys.version, *version,
                 torch.__file__):
        h.update(part if isinstance(part, bytes) else part.encode())
    name = f"weight_check-{h.hexdigest()[:16]}.so"
    if where is None and (PREBUILT / name).is_file():
        return PREBUILT / name
    if where is None and (cached := checked_file(f"torch_ext/{name}")) is not None:
        return cached
    root = Path(torch.__file__).parent
    with tempfile.TemporaryDirectory() as d:
        so = Path(d) / name
        cmd = [gxx, "-O2", "-shared", "-fPIC", "-std=c++20", "-w", f"-D_GLIBCXX_USE_CXX11_ABI="
               f"{int(torch._C._GLIBCXX_USE_CXX11_ABI)}", f"-I{sysconfig.get_paths()['include']}",
               f"-I{root / 'include'}", f"-I{root / 'include' / 'torch' / 'csrc' / 'api' / 'include'}", str(SOURCE),
               "-o", str(so), f"-L{root / 'lib'}", "-lc10", "-ltorch_python", f"-Wl,-rpath,{root / 'lib'}"]
        r = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if r.returncode:
            raise CompileError("g++ could not build fxc's weight check", SOURCE.read_text(), r.stderr[-4000:])
        if where is not None:
            from ...runtime.store import atomic_write
            atomic_write(where / name, so.read_bytes(), 0o755)
            return where / name
        return write_entry(f"torch_ext/{name}", so.read_bytes(), 0o755)


def prebuild() -> None:
    """Build the check beside its source (`_prebuilt/`), as a wheel would ship it (scripts/setup.sh): no process
    then checks its weights in Python while g++ runs."""
    try:
        library_path(PREBUILT)
    except Exception as e:      # noqa: BLE001 (read-only, no g++: the first use builds it into the cache)
        print(f"fxc: weight check not prebuilt ({type(e).__name__}: {str(e)[:300]})", file=sys.stderr)


class WeightSampler:
    """A fingerprint of sampled words of weights that fxc reads through a copy (non-contiguous ones, e.g. the conv
    weights of a channels_last model): a write through `.data` changes neither their version nor their address,
    and the module's own fingerprint (Module.run_prepared) only sees the copy, so this one tells when the copy is
    stale. A write missing every sampled word goes unseen, as for contiguous weights."""

    def __init__(self, tensors, fingerprint):
        index, offsets = [], []
        for k, t in enumerate(tensors):
            size = t.element_size()
            extent = (sum((n - 1) * st for n, st in zip(t.shape, t.stride())) + 1) * size   # bytes the view spans
            if t.numel() == 0 or extent < 4:
                continue
            for j in sorted({q * (t.numel() - 1) // max(FINGERPRINT_WORDS - 1, 1) for q in range(FINGERPRINT_WORDS)}):
                at, rest = 0, j
                for n, st in zip(reversed(t.shape), reversed(t.stride())):
                    at, rest = at + (rest % n) * st, rest // n
                index.append(k)
                offsets.append(min(at * size, extent - 4))
        self.fn, self.n = fingerprint, len(index)
        self.args = (pointer_array([t.data_ptr() for t in tensors]), (ctypes.c_int64 * max(self.n, 1))(*index),
                     (ctypes.c_int64 * max(self.n, 1))(*offsets), self.n)
        self.value = self.fn(*self.args)

    @classmethod
    def of(cls, tensors, fingerprint):
        return None if fingerprint is None else cls(tensors, fingerprint)

    def unchanged(self) -> bool:
        return self.fn(*self.args) == self.value
