"""A compiled module for a device target (OpenCL): program source + launch plan + constants.

Framework-free (numpy, ctypes and pyopencl only). The host runs the plan: each step launches one kernel of
the program over device buffers: the inputs, the outputs, the constants (uploaded once) and one workspace
sized by the memory plan (operands are byte offsets into it). Host <-> device copies happen only at the
graph's edges: inputs before the first launch, outputs after the last. Inputs that are weights
(`prepack_inputs`) stay resident on the device and are uploaded again only when they changed: a new object,
version or address (the caller's token), or a different sample of their words (a write the version missed).
The launches marked `prepack` (what reads weights only: a batch norm's scale, a weight's transpose) run on the
first call and again only after such an upload (`prepack_runs` counts them).

A module with size symbols (`symbols`, from a graph with a symbolic batch: fxc/driver/rows.py) binds them from the
input shapes at each call (runtime/symbols.py's rules: InputError outside the range), grows its input, output and
workspace buffers when a larger size comes (the workspace's symbolic region is `row_bytes` per unit of the
symbol), and runs the plan expanded for that size (runtime/device_rows.py: launches per block of rows, operand
offsets moved to the block's rows), cached per size.
"""
from __future__ import annotations

import ctypes
import hashlib
import json
import threading
from dataclasses import dataclass, field

import numpy as np

from ..errors import ArtifactError, ExecutionError, IndexOutOfRangeError, InputError, index_error_message
from .artifact.loader import _REEXPORT, MANIFEST, PARAMS, interface, unpack_params
from .module import TensorSpec, check_inputs, np_dtype
from .rows import expand, nbytes_at, shape_at, symbolic_dims
from .symbols import bind_symbols

ERROR_WORDS = 8     # the kernels' fxc_err ints: a division by zero, an index out of range (op, index, size)


@dataclass
class Launch:
    kernel: str
    args: list                  # [(slot kind: in | out | const | work | null, index or byte offset)]
    grid: tuple
    block: tuple
    prepack: bool = False       # part of the prepack step (reads weights only): rerun only when a weight changed
    rows: tuple = ()            # symbolic plans: each argument's bytes per row (runtime/device_rows.py)
    repeat: tuple = ()          # symbolic plans: (group, rows per launch, part 0 blocks | 1 remaining rows[, rows
    #                             per launch of part 1: 1, or 2 / 4 where offsets must be whole texels (webgl)])


def _nbytes(spec: TensorSpec) -> int:
    return int(np.prod(spec.shape, dtype=np.int64)) * np_dtype(spec.dtype).itemsize


class _HostFingerprint:
    """The CPU module's fxc_fingerprint, in Python: a hash of sampled 32-bit words at input addresses."""

    @staticmethod
    def fingerprint(addresses, index, offsets, n) -> int:
        words = tuple(ctypes.c_uint32.from_address(addresses[index[k]] + offsets[k]).value for k in range(n))
        return hash(words)


@dataclass
class DeviceModule:
    target: str                         # the target string, e.g. "opencl -device=0"
    source: str                         # the OpenCL C program
    inputs: list
    outputs: list
    consts: list
    workspace_bytes: int
    plan: list                          # Launch
    kernels: list = field(default_factory=list)     # one line per fused group
    prepack_inputs: list = field(default_factory=list)      # inputs kept resident (weights)
    profiled: bool = False
    kernel_flops: list = field(default_factory=list)
    intermediate_bytes: int = 0
    symbols: list = field(default_factory=list)     # size symbols (dicts name, min, max, divisor); [] when static
    row_bytes: int = 0                  # workspace bytes per unit of the symbol, after workspace_bytes
    device: object = field(default=None, repr=False, compare=False)     # the opened device (the build's filled
    #                                                                     Target's); None: opened from `target`
    prepack_runs: int = field(default=0, init=False)        # calls that ran the prepack launches
    _prepacked: bool = field(default=False, init=False, repr=False)     # their results are in the workspace
    exports_symbols = True      # a symbolic batch exports (format 2: row launches) and runs from the artifact

    def __post_init__(self):
        if self.device is None:         # (an artifact's module: opened from its target string)
            from .opencl.device import open_device
            self.device = open_device(dict(_attrs(self.target)).get("device"))
        cl = self.device.cl
        self.consts = [np.ascontiguousarray(c) for c in self.consts]
        sizes = ([_nbytes(s) for s in self.inputs + self.outputs if not symbolic_dims(s)]
                 + [c.nbytes for c in self.consts] + [self.workspace_bytes])
        self.device.check_memory(sizes)
        self._program = self.device.program(self.source)
        buf = self.device.buffer
        self._in = [None if symbolic_dims(s) else buf(_nbytes(s)) for s in self.inputs]
        self._out = [None if symbolic_dims(s) else buf(_nbytes(s)) for s in self.outputs]
        self._const = [buf(c.nbytes) for c in self.consts]
        for b, c in zip(self._const, self.consts):
            if c.nbytes:
                cl.enqueue_copy(self.device.queue, b, c)
        self._ws = None if self.symbols else buf(self.workspace_bytes)
        self._err = buf(4 * ERROR_WORDS)
        self._zero = np.zeros(ERROR_WORDS, np.int32)
        cl.enqueue_copy(self.device.queue, self._err, self._zero)
        self._capacity = 0              # the size of the symbol the buffers hold (symbolic modules)
        self._at: dict = {}             # size -> [(bound launch, step)] (symbolic modules)
        self._kernels: dict = {}        # kernel name -> its one kernel object (symbolic modules)
        self._static = None if self.symbols else [(self._bind(st, offs), st) for st, offs in expand(self.plan, None)]
        self._init_call_state()

    def _init_call_state(self) -> None:
        """The call state every device runtime keeps: which weights are resident (the token key of the weights on the
        device and their sample), the bytes of inputs the last call uploaded, profiled times, the fingerprint the
        torch capture reads for its own weights, and one lock (one call at a time: the device buffers are the
        module's own)."""
        self._resident = None
        self._fingerprint_value = None
        self._resident_objects = None
        self.uploaded_bytes = 0
        self._times: dict = {}
        self._lib = _HostFingerprint
        self._lock = threading.Lock()

    def _bind(self, step: Launch, offsets: list):
        """(kernel object, global size, local size, name, arguments): a static module's kernel objects have their
        arguments set once (the buffers never move: arguments None); a symbolic module's share one object per
        kernel and set the arguments of each launch before it."""
        args = []
        for (kind, ix), off in zip(step.args, offsets):
            if kind == "null":
                args += [None, np.uint64(0)]
                continue
            b = {"in": self._in, "out": self._out, "const": self._const}.get(kind)
            args += [self._ws if b is None else b[ix], np.uint64(off)]
        args.append(self._err)
        if self.symbols:
            k = self._kernels.get(step.kernel)
            if k is None:
                k = self._kernels[step.kernel] = self.device.cl.Kernel(self._program, step.kernel)
        else:
            k = self.device.cl.Kernel(self._program, step.kernel)
            k.set_args(*args)
            args = None
        gsize = tuple(int(g) * int(b) for g, b in zip(step.grid, step.block))
        return k, gsize, tuple(int(b) for b in step.block), step.kernel, args

    # -- size symbols --------------------------------------------------------------------------------------
    def sizes(self, shapes) -> dict:
        """{symbol: value} from the input shapes (InputError where they break the compiled range)."""
        return bind_symbols(self.inputs, shapes, self.symbols) if self.symbols else {}

    def output_shapes(self, sizes: dict) -> list:
        return [shape_at(s, sizes) for s in self.outputs]

    def _size(self, sizes) -> int | None:
        if not self.symbols:
            return None
        if not sizes:
            raise InputError("this module has symbolic sizes: run it with the sizes of its inputs "
                             "(sizes=module.sizes(shapes))")
        return int(sizes[self.symbols[0]["name"]])

    def _pairs(self, s) -> list:
        """[(bound launch, plan step)] of a call at size s (the static plan's when s is None)."""
        if s is None:
            return self._static
        got = self._at.get(s)
        if got is None:
            if len(self._at) >= 64:
                self._at.clear()
            got = self._at[s] = [(self._bind(st, offs), st) for st, offs in expand(self.plan, s)]
        return got

    def _grow_to(self, s: int) -> bool:
        """Buffers for size s (symbolic modules): the symbolic inputs, outputs and the workspace reallocated when s
        exceeds what they hold (to twice that, within the symbol's range), the workspace's static part (packed
        weights) copied over. True when they moved."""
        if s <= self._capacity:
            return False
        cap = max(s, min(2 * self._capacity, int(self.symbols[0].get("max", s))))
        at = {self.symbols[0]["name"]: cap}
        self.device.check_memory([nbytes_at(x, at) for x in self.inputs + self.outputs]
                                 + [c.nbytes for c in self.consts] + [self.workspace_bytes + self.row_bytes * cap],
                                 f"the model at size {cap}")
        buf, cl = self.device.buffer, self.device.cl
        self._in = [buf(nbytes_at(x, at)) if symbolic_dims(x) else b for x, b in zip(self.inputs, self._in)]
        self._out = [buf(nbytes_at(x, at)) if symbolic_dims(x) else b for x, b in zip(self.outputs, self._out)]
        ws = buf(self.workspace_bytes + self.row_bytes * cap)
        if self._ws is not None and self.workspace_bytes:
            cl.enqueue_copy(self.device.queue, ws, self._ws, byte_count=self.workspace_bytes)
        self._ws, self._capacity = ws, cap
        self._at.clear()
        return True

    # -- calls -------------------------------------------------------------------------------------------
    def check_inputs(self, arrays) -> list:
        return check_inputs(self.inputs, arrays, self.symbols)

    def __call__(self, *arrays):
        """numpy in, numpy out (a list when the module has several outputs)."""
        ins = self.check_inputs(arrays)
        sizes = self.sizes([a.shape for a in ins])
        outs = [np.empty(shape, np_dtype(s.dtype)) for s, shape in zip(self.outputs, self.output_shapes(sizes))]
        self.run_arrays(ins, outs, None, sizes)
        return outs[0] if len(outs) == 1 else outs

    def run_arrays(self, ins: list, outs: list, token=None, sizes=None) -> None:
        """Run on contiguous numpy arrays (outs are written). token: (addresses of the prepack_inputs, (their
        objects, versions)) naming the current weights; None uploads every input. sizes: the symbols' values
        (`sizes(shapes)`) for a module with symbolic sizes."""
        s = self._size(sizes)
        with self._lock:          # (the browser modules' _run takes no size: they have no symbolic builds)
            self._run(ins, outs, token) if s is None else self._run(ins, outs, token, s)

    def _run(self, ins: list, outs: list, token, s=None) -> None:
        cl, q = self.device.cl, self.device.queue
        if s is not None and self._grow_to(s):
            self._resident = None           # the moved buffers hold no inputs yet
        key = _token_key(token)
        sample = self._weights_print(ins) if key is not None and self.prepack_inputs else None
        resident = key is not None and key == self._resident and sample == self._fingerprint_value
        self.uploaded_bytes = 0
        for i, (b, a) in enumerate(zip(self._in, ins)):
            if a.nbytes and not (resident and i in self.prepack_inputs):
                cl.enqueue_copy(q, b, a, is_blocking=False)
                self.uploaded_bytes += a.nbytes
        self._resident, self._fingerprint_value = key, sample
        self._resident_objects = None if token is None else token[1][0]     # their ids stay theirs
        events = []
        for k, g, b, name, args in self._to_launch(resident, self._pairs(s)):
            if args is not None:
                k.set_args(*args)
            events.append((cl.enqueue_nd_range_kernel(q, k, g, b), name))
        for b, o in zip(self._out, outs):
            if o.nbytes:
                cl.enqueue_copy(q, o, b, is_blocking=False)
        err = np.empty(ERROR_WORDS, np.int32)
        cl.enqueue_copy(q, err, self._err, is_blocking=True)
        if self.profiled:
            for ev, name in events:
                t = self._times.setdefault(name, [0, 0])
                t[0] += ev.profile.end - ev.profile.start
                t[1] += 1
        if err[0] or err[1]:
            self._prepacked = False         # the error may come from a prepack launch: raise it again next time
        if err[1]:
            cl.enqueue_copy(q, self._err, self._zero)
            words = err.view(np.uint32).astype(np.uint64)
            index, size = (int(np.int64(words[k] | (words[k + 1] << np.uint64(32)))) for k in (3, 5))
            raise IndexOutOfRangeError(index_error_message(int(err[2]), index, size))
        if err[0]:
            cl.enqueue_copy(q, self._err, self._zero)
            raise ExecutionError("integer division by zero in a compiled kernel (eager PyTorch raises "
                                 "ZeroDivisionError here too); make the divisor nonzero or divide in floating point")

    def _to_launch(self, resident: bool, pairs: list) -> list:
        """The launches of this call (pairs: [(bound launch, step)]): all of them, or (weights resident and
        prepacked already) the main ones."""
        if resident and self._prepacked:
            return [x for x, st in pairs if not st.prepack]
        self._prepacked = True
        self.prepack_runs += any(st.prepack for st in self.plan)
        return [x for x, _ in pairs]

    def _weights_print(self, ins) -> tuple:
        """Sampled bytes of each resident input (a write through .data keeps its version and address)."""
        out = []
        for i in self.prepack_inputs:
            flat = ins[i].reshape(-1).view(np.uint8)
            if flat.size:
                out.append(flat[np.linspace(0, flat.size - 1, 16).astype(np.int64)].tobytes())
        return tuple(out)

    def run_prepared(self, in_array, out_ptrs: list, token=None, sizes=None) -> None:
        """The CPU Module's pointer interface (the torch capture): a ctypes array of input addresses, output
        addresses, the token (addresses, (objects, versions)) of the weights, and the symbols' values."""
        self.run_pointers([in_array[i] for i in range(len(self.inputs))], out_ptrs, None, sizes, token)

    def run_pointers(self, in_ptrs: list, out_ptrs: list, prepack_token=None, sizes=None, token=None) -> None:
        if token is None and prepack_token is not None:
            token = (tuple(in_ptrs[i] for i in self.prepack_inputs), prepack_token)
        ins = [_view(p, s, sizes) for p, s in zip(in_ptrs, self.inputs)]
        outs = [_view(p, s, sizes) for p, s in zip(out_ptrs, self.outputs)]
        self.run_arrays(ins, outs, token, sizes)

    def wake(self) -> None:
        """Nothing to wake: the device's queue is always ready (the CPU module wakes its worker threads)."""

    def use_openmp(self) -> None:
        """No host threads run kernels here (the CPU module switches to OpenMP's team)."""

    # -- profiling ---------------------------------------------------------------------------------------
    def profile(self, reset: bool = False) -> list:
        """Per-kernel device times (OpenCL profiling events) since the last reset, slowest first."""
        if not self.profiled:
            raise InputError("this module has no kernel timers; build it with profile=True or FXC_PROFILE=1")
        total = sum(t for t, _ in self._times.values()) or 1
        rows = [{"kernel": k, "calls": n, "total_ms": t / 1e6, "mean_us": t / 1e3 / max(n, 1), "share": t / total}
                for k, (t, n) in self._times.items()]
        if reset:
            self._times.clear()
        return sorted(rows, key=lambda r: -r["total_ms"])

    def profile_table(self, top: int | None = None, reset: bool = False) -> str:
        rows = self.profile(reset)[:top]
        lines = [f"{'kernel':<40} {'calls':>6} {'total ms':>10} {'mean us':>10} {'share':>6}"]
        lines += [f"{r['kernel']:<40} {r['calls']:>6} {r['total_ms']:>10.3f} {r['mean_us']:>10.1f} "
                  f"{100 * r['share']:>5.1f}%" for r in rows]
        return "\n".join(lines)

    def print_profile_at_exit(self) -> None:
        if self.profiled:
            import atexit
            import sys
            atexit.register(lambda: self._times and print(self.profile_table(), file=sys.stderr))

    def launches(self) -> list:
        """One line per launch: kernel and geometry (what fxc.explain shows)."""
        return [f"{s.kernel}: grid {'x'.join(map(str, s.grid))}, work-group {'x'.join(map(str, s.block))}"
                for s in self.plan]


def _attrs(target: str) -> list:
    return [tuple(w.lstrip("-").split("=", 1)) for w in target.split()[1:] if "=" in w]


def _token_key(token):
    """A comparable key of a prepack token (addresses, (objects, versions)): addresses, object ids, versions."""
    if token is None:
        return None
    addrs, (objs, versions) = token
    return tuple(addrs), tuple(map(id, objs)), tuple(versions)


def _view(address: int, spec: TensorSpec, sizes=None) -> np.ndarray:
    """A numpy array over `address` holding a contiguous tensor of `spec` (no copy) at the symbols' `sizes`."""
    dt = np_dtype(spec.dtype)
    shape = shape_at(spec, sizes) if sizes else spec.shape
    n = int(np.prod(shape, dtype=np.int64))
    if n == 0:
        return np.empty(shape, dt)
    raw = (ctypes.c_uint8 * (n * dt.itemsize)).from_address(int(address))
    return np.frombuffer(raw, dt).reshape(shape)


# -- device artifacts (export_artifact.export_device writes them) ------------------------------------------------
def device_interface_line(manifest: dict) -> str:
    """The first line of a device artifact's program: the sha256 of its interface (signature, params layout,
    workspace, plan with launch shapes), so a manifest edited apart from the program is refused."""
    iface = json.dumps(interface(manifest), sort_keys=True, separators=(",", ":"))
    return f"/* fxc_interface {hashlib.sha256(iface.encode()).hexdigest()} */"


def _slot(ix):
    """A plan slot's index from a manifest: an int, or nested tuples of ints (export_artifact._slot wrote lists)."""
    return tuple(_slot(x) for x in ix) if isinstance(ix, list) else int(ix)


def read_device(path, manifest: dict, parts: dict) -> tuple:
    """(source, inputs, outputs, consts, workspace_bytes, plan) of a verified device artifact, its program's interface
    line checked against the manifest (an ArtifactError for an inconsistent one)."""
    from .artifact.loader import program_part
    try:
        source = parts[program_part(manifest)].decode()
        if source.split("\n", 1)[0] != device_interface_line(manifest):
            raise ArtifactError(f"{path}: the manifest's signature, params layout or plan differs from the one the "
                                f"program was exported with; the manifest was edited: {_REEXPORT}")
        consts = unpack_params(manifest, parts[PARAMS])
        dim = lambda d: d if isinstance(d, str) else int(d)  # noqa: E731 (text: a size symbol's multiple)
        spec = lambda s: TensorSpec(str(s["name"]), tuple(dim(d) for d in s["shape"]), str(s["dtype"]))  # noqa: E731
        inputs, outputs = [spec(s) for s in manifest["inputs"]], [spec(s) for s in manifest["outputs"]]
        plan = [Launch(str(st["kernel"]), [(str(k), _slot(i)) for k, i in st["args"]], tuple(map(int, st["grid"])),
                       tuple(map(int, st["block"])), bool(st.get("prepack", False)),
                       tuple(map(int, st.get("rows", ()))), tuple(map(int, st.get("repeat", ()))))
                for st in manifest["plan"]]
        workspace = int(manifest["workspace_bytes"])
    except (KeyError, TypeError, ValueError, AttributeError, UnicodeDecodeError) as e:
        raise ArtifactError(f"{path}: {MANIFEST} is inconsistent ({type(e).__name__}: {e}); {_REEXPORT}") from None
    return source, inputs, outputs, consts, workspace, plan


def load_device(path, manifest: dict, parts: dict):
    """A device module from a verified device artifact (numpy and the device's library only)."""
    source, inputs, outputs, consts, workspace, plan = read_device(path, manifest, parts)
    kind = str(manifest["target"]).split(" ")[0]
    module = DeviceModule
    if kind == "opengl":            # numpy and moderngl only
        from .opengl.device import GLModule as module
    elif kind == "webgl":           # numpy and playwright (the browser) only
        from .browser.webgl import WebGLModule as module
    elif kind == "wasm":            # numpy and playwright (the browser) only
        from .browser.wasm import WasmModule as module
    elif kind == "webgpu":          # numpy and playwright (the browser) only
        from .browser.webgpu import WebGPUModule as module
    extra = {}
    if manifest.get("symbols"):     # format 2: a symbolic batch run by row launches (wasm: by its symbol header)
        if not getattr(module, "exports_symbols", False):
            raise ArtifactError(f"{path}: a {kind} artifact with size symbols; this runtime cannot run dynamic "
                                f"device artifacts: {_REEXPORT}")
        extra = dict(symbols=[dict(s) for s in manifest["symbols"]], row_bytes=int(manifest["row_bytes"]))
        if kind == "wasm":
            extra.update(sym_header=int(manifest["sym_header"]),
                         sym_bytes=[[int(c), [str(x) for x in names]] for c, names in manifest.get("sym_bytes", [])])
    return module(manifest["target"], source, inputs, outputs, consts, workspace, plan,
                  kernels=list(manifest.get("kernels", [])),
                  prepack_inputs=[int(i) for i in manifest.get("resident_inputs", [])], **extra)
