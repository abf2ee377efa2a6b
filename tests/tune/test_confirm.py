"""The confirmation step (fxc/tuning/confirm.py): one confirmation record per group, which compiles apply before a
faster unconfirmed record; a short fxc.tune confirms by itself. (Real slower and faster configs inside the whole
model: test_confirm_noise.py.)"""

import torch

import fxc
from fxc.tuning.log import append, best_records, distil, make_record, read
from fxc.tuning.measure import MeasureParams
from tests.tune.models import small


def test_compiles_apply_the_confirmation_first(tmp_path):
    a = tmp_path / "a.jsonl"
    append(a, make_record("w", "t", {"k": 1}, [1.0], None))
    append(a, make_record("w", "t", {"k": 2}, [0.5], None))
    append(a, make_record("w", "t", {}, [0.9], None, model={"default": [3.0], "tuned": [3.0]}))    # confirmed
    append(a, make_record("w", "t", {"k": 3}, [0.1], None))      # faster, found later, not confirmed
    append(a, make_record("v", "t", {"k": 4}, [0.2], None))
    best = best_records(read(a), "t")
    assert best["w"]["config"] == {} and best["w"]["confirmed"] and best["v"]["config"] == {"k": 4}
    assert distil([a], tmp_path / "d.jsonl") == (5, 3)
    assert best_records(read(tmp_path / "d.jsonl"), "t")["w"]["config"] == {}


def test_tune_confirms_in_the_whole_model(tmp_path):
    m, x = small()
    log = tmp_path / "log.jsonl"
    r = fxc.tune(m, x, target="llvm", trials=12, log=log, batch=4, progress=False,
                 params=MeasureParams(repeat=2, min_repeat_ms=2))
    confirmed = [rec for rec in read(log) if rec.get("confirmed")]
    assert r.confirmation is not None and len(confirmed) == len(r.confirmation.kept) + len(r.confirmation.dropped)
    assert "confirmation" in str(r)
    c = fxc.from_torch(m, x, tuning_log=str(log))
    torch.testing.assert_close(c(*x), m(*x), rtol=1e-4, atol=1e-5)
