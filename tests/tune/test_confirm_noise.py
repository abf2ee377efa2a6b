"""The confirmation (fxc/tuning/confirm.py) measured as the model's user calls it, with a margin over the noise: a
config that is really slower in the whole model is dropped, one that is really faster kept, and the defaults stay
where the whole tuned model is not faster by what is asked. The configs are real schedule choices of two strided
convs to 64 channels at 7x7, whose packed weights leave padding blocks: the default's register tiles of 3 channel
vectors compute 6 blocks for the 4 the output uses, tiles of 2 vectors compute none (the model ~16% faster at 1
thread: measured 2026-12-07 on the 2-core AMD EPYC under load, 370 interleaved calls); 1 vector of 1 output column
per tile reloads the input for every 16 channels and column (the model ~1.7x slower)."""
import statistics

import pytest
import torch

import fxc
from fxc.tuning.confirm import ConfirmParams, confirm, gain
from fxc.tuning.frontends import graph_of
from fxc.tuning.log import read
from fxc.tuning.measure import RUNNER, MeasureParams, Result, WholeModel, measure
from fxc.tuning.payload import MeasuredTask
from fxc.tuning.tasks import extract_tasks
from fxc.tuning.tuner import _measurer
from fxc.tuning.workload import target_key
from tests.tune.models import improved_states

FASTER = {"conv2d.vectors": 2}
SLOWER = {"conv2d.rows": 1, "conv2d.vectors": 1}
QUICK = ConfirmParams(rounds=20, seconds=2.0)


class TwoConvs(torch.nn.Module):
    """Two strided 3x3 convs of one input to 64 channels at 7x7 (direct, over packed weights: Winograd takes stride 1
    only), two groups of their own."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Conv2d(512, 64, 3, stride=2, padding=1)
        self.b = torch.nn.Conv2d(512, 64, 3, stride=2, padding=1)

    def forward(self, x):
        return torch.relu(self.a(x)) + self.b(x)


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Kernels on 1 thread (the workload keys, the runtime and the measuring children follow FXC_NUM_THREADS): on a
    loaded host a 2-thread model's calls swing ~2x as its worker gets a core or not, and the comparison's noise
    with it (measured: 2 standard errors 5% at 2 threads, 1.6% at 1 thread, for a ~15% gain)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FXC_NUM_THREADS", "1")
        yield


@pytest.fixture(scope="module")
def model(one_thread):
    torch.manual_seed(0)
    m, x = TwoConvs().eval(), (torch.randn(1, 512, 14, 14),)
    graph = graph_of(m, x)
    target, tasks = extract_tasks(graph, "llvm")
    convs = sorted((t for t in tasks if t.tunable and not t.graph_level), key=lambda t: t.desc)
    assert len(convs) == 2 and all(t.space.valid(FASTER) and t.space.valid(SLOWER) for t in convs), \
        [t.desc for t in tasks]
    return m, x, graph, target, convs


def _confirm(graph, target, states, log, params):
    tkey = target_key(target)
    measurer, close = _measurer(None, target, tkey, MeasureParams(), RUNNER)
    try:
        return confirm(graph, states, measurer, log, tkey, target, params, "torch")
    finally:
        close()


def test_the_whole_model_timed_interleaved_in_a_process_like_its_users(model):
    """Each config's costs, one per round, paired by round: the faster choice measures faster than the default,
    the slower one slower."""
    m, x, graph, target, (a, b) = model
    configs = [{}, {a.key: FASTER}, {a.key: SLOWER}]
    rs = measure(MeasuredTask("model", "two convs", graph), str(target), target_key(target), configs,
                 MeasureParams(), whole_model=WholeModel(rounds=15, seconds=1.0, framework="torch"))
    assert [r.error for r in rs] == [None] * 3 and len({len(r.costs) for r in rs}) == 1 and len(rs[0].costs) >= 15
    assert gain(rs[0].costs, rs[1].costs)[0] > 0 > gain(rs[0].costs, rs[2].costs)[0], \
        [statistics.median(r.costs) for r in rs]


def test_a_slower_config_is_dropped_a_faster_one_kept(model, tmp_path):
    m, x, graph, target, (a, b) = model
    fast, slow = improved_states([(a, FASTER), (b, SLOWER)])
    log = tmp_path / "log.jsonl"
    result = _confirm(graph, target, [fast, slow], log, QUICK)
    assert not result.errors, result.errors
    records = {r["workload"]: r for r in read(log)}
    assert all(len(records[k]["model"]["tuned"]) >= 20 for k in (a.key, b.key))
    # the 1.7x slower config is dropped on any host
    assert slow.task.desc in result.dropped and slow.best_config == {}, result.why
    assert records[b.key]["config"] == {} and records[b.key]["why"].startswith("dropped:")
    # the ~16% faster one measures faster in its own comparison; whether it clears the noise is the host's (a
    # loaded CI host may widen it): the decision must agree with the figures it recorded
    g, se = gain(records[a.key]["model"]["default"], records[a.key]["model"]["tuned"])
    assert g > 0, (g, se, result.why)
    if fast.task.desc in result.kept:
        assert g > max(QUICK.margin, 2 * se), (g, se, result)
        assert records[a.key]["config"] == FASTER and records[a.key]["why"].startswith("kept:")
        assert fast.best_config == FASTER
    else:
        assert records[a.key]["config"] == {} and records[a.key]["why"].startswith("dropped:"), result.why
        assert g <= max(QUICK.margin, 2 * se) or "the defaults stay" in records[a.key]["why"], (g, se, result.why)
    c = fxc.from_torch(m, x, tuning_log=str(log))
    torch.testing.assert_close(c(*x), m(*x), rtol=1e-4, atol=1e-4)
    lines = [str(k) for k in c.module.kernels]
    assert any("defaults measured best" in k for k in lines), lines
    assert any("conv2d.vectors=2" in k for k in lines) == (fast.task.desc in result.kept), lines


def test_the_defaults_stay_when_the_whole_is_not_faster_by_what_is_asked(model, tmp_path):
    """The faster config passes its own comparison; the final check of the whole tuned model asks for 90%."""
    m, x, graph, target, (a, b) = model
    (fast,) = improved_states([(a, FASTER)])
    log = tmp_path / "log.jsonl"
    result = _confirm(graph, target, [fast], log, ConfirmParams(rounds=20, seconds=2.0, min_gain=0.9))
    assert not result.errors and result.kept == [] and result.dropped == [fast.task.desc], result.why
    (record,) = read(log)
    assert record["config"] == {} and "alone" in record["why"] and fast.best_config == {}, record
    # it reaches the final check where it clears its own comparison's noise (the host's load decides that)
    g, se = gain(record["model"]["default"], record["model"]["tuned"])
    assert ("the defaults stay" in record["why"]) == (g > max(ConfirmParams().margin, 2 * se)), (g, se, record)


def test_the_final_check_keeps_the_defaults_on_fixed_figures(model, tmp_path):
    """The same rule on fixed figures: the faster tiles make the model 14% faster, alone and in the final check,
    which asks for 90%: the defaults stay, and the record says why."""
    m, x, graph, target, (a, b) = model
    (fast,) = improved_states([(a, FASTER)])

    def measurer(task, configs, whole):
        jitter = [1.0 + 0.01 * ((i * 7) % 5 - 2) for i in range(whole.rounds)]
        return [Result(c, [j * 0.86 ** sum(v == FASTER for v in c.values()) for j in jitter]) for c in configs]
    result = confirm(graph, [fast], measurer, tmp_path / "log.jsonl", target_key(target), target,
                     ConfirmParams(rounds=20, seconds=2.0, min_gain=0.9), "torch")
    assert not result.errors and result.kept == [] and result.dropped == [fast.task.desc], result.why
    (record,) = read(tmp_path / "log.jsonl")
    assert record["config"] == {} and "the defaults stay" in record["why"] and "+15.08%" in record["why"], record
    assert fast.best_config == {}
    (fast,) = improved_states([(a, FASTER)])        # asking for 10%, the same figures keep it
    result = confirm(graph, [fast], measurer, tmp_path / "log2.jsonl", target_key(target), target,
                     ConfirmParams(rounds=20, seconds=2.0, min_gain=0.1), "torch")
    assert result.kept == [fast.task.desc] and read(tmp_path / "log2.jsonl")[0]["config"] == FASTER, result.why


def test_gains_below_the_margin_alone_are_kept_together(model, tmp_path):
    """The rule, on fixed figures (a timing margin between two measured gains would make the test depend on the
    host's load; the measured comparisons are the tests above): each conv's faster tiles alone make the model 14%
    faster, both 26% (log gains 0.15 and 0.30); with a margin of 25% neither passes alone, the two at once do, and
    the final check keeps them."""
    m, x, graph, target, (a, b) = model
    states = improved_states([(a, FASTER), (b, FASTER)])
    log = tmp_path / "log.jsonl"
    batches = []

    def measurer(task, configs, whole):
        batches.append(configs)
        jitter = [1.0 + 0.01 * ((i * 7) % 5 - 2) for i in range(whole.rounds)]     # the host's speed, round by round
        return [Result(c, [j * 0.86 ** sum(v == FASTER for v in c.values()) for j in jitter]) for c in configs]
    result = confirm(graph, states, measurer, log, target_key(target), target,
                     ConfirmParams(rounds=20, seconds=2.0, margin=0.25), "torch")
    assert not result.errors and sorted(result.kept) == sorted(s.task.desc for s in states), result.why
    assert all("with the other 1 at once" in why for why in result.why.values()), result.why
    assert all(r["config"] == FASTER for r in read(log))
    assert [len(c) for c in batches] == [4, 2]      # default, each alone, both; then the final check
    result = confirm(graph, improved_states([(a, FASTER), (b, FASTER)]), measurer, tmp_path / "log2.jsonl",
                     target_key(target), target, ConfirmParams(rounds=20, seconds=2.0, margin=0.35), "torch")
    assert result.kept == [] and all(r["config"] == {} for r in read(tmp_path / "log2.jsonl")), result.why


def test_gain_pairs_the_rounds():
    """The gain is the median of the per-round log ratios; a drift that moves both sides of a round cancels."""
    base = [1.0, 2.0, 4.0, 1.0, 2.0]            # the host's speed moving from round to round
    g, se = gain(base, [b * 0.9 for b in base])
    assert abs(g - 0.10536) < 1e-4 and se == 0.0
    g, se = gain([1.0] * 5, [0.9, 1.1, 0.9, 1.1, 1.0])
    assert abs(g) < 1e-9 and se > 0.05
