"""Shared fixtures: `target`, the fxc target a test runs on (which test runs on which: tests/targets.py), and a fresh
torch._dynamo around every test."""

import pytest

from tests.targets import known_failure, require_runtime, targets_of


def _takes_our_target(metafunc) -> bool:
    """True if the test takes this file's `target` fixture (not a `target` of its own parametrize or module)."""
    if "target" not in metafunc.fixturenames:
        return False
    if any("target" in _argnames(m) for m in metafunc.definition.iter_markers("parametrize")):
        return False
    defs = metafunc._arg2fixturedefs.get("target", ())
    return bool(defs) and defs[-1].func.__module__ == __name__


def _argnames(parametrize_marker) -> list:
    names = parametrize_marker.args[0] if parametrize_marker.args else parametrize_marker.kwargs["argnames"]
    return [n.strip() for n in names.split(",")] if isinstance(names, str) else list(names)


_NO_TARGET = set()          # the tests none of whose targets FXC_TEST_TARGETS lists


def pytest_generate_tests(metafunc):
    if _takes_our_target(metafunc):
        targets = targets_of(metafunc.definition.iter_markers())
        if not targets:
            _NO_TARGET.add(metafunc.definition.nodeid)
        metafunc.parametrize("target", targets, indirect=True)


def pytest_collection_modifyitems(config, items):
    """Deselects the tests with no target to run on; a test that fails on a target today (tests/targets.py,
    KNOWN_FAILURES) is an expected failure there."""
    deselected = [item for item in items if item.nodeid.split("[")[0] in _NO_TARGET]
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = [item for item in items if item.nodeid.split("[")[0] not in _NO_TARGET]
    for item in items:
        target = getattr(item, "callspec", None) and item.callspec.params.get("target")
        why = target and known_failure(item.name, target)
        if why:
            item.add_marker(pytest.mark.xfail(reason=f"{target}: {why}", strict=True))


@pytest.fixture
def target(request):
    require_runtime(request.param)
    return request.param


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    import torch._dynamo
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: long-running (models end to end)")
    config.addinivalue_line("markers", "cpu_targets: runs on the host and the lower ISAs (tests/targets.py)")
    config.addinivalue_line("markers", "all_targets: runs on every target (tests/targets.py), not the host alone")
    config.addinivalue_line("markers", "targets(*names): runs on the targets named, and only on those")
