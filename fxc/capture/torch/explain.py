"""fxc.explain's record: what fxc compiled, what fell back to eager PyTorch and why, and the kernels.

Takes a model and inputs (explain) or a `with recording()` block; produces an Explanation. The torch.compile
backend (fxc/capture/torch/backend.py) fills every active recorder through `_record`.
"""
from __future__ import annotations

import collections
import contextlib
from dataclasses import dataclass, field

from ...errors import FxcError

_recorders: list = []      # the active Explanations (one list, shared with fxc.capture.torch.backend)


@dataclass
class Explanation:
    compiled_ops: collections.Counter = field(default_factory=collections.Counter)
    fallback_ops: collections.Counter = field(default_factory=collections.Counter)
    fallback_reasons: dict = field(default_factory=dict)
    kernels: list = field(default_factory=list)
    graphs: int = 0
    subgraphs: int = 0
    failures: list = field(default_factory=list)   # subgraphs that failed to compile and ran eagerly
    notes: list = field(default_factory=list)      # what ran outside every captured graph, and the switch for it
    inference_graphs: int = 0      # graphs compiled for grad mode off, without AOT autograd (torch_inference.py)

    def __str__(self):
        lines = [f"fxc: {self.graphs} captured graph(s), {self.subgraphs} compiled subgraph(s), "
                 f"{sum(self.compiled_ops.values())} ops compiled, {sum(self.fallback_ops.values())} fell back"]
        lines += [f"note: {n}" for n in self.notes]
        if self.failures:
            lines.append("subgraphs that failed to compile (ran in eager PyTorch):")
            lines += [f"  {f}" for f in self.failures]
        if self.fallback_ops:
            lines.append("fell back to eager PyTorch:")
            for op, n in self.fallback_ops.most_common():
                lines.append(f"  {op} x{n}: {self.fallback_reasons.get(op, '')}")
        lines.append("compiled ops: " + ", ".join(f"{op} x{n}" for op, n in self.compiled_ops.most_common()))
        lines.append(f"kernels ({len(self.kernels)}):")
        lines += [f"  {k}" for k in self.kernels]
        return "\n".join(lines)


@contextlib.contextmanager
def recording():
    """An Explanation that every fxc compile and call inside the block fills (fxc.explain, the fuzzer)."""
    rec = Explanation()
    _recorders.append(rec)
    try:
        yield rec
    finally:
        _recorders.remove(rec)


def explain(model, *example_inputs, options: dict | None = None, **option_keywords):
    """Compile `model` with torch.compile(backend="fxc") and report what happened (an Explanation).

    Two forms:

    - ``explain(model, options=None)(*args, **kwargs)``: torch._dynamo.explain's form. The call runs the model on
      `args` and `kwargs` (keyword inputs, e.g. a Hugging Face model's ``input_ids=..., attention_mask=...``)
      and returns the Explanation; fxc's options come only through `options`.
    - ``explain(model, *example_inputs, **options)``: runs at once on the positional inputs, every keyword an fxc
      option (the form before keyword inputs; `options=` may be given too).

    An unknown option raises fxc.errors.FxcError naming the form for keyword inputs.
    """
    from .backend import OPTION_NAMES, fxc_backend
    opts = dict(options or {}, **option_keywords)
    unknown = sorted(set(opts) - OPTION_NAMES)
    if unknown:
        raise FxcError(f"fxc.explain: {', '.join(unknown)}: not an fxc option (known: "
                       f"{', '.join(sorted(OPTION_NAMES))}); to give the model keyword inputs, write "
                       f"fxc.explain(model, options={{...}})(*args, **kwargs)")

    def run(*args, **kwargs) -> Explanation:
        import torch._dynamo
        torch._dynamo.reset()
        try:
            with recording() as rec:
                rec.notes.extend(uncaptured_rnn_notes(model))
                compiled = torch.compile(model, backend=fxc_backend, options=opts or None)
                with torch.no_grad():
                    compiled(*args, **kwargs)
        finally:
            torch._dynamo.reset()
        if not rec.graphs:
            rec.notes.append("Dynamo captured no graph: the whole model ran in eager PyTorch (torch._dynamo.explain"
                             "(model)(*inputs) lists its graph breaks; e.g. nn.Transformer* with a mask but no "
                             "is_causal= compares the mask's values, which Dynamo cannot trace)")
        return rec

    return run(*example_inputs) if example_inputs or option_keywords else run


def uncaptured_rnn_notes(model) -> list:
    """A note per kind of recurrent module in `model` that Dynamo leaves out of its graphs (it runs in eager PyTorch
    whole) while torch._dynamo.config.allow_rnn is off."""
    import torch._dynamo
    if torch._dynamo.config.allow_rnn or not isinstance(model, torch.nn.Module):
        return []
    kinds = sorted({type(m).__name__ for m in model.modules() if isinstance(m, torch.nn.RNNBase)})
    return [f"{k} ran uncaptured in eager PyTorch: Dynamo captures recurrent modules only with "
            f"torch._dynamo.config.allow_rnn = True (then fxc compiles it as a loop over time steps)" for k in kinds]


def _record(fn):
    for r in list(_recorders):
        fn(r)
