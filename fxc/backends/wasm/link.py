"""The `wasm` target's build step: a rendered LLVM module (fxc.backends.llvm.render, the same renderer and object
cache as the `llvm` target) compiled by llvmlite for wasm32 with SIMD128 and linked by Debian's `wasm-ld` (package
`lld`) into one `.wasm` module per model.

Takes the module's LLVM IR text (the kernels and the plan's entries `fxc_run`, `fxc_prepack`, `fxc_run_main`, or
the entries of `build_entries`); produces the `.wasm` bytes, cached by the hash of the IR and the target.
The module exports its memory, its entries, `__heap_base` (where the JS runtime's buffers start) and
`fxc_index_error` (the record of an out-of-range index). What a kernel needs that wasm has no instruction for:
`fxc_parallel_for` (one thread: the loop runs in the caller, RUNTIME_IR) and the math functions a browser's `Math`
has (JS_IMPORTS: fxc/runtime/browser/wasm/runtime.js supplies them as imports). Any other undefined symbol (a libm or
compiler-runtime function, e.g. `erf` in float64) is a CompileError naming it at build time, never an unresolved
import when the browser loads the module. Float32 math (exp, log, tanh, erf, sigmoid, sin, cos, ...) is fxc's
own vector code (fxc.backends.llvm.mathlib), scalars included (Caps.libm is False for wasm).
"""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from ...errors import CompileError, TargetError
from ...runtime.store import read_entry, write_entry
from ...target import Target
from ..llvm import compile as llvm

INSTALL_LLD = ("the wasm target links its module with wasm-ld: install Debian's lld (`apt-get install lld`, "
               "scripts/setup.sh does), or set FXC_WASM_LD to a wasm-ld executable")

# libm names a kernel may call (LLVM's lowering of llvm.sin.f32, frem, ...) that the JS runtime supplies from Math
# (float32 versions computed in double and rounded: at least as accurate as libm's float ones). Keep in step with
# FXC_WASM_IMPORTS in fxc/runtime/browser/wasm/runtime.js (tests/backends/wasm/test_wasm.py checks).
_MATH = ("sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "exp",
         "expm1", "log", "log1p", "log2", "log10", "exp2", "cbrt", "pow", "atan2", "hypot", "fmod")
JS_IMPORTS = tuple(n + s for n in _MATH for s in ("", "f")) + ("fmaf", "fxc_profile_now")
# fmaf: LLVM's llvm.fma on float32 (the exact argument reduction of sin/cos): a * b is exact in double

# What the CPU runtime (cpu_parallel.c) gives the kernels, for one wasm thread: a parallel loop runs whole here.
RUNTIME_IR = """
define void @fxc_parallel_for(ptr %fn, ptr %args, i64 %n) {
entry:
  call void %fn(i64 0, i64 %n, ptr %args)
  ret void
}
"""
# ... and for several (-num-threads=N): N web workers on the module's shared memory
# (fxc/runtime/browser/wasm/runtime.js).
# Worker 0 runs the plan (the page's own thread only posts a call and awaits the answer, so it never spins and both
# cores do kernel work); workers k = 1..N-1 serve the pool in fxc_worker(k). A parallel loop over n stores its body,
# arguments and n, bumps the generation counter and wakes the pool (one barrier a loop: the workers count themselves
# done); part k of N (n k / N to n (k + 1) / N) runs on worker k, part 0 on the caller. Whoever waits (the caller for
# the parts, a pool worker for the next loop) polls its counter POOL_SPIN times, then sleeps in memory.atomic.wait32
# (the last worker done wakes the caller). fxc_pool_workers stays 0 (every loop runs whole in the caller) until the
# JS runtime has started the workers; a loop inside a parallel body, or of fewer than 2 iterations, runs whole too
# (a loop too small to be worth threads is serial already: the schedules' PARALLEL_MIN_WORK).
POOL_SPIN = 20000           # polls before sleeping (a few tens of microseconds: the next loop usually comes sooner)
POOL_IR = """
@fxc_pool_workers = global i32 0, align 4
@fxc_pool_gen = global i32 0, align 4
@fxc_pool_done = global i32 0, align 4
@fxc_pool_spin = global i32 {spin}, align 4
@fxc_pool_busy = internal global i32 0, align 4
@fxc_pool_fn = internal global ptr null, align 4
@fxc_pool_args = internal global ptr null, align 4
@fxc_pool_n = internal global i64 0, align 8
declare i32 @llvm.wasm.memory.atomic.wait32(ptr, i32, i64)
declare i32 @llvm.wasm.memory.atomic.notify(ptr, i32)

define void @fxc_parallel_for(ptr %fn, ptr %args, i64 %n) {
entry:
  %w = load atomic i32, ptr @fxc_pool_workers seq_cst, align 4
  %busy = load atomic i32, ptr @fxc_pool_busy seq_cst, align 4
  %none = icmp eq i32 %w, 0
  %nested = icmp ne i32 %busy, 0
  %small = icmp slt i64 %n, 2
  %a = or i1 %none, %nested
  %serial = or i1 %a, %small
  br i1 %serial, label %alone, label %pool
alone:
  call void %fn(i64 0, i64 %n, ptr %args)
  ret void
pool:
  store atomic i32 1, ptr @fxc_pool_busy seq_cst, align 4
  store atomic ptr %fn, ptr @fxc_pool_fn seq_cst, align 4
  store atomic ptr %args, ptr @fxc_pool_args seq_cst, align 4
  store atomic i64 %n, ptr @fxc_pool_n seq_cst, align 8
  store atomic i32 0, ptr @fxc_pool_done seq_cst, align 4
  %g = atomicrmw add ptr @fxc_pool_gen, i32 1 seq_cst
  %woke = call i32 @llvm.wasm.memory.atomic.notify(ptr @fxc_pool_gen, i32 %w)
  %w64 = zext i32 %w to i64
  %parts = add i64 %w64, 1
  %end0 = sdiv i64 %n, %parts
  %any = icmp sgt i64 %end0, 0
  br i1 %any, label %mine, label %poll0
mine:
  call void %fn(i64 0, i64 %end0, ptr %args)
  br label %poll0
poll0:
  br label %poll
poll:
  %i = phi i32 [ 0, %poll0 ], [ %i1, %more ]
  %d = load atomic i32, ptr @fxc_pool_done seq_cst, align 4
  %all = icmp uge i32 %d, %w
  br i1 %all, label %out, label %more
more:
  %i1 = add i32 %i, 1
  %lim = load atomic i32, ptr @fxc_pool_spin monotonic, align 4
  %long = icmp ugt i32 %i1, %lim
  br i1 %long, label %sleep, label %poll
sleep:
  %d2 = load atomic i32, ptr @fxc_pool_done seq_cst, align 4
  %all2 = icmp uge i32 %d2, %w
  br i1 %all2, label %out, label %block
block:
  %r = call i32 @llvm.wasm.memory.atomic.wait32(ptr @fxc_pool_done, i32 %d2, i64 -1)
  br label %sleep
out:
  store atomic i32 0, ptr @fxc_pool_busy seq_cst, align 4
  ret void
}

define void @fxc_worker(i32 %k) {
entry:
  %seen = alloca i32, align 4
  store i32 0, ptr %seen, align 4
  br label %next
next:
  %s = load i32, ptr %seen, align 4
  br label %poll
poll:
  %i = phi i32 [ 0, %next ], [ %i1, %more ]
  %g0 = load atomic i32, ptr @fxc_pool_gen seq_cst, align 4
  %same0 = icmp eq i32 %g0, %s
  br i1 %same0, label %more, label %run
more:
  %i1 = add i32 %i, 1
  %lim = load atomic i32, ptr @fxc_pool_spin monotonic, align 4
  %long = icmp ugt i32 %i1, %lim
  br i1 %long, label %block, label %poll
block:
  %r = call i32 @llvm.wasm.memory.atomic.wait32(ptr @fxc_pool_gen, i32 %s, i64 -1)
  %g1 = load atomic i32, ptr @fxc_pool_gen seq_cst, align 4
  %same1 = icmp eq i32 %g1, %s
  br i1 %same1, label %block, label %run
run:
  %g = load atomic i32, ptr @fxc_pool_gen seq_cst, align 4
  store i32 %g, ptr %seen, align 4
  %fn = load atomic ptr, ptr @fxc_pool_fn seq_cst, align 4
  %args = load atomic ptr, ptr @fxc_pool_args seq_cst, align 4
  %n = load atomic i64, ptr @fxc_pool_n seq_cst, align 8
  %w = load atomic i32, ptr @fxc_pool_workers seq_cst, align 4
  %w64 = zext i32 %w to i64
  %parts = add i64 %w64, 1
  %k64 = zext i32 %k to i64
  %lo = mul i64 %n, %k64
  %start = sdiv i64 %lo, %parts
  %k1 = add i64 %k64, 1
  %hi = mul i64 %n, %k1
  %end = sdiv i64 %hi, %parts
  %some = icmp slt i64 %start, %end
  br i1 %some, label %body, label %fin
body:
  call void %fn(i64 %start, i64 %end, ptr %args)
  br label %fin
fin:
  %old = atomicrmw add ptr @fxc_pool_done, i32 1 seq_cst
  %now = add i32 %old, 1
  %last = icmp eq i32 %now, %w
  br i1 %last, label %wake, label %next
wake:
  %woke = call i32 @llvm.wasm.memory.atomic.notify(ptr @fxc_pool_done, i32 1)
  br label %next
}
""".replace("{spin}", str(POOL_SPIN))
MEMORY_PAGES = (512, 32768)     # a threaded module's shared memory, in 64 KiB pages: initial (32 MiB), most (2 GiB)
STACK_BYTES = 8 << 20       # the kernels' private arrays (register tiles, small scratch) live on the stack
ENTRIES = ("fxc_run", "fxc_prepack", "fxc_run_main")


def find_linker() -> str:
    """The wasm-ld executable (FXC_WASM_LD, else wasm-ld on PATH, else Debian's versioned ones); TargetError naming
    the package when there is none."""
    named = os.environ.get("FXC_WASM_LD")
    if named:
        if os.access(named, os.X_OK):
            return named
        raise TargetError(f"FXC_WASM_LD={named} is not an executable; {INSTALL_LLD}")
    for name in ("wasm-ld", *(f"wasm-ld-{v}" for v in range(22, 13, -1))):
        path = shutil.which(name)
        if path:
            return path
    raise TargetError(f"no wasm-ld found; {INSTALL_LLD}")


def _runtime_ir(spec: str, threads: int) -> str:
    triple = spec.split("\n")[0]
    return f'target triple = "{triple}"\n' + (POOL_IR if threads > 1 else RUNTIME_IR)


def _shared_memory_flags() -> list:
    """wasm-ld's options for a module whose memory the JS runtime's workers share (fxc_worker, the pool's
    counter and each worker's own stack pointer exported)."""
    return ["--shared-memory", "--import-memory", f"--initial-memory={MEMORY_PAGES[0] << 16}",
            f"--max-memory={MEMORY_PAGES[1] << 16}", "--export=fxc_worker", "--export=fxc_pool_workers",
            "--export=fxc_pool_gen", "--export=fxc_pool_spin", "--export=__stack_pointer"]


def build_wasm(ir_text: str, queue=None, target="wasm", exports=ENTRIES) -> tuple:
    """(the linked .wasm module's bytes, names of the parts compiled now). The module is cached by the
    hash of the IR, the target machine, the runtime and the linker's options. queue: the build's CompileQueue
    (fxc.backends.llvm.compile) holding parts already started. exports: the entry functions to export (those
    defined)."""
    target = Target.parse(target)
    linker = find_linker()
    spec = llvm.machine_spec(target)
    threads = target.caps.threads
    salt = "\n".join([spec, _runtime_ir(spec, threads), ",".join(JS_IMPORTS), ",".join(exports), str(STACK_BYTES),
                      str(MEMORY_PAGES)])
    key = hashlib.sha256((ir_text + salt).encode()).hexdigest()[:24]
    cached = read_entry(f"fxc-{key}.wasm")
    if cached is not None:
        if queue is not None:
            queue.finish()
        return cached, []
    objs, compiled = llvm.compile_objects(ir_text, queue, target)
    runtime = llvm._compile_part(_runtime_ir(spec, threads), True, spec)
    with tempfile.TemporaryDirectory() as d:
        paths = []
        for k, obj in enumerate([*objs, runtime]):
            paths.append(Path(d) / f"k{k}.o")
            paths[-1].write_bytes(obj)
        (Path(d) / "imports.txt").write_text("\n".join(JS_IMPORTS) + "\n")
        out = Path(d) / "model.wasm"
        cmd = [linker, "--no-entry", "--stack-first", "-z", f"stack-size={STACK_BYTES}", "-O2", "--strip-debug",
               f"--allow-undefined-file={Path(d) / 'imports.txt'}", "--export=__heap_base",
               "--export-if-defined=fxc_index_error", *(f"--export-if-defined={e}" for e in exports),
               *(_shared_memory_flags() if threads > 1 else []),
               "-o", str(out), *map(str, paths)]
        _link(cmd, ir_text)
        wasm = out.read_bytes()
    try:
        write_entry(f"fxc-{key}.wasm", wasm)
    except OSError:             # a read-only or full cache only costs the next build time
        pass
    return wasm, compiled


def _link(cmd: list, source: str) -> None:
    """Run wasm-ld; an undefined symbol (a math or runtime function neither the module nor the JS runtime defines)
    is a CompileError naming it."""
    try:
        p = subprocess.run(cmd, capture_output=True, text=True)
    except OSError as e:
        raise TargetError(f"cannot run {cmd[0]} ({e}); {INSTALL_LLD}") from None
    if p.returncode == 0:
        return
    missing = sorted(set(re.findall(r"undefined symbol: (\S+)", p.stderr)))
    if missing:
        raise CompileError(f"the wasm module needs {', '.join(missing)}, which WebAssembly lacks and neither fxc's "
                           f"own math (backends/llvm/mathlib.py) nor the JS runtime's imports (Math) provide; compute "
                           f"that op in float32, or on the llvm target", source=source, log=p.stderr)
    raise CompileError("wasm-ld failed to link the wasm module", source=source, log=p.stderr)


def build_entries(entries: list, target="wasm") -> bytes:
    """A .wasm module of loop-IR kernels, each called by an exported entry of the plan entry's signature,
    `name(ptr inputs, ptr outputs, ptr consts, ptr work)`: entries are (entry name, Kernel, the kernel's arguments
    as plan slots: ("out", j), ("in", j), ("const", j) index those arrays of 32-bit addresses in the module's memory,
    ("work", offset) a byte offset into `work`). The building block of the browser's other targets (webgl, webgpu)
    for the ops they cannot express: fxc.driver.build.wasm_group_entries lowers fused groups to it, and FxcWasm.call in
    fxc/runtime/browser/wasm/runtime.js calls an entry."""
    target = Target.parse(target)
    mw = llvm.module_writer(target)
    for name, kernel, args in entries:
        mw.kernel(kernel)
        mw.entry([(kernel.name, list(args))], name)
    wasm, _ = build_wasm(mw.text(), None, target, tuple(name for name, _, _ in entries))
    return wasm
