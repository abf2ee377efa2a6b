"""Qualcomm's Adreno OpenCL ML SDK (CLML) as fxc's "clml" target (= "opencl -libs=clml"): its pattern table
(patterns.py: TVM's checks over fxc's graph IR, reading Caps), the codegen of a region to its serialised region
graph (codegen.py; docs/byoc.md), and the plan step "clml:region" that the OpenCL runtime runs through a C shim
built on the user's machine against their SDK (fxc/runtime/opencl/clml.py).

CLML regions are whole-region calls chosen by pattern (as TVM's partition_for_clml does): fxc's own OpenCL kernels
for every region stay in the plan behind its step, and the runtime runs them where the device lacks
cl_qcom_ml_ops or the SDK is not installed (a warning, once), so a clml build runs on any OpenCL device.
"""
from __future__ import annotations

from ..library import Library
from .codegen import region_graph
from .patterns import PATTERNS


def lower(region, leaving: set) -> tuple:
    """("clml:region", (), operand Values outputs first, the region graph text) of a region; leaving: the ids of
    the values read after it."""
    text, operands = region_graph(region, leaving)
    return "clml:region", (), operands, text


LIBRARY = Library("clml", ("opencl",), PATTERNS, lower, "fxc.runtime.opencl.clml", whole_regions=True)
