"""`SeededSearch`: a Search that can start from known configs, with helpers the
strategies share (unseen configs, random draws, the cost of a trial)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from tilecraft.autotune.search.base import Search
from tilecraft.autotune.space import ConfigSpace
from tilecraft.autotune.trial import Budget, Evaluate, Trial
from tilecraft.runtime.config import Config

if TYPE_CHECKING:
    from tilecraft.autotune.model import CostModel

DRAW_TRIES = 20  # random draws per wanted config before a space counts as used up


def cost(trial: Trial) -> float:
    """What the search minimizes: an ok trial's score under its objective (its time by
    default); infinity for a failed or unmeasured one (so it ranks last)."""
    score = trial.score
    return math.inf if score is None else score


def normalize(space: ConfigSpace, config: Config) -> Config | None:
    """`config` as this space spells it (so it dedups against neighbours), or None if it
    does not fit the space."""
    snapped = space.snap(space.values(config))
    return snapped if space.is_valid(snapped) else None


class SeededSearch(Search):
    """A Search given `seeds`: configs to try first (e.g. the best of similar shapes from
    the tuning database). Seeds that do not fit the space are snapped or dropped."""

    def __init__(
        self,
        space: ConfigSpace,
        evaluate: Evaluate,
        budget: Budget,
        seed: int = 0,
        seeds: list[Config] | None = None,
    ) -> None:
        super().__init__(space, evaluate, budget, seed)
        normalized = (normalize(space, config) for config in seeds or [])
        self.seeds = unique(c for c in normalized if c is not None)

    def unseen(self, configs: Iterable[Config]) -> list[Config]:
        """`configs` not tried yet, without repeats, in order."""
        return [c for c in unique(configs) if c not in self.seen]

    def draw(self, n: int) -> list[Config]:
        """Up to `n` random valid configs not tried yet (fewer when the space runs out)."""
        out: list[Config] = []
        for _ in range(n * DRAW_TRIES):
            if len(out) >= n:
                break
            config = self.space.random(self.rng)
            if config not in self.seen and config not in out:
                out.append(config)
        return out

    def starts(self, n: int) -> list[Config]:
        """The default config, the seeds, then random configs: at least `n` in all."""
        first = self.unseen([self.space.default(), *self.seeds])
        return first + [c for c in self.draw(max(n - len(first), 0)) if c not in first]


def unique(configs: Iterable[Config]) -> list[Config]:
    """`configs` without repeats, in first-seen order (never set order: hashes of str are
    salted per process, and searches must be deterministic)."""
    return list(dict.fromkeys(configs))


class ModelSearch(SeededSearch):
    """A seeded search that also takes the cost model and the kernel's description."""

    options: tuple[str, ...] = ("model", "description")

    def __init__(
        self,
        space: ConfigSpace,
        evaluate: Evaluate,
        budget: Budget,
        seed: int = 0,
        seeds: list[Config] | None = None,
        model: CostModel | None = None,
        description: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(space, evaluate, budget, seed=seed, seeds=seeds)
        self.model, self.description = model, description
