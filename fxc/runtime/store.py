"""The on-disk cache (compiled libraries, object files, modules, tuning logs): one folder, atomic writes only.
The compiled-module entries (keyed by graph and compiler fingerprints) are fxc/driver/cache.py's.

Takes: FXC_CACHE_DIR (default ~/.cache/fxc) and FXC_CACHE_MAX_BYTES (its size bound, default 2 GiB; a user's
setting, like the folder). Produces: `cache_dir()`, the folder to use, checked entries, and the bound.

Nothing in the cache is trusted blindly (docs/deploy.md, "The compile cache"):
- the folder must belong to this user and be writable by nobody else (as pip and ccache require); otherwise,
  or when it cannot be written at all (a read-only mount or HOME), or once a write fails (a full disk), this
  process builds in a private temporary folder instead, with one warning, and compiles normally;
- every entry is written by `write_entry`: its bytes, then a trailer holding the sha256 of (its name, its
  bytes). `read_entry` returns the bytes only when the trailer matches, the file is this user's and nobody
  else can write it; anything else (truncated, damaged, another entry's content copied over it) is a miss,
  with one warning, and is rebuilt. A library keeps its trailer on disk: the ELF loader ignores bytes past
  the sections, so `dlopen` takes the checked file as it is.

The cache is bounded (least recently used first, `FXC_CACHE_MAX_BYTES`): every hit sets the entry's mtime to now
(its last use), and a write that takes the folder past the bound removes the entries used longest ago until it is
at 80% of the bound (see `evict`). A size count kept in the lock file (`.lock`, flock) keeps writes from walking
the folder, so two processes writing at once account and evict one after the other. An entry used in the last
`GRACE_S` seconds is never removed (a loader may be between its check and its dlopen); one removed while another
process reads it stays readable there (POSIX), and a loader that finds it gone takes it as a miss.
"""
from __future__ import annotations

import atexit
import fcntl
import hashlib
import os
import re
import shutil
import stat
import tempfile
import time
import warnings
from pathlib import Path

TRAILER_MAGIC = b"\0FXCSUM1"
TRAILER = len(TRAILER_MAGIC) + 32

_state = {"wanted": None, "dir": None, "private": None}
_warned: set = set()


def warn_once(key: str, message: str) -> None:
    """One RuntimeWarning per distinct key and process."""
    if key not in _warned:
        _warned.add(key)
        warnings.warn(f"fxc: {message}", RuntimeWarning, stacklevel=3)


def _unsafe(st: os.stat_result) -> str:
    """Why a cache folder or entry with this stat must not be used ('' when it may)."""
    if st.st_uid != os.geteuid():
        return f"it belongs to uid {st.st_uid}, not to this user (uid {os.geteuid()})"
    if st.st_mode & 0o022:
        return f"others can write to it (mode {stat.filemode(st.st_mode)})"
    return ""


def _private_dir(reason: str) -> Path:
    """The process's private build folder (mode 0700, removed at exit), used from now on."""
    if _state["private"] is None:
        d = Path(tempfile.mkdtemp(prefix="fxc-cache-"))
        atexit.register(shutil.rmtree, d, True)
        _state["private"] = d
    warn_once("private", f"not using the compile cache {_state['wanted']}: {reason}; this process builds in "
                         f"{_state['private']} (compiles are not reused across processes). Fix: set FXC_CACHE_DIR "
                         f"to a folder of your own that only you can write (chmod go-w)")
    _state["dir"] = _state["private"]
    return _state["private"]


def cache_dir() -> Path:
    """The folder to cache in: FXC_CACHE_DIR (or ~/.cache/fxc), once it is known to be safe and writable; else
    the process's private folder (see the module's doc)."""
    wanted = Path(os.environ.get("FXC_CACHE_DIR") or Path.home() / ".cache" / "fxc")
    if _state["wanted"] == wanted and _state["dir"] is not None:
        return _state["dir"]
    _state["wanted"], _state["dir"] = wanted, None
    try:
        wanted.mkdir(mode=0o700, parents=True, exist_ok=True)
        why = _unsafe(wanted.stat())
        if not why and not os.access(wanted, os.W_OK | os.X_OK):
            why = "it is not writable"
    except OSError as e:
        why = f"it cannot be created ({e.strerror or e})"
    if why:
        return _private_dir(why)
    _state["dir"] = wanted
    return wanted


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


# -- checked entries --------------------------------------------------------------------------------------
def _seal(name: str, data: bytes) -> bytes:
    return TRAILER_MAGIC + hashlib.sha256(name.encode() + b"\0" + data).digest()


def entry_path(relative: str) -> Path:
    """Where the entry `relative` (e.g. 'objects/<key>.o') lives in the cache in use."""
    return cache_dir() / relative


def write_entry(relative: str, data: bytes, mode: int = 0o644) -> Path:
    """Store `data` as the entry `relative` (atomically, with its trailer); returns its path. A failed write (a full
    or read-only cache) moves this process to its private folder (one warning) and writes there."""
    sealed = data + _seal(Path(relative).name, data)
    path = entry_path(relative)
    try:
        atomic_write(path, sealed, mode)
    except OSError as e:
        if _state["dir"] == _state["private"] and _state["private"] is not None:
            raise                           # the private folder itself failed: a real error
        path = _private_dir(f"writing {relative} failed ({e.strerror or e})") / relative
        atomic_write(path, sealed, mode)
    account(path, len(sealed))
    return path


def read_entry(relative: str, path: Path | None = None):
    """The bytes stored as entry `relative` (without the trailer), or None when it is missing or must not be used
    (damaged, truncated, someone else's content, or writable by others: one warning, and the file is removed)."""
    path = path or entry_path(relative)
    try:
        with open(path, "rb") as f:
            st = os.fstat(f.fileno())
            data = f.read()
    except OSError:
        return None
    why = "" if stat.S_ISREG(st.st_mode) else "not a regular file"
    why = why or _unsafe(st)
    if not why and (len(data) < TRAILER or data[-TRAILER:] != _seal(Path(relative).name, data[:-TRAILER])):
        why = "its content does not match its checksum (truncated, damaged or replaced)"
    if why:
        warn_once("entry", f"ignoring the cache entry {path}: {why}; it is rebuilt (further bad entries are "
                           f"rebuilt without a warning)")
        if st.st_uid == os.geteuid():
            try:
                os.unlink(path)
            except OSError:
                pass
        return None
    try:
        os.utime(path)                      # its last use: the bound evicts the entries used longest ago
    except OSError:                         # gone meanwhile (evicted): the bytes read are still this entry's
        pass
    return data[:-TRAILER]


def checked_file(relative: str):
    """The path of entry `relative` once its content is checked (for files used in place: libraries, the runtime's
    object file), or None (see read_entry)."""
    path = entry_path(relative)
    return path if read_entry(relative, path) is not None else None


# -- the size bound (least recently used first) ------------------------------------------------------------
DEFAULT_MAX_BYTES = 2 << 30
GRACE_S = 60.0          # an entry used this recently is never evicted (a loader may be between its check and load)
LOW_WATER = 0.8         # eviction goes down to this fraction of the bound, so the next writes need no eviction
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def max_bytes() -> int:
    """The cache's size bound in bytes: FXC_CACHE_MAX_BYTES (a number of bytes, or with a K, M, G or T suffix:
    512M, 2G; 0 means no bound), default 2 GiB. A value that is none of these: the default, with one warning."""
    text = os.environ.get("FXC_CACHE_MAX_BYTES", "").strip()
    if not text:
        return DEFAULT_MAX_BYTES
    m = re.fullmatch(r"(\d+(?:\.\d*)?)\s*([kmgt]?)(?:i?b)?", text.lower())
    if m is None:
        warn_once("max-bytes", f"FXC_CACHE_MAX_BYTES={text!r} is not a size; the cache is bounded at the default "
                               f"{DEFAULT_MAX_BYTES >> 30} GiB. Fix: a number of bytes, or e.g. 512M, 2G (0: no bound)")
        return DEFAULT_MAX_BYTES
    return int(float(m.group(1)) * _UNITS[m.group(2)])


def _files(root: Path) -> list:
    """(last use, size, path) of every entry under root: regular files, not the lock (and size count) or a write in
    progress (their names start with a dot or end in .tmp)."""
    out = []
    stack = [root]
    while stack:
        try:
            with os.scandir(stack.pop()) as it:
                for e in it:
                    if e.name.startswith(".") or e.name.endswith(".tmp"):
                        continue
                    try:
                        if e.is_dir(follow_symlinks=False):
                            stack.append(e.path)
                        elif e.is_file(follow_symlinks=False):
                            st = e.stat(follow_symlinks=False)
                            out.append((st.st_mtime, st.st_size, e.path))
                    except OSError:         # removed meanwhile
                        pass
        except OSError:
            pass
    return out


def evict(root: Path, target: int, keep=()) -> int:
    """Remove the entries under `root` used longest ago until their total is at most `target` bytes, sparing those
    in `keep` and those used in the last GRACE_S seconds; returns the total left. Call it holding the lock."""
    files = sorted(_files(root))
    total = sum(size for _, size, _ in files)
    recent = time.time() - GRACE_S
    keep = {str(k) for k in keep}
    for used, size, path in files:
        if total <= target:
            break
        if used >= recent or path in keep:
            continue
        try:
            os.unlink(path)
        except FileNotFoundError:           # another process evicted it first
            pass
        except OSError:
            continue
        total -= size
    return total


class _Locked:
    """The cache's lock (an flock on `.lock`), whose file also holds the size count: the total bytes of the entries
    as decimal digits, or nothing readable (unknown: the next use counts them)."""

    def __init__(self, root: Path):
        self.root = root

    def __enter__(self):
        self.fd = os.open(self.root / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX)
        except BaseException:
            os.close(self.fd)
            raise
        return self

    def __exit__(self, *exc):
        os.close(self.fd)                   # releases the flock

    def total(self):
        text = os.pread(self.fd, 32, 0).strip()
        return int(text) if text.isdigit() else None

    def set_total(self, n: int) -> None:
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, b"%d\n" % n, 0)


def account(path: Path, nbytes: int) -> None:
    """Count a new entry of `nbytes` at `path` (written by this process) and, when that takes the cache past
    max_bytes(), evict (never `path` itself). A cache that cannot be accounted (locked out, read-only) only grows."""
    limit = max_bytes()
    root = cache_dir()
    if not limit or root not in Path(path).parents:
        return
    try:
        with _Locked(root) as lk:
            total = lk.total()
            total = sum(size for _, size, _ in _files(root)) if total is None else total + nbytes
            if total > limit:
                total = evict(root, int(limit * LOW_WATER), keep=(path,))
            lk.set_total(total)
    except OSError:
        pass


def stats() -> dict:
    """{"dir", "bytes", "entries", "max_bytes"} of the cache in use (counted now; also resets the size count)."""
    root = cache_dir()
    files = _files(root)
    total = sum(size for _, size, _ in files)
    try:
        with _Locked(root) as lk:
            lk.set_total(total)
    except OSError:
        pass
    return {"dir": str(root), "bytes": total, "entries": len(files), "max_bytes": max_bytes()}


def clear() -> tuple:
    """Remove every entry of the cache in use; returns (entries, bytes) removed. A process loading one meanwhile
    takes it as a miss (or, having opened it, reads it to the end)."""
    root = cache_dir()
    n = freed = 0
    with _Locked(root) as lk:
        for _, size, path in _files(root):
            try:
                os.unlink(path)
                n, freed = n + 1, freed + size
            except OSError:
                pass
        lk.set_total(sum(size for _, size, _ in _files(root)))
    return n, freed
