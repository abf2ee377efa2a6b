"""Shared fixtures: every test that runs compiled code is parametrised over all fxc targets.
In CI every target must run: a target whose runtime is missing fails, it is not skipped."""

import pytest

from tests.targets import targets_under_test


@pytest.fixture(params=targets_under_test())
def target(request):
    return request.param


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    import torch._dynamo
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: long-running (models end to end)")
