"""The torch.compile backend's per-call checks of the weights (fxc/capture/torch/partition.py).

`WeightCheck` takes the weights' positions among a partition's arguments, their tensors, versions and addresses;
it says of a call's arguments whether the weights are still those tensors at those versions and addresses (one C
pass, weight_check.cpp built with g++ against the installed torch, once per torch version, in a background thread
at first use; in Python until that is ready, or when it cannot be built). This is the torch half of the weight
check: what torch knows (tensor, version, address). The module's weight state (fxc/runtime/weights.py) owns the
rest: the token it is handed, the fingerprint of the weights' words, what the module holds of them.
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

import torch

from ...errors import CompileError
from ...runtime.store import atomic_write, checked_file, write_entry

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
