"""Planned: a graph after the graph passes, with what each plan step (pipeline.PLAN_STEPS) found in it.

The steps fill it in order, each returning a copy with its fields set: hoist_weights (hoisted),
partition_external (regions, offload_notes: the target's -libs=, docs/byoc.md), fuse_groups
(groups), split_prepack (prepack, main, packed_views, views, into_out) and plan_buffers (memory). The driver's plan
turns it into slots, offsets and kernels."""
from __future__ import annotations

from dataclasses import dataclass, field

from .graph import Graph
from .passes.plan_memory import MemoryPlan


@dataclass(frozen=True)
class Planned:
    graph: Graph
    hoisted: frozenset = frozenset()    # ids of the values computed once per weight version (the prepack step)
    regions: tuple = ()                 # the external libraries' regions (passes/partition.py Region)
    offload_notes: dict = field(default_factory=dict)   # node name -> why it runs where it runs (with -libs=)
    groups: list = field(default_factory=list)      # every fused group, in execution order
    prepack: list = field(default_factory=list)     # the groups that make hoisted values only (run once per weights)
    main: list = field(default_factory=list)        # the groups run on every call
    packed_views: dict = field(default_factory=dict)    # id -> Value: a prepack result that is a reshape (no copy)
    views: dict = field(default_factory=dict)       # id -> Value: a per-call value that is a reshape (no copy)
    into_out: dict = field(default_factory=dict)    # id -> output index: an intermediate written into that output
    memory: MemoryPlan | None = None    # the per-call groups' buffers in one workspace
