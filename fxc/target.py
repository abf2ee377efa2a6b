"""Targets: what a compile is for, parsed from a TVM-style string, and the capabilities every layer reads.

    Target.parse("llvm")                       # the host CPU (-mcpu detected)
    Target.parse("llvm -mcpu=haswell")         # AVX2 + FMA, 16 vector registers (runs on any newer x86 host)
    Target.parse("llvm -mcpu=x86-64-v2 -mattr=+popcnt")
    Target.parse("opencl -device=0")           # an OpenCL device (FXC_OPENCL_DEVICE picks one too)
    Target.parse("wasm")                       # WebAssembly (wasm32 + SIMD128) run by a browser: the browser CPU path
    Target.parse("llvm -mtriple=aarch64-linux-gnu -mcpu=cortex-a72")    # 64-bit ARM (NEON), cross-compiled
    Target.parse("rasp3b")                     # a board's alias (BOARDS): its triple, CPU and NEON
    Target.parse("opencl -libs=clblast")       # with regions a vendor library runs (docs/byoc.md; `target.libs`)

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
# the kinds named to users (errors, lists): clml (Qualcomm's CLML SDK on Adreno) is parsed as "opencl -libs=clml" (CLML
# regions, each carrying fxc's opencl kernels, run where the device lacks the extension) and is not offered in lists
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
    fma: bool = False                       # a fused multiply-add instruction in the vector unit (x86 FMA3, ARM's
    #                                         fmla / vfma): llvm.fma, else llvm.fmuladd (never a libm call per lane)
    bf16_dot: bool = False                  # a bf16-pair dot product accumulating in float32 (AVX-512 BF16's
    #                                         vdpbf16ps) and a float32 -> bf16 pair conversion: precision="bf16"
    int8_dot: str = ""                      # the 4-way byte dot product of int8 kernels (ops/int8.py, DotI8):
    #                                         "vnni512" (AVX-512 VNNI vpdpbusd), "vnni256" (AVX-VNNI's 256-bit
    #                                         vpdpbusd), "pmaddwd" (AVX2: exact, bytes widened to int16), "neon_dot"
    #                                         (aarch64 sdot), "neon" (NEON widening multiplies), "" (scalar form)
    scalef: bool = False                    # a 16-lane float32 scale by 2^k (AVX-512's vscalefps) for exp's last step
    cvtt: bool = False                      # x86's vector float32 -> int32 truncation (cvttps2dq), NaN and out of
    #                                         range the "integer indefinite" MIN (the int8 epilogues' conversion)
    float64_minmax: bool = True             # LLVM lowers float64 maximum/minimum (nan-propagating) for the CPU; False
    #                                         (armv7, whose VFP lacks them: LLVM aborts) renders compare and select
    draw_buffers: int = 1                   # texels a fragment shader may write at once (webgl: 4, WebGL 2's least
    #                                         MAX_DRAW_BUFFERS; fxc.backends.webgl.draw_buffers jams a kernel's copies)
    int8_storage: bool = True               # stores of single bytes (int8, uint8, bool) that leave their neighbours
    #                                         alone: OpenCL 1.1 or cl_khr_byte_addressable_store (the device says);
    #                                         GL and WebGPU store a byte into its word atomically, WebGL an int32
    #                                         an element. Without it a kernel storing bytes is refused
    #                                         (fxc.backends.integer_caps)
    int32_ops: bool = True                  # 32-bit two's complement integer arithmetic that wraps (int8 products
    #                                         summed in int32, requantization); a WebGL page has it when its
    #                                         fragment shaders' highp int is 32 bits (the page says)

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

    @property
    def libs(self) -> tuple:
        """The external codegens (vendor libraries) the target names with -libs=a,b, TVM-style (docs/byoc.md);
        which exist and which kinds they serve is fxc.backends.external's question."""
        return tuple(x for x in self.attr("libs", "").split(",") if x)

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
        """The LLVM target triple of an llvm target (-mtriple, else this process's; wasm32's for wasm), in LLVM's
        four-part form: "armv7l-linux-gnueabihf" is "armv7l-unknown-linux-gnueabihf" (LLVM reads a three-part
        triple as arch-vendor-os, and armv7 code would then not take float arguments in VFP registers, the hf ABI)."""
        triple = self.attr("mtriple") or (WASM_TRIPLE if self.kind == "wasm" else host_triple())
        parts = triple.split("-")
        return "-".join([parts[0], "unknown", *parts[1:]]) if len(parts) == 3 and parts[1] == "linux" else triple

    @property
    def llvm_features(self) -> str:
        """LLVM's feature string for an llvm target's machine: the host's full feature list for the host's CPU, else
        the -mattr entries on top of the named CPU's own (LLVM knows every CPU's features; fxc's table only those
        its code generation reads); for wasm, its whole feature set."""
        if self.kind == "wasm":
            return ",".join("+" + f for f in sorted(self.caps.features))
        extra = [f for f in self.attr("mattr", "").split(",") if f]
        if self.mcpu == host_cpu() and triple_arch(self.triple) == triple_arch(host_triple()):
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
    if words[0] in BOARDS:          # a board's alias: its llvm target, the options after it on top
        words = shlex.split(BOARDS[words[0]]) + words[1:]
    if words[0] == "clml":          # opencl with CLML regions (docs/byoc.md): "clml -device=0" is
        named = [x for w in words[1:] if w.startswith("-libs=") for x in w[6:].split(",")]     # "opencl -device=0
        words = ["opencl", *(w for w in words[1:] if not w.startswith("-libs=")),            # -libs=clml"
                 "-libs=" + ",".join(dict.fromkeys(x for x in ["clml", *named] if x))]
    kind, opts = words[0], {}
    if kind not in KINDS:
        raise TargetError(f"unknown target {kind!r}; known kinds: {', '.join(LISTED_KINDS)} "
                          f"(e.g. 'llvm -mcpu=haswell', 'opencl -device=0'), or a board: {', '.join(BOARDS)}")
    for w in words[1:]:
        if not w.startswith("-") or "=" not in w:
            raise TargetError(f"target {text!r}: option {w!r} is not of the form -key=value")
        k, v = w.lstrip("-").split("=", 1)
        opts[k] = v
    if "libs" in opts and not all(x.isidentifier() for x in opts["libs"].split(",")):
        raise TargetError(f"target {text!r}: -libs= takes library names separated by commas (e.g. -libs=clblast)")
    if kind == "llvm":
        return _llvm_target(opts)
    if kind == "wasm":
        return _wasm_target(opts)
    return Target(kind, tuple(sorted(opts.items())))


LLVM_OPTIONS = ("mcpu", "mattr", "mtriple", "num-threads", "libs")


def _llvm_target(opts: dict) -> Target:
    unknown = sorted(set(opts) - set(LLVM_OPTIONS))
    if unknown:
        raise TargetError(f"llvm target: unknown option(s) {', '.join('-' + u for u in unknown)}; "
                          f"known: {', '.join('-' + o for o in LLVM_OPTIONS)}")
    arch = triple_arch(opts.get("mtriple") or host_triple())
    if arch in ARM_CPUS:
        return _arm_target(opts, arch)
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
                                                            features=feats, fma="fma" in feats,
                                                            bf16_dot="avx512bf16" in feats,
                                                            int8_dot=x86_int8_dot(feats),
                                                            scalef="avx512f" in feats, cvtt="sse2" in feats))


def x86_int8_dot(feats: frozenset) -> str:
    """Caps.int8_dot of an x86 CPU: AVX-512 VNNI's 512-bit vpdpbusd, AVX-VNNI's 256-bit one, else the exact
    vpmaddwd form ("pmaddwd") on AVX2 (at 512 bits with AVX-512BW), else the scalar form."""
    if "avx512vnni" in feats and "avx512f" in feats:
        return "vnni512"
    if "avxvnni" in feats:
        return "vnni256"
    return "pmaddwd" if "avx2" in feats and ("avx512f" not in feats or "avx512bw" in feats) else ""


def triple_arch(triple: str) -> str:
    """The architecture family of an LLVM target triple: "x86_64", "aarch64", "arm" (any 32-bit ARM: armv7l,
    armv8l, thumbv7...), "wasm32", else its first component."""
    arch = triple.split("-", 1)[0].lower()
    if arch in ("x86_64", "amd64"):
        return "x86_64"
    if arch in ("aarch64", "arm64"):
        return "aarch64"
    return "arm" if arch.startswith(("arm", "thumb")) else arch


@dataclass(frozen=True)
class ArmCpu:
    """An ARM core as fxc's code generation sees it: the LLVM features -mcpu=name enables that fxc reads (or a user
    asks about), the cores of the boards it ships on (the default thread count) and a core's share of the L2."""
    features: tuple
    cores: int = 4
    cache_kib: int = 256


_A64 = ("neon", "fp-armv8", "crc")                           # ARMv8.0-A: Advanced SIMD (NEON) with fmla
_A64_82 = _A64 + ("lse", "rcpc", "dotprod", "fullfp16")      # ARMv8.2-A cores: sdot/udot, float16 arithmetic
_A32 = ("neon", "vfp4", "fp-armv8", "d32", "crc")            # an ARMv8 core in AArch32 state: NEON, vfma, 32 d regs
# triple_arch -> -mcpu -> ArmCpu. Cores and L2: Raspberry Pi 3 (BCM2837, 4x A53, 512 KiB L2), Pi 4 (BCM2711, 4x A72,
# 1 MiB L2), Pi 5 (BCM2712, 4x A76, 512 KiB L2 each), a Neoverse-N1 server slice (AWS Graviton2: 1 MiB L2 each;
# -num-threads=N for a larger one). "generic": LLVM's baseline for the triple (armv7: no NEON, as Debian's armhf).
ARM_CPUS = {
    "aarch64": {
        "generic": ArmCpu(_A64[:2], 4, 256),
        "cortex-a53": ArmCpu(_A64, 4, 128),
        "cortex-a72": ArmCpu(_A64, 4, 256),
        "cortex-a76": ArmCpu(_A64_82, 4, 512),
        "neoverse-n1": ArmCpu(_A64_82, 4, 1024),
    },
    "arm": {
        "generic": ArmCpu(("vfp3",), 4, 128),
        "cortex-a7": ArmCpu(("neon", "vfp4", "d32"), 4, 128),
        "cortex-a53": ArmCpu(_A32, 4, 128),
        "cortex-a72": ArmCpu(_A32, 4, 256),
    },
}
# -mattr names an ARM target takes (LLVM's), and the other spellings users write for them
ARM_FEATURES = frozenset({"neon", "fp-armv8", "crc", "lse", "rcpc", "dotprod", "fullfp16", "i8mm", "bf16", "vfp3",
                          "vfp4", "d32", "aes", "sha2", "crypto"})
ARM_FEATURE_ALIASES = {"fp16": "fullfp16", "asimd": "neon", "simd": "neon", "dot": "dotprod"}
VECTOR_REGISTERS = {"aarch64": 32, "arm": 16}       # v0-v31; armv7's q0-q15 (NEON's 128-bit registers)

# boards (TVM's arm_cpu models): name -> the llvm target it stands for
BOARDS = {
    "rasp3b": "llvm -mtriple=armv7l-linux-gnueabihf -mcpu=cortex-a53 -mattr=+neon",     # 32-bit Raspberry Pi OS
    "rasp3b64": "llvm -mtriple=aarch64-linux-gnu -mcpu=cortex-a53 -mattr=+neon",
    "rasp4b": "llvm -mtriple=armv7l-linux-gnueabihf -mcpu=cortex-a72 -mattr=+neon",
    "rasp4b64": "llvm -mtriple=aarch64-linux-gnu -mcpu=cortex-a72 -mattr=+neon",
}


def _arm_target(opts: dict, arch: str) -> Target:
    """An ARM llvm target: the CPU's row of ARM_CPUS (this host's CPU and features when it is an ARM machine of
    the same architecture and -mcpu is left out), -mattr on top; NEON's 128-bit registers (4 float32 lanes), 32 of
    them on aarch64 and 16 on armv7, FMA, and the board's core count as the default threads."""
    cpus = ARM_CPUS[arch]
    native = arch == triple_arch(host_triple())
    cpu = opts.get("mcpu") or (host_cpu() if native else "generic")
    cpu = host_cpu() if cpu == "native" and native else cpu
    if native and cpu == host_cpu():
        features, row = set(host_features()), cpus.get(cpu, cpus["generic"])
    elif cpu in cpus:
        features, row = set(cpus[cpu].features), cpus[cpu]
    else:
        raise TargetError(f"llvm target: unknown {arch} CPU {cpu!r}; known: {', '.join(cpus)} (e.g. "
                          f"'llvm -mtriple=aarch64-linux-gnu -mcpu=cortex-a72', or a board: {', '.join(BOARDS)})")
    mattr = []
    for f in filter(None, opts.get("mattr", "").split(",")):
        name = ARM_FEATURE_ALIASES.get(f[1:], f[1:])
        if f[0] not in "+-" or name not in ARM_FEATURES:
            raise TargetError(f"llvm target: -mattr={f!r} is not an {arch} feature; write +name or -name with name "
                              f"one of {', '.join(sorted(ARM_FEATURES))} (e.g. -mattr=+neon,+dotprod)")
        (features.add if f[0] == "+" else features.discard)(name)
        mattr.append(f[0] + name)
    opts["mcpu"] = cpu
    if mattr:
        opts["mattr"] = ",".join(mattr)
    feats = frozenset(features)
    threads = int(opts.get("num-threads", 0) or 0) or (_host_threads() if native else row.cores)
    int8 = "neon_dot" if arch == "aarch64" and "dotprod" in feats else "neon" if "neon" in feats else ""
    caps = Caps(vector_bits=128 if "neon" in feats else 32, vector_registers=VECTOR_REGISTERS[arch],
                threads=threads, features=feats, fma=arch == "aarch64" or "vfp4" in feats, int8_dot=int8,
                cache_bytes=row.cache_kib << 10, float64_minmax=arch == "aarch64")
    return Target("llvm", tuple(sorted(opts.items())), caps)


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
    "opencl": (("device", "libs"), "known: -device=<index or name substring> (or set FXC_OPENCL_DEVICE), "
                                   "-libs=clblast,clml"),
    "opengl": ((), "the opengl target takes none (it uses the process's EGL context)"),
    "webgl": ((), "the webgl target takes none (FXC_CHROMIUM names the browser)"),
    "webgpu": ((), "the webgpu target takes none (FXC_CHROMIUM names the browser)"),
}
