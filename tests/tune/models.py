"""Small models and helpers for the tuning tests."""
import torch

from fxc.tuning.scheduler import TaskState


class Small(torch.nn.Module):
    """A conv (register tiles), a depthwise conv, a pool and a linear: the CPU and GPU schedules' main knobs."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(8, 16, 3, padding=1)
        self.dw = torch.nn.Conv2d(16, 16, 3, padding=1, groups=16)
        self.fc = torch.nn.Linear(16, 10)

    def forward(self, x):
        y = torch.relu(self.dw(torch.relu(self.conv(x))))
        return torch.softmax(self.fc(y.mean((2, 3))), dim=-1)


def small():
    torch.manual_seed(0)
    return Small().eval(), (torch.randn(1, 8, 16, 16),)


def improved_states(tasks_configs: list) -> list:
    """States of tasks whose config is said to beat the default alone (as the search would leave them): the
    confirmation's input."""
    states = []
    for t, config in tasks_configs:
        s = TaskState(t, default_cost=2e-4, best_cost=1e-4)
        s.best_config = config
        states.append(s)
    return states
