"""Trials (one measured config) and the budget every search respects."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from tilecraft.runtime.config import Config
from tilecraft.runtime.settings import OBJECTIVE_NAMES

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
OBJECTIVES = OBJECTIVE_NAMES  # time, energy per call, or their product (energy x delay)


def objective_value(objective: str, time_ms: float | None, energy_j: float | None) -> float | None:
    """A trial's score under `objective` (lower is better): ms, J per call, or J x ms; None
    when a measurement it needs is missing."""
    if objective == "time":
        return time_ms
    if energy_j is None or (objective == "edp" and time_ms is None):
        return None
    return energy_j if objective == "energy" else energy_j * (time_ms or 0.0)


@dataclass
class Trial:
    """One config measured by the benchmarking engine.

    status: "ok", or one of FAILED_STATUSES; `time_ms` is the kernel time (None unless
    ok); `compile_s` the compile time; `error` a short reason for failures; `bench_s`
    the wall time its timing took; `energy_j` the energy of one call in joules (None
    unless measured); `objective` what `score` ranks it by (one of OBJECTIVES).
    """

    config: Config
    status: str
    time_ms: float | None = None
    compile_s: float = 0.0
    error: str = ""
    bench_s: float = 0.0
    energy_j: float | None = None
    objective: str = "time"

    @property
    def ok(self) -> bool:
        return self.status == OK and self.time_ms is not None

    @property
    def score(self) -> float | None:
        """What searches minimize: the trial's value under its objective (None if failed
        or not measured). A property, so a re-timing (`time_ms` updated) counts at once."""
        if not self.ok:
            return None
        return objective_value(self.objective, self.time_ms, self.energy_j)


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
    refunded: int = 0

    def start(self) -> None:
        if self.started is None:
            self.started = self.clock()
        self.used = self.refunded = 0

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

    def refund(self, n: int) -> None:
        """Give back `n` configs that cost nothing (the kernel's own rules refused them
        before any compile), up to `max_configs` in a run: a space the kernel refuses in
        part still gets its measurements, and one it refuses wholly still ends."""
        n = min(n, (self.max_configs or 0) - self.refunded)
        self.used -= n
        self.refunded += n
