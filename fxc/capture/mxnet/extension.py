"""fxc inside MXNet: the partitioner `fxc`, so `sym.optimize_for("fxc", args, aux)` and
`block.optimize_for(x, backend="fxc")` run the ops fxc supports as fxc-compiled subgraphs and leave the rest to
MXNet.

Takes the installed mxnet wheel (its `include/mxnet/lib_api.h` and `src/lib_api.cc`) and `mxnet_fxc.cc` beside
this file; `library_path` builds them with g++ into one shared library in fxc's cache (once per source, g++ and
mxnet version; written atomically), `register` loads it with `mx.library.load` and installs the three callbacks it
calls: `supported` (which nodes fxc converts: the op has a converter and, where MXNet gave the shapes, converting
the node alone succeeds with MXNet's output shape), `review` (copies the values optimize_for was given for a
subgraph's weight inputs, `weight_inputs`, to bake them in) and `compile_subgraph` (one selected subgraph for its
input shapes and dtypes -> an fxc deploy artifact, extracted to a folder the C++ op loads and runs through
`fxc_main`, with the positions of the inputs it still takes).
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

import numpy as np

from ...deploy.export import export
from ...driver.build import build
from ...errors import CompileError, FxcError
from ...relay_like.builder import Builder
from ...runtime.artifact.extract import extract
from ...runtime.store import cache_dir
from .convert import Model, import_mxnet, parse_symbol_json
from .ops import CONVERTERS, LABEL_OPS, WEIGHT_SLOTS, Node, attribute_problem

SOURCE = Path(__file__).with_name("mxnet_fxc.cc")
PREBUILT = SOURCE.parent / "_prebuilt"
MX_DTYPES = {0: "float32", 1: "float64", 2: "float16", 3: "uint8", 4: "int32", 5: "int8", 6: "int64"}
NP_DTYPES = {0: np.float32, 1: np.float64, 2: np.float16, 3: np.uint8, 4: np.int32, 5: np.int8, 6: np.int64}
COMPILED_DTYPES = ("float32", "float64")

_SUPPORTED_CB = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_char_p, ctypes.POINTER(ctypes.c_int), ctypes.c_int)
_REVIEW_CB = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.POINTER(ctypes.c_char_p),
                              ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.POINTER(ctypes.c_int64)),
                              ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_int), ctypes.c_void_p, ctypes.c_int)
_COMPILE_CB = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p,
                               ctypes.c_void_p, ctypes.c_int)
_lock = threading.Lock()
_state: dict = {}           # "path", "lib" and the callbacks (kept alive while the library may call them)
_folders: list = []         # extracted subgraph artifacts, removed at exit
_weights: dict = {}         # token -> {input name: array}: the weights optimize_for gave a subgraph (copies)


def _wheel_sources(mx) -> tuple:
    root = Path(mx.__file__).parent
    include, lib_api = root / "include", root / "src" / "lib_api.cc"
    if not (include / "mxnet" / "lib_api.h").is_file() or not lib_api.is_file():
        raise FxcError(f"the mxnet wheel at {root} lacks include/mxnet/lib_api.h or src/lib_api.cc, which fxc's "
                       f"MXNet extension is built from; install mxnet 1.9.1 from PyPI (pip install 'fxc[mxnet]')")
    return include, lib_api


def library_path(mx=None, where: Path | None = None) -> Path:
    """The extension's shared library: the one built at setup beside this file (`_prebuilt/`, as a wheel would ship
    it) when there is one, else one built now with g++ into the cache (or into `where`), by the hash of its sources,
    g++'s and mxnet's versions; an atomic rename puts it in place."""
    mx = mx or import_mxnet()
    include, lib_api = _wheel_sources(mx)
    gxx = shutil.which("g++")
    if gxx is None:
        raise CompileError("fxc's MXNet extension needs g++ to build (once): apt-get install g++")
    version = subprocess.run([gxx, "--version"], capture_output=True, text=True, check=False).stdout.splitlines()[:1]
    h = hashlib.sha256()
    for part in (SOURCE.read_bytes(), lib_api.read_bytes(), (include / "mxnet" / "lib_api.h").read_bytes(),
                 mx.__version__.encode(), "".join(version).encode()):
        h.update(part)
    name = f"libfxc_mxnet-{h.hexdigest()[:16]}.so"
    if where is None and (PREBUILT / name).is_file():
        return PREBUILT / name
    out = (where or cache_dir() / "mxnet_ext") / name
    if out.is_file():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=out.parent, suffix=".so.tmp")
    os.close(fd)
    try:
        cmd = [gxx, "-shared", "-fPIC", "-O2", "-std=c++17", f"-I{include}", str(SOURCE), str(lib_api), "-o", tmp,
               "-ldl"]
        r = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if r.returncode:
            raise CompileError(f"g++ could not build fxc's MXNet extension ({' '.join(cmd)})", str(SOURCE), r.stderr)
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return out


def prebuild_extension() -> None:
    """Build the extension beside its source at setup (scripts/setup.sh), so no first use waits for g++ (~30 s)."""
    try:
        library_path(where=PREBUILT)
    except (OSError, FxcError, ImportError) as e:     # no mxnet or g++ yet: the cache gets it at the first use
        print(f"fxc: MXNet extension not prebuilt ({e})")


def register() -> Path:
    """Build (once) and load the extension into MXNet, with fxc's callbacks; idempotent. Returns its path."""
    with _lock:
        if "path" in _state:
            return _state["path"]
        mx = import_mxnet()
        path = library_path(mx)
        mx.library.load(str(path), verbose=False)
        lib = ctypes.CDLL(str(path))            # the same handle mx.library.load opened: its globals
        callbacks = _SUPPORTED_CB(_supported), _REVIEW_CB(_review), _COMPILE_CB(_compile)
        lib.fxc_mx_set_callbacks(*callbacks)
        _state.update(path=path, lib=lib, callbacks=callbacks)
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
    params = {k: v for k, v in attrs.items() if not k.startswith("__")}
    if attribute_problem(Node(nd["name"], nd["op"], params)):
        return False
    types = _dtypes(attrs)
    if types is not None and types[0] not in COMPILED_DTYPES:     # (a max Pooling's second output is int32)
        return False
    outs = _shapes(attrs)
    ins = []
    for ref in nd.get("inputs", []):
        src = nodes[ref[0]].get("attrs", {})
        s, t = _shapes(src), _dtypes(src)
        if s is None or ref[1] >= len(s):
            return True             # no shapes to try it on (no input shapes given): its attributes decided
        ins.append((s[ref[1]], t[ref[1]] if t and ref[1] < len(t) else "float32"))
    b = Builder()
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


# -- the weights optimize_for was given -----------------------------------------------------------------------------
def weight_inputs(graph: dict) -> set:
    """Names of the subgraph's inputs read only at weight slots (a conv's weight and bias, BN's gamma, beta and
    moving statistics...): the values optimize_for gave for these are baked in; data inputs never are."""
    nodes, slots = graph["nodes"], {}
    for nd in nodes:
        for k, ref in enumerate(nd.get("inputs", [])):
            slots.setdefault(ref[0], []).append(k in WEIGHT_SLOTS.get(nd["op"], ()))
    return {nodes[i]["name"] for i, s in slots.items() if nodes[i]["op"] == "null" and all(s)}


def _review(text: bytes, n: int, names, data, shapes, ndims, dtypes, out, out_len: int) -> int:
    try:
        weights = weight_inputs(json.loads(text.decode()))
        kept = {}
        for i in range(n):
            name = names[i].decode()
            if name in weights and dtypes[i] in NP_DTYPES and data[i]:
                shape = tuple(shapes[i][d] for d in range(ndims[i]))
                count = int(np.prod(shape, dtype=np.int64))
                buf = (ctypes.c_char * (count * np.dtype(NP_DTYPES[dtypes[i]]).itemsize)).from_address(data[i])
                kept[name] = np.frombuffer(buf, dtype=NP_DTYPES[dtypes[i]]).reshape(shape).copy()
        token = ""
        if kept:
            token = str(len(_weights) + 1)
            _weights[token] = kept
        msg, rc = token, 0
    except Exception as e:      # noqa: BLE001  (a callback from C must not raise: MXNet reports the failure)
        msg, rc = f"{type(e).__name__}: {e}", 1
    _answer(out, out_len, msg)
    return rc


# -- compiling one subgraph -----------------------------------------------------------------------------------------
def compile_subgraph(text: str, shapes: list, types: list, weights: dict | None = None) -> tuple:
    """An MXNet subgraph (its symbol JSON, the shapes and MXNet dtype codes of its inputs in MXNet's order, and the
    values of those inputs to bake in) compiled by fxc and extracted as a deploy artifact into a fresh folder;
    returns (the folder, the positions of the inputs the compiled code takes)."""
    mx = import_mxnet()
    graph = parse_symbol_json(text, "an fxc subgraph")
    graph.setdefault("attrs", {}).setdefault("mxnet_version", ["int", 10901])     # (no "upgrading v0.8" notes)
    text = json.dumps(graph)
    names = mx.sym.load_json(text).list_inputs()
    if len(names) != len(shapes):
        raise FxcError(f"the fxc subgraph has inputs {names} but MXNet passed {len(shapes)} shapes")
    weights = weights or {}
    used = [i for i, n in enumerate(names) if n not in weights]
    model = Model(graph, text, dict(weights), {}, mx, "an fxc subgraph", input_names=[names[i] for i in used])
    dtypes = {names[i]: MX_DTYPES.get(types[i], str(types[i])) for i in used}
    bad = {n: t for n, t in dtypes.items() if t not in COMPILED_DTYPES}
    if bad:
        raise FxcError(f"fxc subgraph inputs of dtype(s) {bad}; fxc compiles {COMPILED_DTYPES} here")
    module = build(model.to_graph({names[i]: tuple(shapes[i]) for i in used}, dtypes), target="llvm")
    root = Path(tempfile.mkdtemp(prefix="fxc-mxnet-subgraph-"))
    _folders.append(root)
    export(module, root / "subgraph.fxc")
    extract(root / "subgraph.fxc", root / "parts")       # extraction writes into a new folder only
    return root / "parts", used


def _compile(text: bytes, shapes: bytes, types: bytes, token: bytes, out, out_len: int) -> int:
    try:
        folder, used = compile_subgraph(text.decode(), json.loads(shapes), json.loads(types),
                                        _weights.get(token.decode()))
        msg, rc = f"{folder}\n{','.join(map(str, used))}", 0
    except Exception as e:      # noqa: BLE001  (reported through MXNet's error, with fxc's message)
        msg, rc = f"{type(e).__name__}: {e}", 1
    _answer(out, out_len, msg)
    return rc


def _answer(out, out_len: int, msg: str) -> None:
    data = msg.encode()[:max(out_len - 1, 0)] + b"\0"
    ctypes.memmove(out, data, len(data))


@atexit.register
def _remove_folders() -> None:
    for f in _folders:
        shutil.rmtree(f, ignore_errors=True)
