"""The plan of a build, made once for every target: which fused groups run when, where every value lives.

Takes the Planned graph of the plan steps (fxc.relay_like.pipeline.plan_graph: hoisting, fusion, the prepack split,
the memory plan of the per-call buffers); produces a `Plan`:

    prepack  groups whose outputs depend on weights only (a weight's packing, a batch norm's scale): the module
             runs them at its first call and again only when a weight changed (what `prepack_inputs` watches);
             their results live after the planned workspace, untouched by the main plan
    main     the groups of every call (a reshape is a view of its input, or writes straight into an output)
    slots    Value id -> ("in", i) | ("const", i) | ("out", i) | ("work", byte offset) | ("work", symbolic)
    end      the static workspace: the memory plan's bytes, then the packed results; kernel scratch comes after

How a target family's kernels find a value of symbolic size (a dynamic batch) is named in SYMBOLIC: the CPU family
through the symbol header (the symbols' values, written into the workspace per call, read by row-block kernels;
offsets are polynomials of the symbols), the GPU family through row launches (offsets base + symbol x bytes per
row, set per launch: fxc/driver/rows.py). Either way the symbolic region starts after everything static.
What the module's `prepack_inputs` are depends on its form (`prepack_inputs`).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import CompileError, LoweringError
from ..relay_like.passes.plan_memory import MemoryPlan
from ..relay_like.planned import Planned
from ..runtime.tensors import TensorSpec
from ..symbolic.expr import ITEMSIZE, Sym, poly
from ..symbolic.sym import SymInfo, dim_text, symbols_of

SYM_HEADER_SLOTS = 8        # the symbol header: 64 bytes, one int64 per symbol
# family -> (slot tag, the memory plan's offsets) of a value of symbolic size: "sym" a polynomial in the header's
# symbols (symbolic_slots resolves it), "rows" bytes per row of the one symbol (row launches)
SYMBOLIC = {"cpu": ("sym", "sym_offsets"), "gpu": ("rows", "row_offsets")}


def align64(nbytes) -> int:
    return (nbytes + 63) // 64 * 64


@dataclass
class Plan:
    prepack: list           # fused groups run once per change of the weights
    main: list              # fused groups run on every call
    slots: dict             # Value id -> (kind, index)
    consts: list            # the graph's constants, in const-slot order
    memory: MemoryPlan      # the per-call buffers in the workspace (fxc.relay_like.passes.plan_memory)
    end: int                # bytes of the static workspace: planned buffers, then the packed results
    sym_index: dict         # size symbol name -> its slot in the symbol header ({} when static)
    external: dict          # a group root's name -> (library name, matched nodes, its Region): an external call

    @property
    def groups(self) -> list:
        """Every group in plan order: the prepack step's, then the call's."""
        return self.prepack + self.main

    def args(self, gr) -> list:
        """Group gr's operands as plan slots: its outputs, then its inputs."""
        return [self.slots[v.id] for v in gr.outputs] + [self.slots[v.id] for v in gr.inputs]

    def symbols(self, infos: dict) -> list:
        """The size symbols, in header order, as the runtime takes them (name, min, max, divisor); infos: the
        graph's facts, {name: SymInfo}."""
        return [dict(vars(infos.get(n) or SymInfo(n))) for n in self.sym_index]

    @property
    def row_symbol(self):
        """The one symbol of row launches (the first of the header; None when static)."""
        return Sym(next(iter(self.sym_index))) if self.sym_index else None


def make_plan(planned: Planned, family: str, caps, kind: str) -> Plan:
    """The plan of a Planned graph for a target of this family: the packed results placed after the per-call
    buffers, every value's slot. LoweringError for size symbols on a target without Caps.dynamic_rows."""
    graph, memory = planned.graph, planned.memory
    sym_index = symbol_slots(graph)
    if sym_index and not caps.dynamic_rows:
        raise LoweringError(f"symbolic sizes on the {kind} target: its runtime takes no symbolic sizes or offsets, "
                            f"so it builds per size")
    packed, end = {}, memory.workspace_bytes
    for gr in planned.prepack:
        for v in gr.outputs:
            packed[v.id] = end
            end += align64(max(v.type.numel * ITEMSIZE[v.dtype], 1))
    consts = graph.constants()
    tag, symbolic = SYMBOLIC[family]
    slots = {v.id: ("in", i) for i, v in enumerate(graph.inputs)}
    slots.update({v.id: ("const", i) for i, v in enumerate(consts)})
    slots.update({v.id: ("out", i) for i, v in enumerate(graph.outputs)})
    slots.update({vid: ("out", i) for vid, i in planned.into_out.items()})
    slots.update({vid: ("work", off) for vid, off in {**memory.offsets, **packed}.items()})
    slots.update({vid: ("work", (tag, off)) for vid, off in getattr(memory, symbolic).items()})
    slots.update({vid: slots[src.id] for vid, src in planned.packed_views.items()})
    slots.update({vid: slots[src.id] for vid, src in planned.views.items()})
    external = {ns[-1].name: (r.library, ns, r) for r in planned.regions for _, ns in r.matches}
    return Plan(planned.prepack, planned.main, slots, consts, memory, end, sym_index, external)


def scratch_args(params, at: int) -> tuple:
    """(the plan slots of a kernel's scratch buffers placed from byte `at` on, the end of the last one): scratch is
    shared by every kernel (they run one at a time), after the static workspace."""
    args = []
    for b in params:
        if b.scope == "scratch":
            args.append(("work", at))
            at += align64(b.nbytes)
    return args, at


def prepack_inputs(plan: Plan, graph, form: str) -> list:
    """The module's prepack_inputs. A library (this process, reading the inputs in place): the inputs the prepack
    step reads, whose change reruns it. A program (its own memory: a device, a page): every weight input, uploaded
    once and kept resident there, packed again when one changes."""
    if form == "library":
        return sorted({plan.slots[v.id][1] for gr in plan.prepack for v in gr.inputs if plan.slots[v.id][0] == "in"})
    return sorted(i for i, v in enumerate(graph.inputs) if v.id in graph.weights)


def symbol_slots(graph) -> dict:
    """Symbol name -> its slot in the workspace's symbol header: the symbols of the graph's input shapes (at most
    SYM_HEADER_SLOTS; CompileError otherwise)."""
    names = sorted({s.name for v in graph.inputs for d in v.shape for s in symbols_of(d)})
    if len(names) > SYM_HEADER_SLOTS:
        raise CompileError(f"inputs with {len(names)} size symbols ({', '.join(names)}); at most "
                           f"{SYM_HEADER_SLOTS} are supported: make some dimensions static")
    return {n: k for k, n in enumerate(names)}


def symbolic_slots(calls: list, header: int, sym_index: dict) -> list:
    """The plan's calls with the symbolic slots resolved: ("work", "header") -> the header's offset; ("work",
    ("sym", offset polynomial)) -> ("work", (base, header byte of the symbol, per)) for base + symbol x per, or
    ("work", (base, ((coefficient, (header bytes of the monomial's symbols)), ...))) for a polynomial (several
    symbols, s x s): the symbolic region starts after the header."""
    if not sym_index:
        return calls

    def slot(a):
        if a[0] == "work" and a[1] == "header":
            return ("work", header)
        if a[0] == "work" and isinstance(a[1], tuple):
            p = poly(a[1][1])
            base = header + 64 + p.pop((), 0)
            terms = tuple((c, tuple(header + 8 * sym_index[x.name] for x in m)) for m, c in p.items())
            if not terms:
                return ("work", base)
            if len(terms) == 1 and len(terms[0][1]) == 1:
                return ("work", (base, terms[0][1][0], terms[0][0]))
            return ("work", (base, terms))
        return a
    return [(name, [slot(a) for a in args]) for name, args in calls]


def symbolic_bytes(size) -> list:
    """A symbolic region's size as [[coefficient, [symbol names]], ...] (the runtime's sum of products)."""
    return [[c, [x.name for x in m]] for m, c in poly(size).items()]


def spec_shape(shape) -> tuple:
    """A graph shape as the runtime's TensorSpec shape: ints, and '4*s0'-style text for symbolic dims."""
    return tuple(d if isinstance(d, int) else dim_text(d) for d in shape)


def tensor_specs(values) -> list:
    """The runtime's TensorSpecs of graph values (the module's inputs or outputs)."""
    return [TensorSpec(v.name, spec_shape(v.shape), v.dtype) for v in values]
