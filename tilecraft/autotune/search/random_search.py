"""`RandomSearch`: the default config, then random valid configs until the budget ends."""

from __future__ import annotations

from tilecraft.autotune.search.common import SeededSearch


class RandomSearch(SeededSearch):
    """Uniform random sampling of the space, in batches the engine compiles in parallel.

    A baseline for the other strategies, and a fair one on rugged spaces. Stops early
    only when no untried config can be drawn.
    """

    name = "random"
    batch_size = 16

    def search(self) -> None:
        self.measure(self.unseen([self.space.default(), *self.seeds]))
        while not self.done():
            batch = self.draw(self.batch_size)
            if not batch:
                return
            self.measure(batch)
