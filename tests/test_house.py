"""The rules of the house (shared/DESIGN.md, "Layout" and "Rules of the house"), read from fxc's own imports.

Every module of fxc/ is parsed with ast (nothing is imported); every import statement in it, at the top or inside a
function, relative or absolute, is an arrow from that module to the fxc module it names, or to the top-level name
of the package it names outside fxc (torch, pyopencl...). The tests fail on an import circle, on an arrow that
breaks a layer rule, and on an import deferred into a function without a comment saying why."""
import ast
import functools
from dataclasses import dataclass
from pathlib import Path

import pytest

FXC = Path(__file__).resolve().parents[1] / "fxc"

FRAMEWORKS = {"torch", "torchvision", "mxnet", "onnx", "onnxruntime"}
# optional or slow-to-import dependencies: the only outside packages an import inside a function may defer
HEAVY = FRAMEWORKS | {"pyopencl", "moderngl", "playwright", "llvmlite"}
# the device APIs of fxc/runtime (a device's handle, its modules, its page); the plan records, the weight state and
# the on-disk store are not device code
DEVICE_APIS = ("fxc.runtime.cpu", "fxc.runtime.opencl", "fxc.runtime.opengl", "fxc.runtime.browser",
               "fxc.runtime.device_module")
# the layers that use the compiler rather than make it up: the public API (fxc/__init__.py), the CLI, the frameworks'
# capture, the driver, export and the web package, the tuner, the test models and sweeps, the other stacks' adapters
ABOVE_THE_COMPILER = {"fxc", "fxc.cli", "fxc.mxnet", "fxc.capture", "fxc.driver", "fxc.deploy", "fxc.tuning",
                      "fxc.testing", "fxc.compat"}
# what the driver may import of fxc/backends: the registry (BACKENDS) and the Backend protocol
BACKEND_REGISTRY = {"fxc.backends", "fxc.backends.backend"}


@dataclass(frozen=True)
class Import:
    """One arrow: `importer` imports `imported` (an fxc module, or the top-level name of an outside package)."""
    importer: str
    imported: str
    line: int
    function: str | None        # the function the import is in; None at module level
    commented: bool             # the statement's line(s) carry a comment (other than a noqa)

    def __str__(self) -> str:
        where = f"line {self.line}" + (f", in {self.function}()" if self.function else "")
        return f"{self.importer} imports {self.imported} ({where})"


@functools.cache
def modules() -> dict:
    """Every module of fxc/: dotted name -> path."""
    found = {}
    for path in sorted(FXC.rglob("*.py")):
        parts = path.relative_to(FXC.parent).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def within(module: str, layer: str) -> bool:
    """`module` is `layer` or lies under it (fxc.runtime.opencl.device is within fxc.runtime)."""
    return module == layer or module.startswith(layer + ".")


def nearest_module(dotted: str) -> str:
    """The fxc module a dotted name reaches (fxc.a.b.name -> fxc.a.b); outside fxc, the top-level package name."""
    if not within(dotted, "fxc"):
        return dotted.split(".")[0]
    while dotted not in modules() and "." in dotted:
        dotted = dotted.rsplit(".", 1)[0]
    return dotted


def targets_of(node, module: str, is_package: bool) -> list:
    """The modules an Import / ImportFrom node of `module` reaches."""
    if isinstance(node, ast.Import):
        return [nearest_module(alias.name) for alias in node.names]
    base = node.module or ""
    if node.level:
        package = module if is_package else module.rsplit(".", 1)[0]
        parts = package.split(".")
        package = ".".join(parts[:len(parts) - node.level + 1])
        base = f"{package}.{base}" if base else package
    # `from package import name`: the submodule when `name` is one, else the package itself
    return [nearest_module(f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules() else base)
            for alias in node.names]


def has_comment(lines: list, node) -> bool:
    """Whether the import's line(s) carry a comment other than a bare `# noqa`."""
    for text in lines[node.lineno - 1:node.end_lineno]:
        if "#" in text:
            comment = text.split("#", 1)[1].strip()
            if comment and not comment.lower().startswith("noqa"):
                return True
    return False


def imports_of(module: str, path: Path) -> list:
    source = path.read_text()
    lines = source.splitlines()
    found = []

    def visit(node, function):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                visit(child, child.name if function is None else function)
            elif isinstance(child, (ast.Import, ast.ImportFrom)):
                commented = has_comment(lines, child)
                for imported in targets_of(child, module, path.name == "__init__.py"):
                    if imported != module:
                        found.append(Import(module, imported, child.lineno, function, commented))
            else:
                visit(child, function)

    visit(ast.parse(source, str(path)), None)
    return found


@functools.cache
def all_imports() -> tuple:
    return tuple(imp for module, path in modules().items() for imp in imports_of(module, path))


# ------------------------------------------------------------------------------------------------- circles
def import_circles() -> list:
    """A line for every group of fxc modules that import each other (a strongly connected component of more than one
    module): a shortest circle through its first module, and the whole group when it is larger."""
    arrows = {}
    for imp in all_imports():
        if imp.imported in modules():
            arrows.setdefault(imp.importer, set()).add(imp.imported)
    circles = []
    for group in strongly_connected(arrows):
        if len(group) > 1:
            circle = " -> ".join(path_around(sorted(group)[0], group, arrows))
            if len(group) > circle.count(" -> "):
                circle += f"  (and more: {len(group)} modules import each other: {', '.join(sorted(group))})"
            circles.append(circle)
    return sorted(circles)


def strongly_connected(arrows: dict) -> list:
    """Tarjan's strongly connected components of the graph `arrows` (module -> set of modules), iteratively."""
    index, low, stack, on_stack, groups = {}, {}, [], set(), []
    for root in sorted(arrows):
        if root in index:
            continue
        work = [(root, iter(sorted(arrows.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, rest = work[-1]
            step = next(rest, None)
            if step is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    group = set()
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        group.add(member)
                        if member == node:
                            break
                    groups.append(group)
            elif step not in index:
                index[step] = low[step] = len(index)
                stack.append(step)
                on_stack.add(step)
                work.append((step, iter(sorted(arrows.get(step, ())))))
            elif step in on_stack:
                low[node] = min(low[node], index[step])
    return groups


def path_around(start: str, group: set, arrows: dict) -> list:
    """A shortest way from `start` back to itself through `group` (breadth first), `start` at both ends."""
    parent, frontier = {start: None}, [start]
    while frontier:
        following = []
        for node in frontier:
            for step in sorted(arrows.get(node, ())):
                if step == start:
                    path = [node]
                    while parent[path[-1]] is not None:
                        path.append(parent[path[-1]])
                    return path[::-1] + [start]
                if step in group and step not in parent:
                    parent[step] = node
                    following.append(step)
        frontier = following
    raise AssertionError(f"{start} is in a circle but has no way back")


def test_no_import_circles():
    circles = import_circles()
    if circles:
        pytest.fail(f"{len(circles)} import circles (top-level and in-function imports alike):\n"
                    + "\n".join(f"  {circle}" for circle in circles), pytrace=False)


# --------------------------------------------------------------------------------------------- layer rules
def is_device_api(module: str) -> bool:
    return any(within(module, api) for api in DEVICE_APIS)


def is_renderer(module: str) -> bool:
    """A module of fxc/backends other than the registry and the backends' entries (<kind>/backend.py: a Backend
    names its module class and its device API's caps, so the entries may import device code)."""
    return within(module, "fxc.backends") and module != "fxc.backends" and module.rsplit(".", 1)[-1] != "backend"


def above_the_compiler(module: str) -> bool:
    return module == "fxc" or any(within(module, layer) for layer in ABOVE_THE_COMPILER - {"fxc"})


RULES = {
    "the runtime imports nothing above it (capture, ops, relay_like, lowering, backends, driver, tuning, the public "
    "API) and no framework or llvmlite":
        (lambda m: within(m, "fxc.runtime"),
         lambda t: above_the_compiler(t) or t in FRAMEWORKS | {"llvmlite"}
         or any(within(t, f"fxc.{layer}") for layer in ("ops", "relay_like", "lowering", "backends"))),
    "fxc/target.py is data: it imports no backend and no device API":
        (lambda m: m == "fxc.target",
         lambda t: within(t, "fxc.backends") or is_device_api(t)),
    "a renderer imports no device API":
        (is_renderer, is_device_api),
    "relay_like, ops and lowering import no framework and nothing above them":
        (lambda m: any(within(m, f"fxc.{layer}") for layer in ("relay_like", "ops", "lowering")),
         lambda t: t in FRAMEWORKS or above_the_compiler(t)),
    "lowering imports no ops (op files hold compute definitions; lowering takes them as computes)":
        (lambda m: within(m, "fxc.lowering"),
         lambda t: within(t, "fxc.ops")),
    "the driver finds a backend only through the registry (fxc.backends.BACKENDS), never a backend module by name":
        (lambda m: within(m, "fxc.driver"),
         lambda t: within(t, "fxc.backends") and t not in BACKEND_REGISTRY),
}


@pytest.mark.parametrize("rule", list(RULES), ids=["runtime", "target", "renderer", "graph", "lowering", "driver"])
def test_layer_rule(rule):
    importer, forbidden = RULES[rule]
    breaks = sorted({str(imp) for imp in all_imports() if importer(imp.importer) and forbidden(imp.imported)})
    if breaks:
        pytest.fail(f"{len(breaks)} imports break the rule: {rule}\n" + "\n".join(f"  {b}" for b in breaks),
                    pytrace=False)


# ------------------------------------------------------------------------------------------ deferred imports
def test_deferred_imports_say_why():
    """An import inside a function only defers an optional or heavy dependency (torch, pyopencl, playwright...) or
    breaks a real startup cost: every such import of an fxc module or of a heavy dependency says which in a comment
    on its line (e.g. `# deferred: pyopencl is optional`)."""
    deferred = [imp for imp in all_imports() if imp.function is not None
                and (imp.imported in HEAVY or within(imp.imported, "fxc"))]
    silent = sorted({str(imp) for imp in deferred if not imp.commented})
    if silent:
        pytest.fail(f"{len(silent)} of the {len(deferred)} imports inside functions (of fxc modules or of "
                    f"{', '.join(sorted(HEAVY))}) carry no comment saying why they are deferred:\n"
                    + "\n".join(f"  {s}" for s in silent), pytrace=False)


def test_the_house_test_reads_the_tree():
    """The walk itself: every fxc module is found, and imports of every form (absolute, relative, of a submodule, of
    a name, inside a function) are read."""
    assert {"fxc", "fxc.target", "fxc.errors"} <= set(modules()) and len(modules()) > 100
    arrows = {(imp.importer, imp.imported) for imp in all_imports()}
    assert ("fxc", "fxc.errors") in arrows                              # `from .errors import FxcError`
    assert any(imp.function for imp in all_imports())
    assert any(imp.imported == "numpy" for imp in all_imports())
