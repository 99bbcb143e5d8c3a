"""A benchmarker that answers from a recorded landscape, with simulated wall time.

Any search can run against it offline, on a CPU, deterministically: a config that was
recorded gets its recorded result; any other gets the result of the nearest recorded
config (knob by knob, in the space's encoding), counted in `imputed`. With `tile_weight`
above 1 the knobs that set the tile and its threads (`TILE_KNOBS`) count that many times
in the distance: on the 38 H200 landscapes, a recorded config's time taken from its
nearest other recorded config is off by 1.47x in the median with equal weights and by
1.29x with weight 10 (off by more than 2x: 34% against 25% of the configs), because
indexing, eviction and grouping knobs, which rarely change the time much, outvote a
block size that changes it several times. The clock advances
as the real engine's would: candidates compile in parallel on `workers` processes while
timings run one at a time, and a timeout costs `timeout_s`.

Example::

    replay = Replay(landscape, space)
    search = make_search("fast", space, replay, Budget(20, 15.0, clock=replay.clock))
    search.run()   # replay.now: simulated seconds; replay.best_ms(): true best found
"""

from __future__ import annotations

import heapq
from dataclasses import replace

import numpy as np

from tilecraft.autotune.landscape import Landscape
from tilecraft.autotune.search.common import normalize
from tilecraft.autotune.space import ConfigSpace
from tilecraft.autotune.trial import Trial
from tilecraft.runtime.config import Config

BATCH_OVERHEAD_S = 0.05  # handing a batch to the workers and reading back the results
TILE_KNOBS = ("block_sizes", "reduction_loops", "num_warps")  # what `tile_weight` weighs


class Replay:
    """Callable like a Benchmarker: configs in, Trials out, from `landscape`."""

    def __init__(
        self,
        landscape: Landscape,
        space: ConfigSpace,
        workers: int = 8,
        timeout_s: float = 10.0,
        tile_weight: float = 1.0,
    ) -> None:
        self.space, self.workers, self.timeout_s = space, workers, timeout_s
        self.table: dict[Config, Trial] = {}
        for t in landscape.trials:
            key = normalize(space, t.config)
            if key is not None:
                self.table.setdefault(key, t)
        self.keys = list(self.table)
        codes = np.asarray([space.encode(c) for c in self.keys], dtype=float)
        self.scale = np.maximum(codes.max(axis=0) - codes.min(axis=0), 1.0)
        self.codes = codes / self.scale
        self.weights = np.asarray(
            [tile_weight if k.field in TILE_KNOBS else 1.0 for k in space.knobs], dtype=float
        )
        self.now = 0.0
        self.imputed = 0
        self.history: list[Trial] = []
        self.trace: list[tuple[int, float, float]] = []  # (trials, seconds, best ms) per batch

    def clock(self) -> float:
        return self.now

    def __call__(self, configs: list[Config]) -> list[Trial]:
        trials = [self.lookup(c) for c in configs]
        self.now += self.batch_seconds(trials)
        self.history += trials
        self.trace.append((len(self.history), self.now, self.best_ms() or float("inf")))
        return trials

    def lookup(self, config: Config) -> Trial:
        """The recorded trial of `config`, or of its nearest recorded neighbour."""
        key = normalize(self.space, config) or config
        found = self.table.get(key)
        if found is None:
            self.imputed += 1
            code = np.asarray(self.space.encode(key), dtype=float) / self.scale
            distances = (np.abs(self.codes - code) * self.weights).sum(axis=1)
            found = self.table[self.keys[int(distances.argmin())]]
        return replace(found, config=config)

    def batch_seconds(self, trials: list[Trial]) -> float:
        """Compiles spread over the workers (longest first), timings one at a time."""
        loads = [0.0] * max(self.workers, 1)
        for cost in sorted((self._compile_s(t) for t in trials), reverse=True):
            heapq.heapreplace(loads, loads[0] + cost)
        timing = sum(t.bench_s for t in trials)
        return max(max(loads), timing) + BATCH_OVERHEAD_S

    def _compile_s(self, t: Trial) -> float:
        return self.timeout_s if t.status == "timeout" else t.compile_s + t.bench_s

    def best_ms(self) -> float | None:
        """The fastest time measured so far (None before any ok trial)."""
        times = [t.time_ms for t in self.history if t.ok and t.time_ms is not None]
        return min(times) if times else None
