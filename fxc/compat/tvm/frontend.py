"""`relay.frontend`: MXNet (symbols and Gluon blocks), ONNX and TorchScript models as the facade's `(mod, params)`.

Each importer checks the model with fxc's own frontend (fxc/capture/<framework>/) and returns an IRModule whose
body is the model (`ir.Imported` over a `Source` of this file) and the model's params as NDArrays, named as TVM
names them (MXNet's argument and auxiliary names, ONNX's initializers, the TorchScript module's state_dict). The
conversion to fxc's graph runs at `relay.build`, with the params given there: the same graph `fxc.from_mxnet`,
`fxc.from_onnx` and `fxc.from_torch` build, so the results are theirs.
"""
from __future__ import annotations

import copy

import numpy as np

from ...errors import InputError, UnsupportedOpError
from ..numpy_aliases import import_mxnet
from .finder import module_getattr
from .ir import Source
from .ndarray import NDArray, note
from .unsupported import UnsupportedAPIError


def _params(values: dict) -> dict:
    """The params a frontend hands back: copies (a script that changes them changes what it passes to relay.build,
    never the model's own values)."""
    return {name: NDArray(np.array(v)) for name, v in values.items()}


def _shapes(shape, names: list, api: str) -> dict:
    if not isinstance(shape, dict):
        raise UnsupportedAPIError(f"{api} without a shape dict", f"pass shape={{name: shape}} for the inputs "
                                  f"{names}")
    return {str(k): tuple(int(d) for d in v) for k, v in shape.items()}


# -- MXNet ---------------------------------------------------------------------------------------------------------
class MXNetSource(Source):
    kind = "MXNet"

    def __init__(self, graph: dict, text: str, mx, where: str, names: list, shapes: dict, dtypes: dict,
                 arg: dict, aux: dict):
        self.graph, self.text, self.mx, self.where = graph, text, mx, where
        self.shapes, self.dtypes, self.aux_names = shapes, dtypes, set(aux)
        super().__init__([(n, shapes[n], dtypes[n]) for n in names], {**arg, **aux})

    def convert(self, params: dict):
        from ...capture.mxnet.convert import Model  # deferred: `import tvm` loads no compiler
        arg = {k: v for k, v in params.items() if k not in self.aux_names}
        aux = {k: v for k, v in params.items() if k in self.aux_names}
        return Model(self.graph, self.text, arg, aux, self.mx, self.where).to_graph(self.shapes, self.dtypes)


def from_mxnet(symbol, shape=None, dtype="float32", arg_params=None, aux_params=None):
    """`relay.frontend.from_mxnet(sym, shape_dict, arg_params=, aux_params=)` for a Symbol, or
    `from_mxnet(block, shape_dict)` for a Gluon HybridBlock (its current parameter values are the params)."""
    from ...capture.mxnet.convert import Model, load_params, parse_symbol_json  # deferred: as in MXNetSource
    mx = import_mxnet()
    if isinstance(symbol, mx.gluon.HybridBlock):
        if arg_params or aux_params:
            raise UnsupportedAPIError("from_mxnet(block, arg_params=...)", "a Gluon block's params are its own")
        names = list(_shapes(shape, ["data"], "from_mxnet(block)"))
        xs = [mx.nd.zeros(s, dtype=dtype if isinstance(dtype, str) else dtype[n]) for n, s in shape.items()]
        symbol(*xs)                                 # finishes deferred initialisation
        out = symbol(*[mx.sym.var(n) for n in names])
        symbol_ = mx.sym.Group(list(out)) if isinstance(out, (list, tuple)) else out
        params = {p.name: p.data() for p in symbol.collect_params().values()}
        arg, aux = load_params(params, mx)
        where = f"Gluon block {symbol.name}"
    elif isinstance(symbol, mx.sym.Symbol):
        symbol_, where = symbol, "the symbol"
        arg, aux = load_params((dict(arg_params or {}), dict(aux_params or {})), mx)
    elif isinstance(symbol, mx.gluon.Block):
        raise UnsupportedAPIError("from_mxnet of a plain Gluon Block", "a HybridBlock or a Symbol has a graph to "
                                  "compile; make the block a HybridBlock")
    else:
        raise UnsupportedAPIError(f"from_mxnet of a {type(symbol).__name__}", "pass an mx.sym.Symbol (with "
                                  "arg_params, aux_params) or a Gluon HybridBlock")
    text = symbol_.tojson()
    graph = parse_symbol_json(text, where)
    model = Model(graph, text, arg, aux, mx, where)       # sorts the params into args and aux states, checks them
    shapes = _shapes(shape, model.input_names, "from_mxnet")
    unknown = set(shapes) - set(model.input_names)
    if unknown:
        raise InputError(f"the shape dict names {sorted(unknown)}, which are not inputs of {where} (its inputs: "
                         f"{model.input_names}; its params come from arg_params and aux_params)")
    missing = [n for n in model.input_names if n not in shapes]
    if missing:
        raise InputError(f"no shape for input(s) {missing} of {where}: add them to the shape dict (a param "
                         f"missing from arg_params is an input too)")
    dtypes = {n: dtype if isinstance(dtype, str) else dtype.get(n, "float32") for n in model.input_names}
    model.infer(shapes, dtypes)                            # shapes checked against the params now, as TVM does
    source = MXNetSource(graph, text, mx, where, model.input_names, shapes, dtypes, model.arg, model.aux)
    return source.module(), _params(source.params)


# -- ONNX ----------------------------------------------------------------------------------------------------------
class OnnxSource(Source):
    kind = "ONNX"

    def __init__(self, proto, inputs: list, params: dict):
        self.proto = proto
        super().__init__(inputs, params)

    def convert(self, params: dict):
        from onnx import numpy_helper  # deferred: onnx is optional

        from ...capture.onnx import to_graph  # deferred: `import tvm` loads no compiler
        proto = self.proto
        if self.changed(params):
            proto = copy.deepcopy(proto)
            for t in proto.graph.initializer:
                t.CopyFrom(numpy_helper.from_array(params[t.name], t.name))
        return to_graph(proto, [shape for _, shape, _ in self.inputs])


def from_onnx(model, shape=None, dtype="float32", opset=None, freeze_params=False, convert_config=None):
    """`relay.frontend.from_onnx(model, shape_dict)`: the initializers are the params (none with
    freeze_params=True: they are constants of the module then, as they always are in fxc's build)."""
    from onnx import numpy_helper  # deferred: onnx is optional

    from ...capture.onnx import load_model, model_inputs  # deferred: `import tvm` loads no compiler
    from ...capture.onnx.ops_tensor import ONNX_DTYPES  # deferred: as above
    if opset is not None or convert_config:
        raise UnsupportedAPIError("from_onnx(opset=/convert_config=)", "fxc converts each op by the opset the "
                                  "model declares; leave them out")
    proto = load_model(model)
    given = dict(shape or {})
    inputs = []
    for name, elem, dims in model_inputs(proto):
        if name in given:
            dims = [int(d) for d in given.pop(name)]
        elif dims is None or not all(isinstance(d, int) for d in dims):
            raise InputError(f"input {name!r} of the ONNX model has open dims {dims}; give its shape in the shape "
                             f"dict")
        if elem not in ONNX_DTYPES:
            raise UnsupportedOpError(f"input {name!r} of the ONNX model has element type {elem}, which fxc does "
                                     f"not compute in")
        inputs.append((name, tuple(dims), ONNX_DTYPES[elem]))
    if given:
        raise InputError(f"the shape dict names {sorted(given)}, which are not inputs of the ONNX model (its "
                         f"inputs: {[n for n, _, _ in inputs]})")
    params = {t.name: numpy_helper.to_array(t) for t in proto.graph.initializer}
    source = OnnxSource(proto, inputs, params)
    return source.module(), ({} if freeze_params else _params(params))


# -- PyTorch -------------------------------------------------------------------------------------------------------
class TorchSource(Source):
    """A torch module (eager, or converted from TorchScript) and example inputs of the given shapes."""
    kind = "PyTorch"

    def __init__(self, module, inputs: list):
        self.module_ = module
        params = {k: v.detach().numpy() for k, v in module.state_dict().items()
                  if not k.endswith("num_batches_tracked")}
        super().__init__(inputs, params)

    def convert(self, params: dict):
        import torch  # deferred: torch loads only for a PyTorch model

        from ...capture.torch.aot import capture, check_supported  # deferred: `import tvm` loads no compiler
        from ...capture.torch.graph import to_graph  # deferred: as capture
        module = self.module_
        changed = self.changed(params)
        if changed:
            module = copy.deepcopy(module)
            module.load_state_dict({n: torch.from_numpy(np.ascontiguousarray(v)) for n, v in changed.items()},
                                   strict=False)
        args = tuple(torch.zeros(shape, dtype=getattr(torch, dtype)) for _, shape, dtype in self.inputs)
        gm, _ = capture(module, args)
        check_supported(gm, module)
        graph, _, struct, _ = to_graph(gm, args)
        if any(kind != "t" for kind, _ in struct):
            raise UnsupportedOpError("the facade compiles PyTorch models whose outputs are all tensors")
        for v, (name, _, _) in zip(graph.inputs, self.inputs):
            v.name = name
        return graph


def from_pytorch(script_module, input_infos, custom_convert_map=None, default_dtype="float32", **options):
    """`relay.frontend.from_pytorch(torch.jit.trace(model, x), [(name, shape), ...])`: a traced (or scripted)
    module, converted to an ExportedProgram by torch's TS2EPConverter; an eager nn.Module is taken as it is."""
    import torch  # deferred: torch loads only for a PyTorch model
    if custom_convert_map or options:
        given = ["custom_convert_map"] * bool(custom_convert_map) + list(options)
        raise UnsupportedAPIError(f"from_pytorch({', '.join(given)}=...)", "fxc converts core ATen ops itself; "
                                  "leave them out")
    inputs = []
    for info in input_infos:
        name, spec = info
        shape, dtype = (spec if len(spec) == 2 and isinstance(spec[1], str) else (spec, default_dtype))
        inputs.append((str(name), tuple(int(d) for d in shape), str(dtype)))
    if isinstance(script_module, torch.jit.ScriptModule):
        from torch._export.converter import TS2EPConverter  # deferred: as torch
        example = tuple(torch.zeros(s, dtype=getattr(torch, d)) for _, s, d in inputs)
        try:
            module = TS2EPConverter(script_module, example).convert().module()
        except Exception as e:      # noqa: BLE001  (torch's converter raises many kinds)
            raise UnsupportedOpError(f"torch cannot convert this TorchScript module to an ExportedProgram "
                                     f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}); pass the "
                                     f"eager nn.Module to from_pytorch instead") from e
        names = {k for k in script_module.state_dict() if not k.endswith("num_batches_tracked")}
        source = TorchSource(module, inputs)
        if set(source.params) != names:
            note("from_pytorch: the converted module's params are named "
                 f"{sorted(source.params)[:3]}... rather than as the TorchScript module's")
    elif isinstance(script_module, torch.nn.Module):
        source = TorchSource(script_module, inputs)
    else:
        raise UnsupportedAPIError(f"from_pytorch of a {type(script_module).__name__}", "pass "
                                  "torch.jit.trace(model, example_input) or the nn.Module")
    return source.module(), _params(source.params)


INSTEAD = {name: "fxc imports MXNet, ONNX and PyTorch models; convert the model to ONNX and use from_onnx"
           for name in ("from_tensorflow", "from_tflite", "from_keras", "from_coreml", "from_darknet", "from_caffe",
                        "from_caffe2", "from_paddle", "from_oneflow")}
__getattr__ = module_getattr("tvm.relay.frontend", INSTEAD, default="the facade's frontends are from_mxnet, "
                                "from_onnx and from_pytorch")
