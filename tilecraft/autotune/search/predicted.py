"""`PredictSearch` ("predict"): measure only the cost model's top picks (predict.py)."""

from __future__ import annotations

from typing import Any

from tilecraft.autotune.model import CostModel
from tilecraft.autotune.predict import top_picks
from tilecraft.autotune.search.common import SeededSearch
from tilecraft.autotune.space import ConfigSpace
from tilecraft.autotune.trial import Budget, Evaluate
from tilecraft.runtime.config import Config


class PredictSearch(SeededSearch):
    """Measures the model's `TOP` picks (see `top_picks`) and nothing else; the default
    config instead when there is no model, or when every pick failed."""

    name = "predict"
    options = ("model", "description")

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

    def search(self) -> None:
        if self.model is not None and self.description is not None:
            picks = top_picks(self.model, self.description, self.space, self.seeds)
            if any(t.ok for t in self.measure(picks)):
                return
        self.measure([self.space.default()])
