"""Workload and target keys: what a tuning record is about, and what a compile looks it up by.

Takes a fused group's signature (fxc.driver.groups.group_signature: its ops, attributes, wiring and types), the
filled Target and the threads its kernels run on; produces short stable keys (sha256 prefixes). Two groups with the
same key compile to the same code, so a record measured for one applies to the other, in any model.
"""
from __future__ import annotations

import hashlib
import os


def target_key(target) -> str:
    """The target a measurement holds for: its string, machine key (triple, CPU, features) and device name."""
    device = str(target.device) if getattr(target, "device", None) is not None else ""
    return _digest(f"{target}\n{target.machine_key}\n{device}")


def workload_key(signature: str, target, threads: int) -> str:
    """The key of one fused group on one target with `threads` threads."""
    return _digest(f"{signature}\n{target_key(target)}\n{threads}")


def threads_of(target) -> int:
    """The threads a target's kernels run on (a CPU's FXC_NUM_THREADS or Caps.threads; a device's compute units)."""
    if target.is_cpu:
        return int(os.environ.get("FXC_NUM_THREADS", "0") or 0) or target.caps.threads
    return target.caps.threads


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:24]
