"""`DifferentialEvolution`: a population evolved on the indexes of each knob's choices."""

from __future__ import annotations

import math
from typing import Any

from tilecraft.autotune.search.common import SeededSearch, cost
from tilecraft.autotune.space import Knob
from tilecraft.autotune.trial import Trial
from tilecraft.runtime.config import Config

Child = tuple[int, Config]  # (index of the member it may replace, config)


class DifferentialEvolution(SeededSearch):
    """DE/rand/1/bin over choice indexes: for member i, pick three others a, b, c and make
        a mutant whose knob k takes choice `a_k + weight * (b_k - c_k)` (rounded up with the
    probability of its fraction, clamped);
        mix it with member i knob by knob (`crossover`), snap it to a valid config, and keep
        it in place of i if it is at least as fast. With probability `greedy`, `a` is the
        fastest member (DE/best/1), which converges faster on smooth spaces.

        A mutant already tried is redrawn; failing that, a random untried neighbour of the
        member stands in, so the search keeps measuring new configs until the budget ends.
    """

    name = "de"
    population = 10
    weight = 0.5
    crossover = 0.3
    greedy = 0.8
    tries = 8

    def search(self) -> None:
        members = self.measure(self.starts(self.population))
        while not self.done() and len(members) >= 4:
            children = self.offspring(members) or self.immigrants(members)
            if not children:
                return
            trials = {t.config: t for t in self.measure(c for _, c in children)}
            for i, config in children:
                trial = trials.get(config)
                if trial is not None and cost(trial) <= cost(members[i]):
                    members[i] = trial

    def offspring(self, members: list[Trial]) -> list[Child]:
        """One untried child per member, where one can be made."""
        children: list[Child] = []
        taken: set[Config] = set()
        for i in range(len(members)):
            child = self.child(members, i, taken)
            if child is not None:
                children.append((i, child))
                taken.add(child)
        return children

    def child(self, members: list[Trial], i: int, taken: set[Config]) -> Config | None:
        """A valid config for member `i` that is neither tried nor `taken`, or None."""
        for _ in range(self.tries):
            config = self.mutant(members, i)
            if config not in self.seen and config not in taken and self.space.is_valid(config):
                return config
        nearby = [c for c in self.unseen(self.space.neighbors(members[i].config)) if c not in taken]
        return self.rng.choice(nearby) if nearby else None

    def mutant(self, members: list[Trial], i: int) -> Config:
        others = [j for j in range(len(members)) if j != i]
        a, b, c = (self.space.values(members[j].config) for j in self.rng.sample(others, 3))
        if self.rng.random() < self.greedy:
            a = self.space.values(min(members, key=cost).config)
        parent = self.space.values(members[i].config)
        forced = self.rng.randrange(len(self.space.knobs))
        values = {}
        for k, knob in enumerate(self.space.knobs):
            crossed = k == forced or self.rng.random() < self.crossover
            values[knob.name] = self.step(knob, a, b, c) if crossed else parent[knob.name]
        return self.space.snap(values)

    def step(self, knob: Knob, a: dict[str, Any], b: dict[str, Any], c: dict[str, Any]) -> Any:
        """The choice at `a + weight * (b - c)` in choice indexes, rounded at random (so
        that short differences still move) and clamped to the knob."""
        ia, ib, ic = (_index(knob, v[knob.name]) for v in (a, b, c))
        index = math.floor(ia + self.weight * (ib - ic) + self.rng.random())
        return knob.choices[min(max(index, 0), len(knob.choices) - 1)]

    def immigrants(self, members: list[Trial]) -> list[Child]:
        """Random configs to replace the slowest members when no child can be made."""
        slowest = sorted(range(len(members)), key=lambda i: -cost(members[i]))
        return list(zip(slowest, self.draw(len(members) // 2), strict=False))


def _index(knob: Knob, value: Any) -> int:
    for candidate in (value, knob.default):
        if candidate in knob.choices:
            return knob.choices.index(candidate)
    return 0
