"""`fxc tune`: merging and distilling logs; its errors are messages."""
import json

from fxc.cli import main
from fxc.tuning.log import append, make_record


def test_distil_keeps_the_best_per_workload(tmp_path, capsys):
    a, b, out = tmp_path / "a.jsonl", tmp_path / "b.jsonl", tmp_path / "best.jsonl"
    for i in range(4):
        append(a if i % 2 else b, make_record(f"w{i % 2}", "t", {"k": i}, [4.0 - i], None))
    assert main(["tune", "--log", str(a), "--log", str(b), "--distil", str(out)]) == 0
    assert "wrote 2" in capsys.readouterr().out
    assert sorted(json.loads(x)["config"]["k"] for x in out.read_text().splitlines()) == [2, 3]


def test_cli_errors(tmp_path, capsys):
    assert main(["tune", "--distil", str(tmp_path / "o.jsonl")]) == 1
    assert "needs the logs" in capsys.readouterr().err
    assert main(["tune"]) == 1
    assert "name the model" in capsys.readouterr().err


FACTORY = '''
import torch


def make():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Conv2d(4, 8, 3, padding=1), torch.nn.ReLU())
'''


def test_tune_a_factory_model(tmp_path, capsys):
    (tmp_path / "factory.py").write_text(FACTORY)
    log = tmp_path / "log.jsonl"
    assert main(["tune", f"{tmp_path / 'factory.py'}:make", "--input-shape", "1,4,8,8", "--trials", "2",
                 "--log", str(log), "--plot", str(tmp_path / "c.png")]) == 0
    out = capsys.readouterr().out
    assert "fxc.tune on llvm" in out and "2 trials" in out, out
    assert (tmp_path / "c.png").exists()
    records = [json.loads(line) for line in log.read_text().splitlines()]
    trials = [r for r in records if "why" not in r]
    assert len(trials) == 2 and all(r["error"] is None and len(r["costs"]) > 0 for r in trials), records
    # a confirmation record follows only where a trial measured faster than the default (a timing the host decides)
    default = [min(r["costs"]) for r in trials if not r["config"]]
    tuned = [min(r["costs"]) for r in trials if r["config"]]
    confirmed = [r for r in records if "why" in r]
    if default and tuned and min(tuned) < default[0]:
        assert len(confirmed) == 1 and confirmed[0]["why"].startswith(("kept", "dropped")), records
        assert confirmed[0]["config"] in ({}, trials[[bool(r["config"]) for r in trials].index(True)]["config"])
    else:
        assert confirmed == [] and "no group improved" in out, (records, out)
