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
