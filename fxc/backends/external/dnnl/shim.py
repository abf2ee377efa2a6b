"""oneDNN at build time: fxc's shim (fxc/runtime/cpu/dnnl_shim.c) compiled against the oneDNN header, for linking
into a module's library and for asking oneDNN, while partitioning, whether it makes a step's primitive.

    link_args(ir_text)      # [shim object, -l:libdnnl.so.2] for a module whose IR calls fxc_dnnl_run, else []
    primitive(params)       # (None, oneDNN's implementation name) or (why oneDNN refuses, "")

Both builds of the shim are cached (by its source's hash) in fxc's cache folder.
"""
from __future__ import annotations

import ctypes
import functools
import hashlib
import subprocess
import tempfile
from pathlib import Path

from ....errors import CompileError
from ....runtime.modules import by_name
from ....runtime.store import checked_file, write_entry

SONAME = "libdnnl.so.2"
SHIM_C = Path(__file__).resolve().parents[3] / "runtime" / "cpu" / "dnnl_shim.c"
STEP_SYMBOL = "fxc_dnnl_run"


def _gcc(args: list, source: str) -> None:
    try:
        p = subprocess.run(["gcc", *args], capture_output=True, text=True)
    except FileNotFoundError:
        raise CompileError("gcc is not installed; the llvm target links with gcc (apt-get install gcc)") from None
    if p.returncode != 0:
        hint = " (the oneDNN header: apt-get install libdnnl-dev)" if "dnnl.h" in p.stderr else ""
        raise CompileError(f"gcc failed on fxc's oneDNN shim{hint}", source=source, log=p.stderr)


def _built(suffix: str, args: list) -> Path:
    """The shim compiled with args into the cache (by the hash of its source and args), once."""
    src = SHIM_C.read_text()
    name = f"dnnl_shim-{hashlib.sha256((src + ' '.join(args)).encode()).hexdigest()[:16]}{suffix}"
    cached = checked_file(name)
    if cached is not None:
        return cached
    by_name("fxc.runtime.cpu.dnnl:check")()
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / f"shim{suffix}"
        _gcc(["-O2", "-fPIC", "-fopenmp", str(SHIM_C), "-o", str(out), *args], src)
        return write_entry(name, out.read_bytes())


def link_args(ir_text: str) -> list:
    """What a library whose IR calls the oneDNN steps links (the shim's object and libdnnl), else []."""
    if f"@{STEP_SYMBOL}(" not in ir_text:
        return []
    return [str(_built(".o", ["-c"])), f"-l:{SONAME}"]


@functools.lru_cache(maxsize=None)
def _shim():
    lib = ctypes.CDLL(str(_built(".so", ["-shared", f"-l:{SONAME}"])))
    lib.fxc_dnnl_check.argtypes = [ctypes.POINTER(ctypes.c_int64), ctypes.c_char_p, ctypes.c_int]
    lib.fxc_dnnl_check.restype = ctypes.c_int
    return lib


@functools.lru_cache(maxsize=4096)
def primitive(params: tuple) -> tuple:
    """(None, implementation name) when oneDNN makes the primitive of these step parameters, else (why not, "")."""
    buf = ctypes.create_string_buffer(128)
    if _shim().fxc_dnnl_check((ctypes.c_int64 * len(params))(*params), buf, 128) != 0:
        return "oneDNN has no implementation of it (its primitive descriptor is refused)", ""
    return None, buf.value.decode()
