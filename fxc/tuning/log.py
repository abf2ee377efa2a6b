"""The tuning log: JSON lines, one record per measurement, and the best record per workload that compiles apply.

A record: {"workload": key, "target": target key, "desc": what the group computes, "config": {knob: value} (only the
knobs off their default), "costs": [seconds per run, ...] ([] on an error), "error": null or an error kind ("build",
"run", "wrong", "crash", "hang", "lost"), "time": unix seconds, "version": fxc's version, "target_str": the target's
string, "detail": what went wrong (errors only)}; a confirmation record (fxc/tuning/confirm.py) adds "confirmed":
true, "model": {"default": [s, ...], "tuned": [s, ...]}, the whole model's costs without and with it (one per round of
interleaved calls), and "why": the figures that decided: its config (the default, {}, where the group's best did not
make the whole model faster by more than the noise) is the one compiles apply for the workload, before any faster
unconfirmed record. Takes log paths; produces records, the best per workload and target
(`best_records`), merged and distilled logs (`distil`).

Appends are atomic per record: each is one write() of one whole line to a file opened O_APPEND, then fsync; a
writer killed mid-write (kill -9) leaves at most one partial last line, which readers skip (one warning per log),
and the next append starts on a fresh line. The default log lies beside the compile cache (default_log_path).
"""
from __future__ import annotations

import json
import os
import time
import warnings
from pathlib import Path

from ..errors import FxcError
from ..runtime.store import atomic_write
from ..version import __version__

ERROR_KINDS = ("build", "run", "wrong", "crash", "hang", "lost")
FIELDS = ("workload", "target", "config", "costs", "error")


def default_log_path() -> Path:
    """The log compiles read when no tuning_log is given: beside the compile cache (FXC_CACHE_DIR, default
    ~/.cache/fxc), named <cache folder>-tuning.jsonl (outside the cache, whose size bound evicts files)."""
    cache = Path(os.environ.get("FXC_CACHE_DIR") or Path.home() / ".cache" / "fxc")
    return cache.with_name(cache.name + "-tuning.jsonl")


def make_record(workload: str, target: str, config: dict, costs: list, error: str | None, desc: str = "",
                target_str: str = "", detail: str = "", model: dict | None = None, why: str = "") -> dict:
    if error is not None and error not in ERROR_KINDS:
        raise FxcError(f"unknown measurement error kind {error!r}; kinds: {', '.join(ERROR_KINDS)}")
    return {"workload": workload, "target": target, "desc": desc, "config": dict(config),
            "costs": [float(c) for c in costs], "error": error, "time": round(time.time(), 3),
            "version": __version__, "target_str": target_str, **({"detail": detail[:300]} if detail else {}),
            **({"confirmed": True, "model": {k: [float(c) for c in v] for k, v in model.items()}} if model else {}),
            **({"why": why} if why else {})}


def append(path, record: dict) -> None:
    """Append one record as one line, atomically (one write of the whole line, then fsync)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    line = (json.dumps(record, sort_keys=True) + "\n").encode()
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        if _ends_open(fd):          # a writer was killed mid-line: that partial line stays apart (readers skip it)
            line = b"\n" + line
        os.write(fd, line)
        os.fsync(fd)
    finally:
        os.close(fd)


def _ends_open(fd: int) -> bool:
    size = os.fstat(fd).st_size
    return size > 0 and os.pread(fd, 1, size - 1) != b"\n"


def read(path) -> list:
    """The well-formed records of a log, in order (a missing log: none). Corrupt lines (a killed writer's partial
    line, a hand edit) are skipped with one warning per log."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return []
    except OSError as e:
        raise FxcError(f"cannot read the tuning log {path}: {e.strerror or e}; give tuning_log= a readable file "
                       f"(or tuning_log=False to build with the default schedules)") from None
    records, bad = [], 0
    for line in raw.splitlines():
        if not line.strip():
            continue
        try:
            r = json.loads(line)
            if not isinstance(r, dict) or any(k not in r for k in FIELDS) or not isinstance(r["config"], dict) \
                    or not isinstance(r["costs"], list):
                raise ValueError("not a record")
            records.append(r)
        except ValueError:
            bad += 1
    if bad:
        warnings.warn(f"fxc: tuning log {path}: skipped {bad} corrupt line(s) (a writer killed mid-record, or an "
                      f"edit); the other {len(records)} records are used", RuntimeWarning, stacklevel=2)
    return records


def cost(record: dict) -> float:
    """A successful record's latency: its fastest repeat, the least disturbed by other work (inf for an error)."""
    return min(record["costs"]) if record["error"] is None and record["costs"] else float("inf")


def best_records(records: list, target: str | None = None) -> dict:
    """workload -> the record compiles apply (for one target key; None: every target, keyed by (target, workload)):
    its latest confirmation, else its fastest successful measurement."""
    best: dict = {}
    for r in records:
        if target is not None and r["target"] != target:
            continue
        k = r["workload"] if target is not None else (r["target"], r["workload"])
        if r.get("confirmed") or (cost(r) < float("inf") and not (k in best and (best[k].get("confirmed")
                                                                                  or cost(best[k]) <= cost(r)))):
            best[k] = r
    return best


_read_cache: dict = {}


def best_for_target(path, target: str) -> tuple:
    """(workload -> best record for this target key, notes): the records a compile applies, read once per version
    of the file. notes says what is not applied (records of other machines or targets) and what came from another
    fxc version."""
    path = Path(path)
    try:
        st = path.stat()
    except FileNotFoundError:
        return {}, []
    key = (str(path), st.st_mtime_ns, st.st_size, target)
    if key not in _read_cache:
        records = read(path)
        best = best_records(records, target)
        notes = []
        others = {r["target_str"] or r["target"] for r in records if r["target"] != target}
        if others and not best:
            notes.append(f"tuning log {path}: its {len(records)} records are for other targets or machines "
                         f"({', '.join(sorted(others)[:3])}), none for this one: the default schedules are used "
                         f"(tune on this machine: fxc tune)")
        old = sorted({r.get("version", "?") for r in best.values()} - {__version__})
        if old:
            notes.append(f"tuning log {path}: applying records of fxc {', '.join(old)} (this is {__version__}) "
                         f"where workload and machine keys match")
        _read_cache.clear()
        _read_cache[key] = (best, notes)
    return _read_cache[key]


def distil(paths: list, out, keep: int = 1) -> tuple:
    """Merge logs into `out` (written atomically), keeping the `keep` fastest successful measurements of each
    workload and target and its latest confirmation; returns (records read, records written)."""
    records = [r for p in paths for r in read(p)]
    groups: dict = {}
    confirmed: dict = {}
    for r in records:
        if r.get("confirmed"):
            confirmed[(r["target"], r["workload"])] = r
        elif cost(r) < float("inf"):
            groups.setdefault((r["target"], r["workload"]), []).append(r)
    kept = [r for g in groups.values() for r in sorted(g, key=cost)[:keep]] + list(confirmed.values())
    kept.sort(key=lambda r: (r["target"], r["workload"], cost(r)))
    atomic_write(out, "".join(json.dumps(r, sort_keys=True) + "\n" for r in kept).encode())
    return len(records), len(kept)
