"""The opengl backend entry (fxc.backends.BACKENDS["opengl"]): GLSL compute shaders on the process's GL context."""
from __future__ import annotations

from ..backend import Backend
from ..glsl import needs_fp64, render_glsl
from ..integer_caps import check_integer_caps


def render(kernels: list, rows=None, caps=None) -> str:
    check_integer_caps(kernels, caps, "this GL context")
    return render_glsl(kernels)


BACKEND = Backend("opengl", "gpu", "program",
                  device_api="fxc.runtime.opengl.device", render=render, needs_fp64=needs_fp64)
