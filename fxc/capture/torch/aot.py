"""Whole-graph, ahead-of-time capture of a PyTorch model: `fxc.from_torch(model, example_inputs)`.

torch.export captures the model as one functional graph, core-ATen decompositions reduce it to the small
op set, and parameters/buffers become constants of fxc's graph (they are baked into an exported
artifact). The graph is converted with the same machinery as the torch.compile backend
(`fxc.capture.torch.graph.to_graph`), but there is no eager fallback here: an op fxc cannot compile is an
UnsupportedOpError that names the op and the node.
"""
from __future__ import annotations

import collections
import contextlib
import io
import operator
import os
import sys
import traceback
import warnings

import numpy as np
import torch
import torch.utils._pytree as pytree
from torch._decomp import core_aten_decompositions, decomposition_table
from torch.export.graph_signature import InputKind, OutputKind

from ...backends import backend_of
from ...driver.build import build
from ...driver.options import check_options
from ...errors import FxcError, InputError, UnsupportedOpError
from ...ops.registry import aten_table
from ...runtime.tensors import TensorSpec, check_shape
from ...symbolic.expr import INT_MAX, Sym
from ...symbolic.sym import SymInfo
from ...target import Target
from .backend import keep_whole
from .graph import FROM_STR, _Support, to_graph
from .symbolic import dim_names, symbolic_placeholders

_TORCH_DTYPE = {name: dt for name, dt in FROM_STR.items() if not name.startswith("complex")}


def _plain_cpu_tensor(a) -> bool:
    """A real (not complex) tensor of a dtype the runtime reads directly; anything else takes the numpy path."""
    return isinstance(a, torch.Tensor) and str(a.dtype).removeprefix("torch.") in _TORCH_DTYPE


class CompiledModel:
    """A whole model compiled by fxc: torch tensors in -> torch tensors out, numpy in -> numpy out.

    Attributes
    ----------
    module : fxc.runtime.cpu.module.Module
        The runtime module (kernels, constants, workspace); what `fxc.export` writes.
    inputs, outputs : list of TensorSpec
        The flat input/output signature (name, shape, dtype).
    """

    def __init__(self, module, out_spec):
        self.module, self.out_spec = module, out_spec
        self._real_outputs = all(s.dtype in _TORCH_DTYPE for s in module.outputs)     # _call_tensors makes them

    @property
    def inputs(self) -> list:
        return self.module.inputs

    @property
    def outputs(self) -> list:
        return self.module.outputs

    def __call__(self, *args):
        as_torch = any(isinstance(a, torch.Tensor) for a in args)
        if as_torch and self._real_outputs and len(args) == len(self.inputs) and all(map(_plain_cpu_tensor, args)):
            return self._call_tensors(args)
        arrays = []
        for spec, a in zip(self.inputs, args):
            if isinstance(a, torch.Tensor):
                self._check_tensor(spec, a)
                a = a.detach().resolve_neg().resolve_conj().numpy()
            arrays.append(a)
        outs = self.module(*arrays, *args[len(self.inputs):])
        outs = outs if isinstance(outs, list) else [outs]
        if as_torch:
            outs = [torch.from_numpy(o) for o in outs]
        return pytree.tree_unflatten(outs, self.out_spec)

    def _check_tensor(self, spec, a) -> None:
        if a.device.type != "cpu":
            raise InputError(f"input {spec.name!r} is on {a.device}; the {self.module.target} target "
                             f"runs on CPU tensors: pass x.cpu()")
        if str(a.dtype).removeprefix("torch.") != spec.dtype:
            raise InputError(f"input {spec.name!r}: expected dtype {spec.dtype}, got {a.dtype}; convert it "
                             f"with .to(torch.{spec.dtype})")

    def _call_tensors(self, args):
        """Real CPU tensors in, tensors out, by address: no numpy on the way. Each step before the kernels costs
        tens of microseconds when the call follows an idle spell (measured after a 5 ms sleep: a tensor's
        .numpy() 71 us, check_inputs 57 us, an array's ctypes.data 63 us), so this path does only the checks."""
        m = self.module
        m.wake()        # the workers spin up while the inputs are checked
        ins = []
        symbolic = bool(getattr(m, "symbols", None))
        for spec, a in zip(self.inputs, args):
            self._check_tensor(spec, a)
            if not symbolic:
                check_shape(spec, a.shape)
            ins.append(a.detach().resolve_neg().resolve_conj().contiguous())
        if symbolic:        # sizes bound from the inputs (InputError outside the symbols' facts)
            sizes = m.sizes([a.shape for a in args])
            outs = [torch.empty(shape, dtype=_TORCH_DTYPE[s.dtype]) for s, shape in zip(m.outputs,
                                                                                      m.output_shapes(sizes))]
            m.run_pointers([t.data_ptr() for t in ins], [o.data_ptr() for o in outs], sizes=sizes)
        else:
            outs = [torch.empty(s.shape, dtype=_TORCH_DTYPE[s.dtype]) for s in m.outputs]
            m.run_pointers([t.data_ptr() for t in ins], [o.data_ptr() for o in outs])
        return pytree.tree_unflatten(outs, self.out_spec)

    def __repr__(self):
        sig = ", ".join(s.describe() for s in self.inputs)
        return f"CompiledModel({sig}) -> {', '.join(s.describe() for s in self.outputs)} [{self.module.target}]"


def _decompose_unconverted(ep):
    """Ops core ATen keeps that fxc has no converter for but torch._decomp can decompose (a bilinear or nearest
    upsample, which torch.compile's tracing decomposes on its way), decomposed in turn, a few rounds deep."""
    for _ in range(3):
        ops = {n.target for n in ep.graph_module.graph.nodes
               if n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload)
               and str(n.target) not in aten_table() and n.target in decomposition_table}
        if not ops:
            break
        ep = ep.run_decompositions({op: decomposition_table[op] for op in ops})
    return ep


@contextlib.contextmanager
def _without_partial_graph():
    """What torch.export writes to stderr, less the partial FX graph it prints (once per wrapper: twice) before
    raising a graph break: fxc's error names the user's line instead."""
    buf = io.StringIO()
    try:
        with contextlib.redirect_stderr(buf):
            yield
    except Exception as e:
        graph = getattr(e, "partial_fx_graph", None)
        text = buf.getvalue().replace(f"{graph}\n", "") if graph else buf.getvalue()
        sys.stderr.write(text)
        raise
    sys.stderr.write(buf.getvalue())


def capture(model: torch.nn.Module, example_inputs: tuple, dynamic_shapes=None):
    """torch.export + core-ATen decompositions; returns (GraphModule with params as get_attr, out_spec).
    dynamic_shapes: torch.export's (torch.export.Dim per dynamic dim)."""
    try:
        with warnings.catch_warnings(), _without_partial_graph():   # (torch's own deepcopy of its tree specs warns
            warnings.filterwarnings("ignore", r".*isinstance\(treespec, LeafSpec\)", FutureWarning)  # of itself)
            ep = torch.export.export(model, tuple(example_inputs), strict=False, dynamic_shapes=dynamic_shapes)
            ep = _decompose_unconverted(ep.run_decompositions(keep_whole(core_aten_decompositions())))
    except Exception as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        where = f"{type(model).__name__}{_user_frame(e)}"
        if not isinstance(e, _graph_breaks()):
            raise FxcError(f"torch.export could not capture {where} ({type(e).__name__}: {first}); "
                           f"check that the model runs in eager PyTorch on these example inputs") from e
        raise UnsupportedOpError(f"graph break in {where}: torch.export could not capture it as one graph "
                                 f"({type(e).__name__}: {first}); fxc.from_torch needs a single graph: replace "
                                 f"data-dependent control flow (Python `if` on a tensor value, .item(), .tolist()) "
                                 f"with tensor ops such as torch.where, or compile with "
                                 f"torch.compile(model, backend='fxc'), which runs such parts in eager") from e
    for spec in ep.graph_signature.output_specs:
        if spec.kind != OutputKind.USER_OUTPUT:
            raise UnsupportedOpError(f"the model mutates {spec.target!r} ({spec.kind.name}), e.g. BatchNorm in "
                                     f"training mode; call model.eval() before fxc.from_torch")
    gm = ep.graph_module
    placeholders = {n.name: n for n in gm.graph.nodes if n.op == "placeholder"}
    for k, spec in enumerate(ep.graph_signature.input_specs):
        if spec.kind == InputKind.USER_INPUT:
            continue
        if spec.kind not in (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR):
            raise UnsupportedOpError(f"model input {spec.arg.name!r} of kind {spec.kind.name} is not supported")
        value = ep.state_dict[spec.target] if spec.target in ep.state_dict else ep.constants[spec.target]
        ph = placeholders[spec.arg.name]
        name = f"_fxc_const_{k}"
        gm.register_buffer(name, value.detach())
        with gm.graph.inserting_before(ph):
            attr = gm.graph.get_attr(name)
        attr.meta = dict(ph.meta)
        ph.replace_all_uses_with(attr)
        gm.graph.erase_node(ph)
    for node in list(gm.graph.nodes):      # metadata assertions (e.g. from .to(dtype)): true for static shapes
        if node.op == "call_function" and not node.users and "assert" in getattr(node.target, "__name__", ""):
            gm.graph.erase_node(node)
    gm.graph.eliminate_dead_code()
    gm.recompile()
    return gm, ep.call_spec.out_spec


def _graph_breaks() -> tuple:
    """Exception types by which torch.export says the model is not one static graph."""
    from torch._dynamo.exc import Unsupported, UserError  # deferred: torch._dynamo is slow to import
    from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode  # deferred: slow (sympy)
    return GuardOnDataDependentSymNode, Unsupported, UserError


def _user_frame(exc: BaseException) -> str:
    """' at file:line in fn: `code`' for the innermost traceback frame outside torch and fxc, or ''."""
    skip = (os.path.dirname(torch.__file__), os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if not f.filename.startswith(skip)]
    if not frames:
        return ""
    f = frames[-1]
    return f" at {f.filename}:{f.lineno} in {f.name}" + (f": `{f.line.strip()}`" if f.line else "")


def _node_source(node) -> str:
    """' at file:line in fn: `code`' of the model code (the innermost frame outside torch) that produced an FX
    node, or ''."""
    trace = [ln.strip() for ln in (node.meta.get("stack_trace") or "").strip().splitlines()]
    files = [i for i, ln in enumerate(trace) if ln.startswith("File ")]
    user = [i for i in files if not trace[i].startswith(f'File "{os.path.dirname(torch.__file__)}')]
    if not files:
        return ""
    i = (user or files)[-1]
    code = trace[i + 1] if i + 1 < len(trace) and not trace[i + 1].startswith("File ") else ""
    return f" at {trace[i][5:]}" + (f": `{code}`" if code else "")


def check_supported(gm: torch.fx.GraphModule, model) -> None:
    """Raise UnsupportedOpError listing every node fxc cannot compile (op, node name, source line, reason)."""
    support, bad = _Support(), []
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target is not operator.getitem:     # (the pick of a result of
            ok, reason = support.check(node)                                        # an op listed already)
            if not ok and reason != "size arithmetic":      # (sizes: evaluated by to_graph, symbolic or not)
                support.reasons[node] = reason
                bad.append(f"{node.target} (node {node.name!r}{_node_source(node)}): {reason}")
    if bad:
        training = model.training and any("batch_norm" in b or "dropout" in b for b in bad)
        hint = " (the model is in training mode: call model.eval() first)" if training else ""
        ops = collections.Counter(b.split(" (")[0] for b in bad)
        raise UnsupportedOpError(f"fxc cannot compile {', '.join(ops)} in {type(model).__name__}{hint}; "
                                 f"fxc.from_torch compiles the whole graph, with no eager fallback:\n  "
                                 + "\n  ".join(bad) + "\nReplace these ops in the model, or use "
                                 "torch.compile(model, backend='fxc'), which runs them in eager PyTorch")


def from_torch(model, example_inputs, target: str = "llvm", dynamic_shapes=None, **options) -> CompiledModel:
    """Compile a whole PyTorch model ahead of time (for export or deploy).

    Parameters
    ----------
    model : torch.nn.Module or callable
        Traced with torch.export on `example_inputs`; parameters and buffers are baked in as constants
        (call `model.eval()` first for inference behaviour of dropout/batch-norm).
    example_inputs : tuple of torch.Tensor or numpy.ndarray (or one tensor)
        Fixes the input shapes and dtypes of the compiled model.
    target : str or fxc.target.Target
        Compilation target: "llvm" (this CPU), or a TVM-style string naming another ("llvm -mcpu=haswell",
        "llvm -mcpu=x86-64-v2 -mattr=+avx2"). Code for a CPU this host lacks compiles and exports; calling it here
        raises TargetError.
    dynamic_shapes : optional
        torch.export's convention: per input, {dim: torch.export.Dim("batch", min=1, max=64)} (or a tuple of
        them). The model is built once for every size in the Dim's range; a call outside it, or whose inputs
        disagree on a size, raises InputError. One symbolic size, as the leading dim of the inputs that have it
        (the batch, the sequence of a batch of one), is supported.
    **options
        `debug` (FXC_DEBUG level), `fuse` (bool, default True), `profile` (bool: per-kernel timers,
        read with `.module.profile_table()`).

    Returns
    -------
    CompiledModel
        Callable on torch tensors (returns torch tensors, in the model's output structure) or on numpy
        arrays (returns numpy arrays); `.module` is the runtime Module that `fxc.export` writes.

    Raises
    ------
    UnsupportedOpError
        The model does not capture as one graph, or uses an op/dtype fxc cannot compile (named with its node).
    TargetError
        Unknown target kind, CPU or option.
    """
    check_options(options)
    target = Target.parse(target)       # TargetError for an unknown kind, CPU or option
    if isinstance(example_inputs, (torch.Tensor, np.ndarray)):
        example_inputs = (example_inputs,)
    args = tuple(torch.from_numpy(np.ascontiguousarray(a)) if isinstance(a, np.ndarray) else a
                 for a in example_inputs)
    if not all(isinstance(a, torch.Tensor) for a in args):
        raise FxcError("fxc.from_torch takes example inputs that are all tensors (torch or numpy)")
    if not isinstance(model, torch.nn.Module):
        model = _Wrap(model)
    backend_of(target).start()      # (llvm: the compile workers' start-up overlaps torch.export's tracing)
    gm, out_spec = capture(model, args, dynamic_shapes)
    check_supported(gm, model)
    symbolic = None
    if dynamic_shapes is not None:
        symbolic = symbolic_placeholders(gm, specialize=False, names=dim_names(gm, dynamic_shapes))
        if symbolic is not None:
            symbolic = (symbolic[0], declared_ranges(dynamic_shapes, symbolic))
    graph, _, struct, _ = to_graph(gm, args, symbolic=symbolic)
    if any(kind != "t" for kind, _ in struct):
        raise UnsupportedOpError("fxc.from_torch compiles models whose outputs are all tensors")
    module = build(graph, target=target, **options)
    module.outputs = [TensorSpec(f"output{i}", s.shape, s.dtype) for i, s in enumerate(module.outputs)]
    return CompiledModel(module, out_spec)


def declared_ranges(dynamic_shapes, symbolic) -> dict:
    """The symbols' facts with the ranges the user's Dims declare (torch.export keeps 1 out of a shape
    environment's range, but fxc's code for a symbolic size runs any size from 1)."""
    shapes, infos = symbolic
    infos = dict(infos)
    per_input = dynamic_shapes.values() if isinstance(dynamic_shapes, dict) else dynamic_shapes
    for shape, spec in zip(shapes, per_input):
        dims = spec.items() if isinstance(spec, dict) else enumerate(spec or ())
        for d, dim in dims:
            sym = shape[d] if isinstance(shape, tuple) and d < len(shape) else None
            if isinstance(sym, Sym) and dim is not None and hasattr(dim, "min"):
                hi = dim.max if isinstance(dim.max, int) and dim.max < INT_MAX else INT_MAX
                infos[sym.name] = SymInfo(sym.name, max(int(dim.min), 1), hi)
    return infos


class _Wrap(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *args):
        return self.fn(*args)
