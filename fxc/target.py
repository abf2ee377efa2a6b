"""Targets: what a compile is for, parsed from a TVM-style string, and the capabilities every layer reads.

    Target.parse("llvm")                       # the host CPU (-mcpu detected)
    Target.parse("llvm -mcpu=haswell")         # AVX2 + FMA, 16 vector registers (runs on any newer x86 host)
    Target.parse("llvm -mcpu=x86-64-v2 -mattr=+popcnt")
    Target.parse("opencl -device=0")           # an OpenCL device (FXC_OPENCL_DEVICE picks one too)
    Target.parse("wasm")                       # WebAssembly (wasm32 + SIMD128) run by a browser: the browser CPU path

A target carries `Caps`: vector lanes and registers, threads, local memory, work-group limits, index width,
dtypes, math functions. Passes, schedules and renderers read these instead of constants. Parsing never needs
the device: `Target.parse` is pure text (plus the host's CPU for a bare `llvm`); a device target's
capabilities are filled by its device API (`with_device`, through `fxc.backends.fill`); whether this host can
run code built for a target is its backend's question (`fxc.backends.check_runnable`). This module is data: it
imports no backend and opens no device.
"""
from __future__ import annotations

import dataclasses
import functools
import os
import shlex
from dataclasses import dataclass, field

from .errors import TargetError

KINDS = ("llvm", "opencl", "opengl", "webgl", "webgpu", "wasm", "clml")
# the kinds named to users (errors, lists): clml builds for Qualcomm's CLML SDK on Adreno and is parsed like the others,
# but is not offered, as fxc runs it nowhere but on those devices (elsewhere its regions run as opencl kernels)
LISTED_KINDS = tuple(k for k in KINDS if k != "clml")


@dataclass(frozen=True)
class Caps:
    """What a target's code may use. Lanes and registers are float32 lanes of one vector register and the count
    of those registers (a register tile's budget); threads: parallel workers (CPU) or compute units (device)."""
    vector_bits: int = 128
    vector_registers: int = 16
    threads: int = 1
    features: frozenset = frozenset()       # LLVM feature names without '+', e.g. {"avx2", "fma", "avx512f"}
    local_memory_bytes: int = 0             # work-group shared memory (0: none, a CPU)
    max_work_group_size: int = 1
    index_bits: int = 64                    # width of the integers kernels index with
    dtypes: frozenset = frozenset({"float32", "float64", "int8", "int16", "int32", "int64", "uint8", "bool",
                                   "bfloat16", "float16", "complex64", "complex128"})
    scatter: bool = True                    # stores at data-dependent addresses
    math: frozenset = frozenset({"exp", "log", "sqrt", "tanh", "erf", "sin", "cos", "pow", "atan2"})
    libm: bool = True                       # kernels may call a C math library (False: wasm, whose float32 math is
    #                                         fxc's own code, llvm/mathlib, and any other math function an import the
    #                                         JS runtime supplies)
    page_kernels: str = ""                  # the target kind whose kernels run, in the same page, the fused groups
    #                                         this one refuses (webgl, webgpu: "wasm"; fxc.driver.page_kernels); ""
    #                                         for none. (Not capture's eager fallback: these kernels are fxc's own.)
    hoist_weights: bool = True              # weight-only values (a batch norm's scale, a weight's transpose) run as
    #                                         a prepack step of their own, kept between calls; False (webgl, whose
    #                                         host checks the indices a kernel reads before the call: they must be
    #                                         inputs or constants) keeps them fused into their uses
    cache_bytes: int = 1 << 20              # a core's private (L2) data cache: what a CPU schedule keeps hot between
                                            # work items (1 MiB: Zen 4, Cascade Lake; larger caches only gain)
    vector_widths: frozenset = frozenset()  # a device language's float32 vector types that device kernels keep
    #                                         (loads, lane-wise arithmetic, stores: OpenCL C's float2/4/8/16); empty:
    #                                         device kernels are scalarized (fxc.lowering.legalize)
    dynamic_rows: bool = True               # code for a symbolic number of rows (a dynamic batch) runs every size
                                            # from one build: row-block kernels (llvm) or row launches with operand
                                            # offsets set at call time (opencl, opengl, webgpu, webgl); False: builds
                                            # per size
    row_align: int = 1                      # a row launch's operand offsets are multiples of this many elements
    #                                         (webgl: 4, a texel of its RGBA textures); the last rows of a size then
    #                                         run in launches of the fewest rows that keep it (fxc/driver/rows.py)
    binary_tails: bool = False              # the rows after the blocks run as launches of 4, 2 and 1 rows (at most
    #                                         one each) rather than one a row: where a launch costs much (a WebGL
    #                                         draw), fewer launches for two more kernels a group
    channel_block: int = 0                  # a device's conv activations in NCHWkc, k channels of a pixel together
    #                                         (webgl: 4, one RGBA texel; relay_like.passes.use_channel_blocks); 0: NCHW
    texture_width: int = 0                  # elements in a row of a tensor's texture (webgl: its runtime's WIDTH),
    #                                         which the renderer's index arithmetic and the runtime's layout share
    draw_buffers: int = 1                   # texels a fragment shader may write at once (webgl: 4, WebGL 2's least
    #                                         MAX_DRAW_BUFFERS; fxc.backends.webgl.draw_buffers jams a kernel's copies)

    @property
    def lanes(self) -> int:
        """float32 lanes of one vector register."""
        return max(1, self.vector_bits // 32)

    def has(self, feature: str) -> bool:
        return feature.lstrip("+") in self.features


@dataclass(frozen=True)
class Target:
    kind: str
    attrs: tuple = ()                       # sorted (key, value) pairs from -key=value options
    caps: Caps = field(default_factory=Caps, compare=False)
    device: object = field(default=None, compare=False, repr=False)     # the opened device (fxc.backends.fill)

    # ------------------------------------------------------------------ parsing
    @staticmethod
    def parse(spec: "str | Target | None") -> "Target":
        """A Target from a string such as "llvm -mcpu=haswell" (a Target is returned as it is; None is "llvm")."""
        if isinstance(spec, Target):
            return spec
        return _parse(spec or "llvm")

    def attr(self, key: str, default=None):
        return dict(self.attrs).get(key, default)

    def with_caps(self, caps: Caps) -> "Target":
        return dataclasses.replace(self, caps=caps)

    def with_device(self, device, caps: Caps) -> "Target":
        """The target filled by its device API: the opened device and the Caps it reports."""
        return dataclasses.replace(self, caps=caps, device=device)

    def check_options(self) -> None:
        """TargetError for an option the target's kind does not take (DEVICE_OPTIONS; llvm and wasm check theirs
        when parsed)."""
        known, hint = DEVICE_OPTIONS.get(self.kind, ((), ""))
        unknown = sorted(set(dict(self.attrs)) - set(known))
        if unknown and self.kind in DEVICE_OPTIONS:
            raise TargetError(f"{self.kind} target: unknown option(s) {', '.join('-' + u for u in unknown)}; {hint}")

    def __str__(self):
        return " ".join([self.kind] + [f"-{k}={v}" for k, v in self.attrs])

    # ------------------------------------------------------------------ CPU
    @property
    def is_cpu(self) -> bool:
        """Code rendered to LLVM IR for a CPU: this host's or a named x86 CPU (`llvm`), or WebAssembly's (`wasm`,
        the browser's CPU): the CPU passes and schedules apply."""
        return self.kind in ("llvm", "wasm")

    @property
    def mcpu(self) -> str:
        """The CPU an llvm target's code is for (LLVM's name, e.g. "znver4", "haswell"; "generic" for wasm)."""
        return self.attr("mcpu", "generic" if self.kind == "wasm" else "")

    @property
    def triple(self) -> str:
        """The LLVM target triple of an llvm target (-mtriple, else this process's; wasm32's for wasm)."""
        return self.attr("mtriple") or (WASM_TRIPLE if self.kind == "wasm" else host_triple())

    @property
    def llvm_features(self) -> str:
        """LLVM's feature string for an llvm target's machine: the host's full feature list for the host's CPU, else
        the -mattr entries on top of the named CPU's own (LLVM knows every CPU's features; fxc's table only those
        its code generation reads); for wasm, its whole feature set."""
        if self.kind == "wasm":
            return ",".join("+" + f for f in sorted(self.caps.features))
        extra = [f for f in self.attr("mattr", "").split(",") if f]
        if self.mcpu == host_cpu():
            return ",".join([host_feature_string()] + extra)
        return ",".join(extra)

    @property
    def machine_key(self) -> str:
        """What code built for this target depends on (cache keys): triple, CPU and feature string."""
        return f"{self.triple}\n{self.mcpu}\n{self.llvm_features}"


def _parse(text: str) -> Target:
    try:
        words = shlex.split(text)
    except ValueError as e:
        raise TargetError(f"cannot parse target {text!r}: {e}") from None
    if not words:
        raise TargetError("empty target string; use 'llvm' for this CPU")
    kind, opts = words[0], {}
    if kind not in KINDS:
        raise TargetError(f"unknown target {kind!r}; known kinds: {', '.join(LISTED_KINDS)} "
                          f"(e.g. 'llvm -mcpu=haswell', 'opencl -device=0')")
    for w in words[1:]:
        if not w.startswith("-") or "=" not in w:
            raise TargetError(f"target {text!r}: option {w!r} is not of the form -key=value")
        k, v = w.lstrip("-").split("=", 1)
        opts[k] = v
    if kind == "llvm":
        return _llvm_target(opts)
    if kind == "wasm":
        return _wasm_target(opts)
    return Target(kind, tuple(sorted(opts.items())))


LLVM_OPTIONS = ("mcpu", "mattr", "mtriple", "num-threads")


def _llvm_target(opts: dict) -> Target:
    unknown = sorted(set(opts) - set(LLVM_OPTIONS))
    if unknown:
        raise TargetError(f"llvm target: unknown option(s) {', '.join('-' + u for u in unknown)}; "
                          f"known: {', '.join('-' + o for o in LLVM_OPTIONS)}")
    cpu = opts.get("mcpu") or host_cpu()
    cpu = host_cpu() if cpu == "native" else cpu
    features = set(host_features()) if cpu == host_cpu() else set(cpu_features(cpu))
    for f in filter(None, opts.get("mattr", "").split(",")):
        if f[0] not in "+-":
            raise TargetError(f"llvm target: -mattr entries start with + or -, got {f!r} (e.g. -mattr=+avx2,-fma)")
        (features.add if f[0] == "+" else features.discard)(f[1:])
    opts["mcpu"] = cpu
    feats = frozenset(features)
    bits = 512 if "avx512f" in feats else 256 if "avx" in feats else 128
    regs = 32 if "avx512f" in feats else 16
    threads = int(opts.get("num-threads", 0) or 0) or _host_threads()
    return Target("llvm", tuple(sorted(opts.items())), Caps(vector_bits=bits, vector_registers=regs, threads=threads,
                                                            features=feats))


WASM_TRIPLE = "wasm32-unknown-unknown"
WASM_OPTIONS = ("mattr", "num-threads")
# what every browser with WebAssembly SIMD has (Chrome 91+, Firefox 89+, Safari 16.4+); LLVM's "generic" wasm CPU
WASM_FEATURES = ("simd128", "bulk-memory", "multivalue", "mutable-globals", "nontrapping-fptoint", "reference-types",
                 "sign-ext")


def _wasm_target(opts: dict) -> Target:
    """wasm32 with SIMD128 (4 float32 lanes), one thread by default; -num-threads=N runs parallel loops on N - 1 web
    workers sharing the module's memory (wasm atomics; the page must be cross-origin isolated: COOP/COEP);
    -mattr=-simd128 for a browser without SIMD."""
    unknown = sorted(set(opts) - set(WASM_OPTIONS))
    if unknown:
        raise TargetError(f"wasm target: unknown option(s) {', '.join('-' + u for u in unknown)}; known: "
                          f"{', '.join('-' + o for o in WASM_OPTIONS)} (e.g. 'wasm -mattr=-simd128')")
    features = set(WASM_FEATURES)
    for f in filter(None, opts.get("mattr", "").split(",")):
        if f[0] not in "+-":
            raise TargetError(f"wasm target: -mattr entries start with + or -, got {f!r} (e.g. -mattr=-simd128)")
        (features.add if f[0] == "+" else features.discard)(f[1:])
    threads = opts.get("num-threads", "1")
    if not threads.isdigit() or not 1 <= int(threads) <= 64:
        raise TargetError(f"wasm target: -num-threads={threads} is not a thread count from 1 to 64")
    if int(threads) > 1:        # shared memory: its atomics, and memory.atomic.wait / notify for the worker pool
        features.add("atomics")
    simd = "simd128" in features
    caps = Caps(vector_bits=128 if simd else 32, vector_registers=16, threads=int(threads),
                features=frozenset(features),
                index_bits=64, dtypes=Caps().dtypes - {"float16"}, libm=False,
                math=Caps().math | {"expm1", "log1p", "asinh", "acosh", "atanh"})
    return Target("wasm", tuple(sorted(opts.items())), caps)


def _host_threads() -> int:
    return len(os.sched_getaffinity(0))


@functools.lru_cache(maxsize=None)
def host_cpu() -> str:
    import llvmlite.binding as llvm  # deferred: the runtime's device APIs import this module, never llvmlite
    return llvm.get_host_cpu_name()


@functools.lru_cache(maxsize=None)
def host_feature_string() -> str:
    """LLVM's feature string of this host's CPU ("+avx2,-avx512fp16,...")."""
    import llvmlite.binding as llvm  # deferred: as in host_cpu
    return llvm.get_host_cpu_features().flatten()


@functools.lru_cache(maxsize=None)
def host_features() -> frozenset:
    return frozenset(f[1:] for f in host_feature_string().split(",") if f.startswith("+"))


@functools.lru_cache(maxsize=None)
def host_triple() -> str:
    import llvmlite.binding as llvm  # deferred: as in host_cpu
    return llvm.get_process_triple()


def cpu_features(cpu: str) -> frozenset:
    """The vector-ISA features of a named x86 CPU, as LLVM's -mcpu=cpu enables them (llvmlite exposes no query for a
    named CPU, so fxc keeps the table below for the features its code generation reads)."""
    if cpu not in X86_CPUS:
        raise TargetError(f"llvm target: unknown CPU {cpu!r}; known: {', '.join(X86_CPUS)} (or leave -mcpu out "
                          f"for this host's CPU, {host_cpu()})")
    return frozenset(X86_CPUS[cpu])


# x86 CPU names -> the features LLVM enables for -mcpu=name that fxc's code generation reads.
_V2 = ("sse2", "sse3", "ssse3", "sse4.1", "sse4.2", "popcnt", "cx16", "sahf")
_V3 = _V2 + ("avx", "avx2", "fma", "f16c", "bmi", "bmi2", "lzcnt", "movbe")
_V4 = _V3 + ("avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl")
X86_CPUS = {
    "x86-64": ("sse2",),
    "x86-64-v2": _V2,
    "x86-64-v3": _V3,
    "x86-64-v4": _V4,
    "sandybridge": _V2 + ("avx",),
    "ivybridge": _V2 + ("avx", "f16c"),
    "haswell": _V3,
    "broadwell": _V3,
    "skylake": _V3,
    "skylake-avx512": _V4,
    "cascadelake": _V4 + ("avx512vnni",),
    "cooperlake": _V4 + ("avx512vnni", "avx512bf16"),
    "icelake-server": _V4 + ("avx512vnni", "avx512vbmi", "avx512vbmi2", "avx512bitalg", "avx512vpopcntdq"),
    "sapphirerapids": _V4 + ("avx512vnni", "avx512bf16", "avx512fp16", "avx512vbmi", "avx512vbmi2", "amx-tile",
                             "amx-bf16", "amx-int8"),
    "emeraldrapids": _V4 + ("avx512vnni", "avx512bf16", "avx512fp16", "avx512vbmi", "avx512vbmi2"),
    "alderlake": _V3 + ("avxvnni",),
    "znver1": _V3,
    "znver2": _V3,
    "znver3": _V3,
    "znver4": _V4 + ("avx512vnni", "avx512bf16", "avx512vbmi", "avx512vbmi2", "avx512bitalg", "avx512vpopcntdq"),
    "znver5": _V4 + ("avx512vnni", "avx512bf16", "avx512vbmi", "avx512vbmi2", "avx512bitalg", "avx512vpopcntdq"),
}


# the options of the device kinds (their device APIs fill the rest of the target: fxc.backends.fill) and what a
# TargetError for another one says
DEVICE_OPTIONS = {
    "opencl": (("device",), "known: -device=<index or name substring> (or set FXC_OPENCL_DEVICE)"),
    "opengl": ((), "the opengl target takes none (it uses the process's EGL context)"),
    "webgl": ((), "the webgl target takes none (FXC_CHROMIUM names the browser)"),
    "webgpu": ((), "the webgpu target takes none (FXC_CHROMIUM names the browser)"),
}
