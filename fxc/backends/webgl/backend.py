"""The webgl backend entry (fxc.backends.BACKENDS["webgl"]): GLSL ES fragment shaders over textures in a page."""
from __future__ import annotations

from ..backend import Backend
from ..glsl import needs_fp64
from ..integer_caps import check_integer_caps
from .program import render_webgl


def render(kernels: list, rows=None, caps=None) -> str:
    """The program at the page's texture width (Caps.texture_width); rows: its row kernels' offsets are uniforms,
    its textures fit the largest size; several texels a fragment where the page has the draw buffers
    (Caps.draw_buffers, fxc.backends.webgl.draw_buffers)."""
    check_integer_caps(kernels, caps, "this WebGL page")
    return render_webgl(kernels, caps.texture_width, *(rows or ()), draw_buffers=caps.draw_buffers)


BACKEND = Backend("webgl", "gpu", "program",
                  device_api="fxc.runtime.browser.webgl", render=render, needs_fp64=needs_fp64)
