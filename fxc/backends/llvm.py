"""The `llvm` target: render kernels to LLVM IR, optimise with llvmlite for the host CPU, emit an
object file and link it (with the parallel runtime) into a shared library. Libraries are cached by
the hash of their IR, so a second process compiling the same graph skips LLVM and the linker."""
from __future__ import annotations

import concurrent.futures
import functools
import hashlib
import re
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


def render(kernels: list, calls: list, prepack_calls: list = (), profile: bool = False) -> str:
    """LLVM IR of the kernels and entries: `fxc_run` runs prepack_calls then calls; with prepack calls
    there are also `fxc_prepack` and `fxc_run_main` so a runtime can skip an unchanged prepack.
    profile: time every kernel call into the exported `fxc_profile_counters` (counter k = k-th call of
    prepack_calls + calls)."""
    tm, triple, _, _ = target_machine()
    mw = ModuleWriter(triple, str(tm.target_data))
    for k in kernels:
        mw.kernel(k)
    every = list(prepack_calls) + list(calls)
    prof = {name: k for k, (name, _) in enumerate(every)} if profile else None
    if profile:
        mw.profile_counters(len(every))
    mw.entry(every, profile=prof)
    if prepack_calls:
        mw.entry(list(prepack_calls), "fxc_prepack", prof)
        mw.entry(list(calls), "fxc_run_main", prof)
    return mw.text()


def optimize(ir_text: str, context=None, tm=None):
    import llvmlite.binding as llvm
    tm = tm or target_machine()[0]
    try:
        mod = llvm.parse_assembly(ir_text, context)
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
    parts = split_module(ir_text, COMPILE_THREADS)
    with concurrent.futures.ThreadPoolExecutor(len(parts)) as pool:   # LLVM runs outside the GIL
        results = list(pool.map(_compile_part, parts))
    with tempfile.TemporaryDirectory() as d:
        objs = []
        for k, (obj, _) in enumerate(results):
            objs.append(Path(d) / f"k{k}.o")
            objs[-1].write_bytes(obj)
        so = Path(d) / "k.so"
        _run(["gcc", "-shared", "-fopenmp", "-o", str(so), *map(str, objs), str(_runtime_object()), "-lm"], ir_text)
        atomic_write(lib, so.read_bytes())
    return lib, "\n".join(text for _, text in results)


COMPILE_THREADS = max(1, min(4, len(os.sched_getaffinity(0))))


def _compile_part(text: str):
    """Optimise and emit one part in its own LLVM context and target machine (thread-safe)."""
    import llvmlite.binding as llvm
    _, triple, cpu, features = target_machine()
    tm = llvm.Target.from_triple(triple).create_target_machine(cpu=cpu, features=features, opt=3,
                                                               reloc="pic", codemodel="default")
    mod = optimize(text, llvm.create_context(), tm)
    return tm.emit_object(mod), str(mod)


def split_module(ir_text: str, n: int) -> list:
    """Split a rendered module into n modules of about equal size for parallel compilation: each kernel
    (with its outlined parallel bodies) goes whole to one part and becomes `hidden` instead of internal
    so the entry functions (in part 0) link to it; declarations and metadata go to every part."""
    lines = ir_text.split("\n")
    first = next((i for i, l in enumerate(lines) if l.startswith("define ")), len(lines))
    head = [l for l in lines[:first]]
    meta = [l for l in lines[first:] if l.startswith("!")]
    funcs, cur = [], None
    for l in lines[first:]:
        if l.startswith("define "):
            cur = [l]
            funcs.append(cur)
        elif cur is not None and not l.startswith("!"):
            cur.append(l)
    name = lambda f: re.match(r"define [^@]*@([\w.]+)\(", f[0]).group(1)
    kernels: dict = {}
    entries = []
    for f in funcs:
        fn = name(f)
        m = re.match(r"(k\d+_\w*?)(_par\d+)?$", fn)
        if m and fn.startswith("k") and not fn.startswith("fxc"):
            base = fn if m.group(2) is None else fn[: -len(m.group(2))]
            kernels.setdefault(base, []).append(f)
        else:
            entries.append(f)
    if n <= 1 or len(kernels) < 2:
        return [ir_text]
    bins = [[] for _ in range(n)]
    sizes = [0] * n
    decl = []
    for base, fs in sorted(kernels.items(), key=lambda kv: -sum(len(x) for f in kv[1] for x in f)):
        k = sizes.index(min(sizes))
        sizes[k] += sum(len(x) for f in fs for x in f)
        for f in fs:
            if name(f) == base:
                f = [f[0].replace(f"define internal void @{base}(", f"define hidden void @{base}(")] + f[1:]
                decl.append(f"declare hidden void @{base}(ptr)")
            bins[k].append(f)
    out = []
    for k, b in enumerate(bins):
        body = [l for f in (entries if k == 0 else []) for l in f] + [l for f in b for l in f]
        mine = {name(f) for f in b}
        decls = [d for d in decl if d.split("@")[1].split("(")[0] not in mine]
        out.append("\n".join(head + decls + [""] + body + meta) + "\n")
    return out


def assembly(ir_text: str) -> str:
    tm = target_machine()[0]
    return tm.emit_assembly(optimize(ir_text))
