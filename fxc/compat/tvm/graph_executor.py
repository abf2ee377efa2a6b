"""`tvm.contrib.graph_executor` (`graph_runtime` before TVM 0.8): run a built or loaded module by input name.

`GraphModule(lib["default"](dev))` and `graph_runtime.create(graph_json, lib, dev)` hold the inputs set by name,
index or `**params`, run the fxc module on them (`run`), and return its outputs (`get_output`). An input that was
never set is an InputError at `run` (TVM would read uninitialised memory). `time_evaluator("run", dev, number=,
repeat=)` and `benchmark` time `run` as TVM's do and return a `BenchmarkResult` (seconds). `GraphFactory` is the
lib of relay.build and tvm.runtime.load_module: a compiled module and its signature.
"""
from __future__ import annotations

import json
import math
import statistics
import time

import numpy as np

from ...errors import InputError, ShapeError
from ...runtime.tensors import np_dtype
from .finder import module_getattr
from .ndarray import Device, NDArray, as_numpy, load_param_dict
from .unsupported import UnsupportedAPIError, missing_member


class _Executor:
    """The state of one graph executor: the factory (its module), the device, the inputs set and the outputs."""

    def __init__(self, factory, device):
        self.factory, self.device = factory, device
        self.specs = list(factory.module.inputs)
        self.inputs: dict = {}
        self.outputs: list | None = None


def executor_on(factory, devices: tuple, api: str) -> _Executor:
    """An executor of the factory's module on the one device given (which must run the module's target)."""
    if len(devices) != 1 or not isinstance(devices[0], Device):
        raise UnsupportedAPIError(f"{api} on {len(devices)} devices", "pass one device, e.g. tvm.cpu(0)")
    device = devices[0]
    if not device.runs(factory.kind):
        raise UnsupportedAPIError(f"{api}: a {factory.kind} module on {device}", f"run it on the device of its "
                                  f"target: {_device_for(factory.kind)}")
    return _Executor(factory, device)


def _device_for(kind: str) -> str:
    return {"llvm": "tvm.cpu(0)", "wasm": "tvm.cpu(0)", "opencl": "tvm.cl(0) (or tvm.cuda(0))",
            "opengl": "tvm.opengl(0)", "webgl": "tvm.opengl(0)", "webgpu": "tvm.webgpu(0)"}.get(kind, "?")


class BenchmarkResult:
    """Times of `run` in seconds: `results` (one per repeat: the mean of its `number` runs), mean, median, min,
    max, std."""

    def __init__(self, results: list):
        self.results = list(results)
        self.mean = statistics.fmean(self.results)
        self.median = statistics.median(self.results)
        self.min, self.max = min(self.results), max(self.results)
        self.std = statistics.pstdev(self.results)

    def __str__(self):
        cols = ("mean", "median", "max", "min", "std")
        head = "".join(f"{c + ' (ms)':>14}" for c in cols)
        return "Execution time summary:\n" + head + "\n" + "".join(f"{1e3 * getattr(self, c):>14.4f}" for c in cols)

    __repr__ = __str__


class GraphModule:
    """`graph_executor.GraphModule(lib["default"](dev))`: set inputs, run, read outputs (see the module doc)."""

    def __init__(self, module):
        if isinstance(module, GraphModule):
            module = module._ex
        if not isinstance(module, _Executor):
            raise UnsupportedAPIError(f"GraphModule({type(module).__name__})", 'pass lib["default"](dev) of a '
                                      "relay.build or tvm.runtime.load_module result")
        self._ex = module

    @property
    def module(self) -> "GraphModule":
        """`m.module.time_evaluator(...)`: the executor itself."""
        return self

    # -- inputs ------------------------------------------------------------------------------------------------
    def _index(self, key) -> int:
        specs = self._ex.specs
        if isinstance(key, (int, np.integer)):
            if not 0 <= int(key) < len(specs):
                raise InputError(f"input index {key}: the module has {len(specs)} input(s) "
                                 f"{[s.name for s in specs]}")
            return int(key)
        for i, s in enumerate(specs):
            if s.name == key:
                return i
        raise InputError(f"the module has no input {key!r}; its inputs are {[s.name for s in specs]}"
                         + ("" if self._ex.factory.baked is None else " (its params are compiled in)"))

    def set_input(self, key=None, value=None, **params):
        """An input by name or index; `**params`: inputs by name, and params compiled in, which must equal the
        values they were built with (fxc compiled them as constants; build again with params= to change one)."""
        if key is not None:
            self._set(self._index(key), value)
        baked = self._ex.factory.baked
        for name, v in params.items():
            if any(s.name == name for s in self._ex.specs):
                self._set(self._index(name), v)
            elif baked is not None and name in baked:
                if not np.array_equal(as_numpy(v), baked[name]):
                    raise InputError(f"param {name!r} differs from the value the module was built with; fxc compiles "
                                     f"params into the module: pass the new values to relay.build(..., params=)")
            else:
                self._index(name)           # names the inputs there are

    def _set(self, i: int, value) -> None:
        spec = self._ex.specs[i]
        array = as_numpy(value)
        if tuple(array.shape) != tuple(spec.shape):
            raise ShapeError(f"input {spec.name!r}: shape {list(array.shape)} where the module was built for "
                             f"{list(spec.shape)}; build again for the new shape")
        self._ex.inputs[spec.name] = np.array(array, dtype=np_dtype(spec.dtype))     # a copy, as TVM copies in

    def get_input(self, index, out=None) -> NDArray:
        spec = self._ex.specs[self._index(index)]
        if spec.name not in self._ex.inputs:
            raise InputError(f"input {spec.name!r} is not set yet; set_input it first")
        return _out(self._ex.inputs[spec.name], out, self._ex.device)

    def get_input_index(self, name: str) -> int:
        return self._index(name)

    def get_num_inputs(self) -> int:
        return len(self._ex.specs)

    def load_params(self, params_bytes) -> None:
        """Params saved with `relay.save_param_dict` (the facade's format): set as `set_input(**params)`."""
        self.set_input(**load_param_dict(params_bytes))

    # -- running -----------------------------------------------------------------------------------------------
    def run(self, **input_dict) -> None:
        if input_dict:
            self.set_input(**input_dict)
        ex = self._ex
        missing = [s.name for s in ex.specs if s.name not in ex.inputs]
        if missing:
            raise InputError(f"input(s) {missing} are not set; set_input them before run()")
        outs = ex.factory.module(*[ex.inputs[s.name] for s in ex.specs])
        ex.outputs = outs if isinstance(outs, list) else [outs]

    def get_output(self, index: int, out=None) -> NDArray:
        outputs = self._ex.outputs
        if outputs is None:
            raise InputError("no outputs yet: call run() first")
        if not 0 <= int(index) < len(outputs):
            raise InputError(f"output index {index}: the module has {len(outputs)} output(s)")
        return _out(outputs[int(index)], out, self._ex.device)

    def get_num_outputs(self) -> int:
        return len(self._ex.factory.module.outputs)

    def __getitem__(self, name: str):
        """`m["run"]`, `m["set_input"]`, ...: the executor's functions by name, as a TVM module's."""
        if name not in ("set_input", "run", "get_output", "get_num_outputs", "get_num_inputs", "get_input",
                        "load_params", "get_input_index"):
            raise UnsupportedAPIError(f'graph executor["{name}"]', "it has set_input, run, get_output, get_input, "
                                      "get_num_outputs, get_num_inputs, get_input_index and load_params")
        return getattr(self, name)

    # -- timing ------------------------------------------------------------------------------------------------
    def time_evaluator(self, func_name: str, dev, number: int = 10, repeat: int = 1, min_repeat_ms: int = 0,
                       limit_zero_time_iterations: int = 100, cooldown_interval_ms: int = 0,
                       repeats_to_cooldown: int = 1, f_preproc: str = ""):
        """A function timing `func_name` ("run"): `repeat` times the mean of `number` calls (raised until one
        repeat lasts `min_repeat_ms`); returns a BenchmarkResult."""
        if func_name != "run":
            raise UnsupportedAPIError(f'time_evaluator("{func_name}")', 'the facade times "run"')
        if f_preproc:
            raise UnsupportedAPIError(f"time_evaluator(f_preproc={f_preproc!r})", "leave f_preproc out")

        def evaluate(*args) -> BenchmarkResult:
            if args:
                raise UnsupportedAPIError("time_evaluator(...)(args)", "set the inputs with set_input first")
            self.run()                      # warm-up (TVM's evaluator runs once first too)
            n, results = max(1, int(number)), []
            for r in range(max(1, int(repeat))):
                while True:
                    t0 = time.perf_counter()
                    for _ in range(n):
                        self.run()
                    elapsed = time.perf_counter() - t0
                    if 1e3 * elapsed >= min_repeat_ms or r > 0:
                        break
                    n = max(n + 1, math.ceil(n * min_repeat_ms / max(1e3 * elapsed, 1e-3)))
                results.append(elapsed / n)
                if cooldown_interval_ms and (r + 1) % max(1, repeats_to_cooldown) == 0:
                    time.sleep(cooldown_interval_ms / 1e3)
            return BenchmarkResult(results)
        return evaluate

    def benchmark(self, device, func_name: str = "run", repeat: int = 5, number: int = 5, min_repeat_ms=None,
                  end_to_end: bool = False, **kwargs) -> BenchmarkResult:
        """`m.benchmark(dev, number=, repeat=)`: time_evaluator's result; `**kwargs` are inputs set first."""
        if end_to_end:
            raise UnsupportedAPIError("benchmark(end_to_end=True)", "the facade times run(); inputs stay in host "
                                      "memory, so run() is end to end already")
        if kwargs:
            self.set_input(**kwargs)
        return self.time_evaluator(func_name, device, number=number, repeat=repeat,
                                   min_repeat_ms=min_repeat_ms or 0)()

    __getattr__ = missing_member("graph_executor.GraphModule", default="the facade's GraphModule has set_input, "
                                 "run, get_output, get_input, get_num_outputs, get_num_inputs, load_params, "
                                 "time_evaluator and benchmark")


def _out(array: np.ndarray, out, device) -> NDArray:
    if out is not None:
        return out.copyfrom(array)
    return NDArray(array.copy(), device)


class GraphFactory:
    """What `relay.build` returns and `tvm.runtime.load_module` loads: a compiled module and its signature.

    `baked`: the param values compiled in, by name (None for a loaded artifact, whose params have no names)."""

    def __init__(self, module, mod_name: str = "default", baked: dict | None = None):
        self.module, self.mod_name, self.baked = module, mod_name, baked

    @property
    def kind(self) -> str:
        return str(getattr(self.module, "target", "llvm")).split()[0]

    def get_graph_json(self) -> str:
        """The module's signature as JSON (fxc's graph is inside the module; this names its inputs and outputs)."""
        sig = lambda specs: [{"name": s.name, "shape": list(s.shape), "dtype": s.dtype} for s in specs]  # noqa: E731
        return json.dumps({"fxc_graph": 1, "target": self.kind, "inputs": sig(self.module.inputs),
                           "outputs": sig(self.module.outputs)}, sort_keys=True)

    def get_lib(self) -> "GraphFactory":
        return self

    def get_params(self) -> dict:
        """Empty: fxc compiles the params into the module."""
        return {}

    def __iter__(self):
        """`graph, lib, params = relay.build(...)`, relay.build's result before TVM 0.7."""
        return iter((self.get_graph_json(), self, {}))

    def __getitem__(self, name: str):
        if name == self.mod_name:
            return lambda *devices: GraphModule(executor_on(self, devices, f'lib["{name}"]'))
        functions = {"get_graph_json": self.get_graph_json, "get_lib": self.get_lib, "get_params": self.get_params}
        if name not in functions:
            raise UnsupportedAPIError(f'lib["{name}"]', f'the facade\'s lib has "{self.mod_name}" (its graph '
                                      f'executor), "get_graph_json", "get_lib" and "get_params"')
        return functions[name]

    def export_library(self, file_name, fcompile=None, addons=None, workspace_dir=None, **options):
        """Write fxc's deploy artifact at `file_name` (whatever its suffix: one file with the kernels, the plan,
        the params and a plain C entry point); `tvm.runtime.load_module` (`fxc.load`) reads it back."""
        if fcompile is not None or addons or options:
            raise UnsupportedAPIError("export_library(fcompile=/addons=/...)", "fxc links the artifact's library "
                                      "itself (cross compilers for ARM targets too); pass the path only")
        from ...deploy.export import export  # deferred: the artifact writer loads only when exporting
        export(self.module, file_name)

    def __repr__(self):
        return f"GraphFactory({self.kind}: {', '.join(s.describe() for s in self.module.inputs)})"

    __getattr__ = missing_member("tvm.runtime.Module (the facade's lib)", default="the facade's lib has "
                                 "['default'], export_library, get_graph_json, get_lib and get_params")


def create(graph_json_str: str, libmod, device) -> GraphModule:
    """`graph_runtime.create(graph, lib, ctx)`: `lib` is what relay.build returned (or its tuple's lib, or
    tvm.runtime.load_module's); `graph` its graph JSON."""
    if not isinstance(libmod, GraphFactory):
        raise UnsupportedAPIError(f"graph_runtime.create with a lib of type {type(libmod).__name__}", "pass the lib "
                                  "that relay.build (or tvm.runtime.load_module) returned")
    if graph_json_str != libmod.get_graph_json():
        raise InputError("graph_runtime.create: this graph JSON is not the one of this lib (a graph and a lib of "
                         "two builds?); pass the graph that relay.build returned with the lib")
    devices = tuple(device) if isinstance(device, (list, tuple)) else (device,)
    return GraphModule(executor_on(libmod, devices, "graph_runtime.create"))


__getattr__ = module_getattr("tvm.contrib.graph_executor", default="the facade's graph executor module has "
                                "create and GraphModule")
