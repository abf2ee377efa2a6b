"""MXNet 1.9.1 on numpy >= 1.24: restore the scalar aliases numpy removed, before `import mxnet`.

MXNet 1.9.1 reads `np.bool`, `np.int`, `np.float`, `np.complex`, `np.object` and `np.str` at import time and in
its dtype tables; numpy 1.24 removed them (they were the Python builtins). numpy 2 removed more (e.g.
`np.PZERO`), which this shim does not restore: MXNet needs numpy < 2.

Takes nothing, changes only the `numpy` module's namespace (adds the six names where they are missing, never
overwrites one), and returns the imported `mxnet` module.
"""
from __future__ import annotations

import numpy as np

REMOVED_ALIASES = {"bool": bool, "int": int, "float": float, "complex": complex, "object": object, "str": str}


def restore_numpy_aliases() -> None:
    """Give numpy back the six aliases of Python builtins that MXNet 1.9.1 uses (idempotent)."""
    for alias, typ in REMOVED_ALIASES.items():
        if alias not in np.__dict__:
            setattr(np, alias, typ)


def import_mxnet():
    """`import mxnet` with the aliases restored first; returns the module.

    Raises ImportError (with the install command) where mxnet is not installed, or where numpy is 2 or newer.
    """
    if int(np.__version__.split(".")[0]) >= 2:
        raise ImportError(f"MXNet 1.9.1 needs numpy < 2 (numpy {np.__version__} is installed): "
                          f"pip install 'numpy<2'")
    restore_numpy_aliases()
    try:
        import mxnet  # deferred: mxnet is optional, and the aliases must be restored first
    except ImportError as e:
        raise ImportError(f"mxnet is not installed ({e}); install it with: pip install 'fxc[mxnet]' "
                          f"(or pip install mxnet==1.9.1)") from e
    return mxnet
