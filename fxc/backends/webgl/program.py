"""The `webgl` target's program: device Kernels -> one JSON text the browser runtime (fxc/runtime/browser/webgl)
draws: the texture width, the elements a texel, and per kernel its fragment shader, parameters and output.

Each kernel is rendered by the draw-buffers renderer (fxc.backends.webgl.draw_buffers: several texels a fragment)
where it gains from it and the device has the draw buffers, else by the lanes renderer (fxc.backends.webgl.lanes:
four outputs a fragment); a draw-buffer part of few rows is drawn as tiles (part_tiles).
"""
from __future__ import annotations

import json

from .draw_buffers import DrawBuffersRenderer, split_draw_buffers
from .lanes import TEXEL_WIDTH, WebGLLanesRenderer

PART_ROWS = 32      # the rows a draw-buffer part's draw spans at least, where it can (see part_tiles)


def part_tiles(split: int, block: int, width: int) -> int:
    """Into how many tiles a draw-buffer part of `split` texels (whole rows of `width`: R rows) is drawn: T tiles
    of `width / T` texels by R rows, one under another, so the draw spans R x T rows. SwiftShader shares a draw
    among its threads by rows: BERT's 128x1024 @ 1024x256 matmul, a part of 2 rows of 1024 texels, took 36-41 ms a
    draw; drawn 64 texels wide (32 rows), 19-22 ms (benchmarks.webgl_matmul_micro --width). 0: drawn as it is
    (parts in runs of `block`, parts not whole rows, or already PART_ROWS rows)."""
    if block != split or split % width or split // width >= PART_ROWS:
        return 0
    rows, tiles = split // width, 1
    while rows * tiles < PART_ROWS and width // (2 * tiles) >= 64:
        tiles *= 2
    return tiles if tiles > 1 else 0


def render_webgl(kernels: list, width: int, offsets=frozenset(), elements: int = 0, draw_buffers: int = 1) -> str:
    """The WebGL program as JSON text: the texture width (at most `width`: the narrowest power of two >= 64 that holds
    every tensor in 2048 rows, WebGL 2's least MAX_TEXTURE_SIZE), the elements a texel (`lanes`: RGBA textures, four
    outputs a fragment, fxc.backends.webgl.lanes), and per kernel its fragment shader, its parameters' dtypes and
    sizes, and which parameter it writes. `offsets`: the names of the kernels that run as row launches (a uniform
    texel offset per parameter, fxc/driver/rows.py); `elements`: the largest tensor at the symbol's largest size;
    `draw_buffers`: the draw buffers a draw may write (Caps.draw_buffers): a kernel that gains from writing several
    texels a fragment (fxc.backends.webgl.draw_buffers) has "targets" (the draw buffers it writes) and "split"
    (texels a part) in its record."""
    texels = max([-(-b.size // TEXEL_WIDTH) for k in kernels for b in k.params] + [-(-elements // TEXEL_WIDTH), 1])
    width = min(width, max(64, 1 << (-(-texels // 2048) - 1).bit_length()))    # as narrow as fits 2048 rows:
    out = {"width": width, "lanes": TEXEL_WIDTH, "kernels": {}}       # a draw of few fragments still spans whole quads
    for k in kernels:
        split = split_draw_buffers(k, draw_buffers) if k.name not in offsets else None
        r = DrawBuffersRenderer(split[0], width, split[1], split[4]) if split else None
        if r is None or r.mode != "lanes":
            r, split = WebGLLanesRenderer(k, width, k.name in offsets), None
        tiles = part_tiles(split[2], split[3], width) if split else 0
        if tiles:
            r.tiles = (tiles, split[2] // width)
        text = r.kernel_text()
        out["kernels"][k.name] = {"shader": text, "output": k.params.index(r.outputs[0]),
                                  "params": [[b.dtype, b.size] for b in k.params], "checks": r.checks}
        if split:
            out["kernels"][k.name].update(targets=split[1], split=split[2])
            if tiles:
                out["kernels"][k.name]["tiles"] = tiles
            if split[3] != split[2]:        # parts in runs of `block` texels (e.g. pixels within a channel block)
                out["kernels"][k.name]["block"] = split[3]
    return json.dumps(out)
