"""Device artifacts (fxc/deploy/export.py's export_device writes them): the program + plan + params of a device
module, read back and loaded as that target's module (numpy and the device's library only).

    source, inputs, outputs, consts, workspace_bytes, plan = read_device(path, manifest, parts)
    module = load_device(path, manifest, parts)     # its kind's class (fxc/runtime/modules.py)

The program's first line is `device_interface_line(manifest)`: the sha256 of the interface (signature, params
layout, workspace, plan with launch shapes), so a manifest edited apart from the program is refused.
"""
from __future__ import annotations

import hashlib
import json

from ...errors import ArtifactError
from ..launch import Launch
from ..modules import module_class
from ..tensors import TensorSpec
from .read import _REEXPORT, MANIFEST, PARAMS, interface, program_part, unpack_params


def device_interface_line(manifest: dict) -> str:
    """The first line of a device artifact's program: the sha256 of its interface (signature, params layout,
    workspace, plan with launch shapes), so a manifest edited apart from the program is refused."""
    iface = json.dumps(interface(manifest), sort_keys=True, separators=(",", ":"))
    return f"/* fxc_interface {hashlib.sha256(iface.encode()).hexdigest()} */"


def _slot(ix):
    """A plan slot's index from a manifest: an int, or nested tuples of ints (export's _slot wrote lists)."""
    return tuple(_slot(x) for x in ix) if isinstance(ix, list) else int(ix)


def read_device(path, manifest: dict, parts: dict) -> tuple:
    """(source, inputs, outputs, consts, workspace_bytes, plan) of a verified device artifact, its program's interface
    line checked against the manifest (an ArtifactError for an inconsistent one)."""
    try:
        source = parts[program_part(manifest)].decode()
        if source.split("\n", 1)[0] != device_interface_line(manifest):
            raise ArtifactError(f"{path}: the manifest's signature, params layout or plan differs from the one the "
                                f"program was exported with; the manifest was edited: {_REEXPORT}")
        consts = unpack_params(manifest, parts[PARAMS])
        dim = lambda d: d if isinstance(d, str) else int(d)  # noqa: E731 (text: a size symbol's multiple)
        spec = lambda s: TensorSpec(str(s["name"]), tuple(dim(d) for d in s["shape"]), str(s["dtype"]))  # noqa: E731
        inputs, outputs = [spec(s) for s in manifest["inputs"]], [spec(s) for s in manifest["outputs"]]
        plan = [Launch(str(st["kernel"]), [(str(k), _slot(i)) for k, i in st["args"]], tuple(map(int, st["grid"])),
                       tuple(map(int, st["block"])), bool(st.get("prepack", False)),
                       tuple(map(int, st.get("rows", ()))), tuple(map(int, st.get("repeat", ()))),
                       tuple(map(int, st.get("call", ()))))
                for st in manifest["plan"]]
        workspace = int(manifest["workspace_bytes"])
    except (KeyError, TypeError, ValueError, AttributeError, UnicodeDecodeError) as e:
        raise ArtifactError(f"{path}: {MANIFEST} is inconsistent ({type(e).__name__}: {e}); {_REEXPORT}") from None
    return source, inputs, outputs, consts, workspace, plan


def load_device(path, manifest: dict, parts: dict):
    """A device module from a verified device artifact (numpy and the device's library only)."""
    source, inputs, outputs, consts, workspace, plan = read_device(path, manifest, parts)
    kind = str(manifest["target"]).split(" ")[0]
    module = module_class(kind)
    extra = {}
    if manifest.get("symbols"):     # format 2: a symbolic batch run by row launches (wasm: by its symbol header)
        if not getattr(module, "exports_symbols", False):
            raise ArtifactError(f"{path}: a {kind} artifact with size symbols; this runtime cannot run dynamic "
                                f"device artifacts: {_REEXPORT}")
        extra = dict(symbols=[dict(s) for s in manifest["symbols"]], row_bytes=int(manifest["row_bytes"]))
        if kind == "wasm":
            extra.update(sym_header=int(manifest["sym_header"]),
                         sym_bytes=[[int(c), [str(x) for x in names]] for c, names in manifest.get("sym_bytes", [])])
    return module(manifest["target"], source, inputs, outputs, consts, workspace, plan,
                  kernels=list(manifest.get("kernels", [])),
                  prepack_inputs=[int(i) for i in manifest.get("resident_inputs", [])], **extra)
