"""Trials (one measured config) and the budget every search respects."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from tilecraft.runtime.config import Config

OK = "ok"
SKIPPED = "skipped"  # not measured: the tuning budget ran out first (never recorded)
FAILED_STATUSES = (
    "compile_error",
    "runtime_error",
    "timeout",
    "wrong_result",
    "invalid",
    SKIPPED,
)


@dataclass
class Trial:
    """One config measured by the benchmarking engine.

    status: "ok", or one of FAILED_STATUSES; `time_ms` is the kernel time (None unless
    ok); `compile_s` the compile time; `error` a short reason for failures; `bench_s`
    the wall time its timing took.
    """

    config: Config
    status: str
    time_ms: float | None = None
    compile_s: float = 0.0
    error: str = ""
    bench_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.status == OK and self.time_ms is not None


Evaluate = Callable[[list[Config]], list[Trial]]


@dataclass
class Budget:
    """Stop after `max_configs` trials or `max_seconds` of (possibly simulated) time,
    counted from `started` when given (tuning counts its set-up too), else from `start`."""

    max_configs: int | None = None
    max_seconds: float | None = None
    clock: Callable[[], float] = time.monotonic
    started: float | None = field(default=None)
    used: int = 0

    def start(self) -> None:
        if self.started is None:
            self.started = self.clock()
        self.used = 0

    def deadline(self) -> float | None:
        """When the time runs out, on `clock`; None without a time limit."""
        if self.max_seconds is None:
            return None
        return (self.clock() if self.started is None else self.started) + self.max_seconds

    def elapsed(self) -> float:
        return 0.0 if self.started is None else self.clock() - self.started

    def remaining_configs(self) -> int:
        left = None if self.max_configs is None else self.max_configs - self.used
        return 1 << 30 if left is None else max(left, 0)

    def exhausted(self) -> bool:
        if self.remaining_configs() <= 0:
            return True
        return self.max_seconds is not None and self.elapsed() >= self.max_seconds

    def charge(self, n: int) -> None:
        self.used += n
