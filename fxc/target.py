"""Targets: what a compile is for, parsed from a TVM-style string, and the capabilities every layer reads.

    Target.parse("llvm")                       # the host CPU (-mcpu detected)
    Target.parse("llvm -mcpu=haswell")         # AVX2 + FMA, 16 vector registers (runs on any newer x86 host)
    Target.parse("llvm -mcpu=x86-64-v2 -mattr=+popcnt")
    Target.parse("opencl -device=0")           # an OpenCL device (FXC_OPENCL_DEVICE picks one too)
    Target.parse("wasm")                       # WebAssembly (wasm32 + SIMD128) run by a browser: the browser CPU path

A target carries `Caps`: vector lanes and registers, threads, local memory, work-group limits, index width,
dtypes, math functions. Passes, schedules and renderers read these instead of constants. Parsing never needs
the device: `Target.parse` is pure text (plus the host's CPU for a bare `llvm`); a device target's
capabilities are filled by its device API (`with_caps`). `check_runnable` says before any kernel runs
whether this host can run code built for the target.
"""
from __future__ import annotations

import dataclasses
import functools
import shlex
from dataclasses import dataclass, field

from .errors import TargetError

KINDS = ("llvm", "opencl", "opengl", "webgl", "webgpu", "wasm", "clml")


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
    #                                         fxc's own code, llvm_math, and any other math function an import the
    #                                         JS runtime supplies)
    fallback: str = ""                      # the target kind whose kernels run, in the same page, the fused groups
    #                                         this one refuses (webgl: "wasm"; fxc.driver.page_kernels); "" for none
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

    def check_runnable(self) -> None:
        """Raise TargetError when this host cannot run code built for the target (an llvm target whose CPU
        features the host lacks; a wasm target without the linker that makes its module or the browser that runs
        it). Compiling and exporting for such a target is allowed; running is not."""
        if self.kind == "wasm":
            from .backends.wasm import find_linker
            from .runtime.browser.wasm import open_wasm_runtime
            find_linker()
            open_wasm_runtime()
            return
        if self.kind != "llvm":
            return
        missing = sorted(self.caps.features - host_features())
        if missing:
            raise TargetError(f"target {self}: this host's CPU ({host_cpu()}) lacks {', '.join(missing)}; code "
                              f"built for it cannot run here. Compile for target='llvm' (the host) to run, or "
                              f"export the artifact and run it on a CPU that has these features")


def _parse(text: str) -> Target:
    try:
        words = shlex.split(text)
    except ValueError as e:
        raise TargetError(f"cannot parse target {text!r}: {e}") from None
    if not words:
        raise TargetError("empty target string; use 'llvm' for this CPU")
    kind, opts = words[0], {}
    if kind not in KINDS:
        raise TargetError(f"unknown target {kind!r}; known kinds: {', '.join(KINDS)} "
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
    import os
    return len(os.sched_getaffinity(0))


@functools.lru_cache(maxsize=None)
def host_cpu() -> str:
    import llvmlite.binding as llvm
    return llvm.get_host_cpu_name()


@functools.lru_cache(maxsize=None)
def host_feature_string() -> str:
    """LLVM's feature string of this host's CPU ("+avx2,-avx512fp16,...")."""
    import llvmlite.binding as llvm
    return llvm.get_host_cpu_features().flatten()


@functools.lru_cache(maxsize=None)
def host_features() -> frozenset:
    return frozenset(f[1:] for f in host_feature_string().split(",") if f.startswith("+"))


@functools.lru_cache(maxsize=None)
def host_triple() -> str:
    import llvmlite.binding as llvm
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


def opencl_caps(info: dict) -> Caps:
    """Caps of an OpenCL device from what its device API reports (fxc.runtime.opencl.device.Device.info): compute units,
    local memory (and whether it is memory of its own: feature "dedicated_local_memory"; a CPU device's is plain
    memory), work-group limit, preferred vector width, its extensions, float64 only with the fp64 extension.
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
                vector_widths=frozenset({2, 4, 8, 16}))


OPENCL_OPTIONS = ("device",)


def opengl_caps(info: dict) -> Caps:
    """Caps of a GL 4.3+ context (fxc.runtime.opengl.device.Device.info): 32-bit indices, no float64 / float16 /
    bfloat16 (int64 is computed in 32 bits where provably exact: fxc.backends.glsl), GL's shared-memory minimum."""
    return Caps(vector_bits=128, vector_registers=0, threads=1, features=frozenset(),
                local_memory_bytes=int(info["local_memory_bytes"]),
                max_work_group_size=min(1024, int(info["max_work_group_size"])), index_bits=32,
                dtypes=frozenset({"float32", "int8", "int16", "int32", "int64", "uint8", "bool"}), scatter=True,
                math=Caps().math | {"erfc", "lgamma", "expm1", "log1p", "asinh", "acosh", "atanh"})


def _opengl_target(target: Target) -> Target:
    if target.attrs:
        raise TargetError(f"opengl target: unknown option(s) {', '.join('-' + k for k, _ in target.attrs)}; the "
                          f"opengl target takes none (it uses the process's EGL context)")
    from .runtime.opengl.device import open_device
    return target.with_caps(opengl_caps(open_device(None).info))


def webgl_caps(info: dict) -> Caps:
    """Caps of a WebGL 2 page (fxc.runtime.browser.webgl.open_page().info): one work-item per fragment, no work-groups
    or
    shared memory, no scatter, 32-bit indices, float32 and integers (int64 narrowed) only; what it refuses runs as
    wasm kernels in the same page."""
    return Caps(vector_bits=128, vector_registers=0, threads=1, features=frozenset(), local_memory_bytes=0,
                max_work_group_size=1, index_bits=32,
                dtypes=frozenset({"float32", "int8", "int16", "int32", "int64", "uint8", "bool"}), scatter=False,
                math=Caps().math | {"expm1", "log1p", "asinh", "acosh", "atanh"}, fallback="wasm",
                row_align=4, binary_tails=True, channel_block=4,
                draw_buffers=max(1, min(4, int(info.get("max_draw_buffers", 4)))))


def _webgl_target(target: Target) -> Target:
    if target.attrs:
        raise TargetError(f"webgl target: unknown option(s) {', '.join('-' + k for k, _ in target.attrs)}; the "
                          f"webgl target takes none (FXC_CHROMIUM names the browser)")
    from .runtime.browser.webgl import open_page
    return target.with_caps(webgl_caps(open_page().info))


def webgpu_caps(info: dict) -> Caps:
    """Caps of a WebGPU device (fxc.runtime.browser.webgpu.open_gpu().info): its work-group and shared-memory limits,
    32-bit
    indices, float32 and integers (int64 narrowed) only; shared memory counts as the device's own
    (feature "dedicated_local_memory") unless the adapter is SwiftShader, a CPU; what WGSL refuses runs as wasm
    kernels in the same page."""
    return Caps(vector_bits=128, vector_registers=0, threads=1,
                features=frozenset({"dedicated_local_memory"} if info.get("dedicated_local_memory") else ()),
                local_memory_bytes=int(info["local_memory_bytes"]),
                max_work_group_size=min(1024, int(info["max_work_group_size"])), index_bits=32,
                dtypes=frozenset({"float32", "int8", "int16", "int32", "int64", "uint8", "bool"}), scatter=True,
                math=Caps().math | {"expm1", "log1p", "asinh", "acosh", "atanh"}, fallback="wasm")


def _webgpu_target(target: Target) -> Target:
    if target.attrs:
        raise TargetError(f"webgpu target: unknown option(s) {', '.join('-' + k for k, _ in target.attrs)}; the "
                          f"webgpu target takes none (FXC_CHROMIUM names the browser)")
    from .runtime.browser.webgpu import open_gpu
    return target.with_caps(webgpu_caps(open_gpu().info))


def device_target(target: Target) -> Target:
    """A device target with its Caps filled from the device it names (opening it: a TargetError says what is
    missing when there is no runtime or device)."""
    if target.kind == "opengl":
        return _opengl_target(target)
    if target.kind == "webgl":
        return _webgl_target(target)
    if target.kind == "webgpu":
        return _webgpu_target(target)
    if target.kind != "opencl":
        raise TargetError(f"target {target}: only 'llvm', 'opencl', 'opengl', 'webgl' and 'webgpu' can be built here")
    unknown = sorted(set(dict(target.attrs)) - set(OPENCL_OPTIONS))
    if unknown:
        raise TargetError(f"opencl target: unknown option(s) {', '.join('-' + u for u in unknown)}; known: -device="
                          f"<index or name substring> (or set FXC_OPENCL_DEVICE)")
    from .runtime.opencl.device import open_device
    return target.with_caps(opencl_caps(open_device(target.attr("device")).info))


def as_target(target) -> Target:
    """Target from a Target, a string or None (the host CPU)."""
    return Target.parse(target)
