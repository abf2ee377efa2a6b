"""The webgpu backend entry (fxc.backends.BACKENDS["webgpu"]): WGSL compute shaders in a browser page."""
from __future__ import annotations

from ..backend import Backend
from ..integer_caps import check_integer_caps
from .wgsl import needs_fp64, render_wgsl


def render(kernels: list, rows=None, caps=None) -> str:
    check_integer_caps(kernels, caps, "this WebGPU device")
    return render_wgsl(kernels)


BACKEND = Backend("webgpu", "gpu", "program",
                  device_api="fxc.runtime.browser.webgpu", render=render, needs_fp64=needs_fp64)
