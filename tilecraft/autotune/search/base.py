"""The base class of searches: bookkeeping of trials, the best so far, and the budget."""

from __future__ import annotations

import random
from collections.abc import Iterable

from tilecraft.autotune.space import ConfigSpace
from tilecraft.autotune.trial import Budget, Evaluate, Trial
from tilecraft.runtime.config import Config


class Search:
    """Subclasses implement `search()`, calling `self.measure(configs)` in batches.

    `measure` skips configs already tried, truncates batches to the budget, records every
    trial in `self.trials` and returns the new ones. `run()` returns the best ok trial,
    or None if none succeeded.
    """

    name = "base"

    def __init__(
        self, space: ConfigSpace, evaluate: Evaluate, budget: Budget, seed: int = 0
    ) -> None:
        self.space, self.evaluate, self.budget = space, evaluate, budget
        self.rng = random.Random(seed)
        self.trials: list[Trial] = []
        self.seen: set[Config] = set()

    def run(self) -> Trial | None:
        self.budget.start()
        self.search()
        return self.best()

    def search(self) -> None:
        raise NotImplementedError

    def measure(self, configs: Iterable[Config]) -> list[Trial]:
        if self.budget.exhausted():
            return []
        fresh: list[Config] = []
        for config in configs:
            if config not in self.seen and len(fresh) < self.budget.remaining_configs():
                self.seen.add(config)
                fresh.append(config)
        if not fresh:
            return []
        self.budget.charge(len(fresh))
        trials = self.evaluate(fresh)
        self.budget.refund(sum(t.status == "invalid" for t in trials))
        self.trials += trials
        return trials

    def best(self) -> Trial | None:
        ranked = self.ranked()
        return ranked[0] if ranked else None

    def ranked(self) -> list[Trial]:
        """Successful trials, best first under their objective (fastest by default), those
        without a score (an energy meter failed) last by time."""
        ok = (t for t in self.trials if t.ok)
        return sorted(ok, key=lambda t: (t.score is None, t.score or 0.0, t.time_ms or 0.0))

    def done(self) -> bool:
        return self.budget.exhausted()
