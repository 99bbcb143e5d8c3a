"""`PredictSearch` ("predict"): measure only the cost model's top picks (predict.py)."""

from __future__ import annotations

from tilecraft.autotune.predict import top_picks
from tilecraft.autotune.search.common import ModelSearch


class PredictSearch(ModelSearch):
    """Measures the model's `TOP` picks (see `top_picks`) and nothing else; the default
    config instead when there is no model, or when every pick failed."""

    name = "predict"

    def search(self) -> None:
        if self.model is not None and self.description is not None:
            picks = top_picks(self.model, self.description, self.space, self.seeds)
            if any(t.ok for t in self.measure(picks)):
                return
        self.measure([self.space.default()])
