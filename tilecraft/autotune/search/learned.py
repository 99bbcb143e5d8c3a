"""`LearnedSearch` ("fast"): measure what a cost model trained on earlier trials rates
best, then climb briefly; tuning a new shape of a known kernel takes a handful of trials."""

from __future__ import annotations

import math

from tilecraft.autotune.search.classifier import ClassifierPatternSearch
from tilecraft.autotune.search.common import ModelSearch, cost
from tilecraft.runtime.config import Config


class LearnedSearch(ModelSearch, ClassifierPatternSearch):
    """Starts from the default config, the seeds nearest in shape (the best configs of
    the same kernel at other shapes, first in `seeds`) and the `first` configs the model
    ranks best among `pool` random ones, the seeds and their neighbours. Then each round
    measures the `per_round` neighbours of the leaders the model rates best (plus the
    pattern search's jumps), and stops after `patience` rounds without a gain of
    `threshold`.

    Without a model (`model=None`: nothing relevant in the tuning database yet) it is
    the classifier-guided pattern search.
    """

    name = "fast"
    first = 7  # model picks: with the default and the nearest seeds, a first batch of 10
    nearest = 2  # seeds measured whatever the model says of them
    pool = 1500
    per_round = 4
    patience = 2

    def search(self) -> None:
        if self.model is None or self.description is None:
            super().search()
            return
        pool = self.measure(self.first_batch())
        best, stalls, previous = min(map(cost, pool), default=math.inf), 0, pool[:0]
        while not self.done() and stalls < self.patience:
            leaders = self.ranked()[: self.leaders]
            near = self.unseen(n for t in leaders for n in self.space.neighbors(t.config))
            jumps = self.unseen(self.jumps(previous + leaders))
            previous = leaders
            picked = [*jumps, *(c for c in self.best_rated(near) if c not in jumps)]
            if not self.measure(picked):
                return
            new = min(map(cost, self.trials))
            stalls = 0 if new < best * (1 - self.threshold) else stalls + 1
            best = min(best, new)

    def first_batch(self) -> list[Config]:
        """The default and the nearest seeds (a floor if the model is wrong about this
        kernel), then the model's favourites."""
        candidates = [*self.seeds, *self.draw(self.pool)]
        candidates += [n for s in self.seeds[: self.nearest] for n in self.space.neighbors(s)]
        rated = self.best_rated(self.unseen(candidates), self.first)
        return self.unseen([self.space.default(), *self.seeds[: self.nearest], *rated])

    def best_rated(self, configs: list[Config], n: int | None = None) -> list[Config]:
        """The `n` (default `per_round`) configs the model ranks best, one per distinct
        feature vector."""
        assert self.model is not None and self.description is not None
        return self.model.rank(self.description, configs, distinct=True)[: n or self.per_round]
