"""`fxc devices`: every target kind and whether this host can run it; each OpenCL device and the GL device with
the capabilities fxc reads (Caps: fxc/target.py).

Takes nothing; produces lines of text. Opening a device is what answers the question (an OpenCL platform, an EGL
context, the headless Chromium for the browser targets), so this takes a few seconds.
"""
from __future__ import annotations

from ..backends import BACKENDS, check_runnable, fill
from ..errors import FxcError
from ..target import KINDS, Target


def caps_text(t: Target) -> str:
    """A target's Caps in one line: what its kernels may use."""
    c = t.caps
    parts = [f"{c.threads} {'threads' if t.is_cpu else 'compute units'}",
             f"vectors {c.vector_bits} bits x {c.vector_registers}" if t.is_cpu else
             f"work-groups <= {c.max_work_group_size}, local memory {c.local_memory_bytes // 1024} KiB",
             f"{c.index_bits}-bit indices"]
    missing = sorted({"float64", "int64", "float16"} - set(c.dtypes))
    if missing:
        parts.append(f"no {', '.join(missing)}")
    if not c.scatter:
        parts.append("no scatter")
    if c.page_kernels:
        parts.append(f"refused groups run as {c.page_kernels} kernels in the page")
    parts.append("dynamic batch in one build" if c.dynamic_rows else "builds per size")
    return "; ".join(parts)


def _device_name(device) -> str:
    """A device's name and driver (a browser page's from what the page reported)."""
    info = getattr(device, "info", None)
    if isinstance(info, dict) and "browser" in info:
        return f"{info['name']} ({info['driver']})"
    return str(device)


def _first_sentence(text: str) -> str:
    return text.split("; ")[0].split(". ")[0][:200]


def _opencl_targets() -> list:
    """`opencl -device=k` for every OpenCL device of this host ([] without OpenCL)."""
    from ..runtime.opencl.device import list_devices  # deferred: pyopencl is optional
    try:
        return [f"opencl -device={k}" for k in range(len(list_devices()))]
    except FxcError:
        return []


def clml_status() -> str:
    """Where a clml build's regions run on this host's first OpenCL device (CLML, or fxc's kernels and why)."""
    from ..runtime.opencl import clml  # deferred: pyopencl is optional
    try:
        why = clml.missing(fill("opencl").device)
    except FxcError as e:
        return f"builds here (= opencl -libs=clml), does not run here: {_first_sentence(str(e))}"
    if why is None:
        return "runs here: CLML regions on this device (= opencl -libs=clml)"
    return f"runs here as fxc's opencl kernels (= opencl -libs=clml): {why}"


def devices_lines() -> list:
    """One line per target kind (with the devices of opencl), saying what runs here and its caps."""
    lines = []
    for kind in KINDS:
        if kind == "clml":
            lines.append(f"{kind:<18} {clml_status()}")
            continue
        if kind not in BACKENDS:
            lines.append(f"{kind:<18} not built by this fxc (no backend of that kind here)")
            continue
        specs = (_opencl_targets() or [kind]) if kind == "opencl" else [kind]
        for spec in specs:
            try:
                t = fill(spec)
                check_runnable(t)
            except FxcError as e:
                lines.append(f"{spec:<18} builds here, does not run here: {_first_sentence(str(e))}")
                continue
            where = f"{t.mcpu}, {len(t.caps.features)} CPU features" if t.is_cpu else _device_name(t.device)
            lines.append(f"{spec:<18} runs here: {where}")
            lines.append(f"{'':<18}   {caps_text(t)}")
    return lines
