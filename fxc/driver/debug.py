"""The debug folder of a build (FXC_DEBUG_DIR, like TORCH_COMPILE_DEBUG): one folder per compile holding

    graph_00_input.txt, graph_01_infer_types.txt, ...   the graph as it came, then after each pass of PIPELINE
    plan.txt          the fused groups in execution order (prepack first) and the memory plan
    loop_ir.txt       every kernel's loop IR
    source.txt        the generated code (LLVM IR, OpenCL C, GLSL, WGSL)
    report.txt        the kernels (what fxc.explain lists), the workspace, the build time
    graph.html        the picture of the fused graph (fxc/deploy/picture.py)

Takes the build's level (FXC_DEBUG or the debug option) and the environment; produces a `Debug`, the level as an
int (what `dbg >= 3` reads) that also collects the texts the build hands it and writes them, each atomically, into
FXC_DEBUG_DIR/<date>-<time>-<pid>-<n>-<target kind>/ at the end of the build. Without FXC_DEBUG_DIR it collects
nothing.
"""
from __future__ import annotations

import itertools
import os
import time
from pathlib import Path

from ..deploy.picture import module_drawing, write_picture
from ..errors import FxcError
from ..runtime.store import atomic_write
from .options import log
from .progress import Progress

_seq = itertools.count()


class Debug(int):
    """The FXC_DEBUG level, with the FXC_DEBUG_DIR folder of this build (None without one)."""

    folder: Path | None
    progress: Progress          # the build's progress line (set by the build: driver/progress.py)

    def __new__(cls, level: int, kind: str = ""):
        self = super().__new__(cls, level)
        root = os.environ.get("FXC_DEBUG_DIR", "")
        self.folder = Path(root) / f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}-{next(_seq):03d}-{kind}" \
            if root else None
        self.texts: dict = {}
        return self

    def note(self, name: str, text: str) -> None:
        """Add `text` to the file `name` of the folder (several notes of one name follow each other)."""
        if self.folder is not None:
            self.texts.setdefault(name, []).append(text)

    def write(self, module, target: str, seconds: float) -> None:
        """Write the folder: what was noted, the report and the picture of `module` (built for `target`)."""
        if self.folder is None:
            return
        try:
            self.folder.mkdir(parents=True)
        except OSError as e:
            raise FxcError(f"FXC_DEBUG_DIR: cannot make {self.folder}: {e.strerror or e}") from None
        lines = [f"target: {target}", f"built in {seconds:.3f} s",
                 f"workspace: {module.workspace_bytes} B", f"kernels ({len(module.kernels)}):"]
        self.note("report.txt", "\n".join(lines + [f"  {k}" for k in module.kernels]))
        for name, texts in self.texts.items():
            atomic_write(self.folder / name, ("\n\n".join(texts) + "\n").encode())
        drawing, _, _ = module_drawing(module, f"fxc build {self.folder.name}")
        write_picture(drawing, self.folder / "graph.html")
        log(f"[fxc] debug folder: {self.folder}")


def plan_text(planned) -> str:
    """The plan steps' result (a relay_like Planned) as text: every fused group in execution order, the memory plan."""
    pre = {id(g) for g in planned.prepack}
    lines = [f"{len(planned.groups)} fused groups ({len(planned.prepack)} prepack: once per weight version)"]
    lines += [f"  g{i}: {g.describe()}" + ("  [prepack]" if id(g) in pre else "") for i, g in enumerate(planned.groups)]
    if planned.memory is not None:
        lines.append(f"memory: workspace {planned.memory.workspace_bytes} B, {planned.memory.total_bytes} B unshared")
    return "\n".join(lines)
