"""A cost model learned from every trial: which configs of a kernel will be fast.

Trials are grouped by kernel and shape. Each trial's target is its time relative to the
best of its group, as log2 (0 for the best; failures get `FAILED`), so that groups of
very different speeds teach the same lesson. A gradient-boosted tree ensemble
(scikit-learn) learns it from `features.features`; for a kernel or shape never timed it
ranks candidate configs by predicted relative time.

Example::

    model = CostModel.fit([(desc, trials), ...])        # None with too little data
    ranked = model.rank(desc_of_new_shape, candidates)  # fastest predicted first
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tilecraft.autotune.features import VERSION, features
from tilecraft.autotune.trial import Trial
from tilecraft.runtime.config import Config

FAILED = 4.0  # log2 penalty of a failed trial: as bad as 16x slower than the best
MIN_OK = 5  # a group teaches only with this many ok trials
MIN_GROUPS = 1

Group = tuple[dict[str, Any], Sequence[Trial]]  # (describe(...) of a kernel/shape, its trials)


@dataclass
class CostModel:
    """A fitted regressor of log2(time / best of the same kernel and shape)."""

    regressor: Any
    groups: int
    rows: int

    @classmethod
    def fit(cls, groups: Sequence[Group], seed: int = 0) -> CostModel | None:
        """Train on the groups that are usable (current feature version, enough ok trials);
        None when none is."""
        x: list[list[float]] = []
        y: list[float] = []
        used = 0
        for desc, trials in groups:
            if desc.get("version") != VERSION:
                continue
            times = [t.time_ms for t in trials if t.ok and t.time_ms]
            if len(times) < MIN_OK:
                continue
            best = min(times)
            used += 1
            for t in trials:
                x.append(features(desc, t.config))
                y.append(math.log2(t.time_ms / best) if t.ok and t.time_ms else FAILED)
        if used < MIN_GROUPS:
            return None
        return cls(_regressor(seed).fit(np.asarray(x), np.asarray(y)), used, len(y))

    def predict(self, desc: dict[str, Any], configs: Sequence[Config]) -> np.ndarray:
        """Predicted log2 slowdown against the best config (lower is better)."""
        if not configs:
            return np.zeros(0)
        return self.regressor.predict(np.asarray([features(desc, c) for c in configs]))

    def rank(self, desc: dict[str, Any], configs: Sequence[Config]) -> list[Config]:
        """`configs`, the fastest predicted first (ties keep their order)."""
        scores = self.predict(desc, configs)
        order = sorted(range(len(configs)), key=lambda i: (scores[i], i))
        return [configs[i] for i in order]


def _regressor(seed: int) -> Any:
    try:
        from sklearn.ensemble import HistGradientBoostingRegressor
    except ImportError as e:
        raise ImportError("the learned cost model needs scikit-learn") from e
    return HistGradientBoostingRegressor(
        max_iter=150, learning_rate=0.1, max_leaf_nodes=31, min_samples_leaf=10, random_state=seed
    )
