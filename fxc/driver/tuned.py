"""The tuned configs a build applies: the best record per workload of the tuning log (fxc/tuning/log.py) for the
target being built.

Takes the build options (tuning_log: a path; False: none; absent: the default log beside the compile cache, when it
exists) and the filled Target; produces {workload key: record} (`tuned_records`), a group's config in it
(`config_of`), the digest the module cache key takes, and the note a kernel's line carries when tuned.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from ..errors import FxcError
from ..tuning.log import best_for_target, default_log_path
from ..tuning.workload import target_key, workload_key
from .groups import group_signature
from .options import log


def log_path(options: dict) -> Path | None:
    """The build's tuning log: tuning_log= (a path), none for tuning_log=False, else the default log."""
    path = options.get("tuning_log")
    return None if path is False else default_log_path() if path is None else path


def tuned_records(options: dict, target) -> dict:
    """workload key -> the best record of the build's tuning log for this target (empty without one)."""
    path = options.get("tuning_log")
    if path is False:
        return {}
    if path is None:
        path = default_log_path()
        if not path.exists():
            return {}
    elif not isinstance(path, (str, os.PathLike)):
        raise FxcError(f"tuning_log={path!r}: give the path of a tuning log (fxc.tune writes one), or False to "
                       f"build with the default schedules")
    elif not Path(path).exists():
        raise FxcError(f"tuning_log={str(path)!r}: no such file; give the log fxc.tune(..., log=) wrote, or leave "
                       f"tuning_log out to use the default log ({default_log_path()})")
    best, notes = best_for_target(path, target_key(target))
    for note in notes:
        _note_once(note)
    return {k: r for k, r in best.items() if not k.startswith("offload:")}    # (those: driver/offload.py's)


_noted: set = set()


def _note_once(note: str) -> None:
    if note not in _noted:
        _noted.add(note)
        log(f"[fxc] {note}")


def config_of(tuned: dict, gr, target, threads: int) -> dict | None:
    """The tuned record of group gr (None: its schedules take their defaults)."""
    if not tuned:
        return None
    return tuned.get(workload_key(group_signature(gr), target, threads))


def graph_key(signature: str, target, threads: int) -> str:
    """The workload key of a graph-level knob's node (e.g. a conv's Winograd form): its signature, marked apart
    from the fused groups' signatures."""
    return workload_key("graph:" + signature, target, threads)


def graph_knob(tuned: dict, target, threads: int):
    """The graph passes' knob lookup (PassContext.knob): the tuned record's value for the node, else the default;
    None without tuned records."""
    if not tuned:
        return None

    def knob(signature, name, default, choices=(), doc="", node=None):
        rec = tuned.get(graph_key(signature, target, threads))
        value = rec["config"].get(name, default) if rec else default
        return value if value in (default, *choices) else default
    return knob


def tuned_digest(tuned: dict) -> str:
    """What the module cache key takes of the applied records: their workloads and configs."""
    if not tuned:
        return ""
    items = sorted((w, json.dumps(r["config"], sort_keys=True)) for w, r in tuned.items())
    return hashlib.sha256(repr(items).encode()).hexdigest()


def tuned_note(record: dict | None) -> str:
    """What a kernel's line says of its config: nothing for the defaults, else the tuned knobs."""
    if record is None:
        return ""
    knobs = ", ".join(f"{k}={v}" for k, v in sorted(record["config"].items())) or "defaults measured best"
    return f"  [tuned: {knobs}]"
