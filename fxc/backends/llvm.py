"""The `llvm` target: render kernels to LLVM IR, optimise with llvmlite for the host CPU, emit an
object file and link it (with the parallel runtime) into a shared library. Libraries are cached by
the hash of their IR, so a second process compiling the same graph skips LLVM and the linker."""
from __future__ import annotations

import functools
import hashlib
import os
import subprocess
import tempfile
from pathlib import Path

from ..cache import atomic_write, cache_dir
from ..errors import CompileError
from .llvm_render import ModuleWriter

RUNTIME_C = Path(__file__).resolve().parent.parent / "runtime" / "cpu_parallel.c"


@functools.lru_cache(maxsize=None)
def target_machine():
    import llvmlite.binding as llvm
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    triple = llvm.get_process_triple()
    cpu = llvm.get_host_cpu_name()
    features = llvm.get_host_cpu_features().flatten()
    tm = llvm.Target.from_triple(triple).create_target_machine(cpu=cpu, features=features, opt=3,
                                                               reloc="pic", codemodel="default")
    return tm, triple, cpu, features


def vector_bits() -> int:
    """Widest float vector the host CPU offers (512 with AVX-512F, 256 with AVX2...)."""
    _, _, _, feats = target_machine()
    if "+avx512f" in feats:
        return 512
    if "+avx" in feats:
        return 256
    return 128


def render(kernels: list, calls: list, prepack_calls: list = ()) -> str:
    """LLVM IR of the kernels and entries: `fxc_run` runs prepack_calls then calls; with prepack calls
    there are also `fxc_prepack` and `fxc_run_main` so a runtime can skip an unchanged prepack."""
    tm, triple, _, _ = target_machine()
    mw = ModuleWriter(triple, str(tm.target_data))
    for k in kernels:
        mw.kernel(k)
    mw.entry(list(prepack_calls) + list(calls))
    if prepack_calls:
        mw.entry(list(prepack_calls), "fxc_prepack")
        mw.entry(list(calls), "fxc_run_main")
    return mw.text()


def optimize(ir_text: str):
    import llvmlite.binding as llvm
    tm = target_machine()[0]
    try:
        mod = llvm.parse_assembly(ir_text)
        mod.verify()
    except RuntimeError as e:
        raise CompileError("generated LLVM IR is invalid (an fxc bug; please report it with FXC_DEBUG=4 output)",
                           source=ir_text, log=str(e)) from None
    pto = llvm.create_pipeline_tuning_options(speed_level=3)
    pto.loop_vectorization = True
    pto.slp_vectorization = True
    pto.loop_unrolling = True
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(mod, pb)
    return mod


def _runtime_object() -> Path:
    src = RUNTIME_C.read_bytes()
    out = cache_dir() / f"cpu_parallel-{hashlib.sha256(src).hexdigest()[:16]}.o"
    if not out.exists():
        with tempfile.TemporaryDirectory() as d:
            tmp = Path(d) / "rt.o"
            _run(["gcc", "-O2", "-fPIC", "-fopenmp", "-c", str(RUNTIME_C), "-o", str(tmp)], RUNTIME_C.read_text())
            atomic_write(out, tmp.read_bytes())
    return out


def _run(cmd, source=""):
    try:
        p = subprocess.run(cmd, capture_output=True, text=True)
    except FileNotFoundError:
        raise CompileError(f"{cmd[0]} is not installed; the llvm target links with gcc "
                           f"(apt-get install gcc)") from None
    if p.returncode != 0:
        raise CompileError(f"{cmd[0]} failed", source=source, log=p.stderr)


def build_library(ir_text: str) -> tuple:
    """Return (path of the shared library, optimised IR text or None when cached)."""
    tm, triple, cpu, feats = target_machine()
    key = hashlib.sha256((ir_text + cpu + feats + RUNTIME_C.read_text()).encode()).hexdigest()[:24]
    lib = cache_dir() / f"fxc-{key}.so"
    if lib.exists():
        return lib, None
    mod = optimize(ir_text)
    obj = tm.emit_object(mod)
    with tempfile.TemporaryDirectory() as d:
        o, so = Path(d) / "k.o", Path(d) / "k.so"
        o.write_bytes(obj)
        _run(["gcc", "-shared", "-fopenmp", "-o", str(so), str(o), str(_runtime_object()), "-lm"], ir_text)
        atomic_write(lib, so.read_bytes())
    return lib, str(mod)


def assembly(ir_text: str) -> str:
    tm = target_machine()[0]
    return tm.emit_assembly(optimize(ir_text))
