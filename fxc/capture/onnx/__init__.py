"""ONNX frontend: `fxc.from_onnx(model_or_path, shapes=None, target="llvm", **options)`.

Takes an `onnx.ModelProto`, its serialized bytes or a `.onnx` path (external data files next to it are read; a model
given as bytes or a ModelProto has no folder, so its external data is read only from an explicit `base_dir=`),
converts the graph with one converter per ONNX op, chosen by the model's opset (`table.py`, `ops_*.py`), into fxc's
graph IR and builds it for the target. Initializers become the module's constants (its params in an exported
artifact); dims the model names (`dim_param`) are bound by `shapes=` or at the first call, and every new binding
compiles once more. float16 tensors compute in float32 (inputs and outputs are converted at the call). Quantised
models (QDQ and the QLinear / Integer operator forms) compute in integers (ops_quant.py, docs/int8.md).
"""
from __future__ import annotations

import functools
import logging
import os
import warnings
from pathlib import Path

import numpy as np
import onnx
from google.protobuf.message import DecodeError
from onnx import helper
from onnx.external_data_helper import load_external_data_for_model, uses_external_data

from ...backends import fill
from ...driver.build import build
from ...driver.options import check_options
from ...errors import FxcError, InputError, ModelFileError, ShapeError, UnsupportedOpError
from ...ops.common import np_dtype
from ...runtime.tensors import TensorSpec
from ...symbolic.expr import Sym
from . import ops_attention, ops_extra, ops_math, ops_nn, ops_quant, ops_resize, ops_rnn, ops_tensor  # noqa: F401
from .ops_tensor import as_array, fxc_dtype
from .table import NEWEST_OPSET, Context, FoldingBuilder, NeedsValues, describe, lookup

FLOAT16 = 10
NARROW = {"int4": np.int8, "uint4": np.uint8}   # 4-bit initializers, held in bytes (their dequantize computes in float)


def load_model(model_or_path, base_dir=None):
    """An onnx.ModelProto from a ModelProto, serialized bytes or a path (with its external data, read from the
    path's folder, or for bytes and a ModelProto from `base_dir` only)."""
    if base_dir is not None and isinstance(model_or_path, (str, os.PathLike)):
        raise InputError("base_dir= is for a model given as bytes or a ModelProto; a model given by its path reads "
                         "its external data from the path's folder")
    if isinstance(model_or_path, onnx.ModelProto):
        model = model_or_path
    elif isinstance(model_or_path, (bytes, bytearray)):
        try:
            model = onnx.load_model_from_string(bytes(model_or_path))
        except (DecodeError, ValueError) as e:
            raise ModelFileError(f"these bytes are not an ONNX model ({e}); pass the bytes of a .onnx file") from e
    elif isinstance(model_or_path, (str, os.PathLike)):
        path = Path(model_or_path)
        if not path.is_file():
            raise ModelFileError(f"no ONNX file at {path}; check the path")
        try:
            model = onnx.load(str(path))
        except (OSError, onnx.checker.ValidationError) as e:
            if isinstance(e, OSError) or "stored in" in str(e) or "external" in str(e).lower():
                raise ModelFileError(f"{path}: its external data cannot be read ({e}); keep the data files next "
                                     f"to the model, under the names it records") from e
            raise ModelFileError(f"{path} is not a valid ONNX model ({e}); export it again") from e
        except (DecodeError, ValueError, RuntimeError) as e:
            raise ModelFileError(f"{path} is not a readable ONNX model: it is truncated or corrupt ({e}); export "
                                 f"it again") from e
    else:
        raise FxcError(f"fxc.from_onnx takes an onnx.ModelProto, its bytes or a path, got {type(model_or_path)}")
    if any(uses_external_data(t) for t in _tensors(model.graph)):
        model = _with_external_data(model, base_dir)
    try:
        onnx.checker.check_model(model)
    except (onnx.checker.ValidationError, ValueError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ModelFileError(f"the ONNX model is not valid ({first}); it is truncated, corrupt or was written "
                             f"wrongly: export it again") from e
    return model


def _tensors(graph):
    """Every TensorProto of a graph: initializers and node attributes, in subgraphs too."""
    yield from graph.initializer
    for node in graph.node:
        for a in node.attribute:
            if a.HasField("t"):
                yield a.t
            yield from a.tensors
            for g in ([a.g] if a.HasField("g") else []) + list(a.graphs):
                yield from _tensors(g)


def _with_external_data(model, base_dir):
    """A copy of `model` (bytes or a ModelProto: no folder of its own) with its external data read from
    `base_dir`, under onnx's checks (no path out of the folder, no links, offsets within the file); without
    base_dir a ModelFileError (never the working directory's files)."""
    named = sorted({f"{t.name!r} in {dict((e.key, e.value) for e in t.external_data).get('location', '?')!r}"
                    for t in _tensors(model.graph) if uses_external_data(t)})
    if base_dir is None:
        raise ModelFileError(f"the model keeps tensor(s) {', '.join(named)} in external data files, and a model "
                             f"given as bytes or a ModelProto has no folder to read them from: pass the .onnx "
                             f"file's path, or base_dir= the folder that holds the data files")
    if not Path(base_dir).is_dir():
        raise ModelFileError(f"base_dir {str(base_dir)!r} is not a folder; pass the folder that holds the model's "
                             f"external data files ({', '.join(named)})")
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    try:
        load_external_data_for_model(copy, str(base_dir))
    except (OSError, ValueError, onnx.checker.ValidationError) as e:
        raise ModelFileError(f"the model's external data cannot be read from {str(base_dir)!r} ({e}); keep the data "
                             f"files in that folder, under the names the model records") from e
    return copy


def opset_of(model) -> int:
    for o in model.opset_import:
        if o.domain in ("", "ai.onnx"):
            return int(o.version)
    return 1


def unsupported_nodes(model, nodes=None) -> list:
    """'OpType (node 'name')' for every node no converter handles at the model's opset."""
    opset, bad = opset_of(model), []
    for i, n in enumerate(nodes if nodes is not None else model.graph.node):
        if n.op_type == "If" and n.domain in ("", "ai.onnx"):     # inlined when its condition is constant
            for a in n.attribute:
                bad += unsupported_nodes(model, helper.get_attribute_value(a).node)
            continue
        if n.domain not in ("", "ai.onnx") or lookup(n.op_type, opset) is None:
            dom = f"{n.domain}." if n.domain not in ("", "ai.onnx") else ""
            bad.append(f"{dom}{n.op_type} (node {n.name or (n.output[0] if n.output else '') or i!r})")
    return bad


FLAGS = frozenset({"allowzero", "ceil_mode", "count_include_pad", "detect_negative", "detect_positive", "exclusive",
                   "keepdims", "largest", "noop_with_empty_axes", "reverse", "select_last_index", "sorted", "transA",
                   "transB", "upper", "onesided", "inverse", "storage_order", "periodic", "training_mode"})   # 0 or 1


@functools.cache
def _schema_attributes(op_type: str, opset: int) -> dict | None:
    """name -> (AttributeProto type, required) of the op's ONNX schema at this opset; None for an op onnx lacks."""
    try:
        schema = onnx.defs.get_schema(op_type, opset, "")
    except onnx.defs.SchemaError:
        return None
    return {k: (int(v.type), v.required) for k, v in schema.attributes.items()}


def _check_attributes(cx, node) -> None:
    """The node's attributes are those its op's schema names, of the types it states, the required ones given
    (onnx's checker leaves these to the op; a renamed or retyped attribute would otherwise be read as absent)."""
    known = _schema_attributes(node.op_type, cx.opset)
    if known is None:
        return
    for a in node.attribute:
        if a.name not in known:
            raise ModelFileError(f"{cx.where()}: attribute {a.name!r} is none of {node.op_type}'s "
                                 f"({', '.join(sorted(known))}); the model is corrupt")
        if a.type != known[a.name][0]:
            names = onnx.AttributeProto.AttributeType
            given = names.Name(a.type) if a.type in names.values() else f"number {a.type}"
            raise ModelFileError(f"{cx.where()}: attribute {a.name} is of type {given}, where ONNX states "
                                 f"{names.Name(known[a.name][0])}; the model is corrupt")
    missing = sorted(k for k, (_, required) in known.items() if required and k not in {a.name for a in node.attribute})
    if missing:
        raise ModelFileError(f"{cx.where()}: lacks the required attribute(s) {missing}; the model is corrupt")


def _attrs(node) -> dict:
    out = {}
    for a in node.attribute:
        if a.name in FLAGS and a.type == a.INT and a.i not in (0, 1):
            raise ModelFileError(f"{describe(node)}: attribute {a.name} is {a.i}; it is a flag, 0 or 1")
        v = helper.get_attribute_value(a)
        if a.type == a.TENSOR:
            v = as_array(v)
        elif a.type in (a.GRAPH, a.GRAPHS, a.SPARSE_TENSOR, a.TYPE_PROTO):
            raise UnsupportedOpError(f"{describe(node)}: attribute {a.name!r} holds a subgraph or sparse tensor, "
                                     f"which fxc does not compile")
        try:
            out[a.name] = v.decode() if isinstance(v, bytes) else v
        except UnicodeDecodeError:
            raise ModelFileError(f"{describe(node)}: attribute {a.name} is {v[:40]!r}, not UTF-8 text; the model is "
                                 f"corrupt") from None
    return out


def model_inputs(model) -> list:
    """(name, elem_type, dims) of the graph inputs that are not initializers; a dim is an int, its name or None
    (unknown), dims None where the model states no shape."""
    inits = {t.name for t in model.graph.initializer}
    out = []
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        tt = vi.type.tensor_type
        if not vi.type.HasField("tensor_type"):
            raise UnsupportedOpError(f"input {vi.name!r} is not a tensor (sequence, map or optional)")
        dims = ([d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in tt.shape.dim]
                if tt.HasField("shape") else None)
        if any(isinstance(d, int) and d < 0 for d in dims or ()):
            raise ModelFileError(f"input {vi.name!r} declares the shape {dims}, with a negative dim; the model is "
                                 f"corrupt (an open dim has a name, or none)")
        out.append((vi.name, tt.elem_type, dims))
    return out


def to_graph(model, shapes: list, values: dict | None = None):
    """The fxc Graph of `model` with its inputs of these concrete shapes; inputs named in `values` are constants
    of these values (the model specialises on them: they give a shape, axes, pads...)."""
    bad = unsupported_nodes(model)
    if bad:
        raise UnsupportedOpError(f"fxc has no converter for {len(bad)} node(s) of this ONNX model (opset "
                                 f"{opset_of(model)}):\n  " + "\n  ".join(bad))
    b = FoldingBuilder()
    cx = Context(b, opset_of(model))
    env: dict = {"": None}
    for t in model.graph.initializer:
        a = as_array(t)
        narrow = a.dtype.name if a.dtype.name in NARROW else None
        try:
            env[t.name] = b.const(a.astype(NARROW[narrow]) if narrow else a)
            if narrow:
                cx.narrow[env[t.name].id] = narrow
        except FxcError:
            raise UnsupportedOpError(f"initializer {t.name!r} is of dtype {a.dtype}, which fxc does not "
                                     f"compile") from None
    for (name, elem, _), shape in zip(model_inputs(model), shapes):
        dtype = fxc_dtype(cx, elem, f"input {name!r}")
        if values and name in values:
            env[name] = b.const(np.asarray(values[name]).astype(np_dtype(dtype)))
        else:
            env[name] = b.graph.input(tuple(shape), dtype, name)
    _convert_nodes(cx, model.graph.node, env)
    cx.warn_refused()
    results = []
    for vi in model.graph.output:
        v = env.get(vi.name)
        if v is None:
            raise ModelFileError(f"graph output {vi.name!r} is made by no node; the model is corrupt")
        if v.is_const or v.node is None:        # an input or a constant returned as it is: a copy the module makes
            v = b.graph.call1("copy", [v])
        _check_output(cx, vi, v)
        results.append(v)
    b.graph.outputs = results
    return b.graph


def _convert_nodes(cx, nodes, env: dict) -> None:
    """Convert `nodes` in order, binding their outputs in `env` (name -> Value)."""
    for node in nodes:
        cx.node = node
        missing = [i for i in node.input if i not in env]
        if missing:
            raise ModelFileError(f"{node.op_type} (node {node.name!r}) reads {missing}, which no node, input or "
                                 f"initializer makes; the model is corrupt")
        ins = [env[i] for i in node.input]
        while ins and ins[-1] is None:
            ins.pop()
        _check_attributes(cx, node)
        try:
            if node.op_type == "If":
                outs = _inline_if(cx, node, ins, env)
            else:
                outs = lookup(node.op_type, cx.opset)(cx, ins, _attrs(node))
        except (ShapeError, UnsupportedOpError) as e:     # (an op's type rule, e.g. shapes that do not broadcast)
            if isinstance(e, NeedsValues) or str(e).startswith(cx.where()):
                raise
            raise type(e)(f"{cx.where()}: {e}") from None
        except MemoryError as e:    # a constant or table the node's attributes make (a Resize to 2**32 rows...)
            raise ShapeError(f"{cx.where()}: the tensors its attributes and inputs ask for do not fit in memory "
                             f"({e}); check the model's shapes and attributes") from None
        except Exception as e:
            if not getattr(e, "__notes__", None):   # the innermost node (an If's branch) is the one to name
                e.add_note(cx.where())
            raise
        outs = outs if isinstance(outs, tuple) else (outs,)
        for name, v in zip(node.output, outs):
            if name:
                env[name] = v


def symbol_name(dim_param: str) -> str:
    """The size symbol of an ONNX dim name: the name itself where it is an identifier ("batch", "seq_len"), else
    made one ("batch size" -> "batch_size", "2d" -> "d_2d"), so errors, `fxc inspect` and fxc_model.h show it."""
    name = "".join(c if c.isalnum() or c == "_" else "_" for c in dim_param.strip()) or "dim"
    return name if name.isidentifier() else f"d_{name}"


def _inline_if(cx, node, ins, env):
    """If over a constant condition: the branch it takes, converted in place (it reads the outer scope)."""
    cond = bool(np.asarray(cx.const(ins[0], "condition")).reshape(-1)[0])
    branch = {a.name: helper.get_attribute_value(a) for a in node.attribute}["then_branch" if cond else "else_branch"]
    inner = dict(env)
    for t in branch.initializer:
        inner[t.name] = cx.b.const(as_array(t))
    outer = cx.node
    _convert_nodes(cx, branch.node, inner)
    cx.node = outer
    return tuple(inner[o.name] for o in branch.output)


def _check_output(cx, vi, v) -> None:
    """The converted output has the dtype and the static dims the model declares (else the model contradicts
    itself, or a converter has a bug)."""
    tt = vi.type.tensor_type
    want = fxc_dtype(cx, tt.elem_type, f"output {vi.name!r}")
    dims = [d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim]
    ok = want == v.dtype and (not tt.HasField("shape") or (len(dims) == len(v.shape) and all(
        d is None or d == s for d, s in zip(dims, v.shape))))
    if not ok:
        raise ShapeError(f"the model declares output {vi.name!r} as {want}{dims}, but its nodes compute "
                         f"{v.dtype}{list(v.shape)} (fxc's conversion): the model contradicts itself (an attribute or "
                         f"shape was changed after export?); if it runs as declared elsewhere, report this fxc bug "
                         f"with the model")


class OnnxModel:
    """An ONNX model compiled by fxc: numpy arrays (or torch tensors) in, the same kind out.

    Attributes
    ----------
    module : fxc.runtime.cpu.module.Module
        The runtime module of the latest binding of the model's input shapes: what `fxc.export` writes. An
        integer input that gives a shape, axes or pads (not data) is compiled in as the value of the call that
        bound it, and is not an input of the module; a call with other values compiles again.
    inputs, outputs : list of TensorSpec
        Its flat signature (float16 tensors of the model appear as float32).
    """

    def __init__(self, proto, shapes, target, options: dict):
        self.proto, self.target, self.options = proto, target, options
        self._inputs = model_inputs(proto)
        self._fp16_out = [vi.type.tensor_type.elem_type == FLOAT16 for vi in proto.graph.output]
        self._modules: dict = {}
        self._last = None
        self._specialized: set = set()      # inputs whose values the model is compiled for (see NeedsValues)
        self._symbolic = None if shapes is None else False   # the build for every size of its named dim (None:
                                                             # not tried yet; False: it cannot be built so)
        bound = self._bind(shapes) if shapes is not None else None
        if bound is None and all(dims is not None and all(isinstance(d, int) for d in dims)
                                 for _, _, dims in self._inputs):
            bound = tuple(tuple(dims) for _, _, dims in self._inputs)
        if bound is not None:
            self._module_for(bound)

    def _bind(self, shapes) -> tuple:
        """Concrete input shapes from `shapes` (a dict name -> shape, a list in input order, or one shape for a
        model of one input, as fxc.from_mxnet takes it)."""
        names = [n for n, _, _ in self._inputs]
        if isinstance(shapes, (tuple, list)) and shapes and all(isinstance(d, (int, np.integer)) for d in shapes):
            if len(names) != 1:
                raise InputError(f"shapes={tuple(shapes)} is one shape, but the model has {len(names)} inputs "
                                 f"{names}: pass a dict name -> shape")
            shapes = [shapes]
        if isinstance(shapes, dict):
            unknown = set(shapes) - set(names)
            if unknown:
                raise InputError(f"shapes= names {sorted(unknown)}, which are not inputs of the model; its inputs "
                                 f"are {names}")
            missing = [n for n, _, dims in self._inputs
                       if n not in shapes and (dims is None or not all(isinstance(d, int) for d in dims))]
            if missing:
                raise InputError(f"shapes= gives no shape for {missing}, whose dims the model leaves open")
            shapes = [shapes.get(n, dims) for n, _, dims in self._inputs]
        if len(shapes) != len(names):
            raise InputError(f"{len(shapes)} shapes for the model's {len(names)} inputs {names}")
        return self._named(tuple(self._check(n, dims, s) for (n, _, dims), s in zip(self._inputs, shapes)))

    def _named(self, bound: tuple) -> tuple:
        """`bound` after checking that a dim name the model uses in several places gets one value."""
        seen: dict = {}
        for (name, _, dims), shape in zip(self._inputs, bound):
            for i, (d, s) in enumerate(zip(dims or (), shape)):
                if isinstance(d, str) and seen.setdefault(d, (s, name, i))[0] != s:
                    s0, n0, i0 = seen[d]
                    raise InputError(f"dim {d!r} is {s0} in input {n0!r} (dim {i0}) but {s} in input {name!r} (dim "
                                     f"{i}); the model names them the same, so they must agree")
        return bound

    @staticmethod
    def _check(name, dims, shape) -> tuple:
        shape = tuple(int(s) for s in shape)
        if any(s < 0 for s in shape):
            raise InputError(f"input {name!r}: shape {list(shape)} has a negative dim")
        if dims is None:
            return shape
        if len(dims) != len(shape):
            raise InputError(f"input {name!r}: the model states rank {len(dims)} ({dims}), got shape {list(shape)}")
        for i, (d, s) in enumerate(zip(dims, shape)):
            if isinstance(d, int) and d != s:
                raise InputError(f"input {name!r}: dim {i} is {d} in the model, got {s} (shape {list(shape)}); "
                                 f"pass an input of shape {dims}")
        return shape

    def _module_for(self, bound: tuple, arrays=None):
        """The module for these input shapes (and the values of the inputs it specialises on), built once; None
        when it needs input values and `arrays` are not given yet."""
        names = [n for n, _, _ in self._inputs]
        if self._symbolic is None and arrays is not None:
            self._symbolic = self._build_symbolic(bound) or False
        if self._symbolic:
            self._last = self._symbolic
            return self._symbolic
        while True:
            if arrays is None and self._specialized:
                return None
            values = {n: arrays[names.index(n)] for n in self._specialized}
            key = (bound, tuple(sorted((n, v.dtype.str, v.shape, v.tobytes()) for n, v in values.items())))
            m = self._modules.get(key)
            if m is not None:
                break
            try:
                graph = to_graph(self.proto, bound, values)
            except NeedsValues as e:
                if e.names <= self._specialized:
                    raise
                self._specialized |= e.names
                continue
            m = build(graph, target=self.target, **self.options)
            m.outputs = [TensorSpec(vi.name, s.shape, s.dtype) for vi, s in zip(self.proto.graph.output, m.outputs)]
            self._modules[key] = m
            break
        self._last = m
        return m

    def _build_symbolic(self, bound: tuple):
        """One module for every value of the model's named dims (its dim_params, each a size symbol of that name:
        fxc/symbolic/sym.py), or None when the model has none or a part that needs the sizes (then each shape
        builds on its own, and a WARNING names the op and the symbols)."""
        names = {d for _, _, dims in self._inputs for d in dims or () if isinstance(d, str)}
        if not names:
            return None
        shapes = [tuple(Sym(symbol_name(d)) if isinstance(d, str) else s for d, s in zip(dims, shape)) if dims
                  else shape for (_, _, dims), shape in zip(self._inputs, bound)]
        try:
            m = build(to_graph(self.proto, shapes), target=self.target, **self.options)
        except Exception as e:      # noqa: BLE001  (never the user's problem: one build per shape instead)
            where = f"{e.__notes__[-1]}: " if getattr(e, "__notes__", None) else ""
            logging.getLogger("fxc").warning(
                "fxc: ONNX model: its named dim(s) %s cannot stay symbolic (%s%s: %s); it builds once per input "
                "shape and exports static artifacts", ", ".join(sorted(names)), where, type(e).__name__, e)
            return None
        if not m.symbols:
            return None
        m.outputs = [TensorSpec(vi.name, s.shape, s.dtype) for vi, s in zip(self.proto.graph.output, m.outputs)]
        return m

    @property
    def module(self):
        if self._last is None:
            if self._specialized:
                raise FxcError(f"the model's shapes come from the values of its inputs {sorted(self._specialized)}: "
                               f"call it once with them first")
            raise FxcError("the model's input shapes are not bound yet: call it once, or pass shapes= to "
                           "fxc.from_onnx")
        return self._last

    @property
    def inputs(self) -> list:
        return self.module.inputs

    @property
    def outputs(self) -> list:
        return self.module.outputs

    def __call__(self, *args, **named):
        """Run the model on its inputs, in order or by name (``model(x)``, ``model(input_ids=a, mask=b)``, or
        ``model(**{"input.1": x})`` for a name that is not an identifier)."""
        if named:
            args = self._by_name(args, named)
        if len(args) != len(self._inputs):
            raise InputError(f"the model takes {len(self._inputs)} inputs {[n for n, _, _ in self._inputs]}, "
                             f"got {len(args)}")
        as_torch = any(type(a).__module__.startswith("torch") for a in args)
        arrays = []
        for (name, elem, _), a in zip(self._inputs, args):
            if type(a).__module__.startswith("torch"):
                a = a.detach().cpu().numpy()
            a = np.asarray(a)
            if elem == FLOAT16 and a.dtype == np.float16:
                a = a.astype(np.float32)
            arrays.append(a)
        bound = self._named(tuple(self._check(n, dims, a.shape) for (n, _, dims), a in zip(self._inputs, arrays)))
        module = self._module_for(bound, arrays)
        outs = module(*[a for (n, _, _), a in zip(self._inputs, arrays) if n not in self._specialized])
        outs = outs if isinstance(outs, list) else [outs]
        outs = [o.astype(np.float16) if f16 else o for o, f16 in zip(outs, self._fp16_out)]
        if as_torch:
            import torch  # deferred: torch is optional (only for torch tensors in and out)
            outs = [torch.from_numpy(np.ascontiguousarray(o)) for o in outs]
        return outs[0] if len(outs) == 1 else tuple(outs)

    def _by_name(self, args: tuple, named: dict) -> tuple:
        """The inputs in the model's order from positional ones followed by named ones (InputError naming an
        unknown, repeated or missing input)."""
        names = [n for n, _, _ in self._inputs]
        unknown = [k for k in named if k not in names]
        if unknown:
            raise InputError(f"{unknown} are not inputs of the model; its inputs are {names}")
        twice = [k for k in named if k in names[:len(args)]]
        if twice:
            raise InputError(f"input(s) {twice} given both by position and by name")
        missing = [n for n in names[len(args):] if n not in named]
        if missing:
            raise InputError(f"the model's input(s) {missing} are missing (its inputs: {names})")
        return tuple(args) + tuple(named[n] for n in names[len(args):])

    def __repr__(self):
        sig = ", ".join(f"{n}: {dims if dims is not None else '?'}" for n, _, dims in self._inputs)
        return f"OnnxModel({sig}) [{self.target}, opset {opset_of(self.proto)}]"


def from_onnx(model_or_path, shapes=None, target: str = "llvm", base_dir=None, **options) -> OnnxModel:
    """Compile an ONNX model.

    Parameters
    ----------
    model_or_path : onnx.ModelProto, bytes, str or os.PathLike
        The model; a path may have external data files next to it.
    base_dir : str or os.PathLike, optional
        For a model given as bytes or a ModelProto whose tensors are in external data files (e.g. loaded with
        `load_external_data=False`): the folder that holds those files. Without it such a model is refused (it
        has no folder of its own; the working directory is never read).
    shapes : dict, list or tuple, optional
        Input shapes (name -> shape, one shape per input in order, or a tuple for a model of one input) for dims
        the model leaves open; without it they are bound at the first call.
    target : str
        Compilation target ("llvm": the host CPU).
    **options
        `debug`, `fuse`, `profile`, `precision`, as for `fxc.from_torch`.

    Returns
    -------
    OnnxModel
        Callable on numpy arrays (returns numpy arrays) or torch tensors (returns tensors), in order or by input
        name; one output as it is, several as a tuple. `.module` is what `fxc.export` writes.

    Raises
    ------
    ModelFileError
        The file is missing, truncated, corrupt or not a valid ONNX model, or its external data cannot be read
        (or, given as bytes or a ModelProto, it has external data and no base_dir).
    UnsupportedOpError
        Ops (all listed, with their nodes) or dtypes fxc cannot compile.
    InputError
        A shape that contradicts the model.
    """
    check_options(options)
    target = fill(target)       # parsed and filled once (a TargetError now, before anything is converted): every
    model = load_model(model_or_path, base_dir)     # build of the model gets this Target
    if opset_of(model) > NEWEST_OPSET:
        warnings.warn(f"the ONNX model's opset {opset_of(model)} is newer than fxc knows ({NEWEST_OPSET}): its ops "
                      f"are converted as at opset {NEWEST_OPSET}, the newest known", stacklevel=3)  # (the caller)
    return OnnxModel(model, shapes, target, options)
