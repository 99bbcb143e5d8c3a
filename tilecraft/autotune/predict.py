"""Prediction instead of search: configs the cost model picks, with few or no benchmarks.

Two uses of the cost model learned from the tuning database (`model.py`):

- the "predict" search (effort "predict"; search/predicted.py) measures only the
  model's `TOP` picks among candidate configs and keeps the fastest; without a model it
  measures the heuristic default alone;
- `untuned_config`, for the untuned path (effort "none" on a GPU): the model's top pick,
  at no benchmark cost, when the model is confident; otherwise None (the default runs).

Confidence is judged by two simple tests, both needed (`Pick.confident`):

1. *near*: the database holds the same kernel (same source) tuned at a shape close to
   this one: the Chebyshev distance between their `features.kernel_numbers` (op counts,
   log2 bytes, FLOPs and sizes) is at most `NEAR`, i.e. no size more than 4x away. A
   kernel the database never saw is never confident (on the landscapes, the model's
   picks for held-out kernels were up to 100x slower than the default);
2. *margin*: the model predicts its top pick at least `MARGIN` (log2) faster than the
   default config, so a small prediction error does not make it slower than the default.

Example::

    picks = top_picks(model, desc, space, seeds)          # the model's 3 favourites
    pick = judge(model, desc, space, seeds, known_descs)  # Pick(config, distance, margin)
    config = pick.config if pick.confident else space.default()
"""

from __future__ import annotations

import math
import sqlite3
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tilecraft.autotune.features import kernel_numbers
from tilecraft.autotune.model import CostModel
from tilecraft.autotune.space import ConfigSpace, space_of
from tilecraft.runtime.config import Config

TOP = 3  # configs the "predict" search measures
DIFFER = 3  # least number of knobs in which each of the top picks differs from the others
NEAR = 2.0  # most kernel-feature distance (log2 sizes) to a tuned shape of the same kernel
MARGIN = 0.15  # least predicted log2 gain of the top pick over the default (about 11%)


def candidates(space: ConfigSpace, seeds: Sequence[Config]) -> list[Config]:
    """What the model chooses from, in a fixed order: the default, the seeds (the best
    configs of the kernel's nearest shapes, then heuristic ones) and their neighbours.
    Not random configs: on the recorded landscapes, the model's picks among those were
    slower and failed more often (it extrapolates far from what it was trained on)."""
    from tilecraft.autotune.search.common import normalize, unique  # imports this module

    fitting = [c for c in (normalize(space, s) for s in seeds) if c is not None]
    near = [n for s in fitting for n in space.neighbors(s)]
    return unique([space.default(), *fitting, *near])


def top_picks(
    model: CostModel,
    desc: dict[str, Any],
    space: ConfigSpace,
    seeds: Sequence[Config],
    n: int = TOP,
) -> list[Config]:
    """The `n` candidates the model ranks fastest, one per distinct feature vector, and
    each `DIFFER` knobs away from those ranked above it (see `diverse`)."""
    return diverse(space, model.rank(desc, candidates(space, seeds), distinct=True), n)


def diverse(
    space: ConfigSpace, ranked: Sequence[Config], n: int, differ: int = DIFFER
) -> list[Config]:
    """The first `n` of `ranked` that differ in at least `differ` knobs from every one kept
    before them, filled up in rank order when too few do. Near-identical picks hedge
    nothing: when the model misjudges one region of the space, three configs from it are
    all slow (on the landscapes the best of three came within 3% of the best in 10 of 27
    held-out shapes with the three fastest-ranked, 13 with picks three knobs apart)."""
    picks: list[Config] = []
    for config in ranked:
        if len(picks) == n:
            return picks
        if all(knob_differences(space, config, p) >= differ for p in picks):
            picks.append(config)
    return picks + [c for c in ranked if c not in picks][: n - len(picks)]


def knob_differences(space: ConfigSpace, a: Config, b: Config) -> int:
    """In how many of the space's knobs two configs differ."""
    va, vb = space.values(a), space.values(b)
    return sum(va[k] != vb[k] for k in va)


@dataclass(frozen=True)
class Pick:
    """The model's top pick with what its confidence is judged on."""

    config: Config
    distance: float  # kernel-feature distance to the nearest known kernel/shape
    margin: float  # predicted log2(time of the default / time of the pick)

    @property
    def confident(self) -> bool:
        return self.distance <= NEAR and self.margin >= MARGIN


def distance(desc: dict[str, Any], known: Iterable[dict[str, Any]]) -> float:
    """Chebyshev distance of `desc`'s kernel numbers to the nearest of `known` (inf if none
    is comparable)."""
    mine = kernel_numbers(desc)
    best = math.inf
    for other in known:
        try:
            theirs = kernel_numbers(other)
        except (KeyError, TypeError):  # a description of an older format
            continue
        if len(theirs) == len(mine):
            best = min(best, max(abs(a - b) for a, b in zip(mine, theirs, strict=True)))
    return best


def judge(
    model: CostModel,
    desc: dict[str, Any],
    space: ConfigSpace,
    seeds: Sequence[Config],
    known: Iterable[dict[str, Any]],
) -> Pick:
    """The model's top pick for `desc`, with its distance to `known` (descriptions of the
    same kernel at the shapes the model learned from) and its predicted margin over the
    default."""
    top = top_picks(model, desc, space, seeds, 1)[0]
    default_score, top_score = model.predict(desc, [space.default(), top])
    return Pick(top, distance(desc, known), default_score - top_score)


def untuned_config(bound: Any, args: tuple, settings: Any) -> Config | None:
    """The config an untuned call runs instead of the default: the cost model's top pick
    when it is confident (see the module's docstring), else None. Only on a GPU (the
    database's times are per GPU); any trouble reading the database means None."""
    from tilecraft.autotune.db import TuningDB
    from tilecraft.autotune.features import describe
    from tilecraft.autotune.model import from_database
    from tilecraft.autotune.seeds import heuristic_seeds
    from tilecraft.autotune.tune import _seeds, db_path, tune_key

    key = tune_key(bound, args)
    path = db_path(settings)
    if key.hardware == "cpu" or not path.exists():
        return None
    try:
        with TuningDB(path) as db:
            model = from_database(db, key.hardware, Path(settings.cache_dir))
            if model is None:
                return None
            known = [d for (k, _), d in db.descriptions(key.hardware).items() if k == key.kernel]
            space = space_of(bound)
            seeds = _seeds(db, key, space) + heuristic_seeds(space)
    except (sqlite3.Error, ImportError, ValueError) as e:
        warnings.warn(f"tilecraft: no predicted config ({e}); the default runs", stacklevel=2)
        return None
    pick = judge(model, describe(bound, key.hardware), space, seeds, known)
    return pick.config if pick.confident else None
