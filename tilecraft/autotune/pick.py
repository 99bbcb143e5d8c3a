"""Choosing the winner among re-timed leaders: robust to timing noise and drift.

The leaders are timed in interleaved rounds (each round times every leader once, see
`Benchmarker.samples`). The GPU's speed drifts between rounds (clocks, temperature, a
busy host), and it moves every leader of a round alike, so each time is divided by its
round's median before leaders are compared: a leader's score is the median of those
ratios over the rounds. Leaders whose scores are within the noise of the best one are
indistinguishable; among those the rule is fixed, not left to the last round's noise: the
first in the search's own ranking (an independent measurement) wins.

Example::

    samples = {a: [1.00, 1.03, 1.01], b: [0.99, 1.04, 1.00]}  # ms per round
    pick(samples, order=[a, b])  # a: b's lead is within the noise
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from tilecraft.runtime.config import Config

MIN_MARGIN = 0.005  # a lead below this (relative) never counts: the rounds are few
MAX_MARGIN = 0.02  # a lead beyond this always counts, however noisy the rounds


def relative(samples: dict[Config, list[float]]) -> dict[Config, list[float]]:
    """Each time divided by the median of its round (samples hold one time per round,
    aligned across configs)."""
    rounds = min((len(times) for times in samples.values()), default=0)
    medians = [statistics.median(times[r] for times in samples.values()) for r in range(rounds)]
    return {c: [t / m for t, m in zip(ts, medians, strict=False)] for c, ts in samples.items()}


def scores(samples: dict[Config, list[float]]) -> dict[Config, float]:
    """Each config's median time relative to its rounds (lower is faster)."""
    return {c: statistics.median(r) for c, r in relative(samples).items() if r}


def margin(samples: dict[Config, list[float]]) -> float:
    """How far apart two scores must be to count: the typical spread of one config's
    relative times over the rounds (half the range, the median over configs), within
    [MIN_MARGIN, MAX_MARGIN]."""
    spreads = [(max(r) - min(r)) / 2 for r in relative(samples).values() if len(r) >= 2]
    noise = statistics.median(spreads) if spreads else 0.0
    return min(max(noise, MIN_MARGIN), MAX_MARGIN)


def pick(samples: dict[Config, list[float]], order: Sequence[Config]) -> Config | None:
    """The winner among the re-timed configs: the first in `order` (the search's ranking)
    whose score is within the `margin` of the best; None when nothing was timed."""
    scored = scores(samples)
    if not scored:
        return None
    best = min(scored.values())
    limit = best * (1 + margin(samples))
    ranked = [c for c in order if c in scored] + [c for c in scored if c not in order]
    return next(c for c in ranked if scored[c] <= limit)
