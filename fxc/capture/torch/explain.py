"""fxc.explain: compile a model with the `fxc` torch.compile backend and report what happened (an Explanation,
recorder.py: what fxc compiled, what fell back to eager PyTorch and why, and the kernels).
"""
from __future__ import annotations

import torch
import torch._dynamo

from ...deploy.picture import write_picture
from ...driver.options import INTERNAL_OPTIONS
from ...errors import FxcError
from .backend import OPTION_NAMES, fxc_backend
from .drawing import explanation_drawing
from .recorder import Explanation, recording


def explain(model, *example_inputs, options: dict | None = None, picture=None, **option_keywords):
    """Compile `model` with torch.compile(backend="fxc") and report what happened (an Explanation).

    Two forms:

    - ``explain(model, options=None)(*args, **kwargs)``: torch._dynamo.explain's form. The call runs the model on
      `args` and `kwargs` (keyword inputs, e.g. a Hugging Face model's ``input_ids=..., attention_mask=...``)
      and returns the Explanation; fxc's options come only through `options`.
    - ``explain(model, *example_inputs, **options)``: runs at once on the positional inputs, every keyword an fxc
      option (the form before keyword inputs; `options=` may be given too).

    picture: also draw what was compiled to this file: .svg, .html (a page with a legend) or .dot; every fused group
    a cluster with its kernel name and launch shape, eager ops and offloaded groups in their own colours, tensor types
    on the edges (fxc/deploy/picture.py: graphviz's dot where installed, else fxc's own layout).

    An unknown option raises fxc.errors.FxcError naming the form for keyword inputs.
    """
    opts = dict(options or {}, **option_keywords)
    unknown = sorted(set(opts) - OPTION_NAMES)
    if unknown:
        raise FxcError(f"fxc.explain: {', '.join(unknown)}: not an fxc option (known: "
                       f"{', '.join(sorted(OPTION_NAMES - INTERNAL_OPTIONS))}); to give the model keyword inputs, "
                       f"write "
                       f"fxc.explain(model, options={{...}})(*args, **kwargs)")

    def run(*args, **kwargs) -> Explanation:
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
        if picture is not None:
            write_picture(explanation_drawing(rec.captured, rec.failures, f"fxc.explain: {type(model).__name__}"),
                          picture)
        return rec

    return run(*example_inputs) if example_inputs or option_keywords else run


def uncaptured_rnn_notes(model) -> list:
    """A note per kind of recurrent module in `model` that Dynamo leaves out of its graphs (it runs in eager PyTorch
    whole) while torch._dynamo.config.allow_rnn is off."""
    if torch._dynamo.config.allow_rnn or not isinstance(model, torch.nn.Module):
        return []
    kinds = sorted({type(m).__name__ for m in model.modules() if isinstance(m, torch.nn.RNNBase)})
    return [f"{k} ran uncaptured in eager PyTorch: Dynamo captures recurrent modules only with "
            f"torch._dynamo.config.allow_rnn = True (then fxc compiles it as a loop over time steps)" for k in kinds]
