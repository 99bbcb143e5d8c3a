"""A learned ranking of configs (LambdaMART-like): trees boosted on pairwise gradients
that weigh most the order of the fastest configs of each kernel and shape.

A regressor of the time spends as much effort on telling a 4x-slow config from an 8x-slow
one as on the few configs within 5% of the best, which are all that the top pick is about.
Here each boosting round fits a regression tree to *lambdas*: for every pair (i, j) of
trials of one kernel and shape where i is among the `TOP_PAIRS` fastest and faster than j,
i is pushed up and j down by the probability that the current scores order them wrongly
times how much swapping them would change the NDCG of the first `CUTOFF` places. Gains
come from the time relative to the group's best (`LEVELS` for the best, 0 from 2x slower
on, and for failures), so near-best configs dominate.

The scores are then put on the log2 time scale (`calibrate`): the slope of log2(time /
best) against the score within groups, so that the untuned path's margin keeps reading as
a predicted log2 gain.

Example::

    trees, weight = fit_ranker(x, y, groups)  # y: log2(time / group best)
    log2_guess = weight * sum(t.predict(x_new) for t in trees)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

ROUNDS = 100  # boosting rounds (trees)
RATE = 0.1  # learning rate
LEAVES = 31  # most leaves per tree
MIN_LEAF = 5  # least trials per leaf
LEVELS = 4.0  # relevance of the best config; 0 at 2x slower and beyond
TOP_PAIRS = 30  # the fastest trials of a group that pairs are formed from
CUTOFF = 10  # NDCG places that count


def fit_ranker(
    x: np.ndarray, y: np.ndarray, groups: Sequence[tuple[int, int]], seed: int = 0
) -> tuple[list[Any], float]:
    """Boosted regression trees ranking the rows of each group (`groups`: [start, stop)
    row ranges; `y`: log2(time / the group's best), failures large), and the weight that
    turns the sum of their predictions into a guess of `y` (see `calibrate`)."""
    from sklearn.tree import DecisionTreeRegressor

    prepared = [_group(y[a:b]) for a, b in groups]
    scores = np.zeros(len(y))
    trees = []
    for _ in range(ROUNDS):
        lambdas = np.zeros(len(y))
        for (a, b), group in zip(groups, prepared, strict=True):
            lambdas[a:b] = _lambdas(scores[a:b], *group)
        tree = DecisionTreeRegressor(
            max_leaf_nodes=LEAVES, min_samples_leaf=MIN_LEAF, random_state=seed
        ).fit(x, lambdas)
        scores += RATE * tree.predict(x)
        trees.append(tree)
    return trees, RATE * calibrate(scores, y, groups)


def calibrate(scores: np.ndarray, y: np.ndarray, groups: Sequence[tuple[int, int]]) -> float:
    """The least-squares slope of `y` against `scores` with each group centred (negative:
    a higher score ranks faster); -1 over the scores' spread if that slope is not."""
    ds = np.concatenate([scores[a:b] - scores[a:b].mean() for a, b in groups])
    dy = np.concatenate([y[a:b] - y[a:b].mean() for a, b in groups])
    spread = float(ds @ ds)
    slope = float(ds @ dy) / spread if spread > 0 else 0.0
    return slope if slope < 0 else -1.0 / max(float(np.std(scores)), 1e-9)


def _group(y: np.ndarray) -> tuple[np.ndarray, np.ndarray, float, np.ndarray]:
    """Per group, once: relevance levels, gains, the ideal DCG and the pairs' first rows."""
    levels = LEVELS * np.clip(1.0 - y, 0.0, 1.0)
    gains = 2.0**levels - 1.0
    ideal = np.sort(gains)[::-1][:CUTOFF]
    ideal_dcg = float((ideal / np.log2(np.arange(2, len(ideal) + 2))).sum()) or 1.0
    top = np.argsort(-levels, kind="stable")[:TOP_PAIRS]
    return levels, gains, ideal_dcg, top


def _lambdas(
    scores: np.ndarray, levels: np.ndarray, gains: np.ndarray, ideal_dcg: float, top: np.ndarray
) -> np.ndarray:
    """The pairwise gradients of one group at the current scores (higher: rank higher)."""
    rank = np.empty(len(scores), dtype=np.int64)
    rank[np.argsort(-scores, kind="stable")] = np.arange(len(scores))
    discount = np.where(rank < CUTOFF, 1.0 / np.log2(rank + 2.0), 0.0)
    i, j = top[:, None], np.arange(len(scores))[None, :]
    swap = np.abs((gains[i] - gains[j]) * (discount[i] - discount[j])) / ideal_dcg
    wrong = 1.0 / (1.0 + np.exp(np.clip(scores[i] - scores[j], -50.0, 50.0)))
    push = np.where(levels[i] > levels[j], wrong * swap, 0.0)
    out = -push.sum(axis=0)
    np.add.at(out, top, push.sum(axis=1))
    return out
