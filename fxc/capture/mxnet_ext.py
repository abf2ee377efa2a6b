"""fxc inside MXNet: the partitioner `fxc`, so `sym.optimize_for("fxc", args, aux)` and
`block.optimize_for(x, backend="fxc")` run the ops fxc supports as fxc-compiled subgraphs and leave the rest to
MXNet.

Takes the installed mxnet wheel (its `include/mxnet/lib_api.h` and `src/lib_api.cc`) and `mxnet_fxc.cc` beside
this file; `library_path` builds them with g++ into one shared library in fxc's cache (once per source, g++ and
mxnet version; written atomically), `register` loads it with `mx.library.load` and installs the two callbacks it
calls: `supported` (which nodes fxc converts: the op has a converter and, where MXNet gave the shapes, converting
the node alone succeeds with MXNet's output shape) and `compile_subgraph` (one selected subgraph for its input
shapes and dtypes -> an fxc deploy artifact, extracted to a folder the C++ op loads and runs through `fxc_main`).
"""
from __future__ import annotations

import atexit
import ctypes
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import threading
import traceback
from pathlib import Path

from ..cache import cache_dir
from ..errors import CompileError, FxcError
from .mxnet import Model, import_mxnet, parse_symbol_json
from .mxnet_ops import CONVERTERS, LABEL_OPS, Node

SOURCE = Path(__file__).with_name("mxnet_fxc.cc")
MX_DTYPES = {0: "float32", 1: "float64", 2: "float16", 3: "uint8", 4: "int32", 5: "int8", 6: "int64"}
COMPILED_DTYPES = ("float32", "float64")

_SUPPORTED_CB = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_char_p, ctypes.POINTER(ctypes.c_int), ctypes.c_int)
_COMPILE_CB = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_void_p,
                               ctypes.c_int)
_lock = threading.Lock()
_state: dict = {}           # "path", "lib" and the callbacks (kept alive while the library may call them)
_folders: list = []         # extracted subgraph artifacts, removed at exit


def _wheel_sources(mx) -> tuple:
    root = Path(mx.__file__).parent
    include, lib_api = root / "include", root / "src" / "lib_api.cc"
    if not (include / "mxnet" / "lib_api.h").is_file() or not lib_api.is_file():
        raise FxcError(f"the mxnet wheel at {root} lacks include/mxnet/lib_api.h or src/lib_api.cc, which fxc's "
                       f"MXNet extension is built from; install mxnet 1.9.1 from PyPI (pip install 'fxc[mxnet]')")
    return include, lib_api


def library_path(mx=None) -> Path:
    """The extension's shared library, built with g++ on first use (cached; an atomic rename puts it in place)."""
    mx = mx or import_mxnet()
    include, lib_api = _wheel_sources(mx)
    gxx = shutil.which("g++")
    if gxx is None:
        raise CompileError("fxc's MXNet extension needs g++ to build (once): apt-get install g++")
    version = subprocess.run([gxx, "--version"], capture_output=True, text=True).stdout.splitlines()[:1]
    h = hashlib.sha256()
    for part in (SOURCE.read_bytes(), lib_api.read_bytes(), (include / "mxnet" / "lib_api.h").read_bytes(),
                 mx.__version__.encode(), "".join(version).encode()):
        h.update(part)
    out = cache_dir() / "mxnet_ext" / f"libfxc_mxnet-{h.hexdigest()[:16]}.so"
    if out.is_file():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=out.parent, suffix=".so.tmp")
    os.close(fd)
    try:
        cmd = [gxx, "-shared", "-fPIC", "-O2", "-std=c++17", f"-I{include}", str(SOURCE), str(lib_api), "-o", tmp,
               "-ldl"]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode:
            raise CompileError(f"g++ could not build fxc's MXNet extension ({' '.join(cmd)})", str(SOURCE), r.stderr)
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return out


def register() -> Path:
    """Build (once) and load the extension into MXNet, with fxc's callbacks; idempotent. Returns its path."""
    with _lock:
        if "path" in _state:
            return _state["path"]
        mx = import_mxnet()
        path = library_path(mx)
        mx.library.load(str(path), verbose=False)
        lib = ctypes.CDLL(str(path))            # the same handle mx.library.load opened: its globals
        supported_cb, compile_cb = _SUPPORTED_CB(_supported), _COMPILE_CB(_compile)
        lib.fxc_mx_set_callbacks(supported_cb, compile_cb)
        _state.update(path=path, lib=lib, callbacks=(supported_cb, compile_cb))
        return path


# -- which nodes fxc takes ------------------------------------------------------------------------------------------
def _shapes(attrs: dict):
    text = attrs.get("__ext_shape__") or attrs.get("__shape__")
    try:
        shapes = json.loads(text.replace("(", "[").replace(")", "]")) if text else None
    except ValueError:
        return None
    if not shapes or not isinstance(shapes, list):
        return None
    shapes = shapes if isinstance(shapes[0], list) else [shapes]
    return None if any(not s or 0 in s or -1 in s for s in shapes) else [tuple(s) for s in shapes]


def _dtypes(attrs: dict):
    text = attrs.get("__ext_dtype__")
    try:
        return [MX_DTYPES.get(int(t), "?") for t in json.loads(text)] if text else None
    except (ValueError, TypeError):
        return None


def node_supported(nodes: list, i: int) -> bool:
    """Whether fxc converts node i: it has a converter, is not a loss op, computes in a dtype fxc compiles, and,
    where MXNet annotated the shapes, converting it alone gives MXNet's output shapes."""
    nd = nodes[i]
    if nd["op"] == "null" or nd["op"] not in CONVERTERS or nd["op"] in LABEL_OPS:
        return False
    attrs = nd.get("attrs", {})
    types = _dtypes(attrs)
    if types is not None and types[0] not in COMPILED_DTYPES:     # (a max Pooling's second output is int32)
        return False
    outs = _shapes(attrs)
    ins = []
    for ref in nd.get("inputs", []):
        src = nodes[ref[0]].get("attrs", {})
        s, t = _shapes(src), _dtypes(src)
        if s is None or ref[1] >= len(s):
            return True             # no shapes to try it on: the op's converter decides at compile time
        ins.append((s[ref[1]], t[ref[1]] if t and ref[1] < len(t) else "float32"))
    from ..relay_like.builder import Builder
    b = Builder()
    params = {k: v for k, v in attrs.items() if not k.startswith("__")}
    try:
        vals = [b.graph.input(s, t if t in COMPILED_DTYPES else "float32") for s, t in ins]
        got = CONVERTERS[nd["op"]](b, vals, Node(nd["name"], nd["op"], params, outs))
    except (FxcError, ValueError, KeyError, IndexError, TypeError):
        return False
    got = got if isinstance(got, tuple) else (got,)
    return outs is None or all(tuple(v.shape) == tuple(s) for v, s in zip(got, outs))


def _supported(graph_json: bytes, ids, n: int) -> int:
    try:
        nodes = json.loads(graph_json.decode())["nodes"]
        for i in range(min(n, len(nodes))):
            ids[i] = -1 if node_supported(nodes, i) else -2
        return 0
    except Exception:           # noqa: BLE001  (a callback from C must not raise: MXNet reports the failure)
        traceback.print_exc()
        return 1


# -- compiling one subgraph -----------------------------------------------------------------------------------------
def compile_subgraph(text: str, shapes: list, types: list) -> Path:
    """An MXNet subgraph (its symbol JSON, the shapes and MXNet dtype codes of its inputs in MXNet's order) compiled
    by fxc and extracted as a deploy artifact into a fresh folder; returns the folder."""
    from ..build import build
    from ..export_artifact import export
    from ..runtime.artifact import extract
    mx = import_mxnet()
    graph = parse_symbol_json(text, "an fxc subgraph")
    graph.setdefault("attrs", {}).setdefault("mxnet_version", ["int", 10901])     # (no "upgrading v0.8" notes)
    text = json.dumps(graph)
    names = mx.sym.load_json(text).list_inputs()
    if len(names) != len(shapes):
        raise FxcError(f"the fxc subgraph has inputs {names} but MXNet passed {len(shapes)} shapes")
    model = Model(graph, text, {}, {}, mx, "an fxc subgraph", input_names=names)
    dtypes = {n: MX_DTYPES.get(t, str(t)) for n, t in zip(names, types)}
    bad = {n: t for n, t in dtypes.items() if t not in COMPILED_DTYPES}
    if bad:
        raise FxcError(f"fxc subgraph inputs of dtype(s) {bad}; fxc compiles {COMPILED_DTYPES} here")
    module = build(model.to_graph({n: tuple(s) for n, s in zip(names, shapes)}, dtypes), target="llvm")
    folder = Path(tempfile.mkdtemp(prefix="fxc-mxnet-subgraph-"))
    _folders.append(folder)
    export(module, folder / "subgraph.fxc")
    extract(folder / "subgraph.fxc", folder)
    return folder


def _compile(text: bytes, shapes: bytes, types: bytes, out, out_len: int) -> int:
    try:
        msg, rc = str(compile_subgraph(text.decode(), json.loads(shapes), json.loads(types))), 0
    except Exception as e:      # noqa: BLE001  (reported through MXNet's error, with fxc's message)
        msg, rc = f"{type(e).__name__}: {e}", 1
    data = msg.encode()[:max(out_len - 1, 0)] + b"\0"
    ctypes.memmove(out, data, len(data))
    return rc


@atexit.register
def _remove_folders() -> None:
    for f in _folders:
        shutil.rmtree(f, ignore_errors=True)
