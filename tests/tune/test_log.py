"""The tuning log: a killed writer and corrupt lines cost at most their own record."""
import json
import subprocess
import sys
import time
import warnings

import pytest

from fxc.errors import FxcError
from fxc.tuning.log import append, best_records, distil, make_record, read


def _rec(i, cost=1.0):
    return make_record(f"w{i % 3}", "t", {"k": i}, [cost + i * 1e-3], None, "desc")


def test_corrupt_lines_are_skipped_with_one_warning(tmp_path):
    log = tmp_path / "log.jsonl"
    for i in range(4):
        append(log, _rec(i))
    with open(log, "ab") as f:
        f.write(b'{"workload": "w9", "trunc')          # a writer killed mid-record
    append(log, _rec(5))                                # starts on a fresh line
    with open(log, "ab") as f:
        f.write(b"not json\n[1, 2]\n")
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        records = read(log)
    assert [r["config"]["k"] for r in records] == [0, 1, 2, 3, 5]
    assert len(w) == 1 and "skipped 3 corrupt" in str(w[0].message)


def test_kill_9_mid_tune_loses_at_most_the_record_in_flight(tmp_path):
    log = tmp_path / "log.jsonl"
    code = ("from fxc.tuning.log import append, make_record\ni = 0\nwhile True:\n"
            "    append(%r, make_record('w', 't', {'k': i}, [1.0] * 200, None, 'x' * 500))\n    i += 1\n" % str(log))
    p = subprocess.Popen([sys.executable, "-c", code], cwd=tmp_path)     # (no fxc of the working directory)
    deadline = time.time() + 60
    while time.time() < deadline and (not log.exists() or log.stat().st_size < 200_000):
        time.sleep(0.05)
    p.kill()
    p.wait()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        records = read(log)
    assert len(records) > 10
    assert [r["config"]["k"] for r in records] == list(range(len(records)))    # none lost but the last
    lines = log.read_bytes().splitlines()
    assert len(lines) - len(records) <= 1


def test_best_and_distil(tmp_path):
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    for i in range(6):
        append(a if i % 2 else b, _rec(i, cost=10.0 - i))
    append(a, make_record("w0", "t", {"k": 99}, [], "crash", "desc"))
    best = best_records(read(a) + read(b), "t")
    assert {w: r["config"]["k"] for w, r in best.items()} == {"w0": 3, "w1": 4, "w2": 5}
    out = tmp_path / "best.jsonl"
    assert distil([a, b], out) == (7, 3)
    assert [json.loads(x)["config"]["k"] for x in out.read_text().splitlines()] == [3, 4, 5]


def test_missing_log_option_is_a_clear_error(tmp_path):
    from fxc.driver.tuned import tuned_records
    from fxc.target import Target
    with pytest.raises(FxcError, match="no such file"):
        tuned_records({"tuning_log": str(tmp_path / "nope.jsonl")}, Target.parse("llvm"))
