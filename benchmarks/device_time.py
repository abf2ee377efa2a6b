"""The device timing loop of the OpenCL microbenchmarks (opencl_gemm, opencl_gemv, opencl_window).

Takes a module built with profile=True (fxc.driver.build, or fxc.from_torch's `.module`) and the arguments of a call;
produces device times in ms from the kernels' OpenCL profiling events: no host copies, no Python overhead."""
from __future__ import annotations

import statistics


def device_ms(module, call, *args) -> float:
    """One call(*args) (the module itself, or a from_torch wrapper around it): its kernels' device time, summed."""
    module.profile(reset=True)
    call(*args)
    return sum(r["total_ms"] for r in module.profile())


def device_times(module, args: tuple, runs: int, call=None) -> tuple:
    """(fastest, median) device time of `runs` calls, in ms; `call` defaults to the module."""
    times = [device_ms(module, call or module, *args) for _ in range(runs)]
    return min(times), statistics.median(times)


def table_row(label: str, cells, label_width: int, cell_width: int) -> str:
    """One line of a benchmark table: the label left-aligned, each cell (a (min, median) pair in ms: "min/median";
    any other value as it is) right-aligned."""
    text = ["{:.3f}/{:.3f}".format(*c) if isinstance(c, tuple) else str(c) for c in cells]
    return f"{label:<{label_width}}" + "".join(f"{t:>{cell_width}}" for t in text)
