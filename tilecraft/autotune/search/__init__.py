"""Search strategies over a ConfigSpace, each a small class under one Budget.

Example::

    search = make_search("pattern", space, evaluate, Budget(max_configs=200), seed=0)
    best = search.run()  # the fastest ok Trial, or None if every config failed
"""

from __future__ import annotations

from typing import Any

from tilecraft.autotune.llm.search import HybridSearch, LLMSearch
from tilecraft.autotune.search.base import Search
from tilecraft.autotune.search.classifier import ClassifierPatternSearch, QuickSearch
from tilecraft.autotune.search.common import SeededSearch
from tilecraft.autotune.search.differential_evolution import DifferentialEvolution
from tilecraft.autotune.search.learned import LearnedSearch
from tilecraft.autotune.search.pattern import PatternSearch
from tilecraft.autotune.search.predicted import PredictSearch
from tilecraft.autotune.search.random_search import RandomSearch
from tilecraft.autotune.space import ConfigSpace
from tilecraft.autotune.trial import Budget, Evaluate
from tilecraft.runtime.config import Config

SEARCHES: dict[str, type[Search]] = {
    cls.name: cls
    for cls in (
        RandomSearch,
        PatternSearch,
        DifferentialEvolution,
        ClassifierPatternSearch,
        QuickSearch,
        LLMSearch,
        HybridSearch,
        LearnedSearch,
        PredictSearch,
    )
}


def make_search(
    name: str,
    space: ConfigSpace,
    evaluate: Evaluate,
    budget: Budget,
    seed: int = 0,
    seeds: list[Config] | None = None,
    **options: Any,
) -> Search:
    """The search strategy called `name` (a key of SEARCHES), ready to `run()`.

    `seeds` are configs to try first, e.g. the best of similar shapes from the database.
    `options` go to searches that list them in `options` (the LLM searches: `context`;
    "fast" and "predict": `model` and `description`).
    """
    if name not in SEARCHES:
        raise ValueError(f"unknown search {name!r}; choose one of {', '.join(SEARCHES)}")
    cls = SEARCHES[name]
    extra = {k: v for k, v in options.items() if k in getattr(cls, "options", ())}
    if issubclass(cls, SeededSearch):
        return cls(space, evaluate, budget, seed=seed, seeds=seeds, **extra)
    return cls(space, evaluate, budget, seed=seed)


__all__ = [
    "SEARCHES",
    "ClassifierPatternSearch",
    "DifferentialEvolution",
    "LearnedSearch",
    "PatternSearch",
    "PredictSearch",
    "RandomSearch",
    "Search",
    "make_search",
]
