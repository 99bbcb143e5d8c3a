"""`PatternSearch`: hill climbing from the best few configs, one knob step at a time."""

from __future__ import annotations

import math

from tilecraft.autotune.search.common import SeededSearch, cost
from tilecraft.autotune.trial import Trial
from tilecraft.runtime.config import Config


class PatternSearch(SeededSearch):
    """Start from the default, the seeds and a few random configs; each round, measure
    every untried neighbour (`ConfigSpace.neighbors`) of the `leaders` fastest configs.

    A climb ends when a round improves the best time by less than `threshold`
    (relative). While budget remains, the search then tries every other value of each
    knob of the best config (a local optimum in steps of one need not be one in longer
    moves) and climbs from there, or, once those are all tried, from random restarts.
    Each round also tries, for each leader, the jump that takes all of its improving
    one-knob steps at once (found among its measured neighbours), so that knobs far from
    their best move together instead of one per round. Subclasses may measure only some
    neighbours by overriding `select`.
    """

    name = "pattern"
    leaders = 2
    threshold = 0.005
    initial = 8  # random configs measured besides the default and the seeds
    restart_size = 4

    def search(self) -> None:
        self.climb_on(self.measure(self.starts(1 + len(self.seeds) + self.initial)))

    def climb_on(self, pool: list[Trial]) -> None:
        """Climb from `pool`, then from each round of escapes (`escapes`), until the budget
        or the space is used up."""
        while not self.done():
            self.climb(pool)
            if self.done():
                return
            pool = self.measure(self.escapes())
            if not pool:
                return  # the space is used up

    def climb(self, pool: list[Trial]) -> None:
        """Move the leaders of `pool` downhill until a round stops improving."""
        best = min((cost(t) for t in pool), default=math.inf)
        previous: list[Trial] = []  # last round's leaders: their neighbours are measured now
        while not self.done():
            leaders = sorted((t for t in pool if t.ok), key=cost)[: self.leaders]
            neighbors = (n for t in leaders for n in self.space.neighbors(t.config))
            candidates = self.unseen(neighbors)
            jumps = self.unseen(self.jumps(previous + leaders))
            previous = leaders
            if not candidates and not jumps:
                return
            selected = self.select(candidates)
            pool = pool + self.measure([*jumps, *(c for c in selected if c not in jumps)])
            new = min(cost(t) for t in pool)
            improved = new < best * (1 - self.threshold)
            best = min(best, new)
            if not improved and len(selected) >= len(candidates):
                return

    def jumps(self, leaders: list[Trial]) -> list[Config]:
        """Per leader, the config with every improving one-knob step it has measured."""
        known = {t.config: t for t in self.trials}
        out = []
        for leader in leaders:
            steps = self.steps(leader, known)
            jump = self.space.config({**self.space.values(leader.config), **steps})
            if len(steps) >= 2 and self.space.is_valid(jump):
                out.append(jump)
        return out

    def steps(self, leader: Trial, known: dict[Config, Trial]) -> dict[str, object]:
        """Knob -> the value of the fastest measured neighbour of `leader` that beats it
        by changing that knob."""
        base = self.space.values(leader.config)
        best: dict[str, tuple[float, object]] = {}
        for config in self.space.neighbors(leader.config):
            trial = known.get(config)
            if trial is None or cost(trial) >= cost(leader):
                continue
            for name, value in self.space.values(config).items():
                if value != base[name] and cost(trial) < best.get(name, (math.inf,))[0]:
                    best[name] = (cost(trial), value)
        return {name: value for name, (_, value) in best.items()}

    def select(self, candidates: list[Config]) -> list[Config]:
        """The candidates to measure this round: all of them."""
        return candidates

    def escapes(self) -> list[Config]:
        """Where to go from a local optimum: every untried one-knob change of the best
        config (any distance along its knob), or random restarts once all are tried."""
        best = self.best()
        return (self.unseen(self.sweep(best.config)) if best else []) or self.restarts()

    def sweep(self, config: Config) -> list[Config]:
        """The valid configs that differ from `config` in one knob, by any number of steps."""
        values = self.space.values(config)
        out = []
        for knob in self.space.knobs:
            for choice in knob.choices:
                candidate = self.space.config({**values, knob.name: choice})
                if self.space.is_valid(candidate):
                    out.append(candidate)
        return out

    def restarts(self) -> list[Config]:
        """Random untried configs to climb from."""
        return self.draw(self.restart_size)
