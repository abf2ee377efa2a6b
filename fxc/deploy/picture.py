"""A picture of a fused, planned graph: SVG, a self-contained HTML page, or graphviz DOT text.

Takes a Drawing: boxes (a fused group and its kernel, a group offloaded to another kind of kernel, an op that ran in
eager PyTorch; an input or output of the model) in execution order, optional regions around boxes (fxc.explain's
compiled subgraphs), and edges labelled with the tensor type they carry. `plan_drawing` makes one from a module's
kernel lines and launch plan (an in-process module or an artifact's manifest, `manifest_drawing`); fxc.explain makes
one from its captured graphs (fxc/capture/torch/drawing.py). `write_picture(drawing, path)` renders it: every box a
cluster (its kernel name and launch shape in the title, its ops as nodes inside), each kind in its own colour, the
types on the edges. Graphviz's `dot` lays it out where it is installed (Debian `graphviz`); without it (or with
layout="fxc") a layered layout of this module's own draws it. Imports only the standard library.
"""
from __future__ import annotations

import html
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import FxcError
from ..runtime.store import atomic_write

# kind -> (fill, border, legend text)
COLOURS = {
    "kernel": ("#dbeafe", "#2563eb", "fused group: one fxc kernel"),
    "prepack": ("#e0e7ff", "#6366f1", "weight prepacking: once per weight version"),
    "offload": ("#ffedd5", "#ea580c", "offloaded: another kind of kernel"),
    "eager": ("#fee2e2", "#dc2626", "ran in eager PyTorch"),
}
FORMATS = (".svg", ".html", ".dot")
_TYPE = re.compile(r"[a-z]+\d*\[[^\]]*\]")      # float32[1, 8, 8, 8], int64[s0, 64]


@dataclass
class Box:
    """One cluster of the picture (kind in COLOURS), or an input/output of the model (kind "input"/"output")."""
    kind: str
    title: str                  # the kernel's name, the eager op, the input's name
    ops: list = field(default_factory=list)     # the ops inside, in order (the nodes of the cluster)
    detail: str = ""            # launch shape, output type, why it fell back
    region: str = ""            # the enclosing region's title ("" for none)


@dataclass
class Drawing:
    title: str
    boxes: list = field(default_factory=list)
    edges: list = field(default_factory=list)   # (from box index, to box index, label)

    def add(self, box: Box) -> int:
        self.boxes.append(box)
        return len(self.boxes) - 1

    def connect(self, a: int, b: int, label: str = "") -> None:
        if a != b and (a, b, label) not in self.edges:
            self.edges.append((a, b, label))

    @property
    def clusters(self) -> int:
        """How many clusters a rendering has: one per group box, one per region."""
        return sum(b.kind in COLOURS for b in self.boxes) + len({b.region for b in self.boxes if b.region})


def _names(kernel: str, line: str) -> bool:
    return re.search(rf"(^|[\[:;, ]){re.escape(kernel)}([ :;,\]]|$)", line) is not None


def _step_lines(steps: list, lines: list) -> list:
    """The kernel line (the group) of each step: the group a step names (a row launch's `repeat`); else line i for
    step i where there is one step per line (CPU plans; device plans of one launch per group); else the line naming
    its kernel, the current one while its group's launches go on, the next one when a kernel comes again (groups
    of equal signature share their kernels). -1: no line names it."""
    if len(steps) == len(lines) and all(g is None for _, _, g in steps):
        return list(range(len(steps)))
    out, cur, on_cur = [], -1, set()
    for kernel, _, group in steps:
        if group is not None and 0 <= group < len(lines):
            li = group
        elif cur >= 0 and kernel not in on_cur and _names(kernel, lines[cur]):
            li = cur
        else:
            order = list(range(cur + 1, len(lines))) + list(range(cur + 1))
            li = next((i for i in order if _names(kernel, lines[i])), -1)
        if li != cur:
            on_cur = set()
        on_cur.add(kernel)
        cur = li
        out.append(li)
    return out


def _group_box(line: str, kernel: str) -> Box:
    """A Box for a kernel line: "k1_relu: conv2d+add+relu -> float32[..]" (CPU), "conv2d+add -> T  [opencl: k1
    grid 4 x block 64]" (devices), "... [wasm in the page: p3; webgl refused it: why]" (offloaded)."""
    text = line.split(": ", 1)[1] if line.startswith(f"{kernel}: ") else line
    ops_text, _, rest = text.partition(" -> ")
    outs = _TYPE.findall(rest.split("  [", 1)[0])
    tags = re.findall(r"\[([^\[\]]*(?:\[[^\]]*\][^\[\]]*)*)\]", rest[rest.find("  ["):]) if "  [" in rest else []
    launch = next((t.split(": ", 1)[1] for t in tags if ": " in t and not t.startswith("anchor")), "")
    kind = "offload" if " in the page: " in rest else "prepack" if "prepack" in tags else "kernel"
    if kind == "offload":       # "p3; webgl refused it: why" -> "webgl refused it: why"
        launch = launch.split(";", 1)[-1].strip()
    elif launch.startswith(f"{kernel} "):
        launch = launch[len(kernel) + 1:]
    detail = launch or ", ".join(outs)
    box = Box(kind, kernel, ops_text.split("+") if ops_text else [kernel], detail)
    box.outs = outs
    return box


def plan_drawing(title: str, lines: list, steps: list, inputs: list, outputs: list, drawing: Drawing | None = None,
                 region: str = "", hidden: frozenset = frozenset()) -> tuple:
    """Add a module's plan to `drawing` (a new one when None).

    lines: its kernel lines (Module.kernels, a manifest's "kernels"); steps: its launches in order, (kernel name,
    args as (slot kind, index) pairs: outputs first, then inputs, the group's index where the step names it or None);
    inputs, outputs: (name, type text) pairs. Returns
    (drawing, the input boxes (None for the inputs in `hidden`, e.g. weights), the output boxes). A group of several
    launches is one box."""
    d = drawing or Drawing(title)
    ins = [None if i in hidden else d.add(Box("input", n, detail=t, region=region))
           for i, (n, t) in enumerate(inputs)]
    writer: dict = {}           # slot -> (box, label) of its last writer
    prev, b = None, None
    for (kernel, args, _), li in zip(steps, _step_lines(steps, lines)):
        if li != prev or li < 0:        # (else the next launch of the same group: the same box)
            box = _group_box(lines[li], kernel) if li >= 0 else Box("kernel", kernel, [kernel])
            box.region = region
            b = d.add(box)
        prev = li
        n_out = max(len(getattr(d.boxes[b], "outs", ())), 1)
        for pos, (kind, ix) in enumerate(args):
            if kind in ("const", "null"):
                continue
            slot = (kind, repr(ix))
            if pos < n_out:             # written
                label = d.boxes[b].outs[pos] if pos < len(getattr(d.boxes[b], "outs", ())) else ""
                writer[slot] = (b, label)
            elif slot in writer:
                d.connect(writer[slot][0], b, writer[slot][1])
            elif kind == "in" and ix < len(ins) and ins[ix] is not None:
                d.connect(ins[ix], b, d.boxes[ins[ix]].detail)
    for b in d.boxes:
        b.__dict__.pop("outs", None)
    outs = [d.add(Box("output", n, detail=t, region=region)) for n, t in outputs]    # (below their writers)
    for ix, box in enumerate(outs):
        if ("out", repr(ix)) in writer:
            d.connect(writer["out", repr(ix)][0], box, writer["out", repr(ix)][1])
    return d, ins, outs


def _type_text(spec: dict) -> str:
    return f"{spec['dtype']}[{', '.join(map(str, spec['shape']))}]"


def manifest_drawing(manifest: dict, title: str) -> Drawing:
    """The Drawing of an artifact's plan (its manifest, as fxc.runtime.artifact.read gives it)."""
    steps = [(s["kernel"], [(k, ix) for k, ix in s["args"]], s["repeat"][0] if s.get("repeat") else None)
             for s in manifest["plan"]]
    d, _, _ = plan_drawing(title, manifest.get("kernels", []), steps,
                           [(s["name"], _type_text(s)) for s in manifest["inputs"]],
                           [(s["name"], _type_text(s)) for s in manifest["outputs"]])
    return d


def write_picture(drawing: Drawing, path, layout: str = "auto") -> Path:
    """Render `drawing` to `path`: .svg, .html (the SVG in a self-contained page with a legend) or .dot (graphviz
    text). layout: "auto" (graphviz's dot where installed, else fxc's own), "dot" (an FxcError without it) or
    "fxc". The file is written atomically; its folder must exist."""
    path = Path(path)
    if path.suffix not in FORMATS:
        raise FxcError(f"picture {path}: give a file name ending in {', '.join(FORMATS)}")
    if not path.parent.is_dir():
        raise FxcError(f"picture {path}: the folder {path.parent} does not exist; create it first")
    if layout not in ("auto", "dot", "fxc"):
        raise FxcError(f"unknown picture layout {layout!r}; valid: 'auto', 'dot', 'fxc'")
    dot = to_dot(drawing)
    if path.suffix == ".dot":
        atomic_write(path, dot.encode())
        return path
    svg = None
    if layout != "fxc":
        svg = _graphviz_svg(dot)
        if svg is None and layout == "dot":
            raise FxcError("graphviz's `dot` is not installed (Debian: apt-get install graphviz); use layout='fxc'")
    svg = svg or to_svg(drawing)
    atomic_write(path, (to_html(drawing, svg) if path.suffix == ".html" else svg).encode())
    return path


def _graphviz_svg(dot: str) -> str | None:
    exe = shutil.which("dot")
    if exe is None:
        return None
    try:
        r = subprocess.run([exe, "-Tsvg"], input=dot.encode(), capture_output=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if r.returncode != 0:
        return None
    text = r.stdout.decode()
    return text[text.find("<svg"):]


def _q(text: str) -> str:
    return '"' + str(text).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def to_dot(d: Drawing) -> str:
    """Graphviz text: every group box a cluster (class "group <kind>"), every region a dashed cluster around its
    boxes (class "region")."""
    out = [f"digraph fxc {{\n  graph [label={_q(d.title)}, labelloc=t, fontname=Helvetica, fontsize=16, "
           "rankdir=TB, nodesep=0.25, ranksep=0.35, compound=true];",
           '  node [fontname=Helvetica, fontsize=10, shape=box, style="rounded,filled", fillcolor=white, height=0.3];',
           "  edge [fontname=Helvetica, fontsize=9, color=\"#555555\"];"]
    ends = {}       # box -> (first node, last node, cluster or "")
    regions: dict = {}
    for i, b in enumerate(d.boxes):
        regions.setdefault(b.region, []).append(i)

    def emit(i, b, pad):
        if b.kind not in COLOURS:
            label = b.title + "\n" + b.detail
            out.append(f"{pad}b{i} [label={_q(label)}, shape=ellipse, style=filled, "
                       f"fillcolor=\"#f3f4f6\", class={_q(b.kind)}];")
            ends[i] = (f"b{i}", f"b{i}", "")
            return
        fill, border, _ = COLOURS[b.kind]
        label = b.title + (f"\n{b.detail}" if b.detail else "")
        out.append(f"{pad}subgraph cluster_g{i} {{ label={_q(label)}; style=\"rounded,filled\"; fillcolor={_q(fill)};"
                   f" color={_q(border)}; fontsize=10; class={_q('group ' + b.kind)};")
        names = [f"b{i}_{j}" for j in range(len(b.ops))]
        for n, op in zip(names, b.ops):
            out.append(f"{pad}  {n} [label={_q(op)}];")
        if len(names) > 1:
            out.append(f"{pad}  {' -> '.join(names)} [color={_q(border)}, arrowsize=0.5];")
        out.append(f"{pad}}}")
        ends[i] = (names[0], names[-1], f"cluster_g{i}")

    for k, (region, members) in enumerate(regions.items()):
        pad = "  "
        if region:
            out.append(f"  subgraph cluster_r{k} {{ label={_q(region)}; style=dashed; color=\"#6b7280\"; "
                       "class=\"region\";")
            pad = "    "
        for i in members:
            emit(i, d.boxes[i], pad)
        if region:
            out.append("  }")
    for a, b, label in d.edges:     # clipped at the clusters' borders
        clip = (f", ltail={ends[a][2]}" if ends[a][2] else "") + (f", lhead={ends[b][2]}" if ends[b][2] else "")
        out.append(f"  {ends[a][1]} -> {ends[b][0]} [label={_q(label)}{clip}];")
    out.append("}")
    return "\n".join(out) + "\n"


# ---- fxc's own layout: layers by longest path, boxes side by side in a layer, edges as curves ---------------------

CHAR_W, LINE_H, PAD, GAP_X, GAP_Y = 6.6, 18, 10, 24, 46


def _size(b: Box) -> tuple:
    texts = [b.title, b.detail] + list(b.ops)
    w = max(len(t) for t in texts) * CHAR_W + 2 * PAD + (12 if b.kind in COLOURS else 0)
    h = (2 if b.detail else 1) * LINE_H + PAD + (len(b.ops) * (LINE_H + 6) + PAD if b.kind in COLOURS else 0)
    return max(w, 80), h


def to_svg(d: Drawing) -> str:
    """The drawing laid out by fxc itself (no graphviz): an SVG with the same classes as graphviz's clusters."""
    n = len(d.boxes)
    layer = [0] * n
    preds: dict = {}
    for a, b, _ in d.edges:
        preds.setdefault(b, []).append(a)
    start = 0           # a region's first layer: below everything before it, so regions never share a layer
    for i in range(n):          # boxes are in execution order: a box's inputs come before it
        if i and d.boxes[i].region != d.boxes[i - 1].region:
            start = 1 + max(layer[:i])
        layer[i] = max(start, 1 + max((layer[p] for p in preds.get(i, ()) if p < i), default=-1))
    rows: dict = {}
    for i in range(n):
        rows.setdefault(layer[i], []).append(i)
    sizes = [_size(b) for b in d.boxes]
    width = max((sum(sizes[i][0] for i in r) + GAP_X * (len(r) - 1) for r in rows.values()), default=200) + 80
    width = max(width, len(d.title) * 9 + 40)
    pos, y = {}, 50.0
    for k in sorted(rows):
        r = rows[k]
        total = sum(sizes[i][0] for i in r) + GAP_X * (len(r) - 1)
        x = (width - total) / 2
        for i in r:
            pos[i] = (x, y)
            x += sizes[i][0] + GAP_X
        y += max(sizes[i][1] for i in r) + GAP_Y
    height = y + 10
    e = html.escape
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
           f'viewBox="0 0 {width:.0f} {height:.0f}" font-family="Helvetica, Arial, sans-serif">',
           '<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" '
           'orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" fill="#555"/></marker></defs>',
           f'<rect width="100%" height="100%" fill="white"/><text x="{width / 2:.0f}" y="28" font-size="16" '
           f'text-anchor="middle">{e(d.title)}</text>']
    regions: dict = {}
    for i, b in enumerate(d.boxes):
        if b.region:
            regions.setdefault(b.region, []).append(i)
    for title, members in regions.items():
        x0 = min(pos[i][0] for i in members) - 8
        y0 = min(pos[i][1] for i in members) - 22
        x1 = max(pos[i][0] + sizes[i][0] for i in members) + 8
        y1 = max(pos[i][1] + sizes[i][1] for i in members) + 8
        out.append(f'<g class="cluster region"><title>{e(title)}</title><rect x="{x0:.1f}" y="{y0:.1f}" '
                   f'width="{x1 - x0:.1f}" height="{y1 - y0:.1f}" rx="6" fill="none" stroke="#6b7280" '
                   f'stroke-dasharray="5,4"/><text x="{x0 + 6:.1f}" y="{y0 + 14:.1f}" font-size="11" '
                   f'fill="#374151">{e(title)}</text></g>')
    for a, b, label in d.edges:
        (xa, ya), (wa, ha) = pos[a], sizes[a]
        (xb, yb), (wb, _) = pos[b], sizes[b]
        x1, y1, x2, y2 = xa + wa / 2, ya + ha, xb + wb / 2, yb
        if y2 <= y1:        # (an output placed on the writer's row)
            y2 = y1 + 4
        mid = (y1 + y2) / 2
        out.append(f'<g class="edge"><path d="M {x1:.1f} {y1:.1f} C {x1:.1f} {mid:.1f}, {x2:.1f} {mid:.1f}, '
                   f'{x2:.1f} {y2 - 2:.1f}" fill="none" stroke="#555" marker-end="url(#arrow)"/>'
                   + (f'<text x="{(x1 + x2) / 2 + 4:.1f}" y="{mid + 3:.1f}" font-size="9" fill="#374151" '
                      f'paint-order="stroke" stroke="white" stroke-width="3">{e(label)}</text>' if label else "")
                   + "</g>")
    for i, b in enumerate(d.boxes):
        (x, y), (w, h) = pos[i], sizes[i]
        if b.kind not in COLOURS:
            out.append(f'<g class="node {b.kind}"><title>{e(b.title)}</title><rect x="{x:.1f}" y="{y:.1f}" '
                       f'width="{w:.1f}" height="{h:.1f}" rx="{h / 2:.1f}" fill="#f3f4f6" stroke="#6b7280"/>'
                       f'<text x="{x + w / 2:.1f}" y="{y + 15:.1f}" font-size="11" text-anchor="middle">'
                       f'{e(b.title)}</text><text x="{x + w / 2:.1f}" y="{y + 31:.1f}" font-size="9" '
                       f'text-anchor="middle" fill="#374151">{e(b.detail)}</text></g>')
            continue
        fill, border, _ = COLOURS[b.kind]
        parts = [f'<g class="cluster group {b.kind}"><title>{e(b.title)}</title><rect x="{x:.1f}" y="{y:.1f}" '
                 f'width="{w:.1f}" height="{h:.1f}" rx="6" fill="{fill}" stroke="{border}"/>'
                 f'<text x="{x + w / 2:.1f}" y="{y + 15:.1f}" font-size="11" font-weight="bold" '
                 f'text-anchor="middle">{e(b.title)}</text>']
        ty = y + LINE_H
        if b.detail:
            parts.append(f'<text x="{x + w / 2:.1f}" y="{ty + 12:.1f}" font-size="9" text-anchor="middle" '
                         f'fill="#374151">{e(b.detail)}</text>')
            ty += LINE_H
        ty += PAD / 2
        for op in b.ops:
            parts.append(f'<rect class="op" x="{x + PAD:.1f}" y="{ty:.1f}" width="{w - 2 * PAD:.1f}" '
                         f'height="{LINE_H:.1f}" rx="4" fill="white" stroke="{border}" stroke-width="0.6"/>'
                         f'<text x="{x + w / 2:.1f}" y="{ty + 13:.1f}" font-size="10" text-anchor="middle">'
                         f'{e(op)}</text>')
            ty += LINE_H + 6
        out.append("".join(parts) + "</g>")
    out.append("</svg>")
    return "\n".join(out)


def to_html(d: Drawing, svg: str) -> str:
    """A self-contained page: the title, a legend of the colours, counts, and the SVG."""
    e = html.escape
    counts = {k: sum(b.kind == k for b in d.boxes) for k in COLOURS}
    legend = "".join(f'<span class="key"><i style="background:{f};border-color:{c}"></i>{e(t)}: {counts[k]}</span>'
                     for k, (f, c, t) in COLOURS.items())
    return (f'<!doctype html>\n<html><head><meta charset="utf-8"><title>{e(d.title)}</title><style>'
            "body{font-family:Helvetica,Arial,sans-serif;margin:16px;color:#111}h1{font-size:18px;margin:0 0 8px}"
            ".key{margin-right:18px;font-size:13px;white-space:nowrap}.key i{display:inline-block;width:14px;"
            "height:14px;border:1px solid;border-radius:3px;margin-right:5px;vertical-align:-2px}"
            "#graph{margin-top:12px;overflow:auto}</style></head>\n"
            f'<body><h1>{e(d.title)}</h1><div class="legend">{legend}</div>\n<div id="graph">{svg}</div>'
            "</body></html>\n")


def module_drawing(module, title: str, drawing: Drawing | None = None, region: str = "",
                   hidden: frozenset = frozenset()) -> tuple:
    """plan_drawing of a runtime module built in this process (its `kernels` lines and its `plan`)."""
    steps = [(s.kernel, list(s.args), s.repeat[0] if s.repeat else None) if hasattr(s, "kernel") else
             (s[0], list(s[1]), None) for s in module.plan]
    spec = lambda s: (s.name, f"{s.dtype}[{', '.join(map(str, s.shape))}]")    # noqa: E731
    return plan_drawing(title, list(module.kernels), steps, [spec(s) for s in module.inputs],
                        [spec(s) for s in module.outputs], drawing, region, hidden)
