"""Where a tuning run's wall time goes, phase by phase (`bound.tuning["phases"]`).

The fixed costs of a short tuning run (starting workers, the reference outputs, saving the
arguments) can dominate its few benchmarks; this breakdown shows them. Phases, in seconds:

- `plan`: reading the tuning database and the cost model, choosing the search;
- `reference`: computing the reference outputs (compile included): with workers, by the
  worker that runs the reference config first, while the others compile their candidates
  (or, when it fails, eagerly in a background thread of this process); else here;
- `save`: writing the arguments and the reference for the worker processes;
- `workers_ready`: the longest start-up (spawn to ready) of the workers that were still
  starting when this run began (0 when a warm pool served it); it overlaps `reference`,
  `save` and `plan`;
- `load`: the longest time a worker took to load the arguments at its first job;
- `compile_max` / `compile_sum`: the first run (the compile) of the candidates;
- `timing`: the benchmarks (summed over candidates; they take turns on the GPU);
- `retime`: re-timing the leaders at the end;
- `codegen`: generating the candidates' code in this process;
- `measure`: waiting for the batches of candidates (wall time);
- `search`: the search's own work between batches (ranking, model predictions);
- `total`: the whole run.

Example::

    phases = Phases()
    with phases.timed("reference"):
        ...
    phases.summary()  # "total 2.31 s: plan 0.05, reference 0.40, ..."
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

ORDER = (
    "plan",
    "reference",
    "save",
    "workers_ready",
    "load",
    "compile_max",
    "compile_sum",
    "timing",
    "retime",
    "codegen",
    "measure",
    "search",
)


class Phases(dict[str, float]):
    """Seconds per phase of one tuning run; phases timed twice add up."""

    def add(self, name: str, seconds: float) -> None:
        """Add `seconds` to phase `name`."""
        self[name] = self.get(name, 0.0) + seconds

    def most(self, name: str, seconds: float) -> None:
        """Keep the largest of `seconds` and what phase `name` holds."""
        self[name] = max(self.get(name, 0.0), seconds)

    @contextlib.contextmanager
    def timed(self, name: str) -> Iterator[None]:
        """Add the wall time of the `with` block to phase `name`."""
        start = time.perf_counter()
        try:
            yield
        finally:
            self.add(name, time.perf_counter() - start)

    def rounded(self) -> dict[str, float]:
        """The phases in their documented order, to the millisecond."""
        names = [n for n in ORDER if n in self] + sorted(set(self) - set(ORDER))
        return {n: round(self[n], 3) for n in names}

    def summary(self) -> str:
        """One terse line: the total, then each phase's seconds."""
        shown = self.rounded()
        total = shown.pop("total", None)
        parts = ", ".join(f"{name} {seconds:.2f}" for name, seconds in shown.items())
        return parts if total is None else f"total {total:.2f} s: {parts}"
