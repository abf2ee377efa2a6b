"""The compiled-module cache: a built CPU Module stored under a key of fxc's source, the graph, the target and the
options (module_key), in the on-disk cache of fxc/runtime/store.py (atomic, checked entries).

An entry holds the module's library, plan and metadata, and its constants (the weights as the passes leave them:
packed, folded) only while they are small, at most `max_entry_consts()` (1/32 of the cache's bound, 64 MiB by
default): a larger model's entry keeps their digest instead, and a hit recomputes them from the graph with the
graph passes alone (no lowering, no LLVM), checked against the digest. So a cache of 2 GiB holds the code of many
models rather than the weights of two."""
from __future__ import annotations

import hashlib
import io
import json
import os
import re
import warnings
import zipfile
import zlib
from pathlib import Path

import numpy as np

from ..errors import BUILD_WARNINGS, FxcError
from ..ops.registry import as_registered
from ..runtime.cpu.module import Module
from ..runtime.store import checked_file, max_bytes, read_entry, warn_once, write_entry
from ..runtime.tensors import TensorSpec
from ..target import Target


def source_fingerprint() -> str:
    """Hash of fxc's own source (every .py and .c file of the package): a cached module is only reused by
    the exact compiler that built it."""
    global _SOURCE_FP
    if _SOURCE_FP is None:
        h = hashlib.sha256()
        root = Path(__file__).resolve().parents[1]
        for p in sorted(root.rglob("*")):
            if p.suffix in (".py", ".c") and "__pycache__" not in p.parts:
                h.update(str(p.relative_to(root)).encode() + b"\0" + p.read_bytes() + b"\0")
        _SOURCE_FP = h.hexdigest()
    return _SOURCE_FP


_SOURCE_FP = None


def graph_fingerprint(graph) -> str:
    """A canonical hash of a graph IR: value numbering by first appearance, ops, attrs, types and the bytes
    of every constant (not value names: a cached module takes the current graph's, see fxc/driver/build.py)."""
    h = hashlib.sha256()
    ids: dict = {}

    def ref(v):
        if v.id not in ids:
            ids[v.id] = len(ids)
            if v.is_const:
                h.update(f"const {ids[v.id]} {v.type!r} ".encode() + hashlib.sha256(v.data.tobytes()).digest())
        return str(ids[v.id])
    for v in graph.inputs:
        h.update(f"in {ref(v)} {v.type!r}{' weight' if v.id in graph.weights else ''}\n".encode())
    for n in graph.nodes:
        args = ",".join(ref(v) for v in n.inputs)
        outs = ",".join(f"{ref(o)}:{o.type!r}" for o in n.outputs)
        h.update(f"{outs}={n.op}({args}){sorted(n.attrs.items())!r}\n".encode())
    h.update(("out " + ",".join(ref(v) for v in graph.outputs)).encode())
    return h.hexdigest()


def max_entry_consts() -> int:
    """The most bytes of constants a module entry holds itself (a 32nd of the cache's bound: 64 MiB by
    default; no limit when the cache is unbounded)."""
    bound = max_bytes()
    return bound // 32 if bound else 1 << 62


def consts_digest(consts) -> str:
    """sha256 of constants' dtypes, shapes and bytes: what a recomputation must reproduce."""
    h = hashlib.sha256()
    for c in consts:
        c = np.ascontiguousarray(c)
        h.update(f"{c.dtype.str}{c.shape}".encode())
        h.update(memoryview(c).cast("B"))
    return h.hexdigest()


def load_module(key: str, recompute=None):
    """The Module cached under `key`, or None (missing, damaged, or its library is gone or damaged). recompute:
    () -> the module's constants, for an entry that keeps only their digest (None there: the entry is a miss)."""
    try:
        raw = [read_entry(f"modules/{key}{ext}") for ext in (".json", ".ll.z")]
        if any(r is None for r in raw):
            return None
        meta = json.loads(raw[0])
        if not re.fullmatch(r"fxc-[0-9a-f]+\.so", str(meta["library"])):   # relative to the cache, a plain name
            return None
        library = checked_file(meta["library"])
        if library is None:
            return None
        if "consts_digest" in meta:         # constants too large for the entry: recomputed, then checked
            if recompute is None:
                return None
            consts = recompute()
            if len(consts) != meta["n_consts"] or consts_digest(consts) != meta["consts_digest"]:
                warn_once("consts", f"the cached module {key[:16]}'s constants differ from the graph's; it is rebuilt")
                return None
        else:
            npz = read_entry(f"modules/{key}.npz")
            if npz is None:
                return None
            with np.load(io.BytesIO(npz), allow_pickle=False) as z:
                consts = [z[f"c{i}"] for i in range(meta["n_consts"])]
        source = zlib.decompress(raw[1]).decode()
        spec = lambda t: TensorSpec(t[0], tuple(t[1]), t[2])   # noqa: E731
        plan = [(name, [tuple(s) for s in slots]) for name, slots in meta["plan"]]
        module = Module(meta["target"], str(library), [spec(t) for t in meta["inputs"]],
                        [spec(t) for t in meta["outputs"]], consts, meta["workspace_bytes"], meta["kernels"],
                        meta["intermediate_bytes"], source, prepack_inputs=meta["prepack_inputs"], plan=plan,
                        kernel_flops=meta["kernel_flops"], profiled=meta["profiled"], offload=meta.get("offload", []),
                        warned=[[str(k), str(m)] for k, m in meta.get("warned", [])])
        for kind, message in module.warned:     # what the build told the user, told again
            warnings.warn(BUILD_WARNINGS.get(kind, UserWarning)(message), stacklevel=4)
        return module
    except (OSError, ValueError, KeyError, TypeError, IndexError, EOFError, zlib.error, zipfile.BadZipFile,
            UnicodeDecodeError, FxcError) as e:
        warn_once("entry", f"ignoring the cached module {key[:16]} ({type(e).__name__}: {e}); it is rebuilt")
        return None


def store_module(key: str, module) -> None:
    """Cache a built Module under `key` (metadata, IR and the constants, or their digest past max_entry_consts();
    the library is already cached, and is named relative to the cache, so a copied cache uses its own files)."""
    held = sum(np.asarray(c).nbytes for c in module.consts) <= max_entry_consts()
    if held:
        buf = io.BytesIO()
        np.savez(buf, **{f"c{i}": c for i, c in enumerate(module.consts)})
        write_entry(f"modules/{key}.npz", buf.getvalue())
    write_entry(f"modules/{key}.ll.z", zlib.compress(module.source.encode(), 1))
    spec = lambda t: [t.name, list(t.shape), t.dtype]   # noqa: E731
    meta = {"target": module.target, "library": Path(module.library).name, "inputs": [spec(t) for t in module.inputs],
            "outputs": [spec(t) for t in module.outputs], "n_consts": len(module.consts),
            "workspace_bytes": module.workspace_bytes, "kernels": module.kernels,
            "intermediate_bytes": module.intermediate_bytes, "prepack_inputs": module.prepack_inputs,
            "plan": module.plan, "kernel_flops": module.kernel_flops, "profiled": module.profiled,
            "warned": module.warned,
            **({"offload": module.offload} if module.offload else {})}      # the -libs= split (fxc.explain)
    if not held:
        meta["consts_digest"] = consts_digest(module.consts)
    write_entry(f"modules/{key}.json", json.dumps(meta).encode())      # last: the entry exists once this does


def cacheable(dbg: int) -> bool:
    """Modules come from the on-disk cache unless FXC_MODULE_CACHE=0, debug >= 2 (which shows the passes) or
    an op of the graph was replaced at run time (a test's deliberately broken kernel)."""
    return dbg < 2 and os.environ.get("FXC_MODULE_CACHE", "1") != "0" and as_registered()


def module_key(graph, target: Target, options: dict, tuned: str = "") -> str:
    """Everything a built module depends on: fxc's source, the graph, the target (its CPU, features and threads,
    not the host's), the options, fxc's environment variables (FXC_NUM_THREADS) and the tuned configs applied
    (their digest, fxc/driver/tuned.py)."""
    env = sorted((k, v) for k, v in os.environ.items()
                 if k.startswith("FXC_") and k not in ("FXC_CACHE_DIR", "FXC_DEBUG", "FXC_PROGRESS"))
    opts = sorted((k, repr(v)) for k, v in options.items() if k != "debug")
    parts = [source_fingerprint(), str(target), target.machine_key, repr(env), repr(opts),
             str(target.caps.threads), graph_fingerprint(graph)] + ([tuned] if tuned else [])
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()
