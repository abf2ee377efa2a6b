"""The progress bar of a tuning run (tqdm): trials done of the budget, ETA, best latency of the task just tuned and
the end-to-end estimate. Off when stderr is not a terminal (or progress=False); progress=True forces it on."""
from __future__ import annotations

import sys


class Progress:
    def __init__(self, total: int, enabled: bool | None = None, stream=None):
        stream = stream or sys.stderr
        on = stream.isatty() if enabled is None else enabled
        self.bar = None
        if on:
            from tqdm import tqdm  # deferred: optional (fxc[tune]); only a visible bar needs it
            self.bar = tqdm(total=total, unit="trial", file=stream, dynamic_ncols=True, desc="fxc tune")

    def update(self, n: int, task_desc: str, best_s: float, e2e_s: float, e2e_default_s: float) -> None:
        if self.bar is None:
            return
        self.bar.update(n)
        best = f"{best_s * 1e3:.3f} ms" if best_s < float("inf") else "-"
        self.bar.set_postfix_str(f"best {best} ({task_desc[:28]}); end to end {e2e_s * 1e3:.2f} ms "
                                 f"(default {e2e_default_s * 1e3:.2f} ms)")

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
