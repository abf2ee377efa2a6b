"""MXNet capture: `fxc.from_mxnet(sym, params)` turns an MXNet symbol and its params into a compiled callable.

Takes an `mx.sym.Symbol`, its JSON text or file, or a checkpoint prefix (`prefix-symbol.json` and
`prefix-%04d.params`), and params as one dict (`arg:`/`aux:` keys or plain names) or `(arg_params, aux_params)`,
NDArray or numpy. MXNet's own shape and type inference checks the params against the symbol and gives every
node's output shape; each op node becomes registry ops through `fxc.capture.mxnet.ops.CONVERTERS` (params are
constants of the graph: they are baked in, as a checkpoint's are), and the graph is built for the target.
Produces an `MXNetModel`: NDArray in, NDArray out (numpy in, numpy out), which `fxc.export` writes. Nothing here
pickles: params files are read with `mx.nd.load`, MXNet's own binary format.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from ...backends import fill
from ...compat.numpy_aliases import import_mxnet  # mxnet through the numpy-alias shim
from ...driver.build import build
from ...driver.options import check_options
from ...errors import FxcError, InputError, ModelFileError, ShapeError, UnsupportedOpError
from ...relay_like.builder import Builder
from ...runtime.tensors import TensorSpec
from .ops import CONVERTERS, LABEL_OPS, Node, attribute_problem, output_count, parse_dtype, unsupported


def _mx_error(mx) -> tuple:
    return (mx.base.MXNetError, ValueError, TypeError, UnicodeDecodeError)


def _first_line(e: BaseException) -> str:
    """The line of an MXNet error that says what failed (its message starts with a C++ traceback)."""
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    said = [ln for ln in lines if ln.startswith(("MXNetError", "Check failed", "Error in operator"))]
    return (said[-1] if said else lines[-1] if lines else type(e).__name__).removeprefix("MXNetError: ")


# -- reading the model ----------------------------------------------------------------------------------------------
def parse_symbol_json(text: str, where: str = "the symbol JSON") -> dict:
    """The symbol's JSON as a dict, checked: nodes with op, name, attribute tables of strings and inputs that refer
    to earlier nodes; heads that name nodes. A key given twice keeps its last value (as MXNet's reader does)."""
    try:
        graph = json.loads(text, object_pairs_hook=_last_wins)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ModelFileError(f"{where} is not valid JSON ({e}); the file is truncated or corrupt: save it again "
                             f"with sym.save(path) or export it with block.export(prefix)") from None
    nodes = graph.get("nodes") if isinstance(graph, dict) else None
    if not isinstance(nodes, list) or not isinstance(graph.get("heads"), list) or not nodes:
        raise ModelFileError(f"{where} is JSON but not an MXNet symbol (it needs 'nodes' and 'heads' lists)")
    for i, nd in enumerate(nodes):
        if not isinstance(nd, dict) or not isinstance(nd.get("op"), str) or not isinstance(nd.get("name"), str):
            raise ModelFileError(f"{where}: node #{i} lacks an 'op' or a 'name'; the symbol is corrupt")
        for key in ATTR_KEYS:
            table = nd.get(key, {})
            if not (isinstance(table, dict) and all(isinstance(v, str) for v in table.values())):
                raise ModelFileError(f"{where}: node {nd['name']!r} ({nd['op']}) has {key!r} {table!r}, which is not "
                                     f"a table of strings; the symbol is corrupt")
        refs = nd.get("inputs", [])
        if not isinstance(refs, list):
            raise ModelFileError(f"{where}: node {nd['name']!r} ({nd['op']}) has inputs {refs!r}, not a list")
        for ref in refs:
            if not (_is_ref(ref) and ref[0] < i):
                raise ModelFileError(f"{where}: node {nd['name']!r} ({nd['op']}) reads input {ref!r}, which is not "
                                     f"an output of an earlier node ([node, output] or [node, output, version]); "
                                     f"the symbol is corrupt")
    for ref in graph["heads"]:
        if not (_is_ref(ref) and ref[0] < len(nodes)):
            raise ModelFileError(f"{where}: output {ref!r} names no node; the symbol is corrupt")
    return graph


ATTR_KEYS = ("attrs", "attr", "param")     # MXNet >= 1.0, < 1.0 and < 0.9 name a node's attribute table so


def _last_wins(pairs: list) -> dict:
    """A JSON object as dmlc's reader takes it: a key given twice keeps its last value, at its last place."""
    out: dict = {}
    for k, v in pairs:
        out.pop(k, None)
        out[k] = v
    return out


def _is_ref(ref) -> bool:
    """[node, output] or [node, output, version], non-negative ints (MXNet reads them unchecked as unsigned)."""
    return (isinstance(ref, list) and len(ref) in (2, 3)
            and all(type(v) is int and 0 <= v < 2 ** 31 for v in ref))


def node_attrs(nd: dict) -> dict:
    """A node's attributes as MXNet 1.9 reads them (nnvm's JSONNode::Load): `attrs` (MXNet >= 1.0) and the legacy
    `attr` (MXNet < 1.0) each replace one table, so the one later in the node's JSON wins whole; `param` (MXNet <
    0.9) then adds only the keys neither gave."""
    attrs: dict = {}
    for key, table in nd.items():
        if key in ("attrs", "attr"):
            attrs = dict(table)
    for k, v in (nd.get("param") or {}).items():
        attrs.setdefault(k, v)
    return attrs


def check_outputs_read(graph: dict, mx, where: str) -> None:
    """Every input reference and head reads an output its node has. MXNet indexes a node's outputs by the number
    in the JSON without checking it (past the end it crashes the process), so this runs before MXNet loads the
    graph: a variable has one output; an op node as many as MXNet lists for that node alone."""
    nodes, counts = graph["nodes"], {}

    def outputs(i: int) -> int:
        nd = nodes[i]
        if nd["op"] == "null":
            return 1
        n_in = len(nd.get("inputs", []))
        key = (nd["op"], json.dumps(node_attrs(nd), sort_keys=True), n_in)
        if key not in counts:
            alone = {"nodes": [{"op": "null", "name": f"in{k}", "inputs": []} for k in range(n_in)]
                     + [{"op": nd["op"], "name": nd["name"], "attrs": node_attrs(nd),
                         "inputs": [[k, 0, 0] for k in range(n_in)]}],
                     "arg_nodes": list(range(n_in)), "heads": [[n_in, 0, 0]],
                     "attrs": {"mxnet_version": ["int", 10901]}}
            try:
                sym = mx.sym.load_json(json.dumps(alone))
            except _mx_error(mx) as e:
                raise ModelFileError(f"MXNet cannot load node {nd['name']!r} ({nd['op']}) of {where} "
                                     f"({_first_line(e)}); the symbol is corrupt") from None
            counts[key] = len(sym.get_internals().list_outputs()) - n_in
        return counts[key]

    reads = [(f"node {nd['name']!r} ({nd['op']}) reads", ref) for nd in nodes for ref in nd.get("inputs", [])]
    for what, ref in reads + [("the symbol's outputs (heads) read", ref) for ref in graph["heads"]]:
        have = outputs(ref[0])
        if ref[1] >= have:
            src = nodes[ref[0]]
            raise ModelFileError(f"{where}: {what} output {ref[1]} of node {src['name']!r} ({src['op']}), which "
                                 f"has {have} output(s); the symbol is corrupt")


def is_checkpoint(ref) -> bool:
    """Whether `ref` is an MXNet checkpoint prefix (`ref-symbol.json` exists); needs no mxnet."""
    return isinstance(ref, (str, os.PathLike)) and Path(f"{ref}-symbol.json").is_file()


def load_symbol(sym, epoch=None) -> tuple:
    """(symbol JSON text, params file path or None, where) from a Symbol, JSON text, a JSON file or a checkpoint
    prefix (with `epoch`)."""
    if hasattr(sym, "tojson"):
        return sym.tojson(), None, "the symbol"
    if not isinstance(sym, (str, os.PathLike)):
        raise InputError(f"fxc.from_mxnet takes an mx.sym.Symbol, its JSON text, a .json file or a checkpoint "
                         f"prefix, got {type(sym).__name__}")
    text = str(sym)
    if text.lstrip().startswith("{"):
        return text, None, "the symbol JSON"
    path = Path(text)
    if path.is_file():
        return _read_text(path), None, str(path)
    prefix = Path(f"{text}-symbol.json")
    if prefix.is_file():
        params = Path(f"{text}-{int(epoch or 0):04d}.params")
        if not params.is_file():
            have = sorted(p.name for p in prefix.parent.glob(f"{Path(text).name}-*.params"))
            raise ModelFileError(f"checkpoint {text!r} has no params file {params.name} (epoch {int(epoch or 0)}); "
                                 f"found: {', '.join(have) or 'none'}; pass epoch= of one of them")
        return _read_text(prefix), params, str(prefix)
    raise ModelFileError(f"{text!r} is neither a symbol JSON file nor a checkpoint prefix ({prefix.name} does not "
                         f"exist); pass the symbol, its file, or the prefix given to mx.model.save_checkpoint")


def _read_text(path: Path) -> str:
    try:
        return path.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        raise ModelFileError(f"{path} is not a text (UTF-8) symbol JSON file; the file is corrupt") from None
    except OSError as e:
        raise ModelFileError(f"cannot read {path}: {e}") from None


def _as_array(name: str, v) -> np.ndarray:
    if hasattr(v, "asnumpy"):
        return v.asnumpy()
    if isinstance(v, np.ndarray):
        return v
    raise InputError(f"param {name!r} is a {type(v).__name__}; give params as mx.nd.NDArray or numpy arrays")


def load_params(params, mx=None) -> tuple:
    """(arg dict, aux dict) of numpy arrays from a params file, one dict (`arg:`/`aux:` keys or plain names, which
    are sorted out later against the symbol) or an `(arg_params, aux_params)` pair."""
    if params is None:
        return {}, {}
    if isinstance(params, (str, os.PathLike)):
        mx = mx or import_mxnet()
        path = Path(params)
        if not path.is_file():
            raise ModelFileError(f"params file {str(path)!r} does not exist")
        try:
            params = mx.nd.load(str(path))
        except _mx_error(mx) as e:
            raise ModelFileError(f"params file {str(path)!r} is truncated or corrupt ({_first_line(e)}); save it "
                                 f"again (mx.nd.save, block.export or mx.model.save_checkpoint)") from None
        if not isinstance(params, dict):
            raise ModelFileError(f"params file {str(path)!r} holds a list of {len(params)} unnamed arrays; "
                                 f"fxc needs named ones (arg:name / aux:name), as mx.model.save_checkpoint writes")
    if isinstance(params, (tuple, list)) and len(params) == 2 and all(isinstance(p, dict) for p in params):
        return ({k: _as_array(k, v) for k, v in params[0].items()},
                {k: _as_array(k, v) for k, v in params[1].items()})
    if not isinstance(params, dict):
        raise InputError(f"params must be a dict, an (arg_params, aux_params) pair or a .params file, "
                         f"got {type(params).__name__}")
    arg, aux, plain = {}, {}, {}
    for k, v in params.items():
        kind, _, name = str(k).partition(":")
        table = {"arg": arg, "aux": aux}.get(kind) if name else None
        (table if table is not None else plain)[name if table is not None else str(k)] = _as_array(str(k), v)
    arg.update(plain)           # plain names: sorted into args/aux by the symbol (see Model._bind)
    return arg, aux


# -- the model ------------------------------------------------------------------------------------------------------
class Model:
    """A symbol with its params, checked against each other: what `from_mxnet` compiles for given input shapes."""

    def __init__(self, graph: dict, text: str, arg: dict, aux: dict, mx, where: str, input_names=None):
        self.graph, self.mx, self.where, self._given_inputs = graph, mx, where, input_names or ()
        bad = unsupported(graph["nodes"])
        if bad:
            raise UnsupportedOpError(f"fxc has no converter for {len(bad)} node(s) of {where}:\n  " + "\n  ".join(bad)
                                     + "\nReplace these ops in the model, or run it through "
                                       "sym.optimize_for('fxc', ...) after `import fxc.mxnet`, which leaves them "
                                       "to MXNet")
        check_outputs_read(graph, mx, where)
        try:
            self.sym = mx.sym.load_json(text)
        except _mx_error(mx) as e:
            raise ModelFileError(f"MXNet cannot load {where} ({_first_line(e)}); the symbol is corrupt") from None
        self.arg_names, self.aux_names = self.sym.list_arguments(), self.sym.list_auxiliary_states()
        self.arg, self.aux = self._bind(arg, aux)
        labels = self._labels()
        self.input_names = input_names or [n for n in self.arg_names if n not in self.arg and n not in labels]

    def _bind(self, arg: dict, aux: dict) -> tuple:
        """Params sorted into args and aux states by the symbol; extra and missing aux states named."""
        args, auxs = {}, {}
        for name, v in {**arg, **aux}.items():
            if name in self.aux_names:
                auxs[name] = v
            elif name in self.arg_names:
                args[name] = v
            else:
                known = ", ".join(self.arg_names + self.aux_names)
                raise InputError(f"param {name!r} is not an argument or auxiliary state of {self.where} "
                                 f"(it has: {known}); remove it, or pass the symbol it belongs to")
        missing = [n for n in self.aux_names if n not in auxs and n not in self._given_inputs]
        if missing:
            raise InputError(f"params lack the auxiliary state(s) {', '.join(map(repr, missing))} of {self.where} "
                             f"(BatchNorm's moving mean and var); pass them as aux:name")
        return args, auxs

    def _labels(self) -> set:
        """Arguments read only as the label of a loss op (SoftmaxOutput's label): not needed for inference."""
        nodes, reads = self.graph["nodes"], {}
        for nd in nodes:
            for slot, ref in enumerate(nd.get("inputs", [])):
                reads.setdefault(ref[0], []).append((nd["op"], slot))
        return {nodes[i]["name"] for i, r in reads.items()
                if nodes[i]["op"] == "null" and all(LABEL_OPS.get(op) == slot for op, slot in r)}

    def infer(self, shapes: dict, dtypes: dict) -> tuple:
        """(arg shapes, arg dtypes, {internal output name: shape}, output dtypes) by MXNet's own inference; the
        params' shapes checked against what the model needs for these input shapes."""
        mx, where = self.mx, self.where
        desc = ", ".join(f"{k} {tuple(v)}" for k, v in shapes.items())
        self._check_dims(shapes)
        try:
            arg_shapes, _, aux_shapes = self.sym.infer_shape(**shapes)
            arg_types, out_types, aux_types = self.sym.infer_type(**{k: np.dtype(v) for k, v in dtypes.items()})
            internals = self.sym.get_internals()
            inner = dict(zip(internals.list_outputs(), internals.infer_shape(**shapes)[1]))
        except _mx_error(mx) as e:
            raise ShapeError(f"the input shape(s) {desc} contradict {where}: {_first_line(e)}; give the shapes "
                             f"the model was built for") from None
        if arg_shapes is None:
            raise ShapeError(f"MXNet cannot infer every shape of {where} from {desc}; pass shapes= for every input "
                             f"({', '.join(self.input_names)})")
        need = dict(zip(self.arg_names + self.aux_names, list(arg_shapes) + list(aux_shapes)))
        types = dict(zip(self.arg_names + self.aux_names, list(arg_types) + list(aux_types)))
        for name, v in {**self.arg, **self.aux}.items():
            if tuple(v.shape) != tuple(need[name]):
                raise ShapeError(f"param {name!r} has shape {tuple(v.shape)}, but {where} with input(s) {desc} "
                                 f"needs {tuple(need[name])}: check the input shape, or that the params belong "
                                 f"to this symbol")
        missing = [n for n in self.arg_names if n not in self.arg and n not in shapes and n in self.input_names]
        if missing:
            raise InputError(f"no shape for input(s) {', '.join(map(repr, missing))} of {where}; if they are "
                             f"params, they are missing from params")
        return need, types, inner, [np.dtype(t).name for t in out_types or ()]

    def _check_dims(self, shapes: dict) -> None:
        """Input dims MXNet's shape inference can take: an MXNet built without large-tensor support (the pip
        wheel) holds a dim in 32 bits and raises a bare Exception past that."""
        large = self.mx.runtime.Features().is_enabled("INT64_TENSOR_SIZE")
        limit = 2 ** 63 - 1 if large else 2 ** 31 - 1
        for name, shape in shapes.items():
            if any(d < 0 or d > limit for d in shape):
                raise ShapeError(f"input {name!r} of {self.where} has shape {tuple(shape)}: "
                                 f"{'a dim' if large else 'MXNet (built without USE_INT64_TENSOR_SIZE) holds a dim'} "
                                 f"in {'64' if large else '32'} bits, so each must be between 0 and {limit}; give "
                                 f"the shape the model is meant for")

    def check_missing_params(self, shapes: dict) -> None:
        """Inputs without a shape whose shape MXNet infers from the given ones are weights missing from params."""
        self._check_dims(shapes)
        try:
            arg_shapes = self.sym.infer_shape_partial(**shapes)[0]
        except _mx_error(self.mx):
            return              # infer() at the build says what contradicts
        inferred = dict(zip(self.arg_names, arg_shapes or ()))
        missing = [n for n in self.input_names if n not in shapes and inferred.get(n) and 0 not in inferred[n]]
        if missing:
            raise InputError(f"{', '.join(map(repr, missing))} of {self.where} have no value and no shape, and "
                             f"their shape follows from the inputs': they look like params missing from params; "
                             f"pass them in params (or their shape in shapes= if they are inputs)")

    def to_graph(self, shapes: dict, dtypes: dict):
        """The fxc graph of the symbol for these input shapes and dtypes; params are constants."""
        _, types, inner, out_types = self.infer(shapes, dtypes)
        b = Builder()
        env: dict = {}
        for i, nd in enumerate(self.graph["nodes"]):
            name, op = nd["name"], nd["op"]
            if op == "null":
                if name in self.input_names:
                    env[(i, 0)] = b.graph.input(shapes[name], dtypes[name], name)
                elif name in self.arg or name in self.aux:
                    a = (self.arg.get(name) if name in self.arg else self.aux[name])
                    env[(i, 0)] = b.const(np.ascontiguousarray(a, dtype=np.dtype(types[name])))
                continue            # a label: read only by a loss op's label slot, which converters ignore
            ins = [env.get((ref[0], ref[1] if len(ref) > 1 else 0)) for ref in nd.get("inputs", [])]
            node = Node(name, op, node_attrs(nd), _node_shapes(inner, name))
            outs = _convert(b, node, ins if LABEL_OPS.get(op) is None else ins[:LABEL_OPS[op]])
            outs = outs if isinstance(outs, tuple) else (outs,)
            _check_shapes(node, outs)
            for k, v in enumerate(outs[:output_count(op, node.attrs) or len(outs)]):
                env[(i, k)] = v
        heads = []
        for ref in self.graph["heads"]:
            v = env.get((ref[0], ref[1] if len(ref) > 1 else 0))
            if v is None:
                raise UnsupportedOpError(f"output {self.graph['nodes'][ref[0]]['name']!r} of {self.where} is an "
                                         f"input or a label; fxc compiles outputs computed by ops")
            heads.append(v if v.node is not None else b.call("copy", [v]))     # an output that is a param
        # each output in the dtype MXNet infers for it (MXNet states its types; fxc's promotion rules may differ)
        b.graph.outputs = [h if k >= len(out_types) or h.dtype == out_types[k] else
                           b.call("cast", [h], dtype=out_types[k]) for k, h in enumerate(heads)]
        return b.graph


def _node_shapes(inner: dict, name: str):
    if f"{name}_output" in inner:
        return [tuple(inner[f"{name}_output"])]
    outs = [tuple(inner[k]) for k in (f"{name}_output{i}" for i in range(16)) if k in inner]
    return outs or None


def _convert(b, node: Node, ins: list):
    problem = attribute_problem(node)
    if problem:
        raise node.unsupported(problem)
    try:
        return CONVERTERS[node.op](b, ins, node)
    except (ShapeError, UnsupportedOpError) as e:
        if str(e).startswith("MXNet op"):
            raise
        raise type(e)(f"MXNet op {node.op} (node {node.name!r}): {e}") from None


def _check_shapes(node: Node, outs) -> None:
    """Each output's shape is MXNet's: a converter that disagrees is an error here, never a wrong result later."""
    for k, (v, want) in enumerate(zip(outs, node.shapes or ())):
        if tuple(v.shape) != tuple(want):
            raise UnsupportedOpError(f"MXNet op {node.op} (node {node.name!r}) with attributes {node.attrs}: fxc's "
                                     f"conversion gives output {k} the shape {tuple(v.shape)} where MXNet gives "
                                     f"{tuple(want)}; these attributes are not supported")


class MXNetModel:
    """A compiled MXNet model: NDArrays in -> NDArrays out, numpy in -> numpy out.

    Attributes
    ----------
    module : fxc.runtime.cpu.module.Module
        The runtime module, what `fxc.export` writes (built from `shapes=`, or at the first call).
    input_names : list of str
        The symbol's inputs in call order (its arguments that are neither params nor labels).
    """

    def __init__(self, model: Model, shapes: dict, dtypes: dict, target, options: dict):
        self._model, self._shapes, self._dtypes = model, shapes, dtypes
        self.target, self.options, self._module = target, options, None
        self.input_names = list(model.input_names)
        if all(n in shapes for n in self.input_names):
            self._build()
        elif shapes and model.arg:
            model.check_missing_params(shapes)

    def _build(self, shapes: dict | None = None, dtypes: dict | None = None) -> None:
        """Compile for these input shapes and dtypes (kept only once the build succeeds)."""
        shapes, dtypes = shapes or self._shapes, dtypes or self._dtypes
        graph = self._model.to_graph(shapes, dtypes)
        module = build(graph, target=self.target, **self.options)
        module.outputs = [TensorSpec(f"output{i}", s.shape, s.dtype) for i, s in enumerate(module.outputs)]
        self._module, self._shapes, self._dtypes = module, shapes, dtypes

    @property
    def module(self):
        if self._module is None:
            raise FxcError(f"the MXNet model is not built yet: its input shapes come from the first call; call it "
                           f"once, or pass shapes={{{', '.join(repr(n) + ': (...)' for n in self.input_names)}}} to "
                           f"fxc.from_mxnet")
        return self._module

    @property
    def inputs(self) -> list:
        return self.module.inputs

    @property
    def outputs(self) -> list:
        return self.module.outputs

    def __call__(self, *args, **kwargs):
        args = self._arrange(args, kwargs)
        mx = self._model.mx
        as_nd = any(isinstance(a, mx.nd.NDArray) for a in args)
        arrays = []
        for name, a in zip(self.input_names, args):
            if isinstance(a, mx.nd.NDArray):
                a = a.asnumpy()
            elif not isinstance(a, np.ndarray):
                raise InputError(f"input {name!r} is a {type(a).__name__}; pass an mx.nd.NDArray or a numpy array")
            arrays.append(a)
        if self._module is None:
            self._build({n: self._shapes.get(n, tuple(a.shape)) for n, a in zip(self.input_names, arrays)},
                        {n: self._dtypes.get(n, str(a.dtype)) for n, a in zip(self.input_names, arrays)})
        outs = self._module(*arrays)
        outs = outs if isinstance(outs, list) else [outs]
        if as_nd:
            outs = [mx.nd.array(o, dtype=o.dtype) for o in outs]
        return outs[0] if len(outs) == 1 else outs

    def _arrange(self, args: tuple, kwargs: dict) -> list:
        if kwargs:
            unknown = set(kwargs) - set(self.input_names)
            if unknown or args:
                raise InputError(f"pass the inputs {self.input_names} either all by position or all by name "
                                 f"(unknown: {sorted(unknown)})")
            args = tuple(kwargs.get(n) for n in self.input_names)
        if len(args) != len(self.input_names) or any(a is None for a in args):
            raise InputError(f"the model takes {len(self.input_names)} input(s) {self.input_names}, got "
                             f"{len(args)}; a param missing from params becomes an input too")
        return list(args)

    def __repr__(self):
        if self._module is None:
            return f"MXNetModel({', '.join(self.input_names)}) [not built: shapes come from the first call]"
        m = self._module
        return (f"MXNetModel({', '.join(s.describe() for s in m.inputs)}) -> "
                f"{', '.join(s.describe() for s in m.outputs)} [{m.target}]")


def _input_dicts(shapes, dtype, names: list) -> tuple:
    if shapes is None:
        shapes = {}
    elif not isinstance(shapes, dict):
        if len(names) != 1:
            raise InputError(f"the model has inputs {names}: pass shapes as a dict of name -> shape")
        shapes = {names[0]: shapes}
    unknown = set(shapes) - set(names)
    if unknown:
        raise InputError(f"shapes name {sorted(unknown)}, which are not inputs of the model (its inputs: {names})")
    try:
        shapes = {k: tuple(int(s) for s in v) for k, v in shapes.items()}
    except (TypeError, ValueError):
        raise InputError(f"shapes must map input names to tuples of ints, got {shapes!r}") from None
    dtypes = {n: parse_dtype(dtype.get(n, "float32") if isinstance(dtype, dict) else dtype) for n in names}
    return shapes, dtypes


def from_mxnet(sym, params=None, shapes=None, dtype="float32", target: str = "llvm", **options) -> MXNetModel:
    """Compile an MXNet model (symbol + params) with fxc.

    Parameters
    ----------
    sym : mx.sym.Symbol, str or os.PathLike
        The symbol, its JSON text, a symbol JSON file, or a checkpoint prefix (`prefix-symbol.json` and
        `prefix-%04d.params` of `epoch=`, default 0; then `params` may be left out).
    params : dict, (dict, dict), str or None
        `{"arg:name": array, "aux:name": array}` (plain names also work), `(arg_params, aux_params)`, or a .params
        file; arrays are mx.nd.NDArray or numpy. They are baked into the compiled model.
    shapes : dict of name -> tuple, or a tuple for a model of one input
        Input shapes; inputs left out take their shape at the first call.
    dtype : str or dict of name -> str
        Input dtype(s) ("float32").
    target : str
        Compilation target ("llvm": the host CPU).
    **options
        `epoch` (checkpoint), `debug`, `fuse`, `profile`, `precision` (as for `fxc.from_torch`).

    Returns
    -------
    MXNetModel
        Callable on NDArrays (returns NDArrays) or numpy arrays (returns numpy); several outputs come as a list.

    Raises
    ------
    ModelFileError
        A missing, truncated or corrupt symbol JSON or params file.
    InputError
        Params missing, extra or not arrays; shapes naming no input.
    ShapeError
        A param whose shape differs from what the model needs, or input shapes that contradict the model.
    UnsupportedOpError
        Ops without a converter (all listed, with their nodes).
    """
    epoch = options.pop("epoch", None)
    check_options(options, extra={"epoch"})
    mx = import_mxnet()
    text, params_file, where = load_symbol(sym, epoch)
    graph = parse_symbol_json(text, where)
    if params is None and params_file is not None:
        params = params_file
    arg, aux = load_params(params, mx)
    model = Model(graph, text, arg, aux, mx, where)
    shapes, dtypes = _input_dicts(shapes, dtype, model.input_names)
    return MXNetModel(model, shapes, dtypes, fill(target), options)     # the target parsed and filled once
