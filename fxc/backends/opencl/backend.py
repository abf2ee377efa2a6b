"""The opencl backend entry (fxc.backends.BACKENDS["opencl"]): OpenCL C, run through pyopencl."""
from __future__ import annotations

from ..backend import Backend
from ..integer_caps import check_integer_caps
from .render import needs_fp64, render_opencl


def render(kernels: list, rows=None, caps=None) -> str:
    check_integer_caps(kernels, caps, "this OpenCL device")
    return render_opencl(kernels)


BACKEND = Backend("opencl", "gpu", "program",
                  device_api="fxc.runtime.opencl.device", render=render, needs_fp64=needs_fp64)
