"""The reference outputs of a tuning run, when this process must compute them.

Every candidate's outputs are compared with the reference (the default config's). With
worker processes, the worker that runs the reference config computes it and saves it
(`runner.check(publish=...)`), so that config compiles once; only when that worker fails
does this process compute it, eagerly (see `Benchmarker._fall_back`): a `Reference`
computes it in a background thread and saves it atomically, while the workers compile
and run their candidates, then wait for the file to compare (`wait_for`). Jobs' timeouts
are held while it is pending (`WorkerPool.run(hold=...)`).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import torch

from tilecraft.autotune.phases import Phases


class ReferenceFailed(Exception):
    """Computing or saving the reference failed (the cause is chained)."""


class Reference:
    """`compute()` run in a daemon thread with `device` (the arguments' GPU, "" for none)
    current, its outputs saved to `path` (atomically)."""

    def __init__(
        self,
        compute: Callable[[], list[torch.Tensor]],
        path: Path,
        phases: Phases,
        device: str = "",
    ) -> None:
        self.compute, self.path, self.phases, self.device = compute, path, phases, device
        self.expected: list[torch.Tensor] | None = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="tilecraft-reference", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            # a new thread's current GPU is GPU 0; Triton compiles and launches on the current
            on_device = torch.cuda.device(self.device) if self.device else contextlib.nullcontext()
            with self.phases.timed("reference"), on_device:
                self.expected = self.compute()
            with self.phases.timed("save"):
                save(self.expected, self.path)
        except BaseException as e:  # noqa: BLE001 - handed to the tuning thread
            self.error = e

    def pending(self) -> bool:
        """Whether it is still being computed; raises ReferenceFailed once that failed."""
        if self.thread.is_alive():
            return True
        if self.error is not None:
            raise ReferenceFailed(str(self.error)) from self.error
        return False

    def join(self) -> None:
        """Wait until it is computed (or failed)."""
        self.thread.join()


def save(expected: list[torch.Tensor], path: Path) -> None:
    """Write `expected` to `path` so that no reader ever sees half a file."""
    part = path.with_name(path.name + ".part")
    torch.save(expected, part)
    os.replace(part, path)


def wait_for(path: str, poll_s: float = 0.005) -> list[torch.Tensor]:
    """The reference saved at `path`, once it is there (the pool stops a worker that waits
    longer than the run allows)."""
    while not os.path.exists(path):
        time.sleep(poll_s)
    return torch.load(path, weights_only=False)
