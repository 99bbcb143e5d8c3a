"""`LearnedSearch` ("fast"): measure what a cost model trained on earlier trials rates
best, then climb briefly; tuning a new shape of a known kernel takes a handful of trials."""

from __future__ import annotations

import functools
import math
from typing import Any

from tilecraft.autotune.features import features
from tilecraft.autotune.search.classifier import ClassifierPatternSearch
from tilecraft.autotune.search.common import ModelSearch, cost
from tilecraft.autotune.trial import Trial
from tilecraft.runtime.config import Config


class LearnedSearch(ModelSearch, ClassifierPatternSearch):
    """Starts from the default config, the seeds nearest in shape (the best configs of
    the same kernel at other shapes, first in `seeds`) and the `first` configs the model
    ranks best among `pool` random ones, the seeds and their neighbours. Then each round
    measures the `per_round` neighbours of the leaders the model rates best (plus the
    pattern search's jumps). After `patience` rounds without a gain of `threshold`, one
    round of long moves (`wide_moves`); the climb goes on if they gain, else it stops and
    the rest of the budget up to the finishing share goes to `look_further`.

    Without a model (`model=None`: nothing relevant in the tuning database yet) it is
    the classifier-guided pattern search. `tuned_seeds`: how many of `seeds` (the first)
    are the database's best configs of this kernel; with none (a kernel never tuned here)
    that has device loops, the first `untuned_first` seeds (the heuristics': long chunks of
    few rows, classic matrix tiles) are all measured, whatever the model says: it only
    knows other kernels, and on the H200 it kept kernels that stream long rows near the
    default's short chunks (kl_div, two-pass softmax). In replay on the landscapes, doing
    so for the kernels without loops (one row per program, seeded with rows and warps)
    only made the first batch longer.

    The last `finish_share` of the time budget (or once the climb stalls) goes to the
    knobs the model cannot see (`blind`: cache eviction hints, ...), which its ranking
    would never pick: each other value of each such knob of the best config is measured,
    then the changes that helped, together. Whatever budget is left after that goes on as
    `look_further` does, its picks carrying the blind knobs' values of the best config
    (the search used to end there, with 1-3 s of a 10 s budget unspent).

    Under a time budget, the model's picks pass over the configs it predicts to compile
    longer than `slow_share` of the time left (`compile_limit`): in replay on the landscapes,
    held-out kernels then measured more configs where compiles are slow (attention) and
    ended closer to the best (mean of three seed sets 1.022 -> 1.018, benchmarks/RESULTS.md).
    """

    name = "fast"
    options = (*ModelSearch.options, "tuned_seeds")
    first = 7  # model picks: with the default and the nearest seeds, a first batch of 10
    nearest = 2  # seeds measured whatever the model says of them
    untuned_first = 6  # the same, for a kernel the database has no best config of
    pool = 1500
    per_round = 4
    patience = 2
    wide = 6  # long moves measured once the climb first stalls
    explore_pool = 500  # random configs the model rates per exploring round
    finish_share = 0.35  # of the time budget, kept for the knobs the model cannot see
    slow_share = 0.25  # of the time left: a pick predicted to compile longer is passed over
    blind_values: dict[str, Any] | None = None  # the best's blind knobs, once measured

    def __init__(self, *args: Any, tuned_seeds: int | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if tuned_seeds == 0 and self.space.spec.device_loops:
            self.nearest = self.untuned_first

    def search(self) -> None:
        if self.model is None or self.description is None:
            super().search()
            return
        self.climb_model()
        self.look_further()
        self.finish()
        self.look_further(to_end=True)

    def climb_model(self) -> None:
        """The model's first batch, then rounds of its favourite neighbours until the
        finishing share of the budget, or a second stall: after the first, one round of
        the model's favourite long moves of the best config (`wide_moves`)."""
        pool = self.measure(self.first_batch())
        best, stalls, previous = min(map(cost, pool), default=math.inf), 0, pool[:0]
        widened = False
        while not self.done() and not self.finishing():
            if stalls >= self.patience:
                if widened:
                    return
                widened, picked = True, self.wide_moves()
            else:
                leaders = self.ranked()[: self.leaders]
                near = self.unseen(n for t in leaders for n in self.space.neighbors(t.config))
                jumps = self.unseen(self.jumps(previous + leaders))
                previous = leaders
                picked = [*jumps, *(c for c in self.best_rated(near) if c not in jumps)]
            if not self.spend(picked):
                return
            new = min(map(cost, self.trials))
            stalls = 0 if new < best * (1 - self.threshold) else stalls + 1
            best = min(best, new)

    def look_further(self, to_end: bool = False) -> None:
        """Until the finishing share of the budget (or its end, `to_end`): rounds of the
        model's favourites among fresh random configs and among the leaders' neighbours.
        (The climb ends at its first local optimum, in replay on the landscapes after 3-4 s
        of a 10 s budget; going on this way brought the mean held-out result from 1.10x the
        best to 1.04x.)"""
        while not self.done() and (to_end or not self.finishing()):
            leaders = self.ranked()[: self.leaders]
            near = self.unseen(n for t in leaders for n in self.space.neighbors(t.config))
            fresh = self.best_rated(self.unseen(self.draw(self.explore_pool)))
            picked = [*fresh, *(c for c in self.best_rated(near) if c not in fresh)]
            if not self.spend(picked):
                return

    def wide_moves(self) -> list[Config]:
        """The `wide` one-knob changes of the best config, by any distance along the knob,
        that the model rates best: a climb in single steps stops at the first ridge (more
        warps only pay with a larger block, ...) with most of its budget unspent."""
        leader = self.best()
        if leader is None:
            return []
        return self.best_rated(self.unseen(self.sweep(leader.config)), self.wide)

    def first_batch(self) -> list[Config]:
        """The default and the nearest seeds (a floor if the model is wrong about this
        kernel), then the model's favourites."""
        candidates = [*self.seeds, *self.draw(self.pool)]
        candidates += [n for s in self.seeds[: self.nearest] for n in self.space.neighbors(s)]
        rated = self.best_rated(self.unseen(candidates), self.first)
        return self.unseen([self.space.default(), *self.seeds[: self.nearest], *rated])

    def best_rated(self, configs: list[Config], n: int | None = None) -> list[Config]:
        """The `n` (default `per_round`) configs the model ranks best, one per distinct
        feature vector, with the knobs it cannot see at their defaults, or once measured
        (`finish`) at the best config's values (a random register cap must not ride along
        on a pick the model made for other reasons)."""
        assert self.model is not None and self.description is not None
        plain = self.unseen(self.plain(c) for c in configs)
        ranked = self.model.rank(self.description, plain, True, self.compile_limit())
        return ranked[: n or self.per_round]

    def compile_limit(self) -> float | None:
        """The longest a pick may be predicted to compile: `slow_share` of the time left (a
        batch waits for its slowest compile, and one that times out ends a 10 s budget);
        None without a time budget."""
        if self.budget.max_seconds is None:
            return None
        return self.slow_share * (self.budget.max_seconds - self.budget.elapsed())

    def plain(self, config: Config) -> Config:
        """`config` with its blind knobs at their defaults (after `finish`: the best's)."""
        if not self.blind_knobs:
            return config
        values = {**self.space.values(config), **(self.blind_values or self.blind_knobs)}
        carried = self.space.config(values)
        if self.blind_values and not self.space.is_valid(carried):  # e.g. a register cap
            return self.space.config({**self.space.values(config), **self.blind_knobs})
        return carried

    @functools.cached_property
    def blind_knobs(self) -> dict[str, Any]:
        """Knob name -> default, for the knobs no value of which changes the model's
        features of the default config (eviction hints, register caps, ...)."""
        assert self.description is not None
        values = self.space.values(self.space.default())
        same = features(self.description, self.space.config(values))
        return {
            k.name: k.default
            for k in self.space.knobs
            if len(k.choices) > 1
            and all(
                features(self.description, self.space.config({**values, k.name: c})) == same
                for c in k.choices
            )
        }

    def finishing(self) -> bool:
        """Whether what is left of the budget is the finishing stage's: its share of the
        time, or the configs it needs."""
        seconds = self.budget.max_seconds
        late = seconds is not None and self.budget.elapsed() >= (1 - self.finish_share) * seconds
        return late or self.budget.remaining_configs() <= self.reserve()

    def reserve(self) -> int:
        """Configs the finishing stage needs: the best config's blind variants, and one
        that combines those that help (none once it ran)."""
        leader = self.best()
        if leader is None or self.blind_values is not None:
            return 0
        return len(self.blind(leader.config)) + 1

    def spend(self, picked: list[Config]) -> list[Trial]:
        """Measure `picked`, as many as leave the finishing stage its configs."""
        room = self.budget.remaining_configs() - self.reserve()
        return self.measure(picked[:room]) if room > 0 else []

    def finish(self) -> None:
        """Measure the best config's blind variants, then its improving ones combined;
        later picks carry the blind values of the best config then."""
        leader = self.best()
        if leader is None or self.done():
            return
        self.combine(leader)
        values = self.space.values((self.best() or leader).config)
        self.blind_values = {name: values[name] for name in self.blind_knobs}

    def combine(self, leader: Trial) -> None:
        """Measure `leader`'s blind variants, then those that helped, together."""
        tried = self.measure(self.blind(leader.config))
        better = [t for t in tried if cost(t) < cost(leader)]
        if len(better) >= 2:
            changes: dict[str, object] = {}
            base = self.space.values(leader.config)
            for trial in sorted(better, key=cost, reverse=True):  # the fastest last: it wins
                changes.update(
                    {k: v for k, v in self.space.values(trial.config).items() if v != base[k]}
                )
            combined = self.space.config({**base, **changes})
            if self.space.is_valid(combined):
                self.measure([combined])

    def blind(self, config: Config) -> list[Config]:
        """The untried configs that differ from `config` in one knob, by any value, and
        that the model sees as the same config (the same features)."""
        assert self.description is not None
        same = features(self.description, config)
        values = self.space.values(config)
        itself = self.space.config(values)  # a knob without effect here gives it back
        out = []
        for knob in self.space.knobs:
            for choice in knob.choices:
                candidate = self.space.config({**values, knob.name: choice})
                if candidate == itself:
                    continue
                if self.space.is_valid(candidate) and features(self.description, candidate) == same:
                    out.append(candidate)
        return self.unseen(out)
