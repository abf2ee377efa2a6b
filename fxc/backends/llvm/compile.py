"""The `llvm` target: render kernels to LLVM IR, optimise with llvmlite for the target's CPU (`fxc.target.Target`:
its -mcpu and features; the host by default), emit an object file and link it (with the parallel runtime) into a
shared library whose every undefined symbol the C runtime libraries define. Libraries are cached by the hash of
their IR and the target machine, so a second process compiling the same graph skips LLVM and the linker.

A target machine is named by its `spec`, "triple\ncpu\nfeatures" (`Target.machine_key`): the text that goes into
every cache key and to the compile workers."""
from __future__ import annotations

import atexit
import functools
import hashlib
import os
import re
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from ...errors import CompileError
from ...runtime.store import atomic_write, cache_dir, checked_file, read_entry, write_entry
from ...target import Target, host_triple, triple_arch
from ..external.dnnl import shim as dnnl
from .module import ModuleWriter
from .toolchain import toolchain

RUNTIME_C = Path(__file__).resolve().parents[2] / "runtime" / "cpu" / "cpu_parallel.c"


def target_machine(target=None):
    """(LLVM target machine, triple, cpu, feature string) for an llvm target (a Target or its string; None: the
    host). The machine is shared: a thread that optimises or emits makes its own (new_machine)."""
    return _shared_machine(machine_spec(target))


def machine_spec(target=None) -> str:
    """The spec ("triple\ncpu\nfeatures") of an llvm target's machine."""
    return Target.parse(target).machine_key


@functools.lru_cache(maxsize=None)
def _shared_machine(spec: str):
    triple, cpu, features = spec.split("\n")
    return new_machine(spec), triple, cpu, features


def new_machine(spec: str, opt: int = 3):
    """A new LLVM target machine for a spec (one per thread: they are not shared)."""
    import llvmlite.binding as llvm  # deferred: importing llvmlite costs ~35 ms, paid only when LLVM runs
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    triple, cpu, features = spec.split("\n")
    wasm = triple.startswith("wasm")
    if triple_arch(triple) != triple_arch(host_triple()):   # another architecture (wasm, ARM): LLVM's other targets
        llvm.initialize_all_targets()
        llvm.initialize_all_asmprinters()
    # a wasm module is linked statically (wasm-ld, no GOT); a kernel library is a shared object
    return llvm.Target.from_triple(triple).create_target_machine(cpu=cpu, features=features, opt=opt,
                                                                 reloc="static" if wasm else "pic",
                                                                 codemodel="default")


def render(kernels: list, calls: list, prepack_calls: list = (), profile: bool = False, target=None) -> str:
    """LLVM IR of the kernels and entries: `fxc_run` runs prepack_calls then calls; with prepack calls
    there are also `fxc_prepack` and `fxc_run_main` so a runtime can skip an unchanged prepack.
    profile: time every kernel call into the exported `fxc_profile_counters` (counter k = k-th call of
    prepack_calls + calls)."""
    mw = module_writer(target)
    for k in kernels:
        mw.kernel(k)
    return finish_module(mw, calls, prepack_calls, profile)


def module_writer(target=None) -> ModuleWriter:
    """A ModuleWriter for an llvm target (None: the host): its data layout, and its CPU features for `has` (and
    whether kernels may call libm: not on wasm)."""
    target = Target.parse(target)
    tm, triple, _, _ = target_machine(target)
    return ModuleWriter(triple, str(tm.target_data), target.caps)


def add_kernel(mw: ModuleWriter, kernel, queue: "CompileQueue | None" = None) -> None:
    """Render one kernel into mw; with a queue, its part (when it is a part of its own, see split_module) starts
    compiling now, in the workers, while the build lowers the next kernels. The whole module's split later
    gives the same part text, which the queue then already has."""
    n = len(mw.functions)
    mw.kernel(kernel)
    functions = mw.functions[n:]
    if queue is None or sum(map(len, functions)) < SMALL_PART:       # a small kernel goes in a batch part
        return
    for name, text in _split(mw.text(functions, []), dict(enumerate(mw.md)))[1]:      # mw.md[i] is !i
        key = part_key(name, text, queue.spec)
        if not (cache_dir() / "objects" / f"{key}.o").exists():      # else compile_objects reads it
            queue.add(key, name, text, True)


def add_external(mw: ModuleWriter, name: str, symbol: str, params: tuple) -> None:
    """A plan step that calls an external library's runtime (docs/byoc.md): `name(args)` calls `symbol(args,
    params, state)`, params the step's int64 parameters (a constant), state the step's own pointer (a global, null
    until the runtime's first call keeps its objects there). Named fxc_*, it stays in the entry part."""
    mw.decls[f"@{name}_p"] = (f"@{name}_p = internal constant [{len(params)} x i64] ["
                              + ", ".join(f"i64 {int(v)}" for v in params) + "]")
    mw.decls[f"@{name}_s"] = f"@{name}_s = internal global ptr null"
    mw.declare(symbol, "void", ["ptr", "ptr", "ptr"])
    mw.functions.append(f"define internal void @{name}(ptr %args) nounwind noinline {{\nentry:\n"
                        f"  call void @{symbol}(ptr %args, ptr @{name}_p, ptr @{name}_s)\n  ret void\n}}\n")


def finish_module(mw: ModuleWriter, calls: list, prepack_calls: list = (), profile: bool = False) -> str:
    """The module's text once every kernel is in mw: the entries (see render) added."""
    every = list(prepack_calls) + list(calls)
    prof = {name: k for k, (name, _) in enumerate(every)} if profile else None
    if profile:
        mw.profile_counters(len(every))
    mw.entry(every, profile=prof)
    if prepack_calls:
        mw.entry(list(prepack_calls), "fxc_prepack", prof)
        mw.entry(list(calls), "fxc_run_main", prof)
    return mw.text()


# Kernels: LLVM's O3 without the SLP vectorizer: fxc's loop IR already holds explicit vectors, and its loops ask
# for the loop vectorizer and unroller only where they want them (see module.ModuleWriter.loop_md); SLP was ~15% of the
# optimisation time for no measured speed. The entry part (a straight list of kernel calls) gets no IR passes,
# and codegen at O0 (fast instruction selection, no scheduling): it is compiled last, after every kernel is
# rendered, so its time is the build's tail (ResNet-18's: 36 -> 17 ms of codegen); its code only passes addresses.
# Part of the object-cache key.
PIPELINE = "kernels O3 loop-vectorize unroll no-slp; entry none, codegen O0"


def optimize(ir_text: str, context=None, tm=None, passes: bool = True):
    """Parse and verify LLVM IR text, then run the kernels' pipeline over it (unless not passes) for target
    machine tm (the host's by default)."""
    import llvmlite.binding as llvm  # deferred: importing llvmlite costs ~35 ms, paid only when LLVM runs
    tm = tm or target_machine()[0]
    mod = None
    try:
        mod, log = llvm.parse_assembly(ir_text, context), None
        mod.verify()
    except RuntimeError as e:
        log = str(e)
    if log is not None:
        # raised outside the handler and without the LLVM objects in this frame: an error kept until the
        # interpreter exits (a test's excinfo) would otherwise free them after LLVM itself (a crash)
        del context, tm, mod
        raise CompileError("generated LLVM IR is invalid (an fxc bug; please report it with FXC_DEBUG=4 output)",
                           source=ir_text, log=log)
    if not passes:
        return mod
    pto = llvm.create_pipeline_tuning_options(speed_level=3)
    pto.loop_vectorization = True
    pto.slp_vectorization = False
    pto.loop_unrolling = True
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(mod, pb)
    return mod


PREBUILT = RUNTIME_C.parent / "_prebuilt"      # the runtime's object file made at install (scripts/setup.sh)


def _runtime_object(where: Path | None = None, triple: str | None = None) -> Path:
    """The thread-pool runtime (runtime/cpu_parallel.c) as an object file for `triple` (None: this host), by the
    hash of its source, compiled by the triple's toolchain (toolchain.py): the one built at install when there is
    one, else the cache's (checked, fxc/runtime/store.py) or one built now into the cache (or into `where`)."""
    src = RUNTIME_C.read_bytes()
    triple = triple or host_triple()
    arch = triple_arch(triple)
    tag = "" if arch == triple_arch(host_triple()) else f"{arch}-"      # (the host's name as it always was)
    name = f"cpu_parallel-{tag}{hashlib.sha256(src).hexdigest()[:16]}.o"
    if where is None and (PREBUILT / name).exists():
        return PREBUILT / name
    if where is None and (cached := checked_file(name)) is not None:
        return cached
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d) / "rt.o"
        _run([toolchain(triple).cc, "-O2", "-fPIC", "-fopenmp", "-c", str(RUNTIME_C), "-o", str(tmp)],
             RUNTIME_C.read_text())
        if where is None:
            return write_entry(name, tmp.read_bytes())     # its checksum trailer is past the ELF sections
        atomic_write(where / name, tmp.read_bytes())
    return where / name


def prebuild_runtime() -> None:
    """Build the runtime's object file beside its source, as an installed package has it (scripts/setup.sh):
    a first compile in a fresh cache then does not run gcc on it (0.06-0.1 s)."""
    try:
        _runtime_object(PREBUILT)
    except (OSError, CompileError):     # read-only, or no gcc yet: the cache gets it at the first build
        pass


def _run(cmd, source=""):
    try:
        p = subprocess.run(cmd, capture_output=True, text=True)
    except FileNotFoundError:
        raise CompileError(f"{cmd[0]} is not installed; the llvm target links with gcc "
                           f"(apt-get install gcc)") from None
    if p.returncode != 0:
        raise CompileError(f"{cmd[0]} failed", source=source, log=p.stderr)


def build_library(ir_text: str, queue: "CompileQueue | None" = None, target=None) -> tuple:
    """Return (path of the shared library, names of the parts compiled now: empty when all came from the caches).

    The library is cached by the hash of the whole IR and the target machine; below that, each kernel's object
    code is cached by the hash of the kernel's own IR (see split_module), so a kernel shared with another graph
    (another model, the backward graph, a changed epilogue elsewhere) compiles once. queue: the build's
    CompileQueue (for the same target), holding the parts it has started already (closed here in any case).
    target: the llvm target (None: the host). Raises CompileError when the library would need a symbol that the
    C runtime libraries do not define (check_link)."""
    spec = machine_spec(target)
    extra = dnnl.link_args(ir_text)     # an external library's steps: its shim and library (docs/byoc.md)
    key = hashlib.sha256((ir_text + spec + RUNTIME_C.read_text() + "".join(extra)).encode()).hexdigest()[:24]
    lib = checked_file(f"fxc-{key}.so")        # a damaged or replaced library is a miss (fxc/runtime/store.py)
    if lib is not None:
        if queue is not None:
            queue.finish()
        return lib, []
    t0 = time.perf_counter()
    objs, compiled = compile_objects(ir_text, queue, target)
    t1 = time.perf_counter()
    with tempfile.TemporaryDirectory() as d:
        paths = []
        for k, obj in enumerate(objs):
            paths.append(Path(d) / f"k{k}.o")
            paths[-1].write_bytes(obj)
        so = Path(d) / "k.so"
        triple = Target.parse(target).triple
        link_shared(["-o", str(so), *map(str, paths), str(_runtime_object(triple=triple)), *extra], ir_text, triple)
        lib = write_entry(f"fxc-{key}.so", so.read_bytes())
    if int(os.environ.get("FXC_DEBUG", "0") or 0) >= 1:
        print(f"[fxc] llvm: {len(objs)} parts, {len(compiled)} compiled ({PIPELINE}, {COMPILE_PROCESSES} processes) "
              f"in {1e3 * (t1 - t0):.0f} ms, link {1e3 * (time.perf_counter() - t1):.0f} ms", file=sys.stderr)
    return lib, compiled


COMPILE_PROCESSES = max(1, min(4, len(os.sched_getaffinity(0))))     # this process and its compile workers
WORKER_MIN_IR = 200_000     # characters of IR to compile (~0.2 s of LLVM) that pay for starting a worker (~0.2 s)


def link_shared(args: list, source: str = "", triple: str | None = None) -> None:
    """gcc -shared (the triple's toolchain: None, this host's) with the parallel runtime's libraries (OpenMP, libm,
    libc, libpthread, libgcc_s), refusing an undefined symbol (-z defs): a library that links loads. A symbol none
    of them defines (a compiler-runtime helper such as __truncsfbf2, which LLVM calls where the target CPU lacks an
    instruction and Debian's libgcc lacks) is a CompileError naming it, never an OSError when the library is
    loaded."""
    cmd = [toolchain(triple or host_triple()).cc, "-shared", "-fopenmp", "-Wl,-z,defs", *args, "-lm"]
    try:
        _run(cmd, source)
    except CompileError as e:
        missing = sorted(set(re.findall(r"undefined reference to [`']([^']+)'", e.log or "")))
        if not missing:
            raise
        raise CompileError(f"the kernel library needs {', '.join(missing)}, which none of the runtime's libraries "
                           f"(libc, libm, libpthread, libgcc_s, libgomp) defines: LLVM calls such helpers where the "
                           f"target CPU lacks an instruction. This is an fxc bug (please report it with FXC_DEBUG=4 "
                           f"output); meanwhile compile for a target with the CPU features the op needs",
                           source=source, log=e.log) from None


def compile_objects(ir_text: str, queue: "CompileQueue | None" = None, target=None) -> tuple:
    """Object code of a rendered module, one object per part of split_module: (objects, names of the parts
    compiled now). Parts come from the object cache when their IR was compiled before; the others compile
    here and in COMPILE_PROCESSES - 1 worker processes (see CompileQueue). queue: one holding parts already
    started (a build's, for the same target); it is finished here. target: the llvm target (None: the host)."""
    spec = machine_spec(target) if queue is None else queue.spec
    parts = split_module(ir_text)
    keys = [part_key(name, text, spec) for name, text in parts]
    if queue is None:
        queue = CompileQueue(target)
        if len(parts) > 1 and sum(len(text) for _, text in parts) >= WORKER_MIN_IR:
            queue.start()
    objects: dict = {}
    for (name, text), key in zip(parts, keys):
        if key in objects or queue.has(key):
            continue
        obj = read_entry(f"objects/{key}.o")     # None when missing or damaged (fxc/runtime/store.py)
        if obj is not None:
            objects[key] = obj
        else:
            queue.add(key, name, text, name != "entry")
    objects.update(queue.finish())
    return [objects[k] for k in dict.fromkeys(keys)], queue.names


@functools.lru_cache(maxsize=None)
def _key_salt(spec: str) -> str:
    import llvmlite.binding as llvm  # deferred: importing llvmlite costs ~35 ms, paid only when LLVM runs
    return f"{spec}\n{PIPELINE}\nllvm {llvm.llvm_version_info}\n"


def part_key(name: str, text: str, spec: str | None = None) -> str:
    """The object cache's key of a part: its IR (and the entry's name), the target machine (spec; None: the
    host's), the pipeline, LLVM's version."""
    salt = _key_salt(spec or machine_spec())
    return hashlib.sha256((salt + name * (name == "entry") + text).encode()).hexdigest()[:32]


_SWITCH = {"open": 0, "interval": None}
_SWITCH_LOCK = threading.Lock()


def _responsive(on: bool) -> None:
    """While a queue's workers are fed, this process's threads hand over the GIL every 0.5 ms instead of 5: the
    thread feeding a worker needs it a few times a part (to send it, to read the object), and the build's own
    thread holds it while it lowers the next kernels; at 5 ms a turn the workers sat idle for a third of the time."""
    with _SWITCH_LOCK:
        if on:
            _SWITCH["open"] += 1
            if _SWITCH["open"] == 1:
                _SWITCH["interval"] = sys.getswitchinterval()
                sys.setswitchinterval(min(_SWITCH["interval"], 0.0005))
        else:
            _SWITCH["open"] -= 1
            if _SWITCH["open"] == 0:
                sys.setswitchinterval(_SWITCH["interval"])


class CompileQueue:
    """The parts of one module compiling, added while the build is still producing them.

    The compile workers (COMPILE_PROCESSES - 1 other processes, llvmlite allowing one LLVM call per process at a
    time) take each part as it is added, while this process lowers and renders the next kernels; finish() closes
    the queue, has this process take what is left too and waits for the rest. The largest waiting part goes
    first, so that all finish about together. Objects go to the object cache as they come. target: the llvm
    target every part is compiled for (None: the host)."""

    def __init__(self, target=None):
        self.spec = machine_spec(target)
        self.waiting: dict = {}         # key -> (name, IR text, run the kernels' pipeline)
        self.running: set = set()
        self.objects: dict = {}         # key -> object code
        self.names: list = []           # of the parts added, in order
        self.error = None
        self.closed = self.started = False
        self.cond = threading.Condition()

    def has(self, key: str) -> bool:
        with self.cond:
            return key in self.waiting or key in self.running or key in self.objects

    def add(self, key: str, name: str, text: str, passes: bool) -> None:
        with self.cond:
            if self.has(key):
                return
            self.waiting[key] = (name, text, passes)
            self.names.append(name)
            self.cond.notify_all()

    def start(self) -> "CompileQueue":
        """Let the worker processes take parts (from now until the queue is finished)."""
        workers = _workers(COMPILE_PROCESSES - 1)
        if workers:
            _responsive(True)
            self.started = True
        for worker in workers:
            threading.Thread(target=self._remote, args=(worker,), name="fxc-compile-feed", daemon=True).start()
        return self

    def close(self) -> None:
        """No more parts: the workers stop taking parts once none waits (a failed build's queue)."""
        with self.cond:
            self.closed = True
            self.cond.notify_all()
            started, self.started = self.started, False
        if started:
            _responsive(False)

    def finish(self) -> dict:
        """key -> object code of every part added; raises the first part's error."""
        self.close()
        self._run(_compile_part, block=False)
        with self.cond:
            self.cond.wait_for(lambda: not self.running)
        if self.error is not None:
            raise self.error
        return self.objects

    def _remote(self, worker):
        if worker.ready():
            self._run(worker.compile, block=True, alive=lambda: worker.ok)

    def _take(self, block: bool):
        with self.cond:
            while True:
                if self.error is not None:
                    return None
                if self.waiting:
                    key = max(self.waiting, key=lambda k: len(self.waiting[k][1]))
                    self.running.add(key)
                    return key, self.waiting.pop(key)
                if self.closed or not block:
                    return None
                self.cond.wait()

    def _run(self, compile_one, block: bool, alive=lambda: True):
        while alive() and (job := self._take(block)) is not None:
            key, (_, text, passes) = job
            try:
                obj, error = compile_one(text, passes, self.spec), None
            except BaseException as e:      # raised by finish(), in the build's thread
                obj, error = None, e
            if error is None:
                try:
                    write_entry(f"objects/{key}.o", obj)
                except OSError:             # a read-only or full cache only costs the next build time
                    pass
            with self.cond:
                self.running.discard(key)
                if error is None:
                    self.objects[key] = obj
                else:
                    self.error = self.error or error
                self.cond.notify_all()


class _Worker:
    """A compile worker process (fxc/backends/llvm/worker.py), started once and kept for the process's life.
    Whatever goes wrong with it (it cannot start, builds for another CPU, dies, reports an error), the part
    compiles in this process instead, where a bad part raises its CompileError."""

    def __init__(self):
        root = str(Path(__file__).resolve().parents[3])
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])))
        try:
            self.proc = subprocess.Popen([sys.executable, "-m", "fxc.backends.llvm.worker"], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
            self.ok = None          # not known until its first message
        except OSError:
            self.proc, self.ok = None, False
        self.lock = threading.Lock()

    def ready(self) -> bool:
        """Wait for the worker's first message (its host CPU) and check it matches this process's."""
        with self.lock:
            if self.ok is None:
                try:
                    kind, payload = read_message(self.proc.stdout)
                    self.ok = kind == b"H" and payload == machine_spec().encode()
                except OSError:
                    self.ok = False
            return self.ok

    def compile(self, text: str, passes: bool, spec: str) -> bytes:
        with self.lock:
            if self.ok:
                try:
                    send_message(self.proc.stdin, b"K" if passes else b"E", f"{spec}\0{text}".encode())
                    kind, payload = read_message(self.proc.stdout)
                    if kind == b"O":
                        return payload
                    self.ok = kind == b"X"          # an error in the part: compiled here, it raises
                except OSError:
                    self.ok = False
        return _compile_part(text, passes, spec)

    def close(self):
        if self.proc is not None and self.proc.poll() is None:
            try:
                self.proc.stdin.close()
                self.proc.wait(timeout=2)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()


def send_message(out, kind: bytes, payload: bytes) -> None:
    """One message to or from a compile worker: its kind byte, an 8-byte little-endian length, the payload."""
    out.write(kind + struct.pack("<Q", len(payload)) + payload)
    out.flush()


def read_message(inp) -> tuple:
    """(kind, payload) of the next message from a stream (send_message), or (None, None) at its end."""
    head = inp.read(9)
    if len(head) < 9:
        return None, None
    kind, n = head[:1], struct.unpack("<Q", head[1:])[0]
    payload = inp.read(n)
    if len(payload) < n:
        return None, None
    return kind, payload


_WORKERS: list = []


def start_workers() -> None:
    """Start the compile workers now (a build calls this before lowering, which hides their start-up)."""
    if COMPILE_PROCESSES > 1:
        _workers(COMPILE_PROCESSES - 1)


def _workers(n: int) -> list:
    """n compile workers (started on first use; the ones that failed are replaced)."""
    _WORKERS[:] = [w for w in _WORKERS if w.ok is not False]
    while len(_WORKERS) < n:
        _WORKERS.append(_Worker())
    return _WORKERS[:n]


@atexit.register
def _close_workers():
    for w in _WORKERS:
        w.close()


def _compile_part(text: str, optimize_ir: bool = True, spec: str | None = None) -> bytes:
    """Optimise and emit one part for the target machine `spec` (None: the host) in its own LLVM context and
    target machine; a part not optimize_ir (the entry) gets no IR passes and O0 codegen (PIPELINE)."""
    import llvmlite.binding as llvm  # deferred: importing llvmlite costs ~35 ms, paid only when LLVM runs
    tm = new_machine(spec or machine_spec(), 3 if optimize_ir else 0)
    return tm.emit_object(optimize(text, llvm.create_context(), tm, passes=optimize_ir))


_DEFINE = re.compile(r"define [^@]*@([\w.]+)\(")
_KERNEL = re.compile(r"(k\d+_\w*?)(_par\d+)?$")      # k<i>_<op> and its outlined parallel bodies k<i>_<op>_par<j>
_GLOBAL = re.compile(r"@([\w.]+)")
_META = re.compile(r"!(\d+)\b")
_META_LINE = re.compile(r"!(\d+) = ")


SMALL_PART = 10_000      # characters of IR: smaller kernels share parts (a part costs ~4 ms of LLVM however small)
BATCH_PART = 40_000


def split_module(ir_text: str) -> list:
    """Split a rendered module into parts compiled (and cached) separately: [(name, IR text)], the entries first.

    Each kernel (with its outlined parallel bodies) is put in a canonical form that does not depend on the
    rest of the graph: the kernel is named fxc_k<hash of its code> (hidden, so the entry part links to it),
    its parallel bodies <that name>_par<j>, its metadata numbered from 0, only the declarations it uses
    kept. A kernel of SMALL_PART characters or more is a part of its own, so equal kernels of two graphs
    have the same text and the object cache finds them; smaller ones are packed, in the order of their
    names, into parts of about BATCH_PART. The entry part keeps everything else (calling the renamed kernels)."""
    entry, own, batches = _split(ir_text)
    return [("entry", entry)] + own + batches


def _split(ir_text: str, meta: dict | None = None) -> tuple:
    """split_module's parts as (the entry's text, [the kernels that are parts of their own], [the batches]).
    meta: the module's metadata lines by number, when the text leaves them out."""
    lines = ir_text.split("\n")
    first = next((i for i, l in enumerate(lines) if l.startswith("define ")), len(lines))
    head = lines[:first]
    meta, funcs, cur = dict(meta or {}), [], None
    for l in lines[first:]:
        if l.startswith("define "):
            cur = [l]
            funcs.append(cur)
        elif l.startswith("!"):         # the metadata, after every function
            cur = None
            if m := _META_LINE.match(l):
                meta[int(m.group(1))] = l
        elif cur is not None:
            cur.append(l)
    for f in funcs:                     # one blank line after each (the text's end adds another to the last)
        while f[-2:] == ["", ""]:
            f.pop()
    kernels: dict = {}
    entries = []
    for f in funcs:
        fn = _DEFINE.match(f[0]).group(1)
        m = _KERNEL.match(fn)
        if m and not fn.startswith("fxc"):
            kernels.setdefault(m.group(1), []).append((fn, f))
        else:
            entries.append(f)
    if not kernels:
        return ir_text, [], []
    rename, units = {}, {}
    for base, fs in kernels.items():
        names = {fn: ("KERNEL" if fn == base else f"KERNEL_par{j}") for j, (fn, _) in enumerate(fs)}
        body = [_GLOBAL.sub(lambda m: "@" + names.get(m.group(1), m.group(1)), l) if "@" in l else l
                for _, f in fs for l in f]
        unit = (base, *_canonical_meta(body, meta))
        canon = "fxc_k" + hashlib.sha256(_part_text(head, [unit]).encode()).hexdigest()[:20]
        named = [l.replace("define internal void @KERNEL(", "define hidden void @KERNEL(")
                  .replace("@KERNEL", "@" + canon)
                 if "@KERNEL" in l else l for l in unit[1]]
        rename[base] = canon
        units.setdefault(canon, (base, named, unit[2]))
    own, batches, batch = [], [], []
    for canon in sorted(units, key=lambda c: (_size(units[c]) < SMALL_PART, c)):
        if _size(units[canon]) >= SMALL_PART:
            own.append((units[canon][0], _part_text(head, [units[canon]])))
            continue
        batch.append(units[canon])
        if sum(map(_size, batch)) >= BATCH_PART:
            batches.append((",".join(u[0] for u in batch), _part_text(head, batch)))
            batch = []
    if batch:
        batches.append((",".join(u[0] for u in batch), _part_text(head, batch)))
    decls = [f"declare hidden void @{c}(ptr)" for c in units]
    body = [_GLOBAL.sub(lambda m: "@" + rename.get(m.group(1), m.group(1)), l) if "@" in l else l
            for f in entries for l in f]
    entry = "\n".join(head + decls + [""] + body + [meta[k] for k in sorted(meta)]) + "\n"
    return entry, own, batches


def _size(unit) -> int:
    return sum(len(l) + 1 for l in unit[1])


def _part_text(head: list, units: list) -> str:
    """The IR text of one part: head's target lines and the declarations the units use (sorted: their order in
    head depends on the other kernels), then each unit's functions and metadata, its metadata numbers shifted
    past the previous units'. unit: (name, functions' lines, metadata lines)."""
    used = {g for _, body, _ in units for l in body if "@" in l for g in _GLOBAL.findall(l)}
    decl = [l for l in head if l.strip() and not l.startswith(("declare ", "@"))]
    decl += sorted(l for l in head if l.startswith(("declare ", "@")) and _GLOBAL.search(l).group(1) in used)
    body, meta = [], []
    for _, lines, md in units:
        shift = lambda l, off=len(meta): _META.sub(lambda m: f"!{int(m.group(1)) + off}", l) if off and "!" in l else l
        body += [shift(l) for l in lines]
        meta += [shift(l) for l in md]
    return "\n".join(decl + [""] + body + meta) + "\n"


def _canonical_meta(body: list, meta: dict) -> tuple:
    """(body, metadata lines): the metadata it references (transitively) renumbered from 0 in order of first use."""
    order: dict = {}
    pending = [int(i) for l in body if "!" in l for i in _META.findall(l)]
    while pending:
        i = pending.pop(0)
        if i not in order:
            order[i] = len(order)
            pending += [int(j) for j in _META.findall(meta[i].split(" = ", 1)[1])]
    sub = lambda l: _META.sub(lambda m: f"!{order[int(m.group(1))]}", l) if "!" in l else l
    return [sub(l) for l in body], [sub(meta[i]) for i in sorted(order, key=order.get)]


def assembly(ir_text: str, target=None) -> str:
    tm = target_machine(target)[0]
    return tm.emit_assembly(optimize(ir_text, tm=tm))
