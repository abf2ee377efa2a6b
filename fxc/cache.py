"""The on-disk cache (compiled libraries, tuning logs): one folder, atomic writes only."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path


def cache_dir() -> Path:
    d = Path(os.environ.get("FXC_CACHE_DIR") or Path.home() / ".cache" / "fxc")
    d.mkdir(parents=True, exist_ok=True)
    return d


def atomic_write(path, data: bytes, mode: int = 0o644) -> None:
    """Write to a temporary file in the same folder, fsync, then rename over `path` (file mode `mode`)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, mode)                 # mkstemp creates 0600; a written file is readable like any other
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


# -- compiled modules, by graph fingerprint ---------------------------------------------------------------
def source_fingerprint() -> str:
    """Hash of fxc's own source (every .py and .c file of the package): a cached module is only reused by
    the exact compiler that built it."""
    import hashlib
    global _SOURCE_FP
    if _SOURCE_FP is None:
        h = hashlib.sha256()
        root = Path(__file__).resolve().parent
        for p in sorted(root.rglob("*")):
            if p.suffix in (".py", ".c") and "__pycache__" not in p.parts:
                h.update(str(p.relative_to(root)).encode() + b"\0" + p.read_bytes() + b"\0")
        _SOURCE_FP = h.hexdigest()
    return _SOURCE_FP


_SOURCE_FP = None


def graph_fingerprint(graph) -> str:
    """A canonical hash of a graph IR: value numbering by first appearance, ops, attrs, types and the bytes
    of every constant (not value names: a cached module takes the current graph's, see fxc/build.py)."""
    import hashlib
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


def load_module(key: str):
    """The Module cached under `key`, or None (missing, damaged, or its library is gone)."""
    import json
    import zlib
    import numpy as np
    from .runtime.module import Module, TensorSpec
    d = cache_dir() / "modules"
    try:
        meta = json.loads((d / f"{key}.json").read_text())
        if not Path(meta["library"]).exists():
            return None
        with np.load(d / f"{key}.npz", allow_pickle=False) as z:
            consts = [z[f"c{i}"] for i in range(meta["n_consts"])]
        source = zlib.decompress((d / f"{key}.ll.z").read_bytes()).decode()
    except (OSError, ValueError, KeyError, zlib.error):
        return None
    spec = lambda t: TensorSpec(t[0], tuple(t[1]), t[2])
    plan = [(name, [tuple(s) for s in slots]) for name, slots in meta["plan"]]
    return Module(meta["target"], meta["library"], [spec(t) for t in meta["inputs"]], [spec(t) for t in meta["outputs"]],
                  consts, meta["workspace_bytes"], meta["kernels"], meta["intermediate_bytes"], source,
                  prepack_inputs=meta["prepack_inputs"], plan=plan, kernel_flops=meta["kernel_flops"],
                  profiled=meta["profiled"])


def store_module(key: str, module) -> None:
    """Cache a built Module under `key` (metadata, constants and IR; the library is already cached)."""
    import io
    import json
    import zlib
    import numpy as np
    d = cache_dir() / "modules"
    buf = io.BytesIO()
    np.savez(buf, **{f"c{i}": c for i, c in enumerate(module.consts)})
    atomic_write(d / f"{key}.npz", buf.getvalue())
    atomic_write(d / f"{key}.ll.z", zlib.compress(module.source.encode(), 1))
    spec = lambda t: [t.name, list(t.shape), t.dtype]
    meta = {"target": module.target, "library": str(module.library), "inputs": [spec(t) for t in module.inputs],
            "outputs": [spec(t) for t in module.outputs], "n_consts": len(module.consts),
            "workspace_bytes": module.workspace_bytes, "kernels": module.kernels,
            "intermediate_bytes": module.intermediate_bytes, "prepack_inputs": module.prepack_inputs,
            "plan": module.plan, "kernel_flops": module.kernel_flops, "profiled": module.profiled}
    atomic_write(d / f"{key}.json", json.dumps(meta).encode())      # last: the entry exists once this does
