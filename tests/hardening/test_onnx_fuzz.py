"""A fixed small sample of the randomised ONNX fuzz (tests/hardening/onnx_fuzz.py; the long sweep is `python -m
tests.hardening.onnx_fuzz --n 5000`): every mutant ends in an fxc.errors refusal or the reference evaluator's
result."""
import numpy as np

from fxc.errors import FxcError
from tests.hardening import onnx_fuzz


def test_fixed_sample_has_no_finding():
    counts, findings = onnx_fuzz.sweep(120, seed=0, timeout=60)
    assert not findings, "\n".join(f"[0:{i}] {outcome}: {what}\n{detail}" for i, what, outcome, detail in findings)
    assert counts["equal"] >= 10 and counts["refused"] >= 50, counts     # both kinds of ending are exercised


def test_seed_models_run_as_the_reference():
    for m in onnx_fuzz.seed_models():
        assert onnx_fuzz.run_case(m.SerializeToString()) == ("equal", ""), m.graph.name


def test_the_oracle_flags_a_crash_and_a_wrong_result(monkeypatch):
    """The fuzz's verdicts can fail: a bare exception is a crash, a different result is wrong."""
    data = onnx_fuzz.seed_models()[0].SerializeToString()

    def bare(*a, **k):
        raise KeyError("boom")
    monkeypatch.setattr(onnx_fuzz.fxc, "from_onnx", bare)
    assert onnx_fuzz.run_case(data)[0] == "crash"
    monkeypatch.setattr(onnx_fuzz.fxc, "from_onnx", lambda *a: (lambda *x: np.zeros((2, 3), np.float32)))
    assert onnx_fuzz.run_case(data)[0] == "wrong"

    def refuse(*a, **k):
        raise FxcError("no")
    monkeypatch.setattr(onnx_fuzz.fxc, "from_onnx", refuse)
    assert onnx_fuzz.run_case(data)[0] == "refused"


def test_mutants_are_reproducible():
    seeds = onnx_fuzz.seed_models()
    assert [onnx_fuzz.mutant(3, i, seeds) for i in range(20)] == [onnx_fuzz.mutant(3, i, seeds) for i in range(20)]
    kinds = {onnx_fuzz.mutant(3, i, seeds)[1].split(": ")[1].split()[0] for i in range(40)}
    assert {"bits", "truncated"} <= kinds and len(kinds) > 2
