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
    assert len(log.read_text().splitlines()) == 2 and (tmp_path / "c.png").exists()
