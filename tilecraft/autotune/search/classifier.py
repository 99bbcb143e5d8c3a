"""`ClassifierPatternSearch`: pattern search that measures only the neighbours a model
trained on the trials so far predicts to be among the fastest."""

from __future__ import annotations

import math
from typing import Any

from tilecraft.autotune.search.common import cost
from tilecraft.autotune.search.pattern import PatternSearch
from tilecraft.runtime.config import Config

ESTIMATORS = 20  # small: the model is refitted every round on a few hundred trials


class ClassifierPatternSearch(PatternSearch):
    """Pattern search with a filter: after a larger first batch, each round trains a
    gradient-boosted classifier (scikit-learn) on `space.encode(config)` -> "among the
    fastest `top_fraction` of ok trials" (failures are negatives), and measures only the
    `keep` share of the leaders' neighbours it rates best, plus now and then a random
    one. With fewer than two positive (or negative) examples it behaves as pattern
    search. Skipped neighbours stay candidates for later rounds.
    """

    name = "classifier"
    leaders = 3  # the filter makes a wider front affordable
    initial = 16
    top_fraction = 0.2
    keep = 0.25
    min_keep = 2
    explore = 0.2  # chance per round of measuring one neighbour the model passed over
    restart_pool = 8  # random configs scored per restart point

    def select(self, candidates: list[Config]) -> list[Config]:
        ranked = self.rank(candidates)
        if ranked is None:
            return candidates
        n = max(self.min_keep, math.ceil(self.keep * len(candidates)))
        chosen, rest = ranked[:n], ranked[n:]
        if rest and self.rng.random() < self.explore:
            chosen.append(self.rng.choice(rest))
        return chosen

    def restarts(self) -> list[Config]:
        pool = self.draw(self.restart_size * self.restart_pool)
        ranked = self.rank(pool)
        return (pool if ranked is None else ranked)[: self.restart_size]

    def rank(self, configs: list[Config]) -> list[Config] | None:
        """`configs`, most promising first; None without enough examples to learn from."""
        model = self.train()
        if model is None or not configs:
            return None
        scores = model.predict_proba([self.space.encode(c) for c in configs])[:, 1]
        order = sorted(range(len(configs)), key=lambda i: -scores[i])
        return [configs[i] for i in order]

    def train(self) -> Any:
        """A classifier of fast configs fitted on every trial, or None."""
        labels = self.labels()
        if sum(labels) < 2 or len(labels) - sum(labels) < 2:
            return None
        model = _classifier()
        model.fit([self.space.encode(t.config) for t in self.trials], labels)
        return model

    def labels(self) -> list[int]:
        """1 for trials among the best `top_fraction` of scored ones (the fastest, under
        the time objective), else 0."""
        scores = sorted(cost(t) for t in self.trials if cost(t) < math.inf)
        if not scores:
            return [0] * len(self.trials)
        cut = scores[min(len(scores), max(2, math.ceil(self.top_fraction * len(scores)))) - 1]
        return [int(cost(t) <= cut) for t in self.trials]


def _classifier() -> Any:
    try:
        from sklearn.ensemble import GradientBoostingClassifier
    except ImportError as e:
        raise ImportError("the 'classifier' search needs scikit-learn") from e
    return GradientBoostingClassifier(
        n_estimators=ESTIMATORS, learning_rate=0.2, max_depth=3, random_state=0
    )


class QuickSearch(ClassifierPatternSearch):
    """The classifier-guided climb started only from the default and the seeds (no random
    configs): the fast default for tuning in seconds."""

    name = "quick"
    leaders = 2
    initial = 0
