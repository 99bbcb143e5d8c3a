"""A cost model learned from every trial: which configs of a kernel will be fast.

Trials are grouped by kernel and shape; each trial's time is taken relative to the best
of its group, as log2 (0 for the best; failures get `FAILED`), so that groups of very
different speeds teach the same lesson. Boosted trees (`ranker.py`, LambdaMART-like,
on `features.features`) learn the order of each group's trials, the fastest ones
weighing most, and their scores are scaled to predict that log2 relative time. For a
kernel or shape never timed the model ranks candidate configs.

Before (model version 3) a regressor of the log2 time was blended with one of each
trial's rank in its group. On the recorded landscapes (`benchmarks/predict_eval.py`,
held-out shapes) the ranker's top pick is closer to the best in the median and, more
clearly, in the geometric mean (fewer picks several times slower), on each of three
training sets; on held-out kernels it is no better (benchmarks/RESULTS.md).

Example::

    model = CostModel.fit([(desc, trials), ...])        # None with too little data
    ranked = model.rank(desc_of_new_shape, candidates)  # fastest predicted first
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import math
import warnings
from collections.abc import Sequence
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tilecraft.autotune.db import TuningDB
from tilecraft.autotune.features import VERSION, features
from tilecraft.autotune.trees import TreeEnsemble
from tilecraft.autotune.trial import Trial
from tilecraft.runtime.cache import subdir
from tilecraft.runtime.config import Config

FAILED = 4.0  # log2 penalty of a failed trial: as bad as 16x slower than the best
MIN_OK = 5  # a group teaches only with this many ok trials
MIN_GROUPS = 1
# the model's settings, part of a cached model's stamp (2: leaves of 5 trials, 3: a second
# model learns each trial's rank in its group, blended; 4: a LambdaMART-like ranker)
MODEL_VERSION = 4

Group = tuple[dict[str, Any], Sequence[Trial]]  # (describe(...) of a kernel/shape, its trials)


@dataclass
class CostModel:
    """Fitted trees predicting log2(time / best of the same kernel and shape), roughly:
    a ranking scaled to that (see the module's docstring)."""

    regressor: Any
    groups: int
    rows: int

    @classmethod
    def fit(cls, groups: Sequence[Group], seed: int = 0) -> CostModel | None:
        """Train on the groups that are usable (current feature version, enough ok trials);
        None when none is."""
        x: list[list[float]] = []
        y: list[float] = []
        bounds: list[tuple[int, int]] = []
        for desc, trials in groups:
            if desc.get("version") != VERSION:
                continue
            times = sorted(t.time_ms for t in trials if t.ok and t.time_ms)
            if len(times) < MIN_OK:
                continue
            start = len(y)
            for t in trials:
                x.append(features(desc, t.config))
                y.append(math.log2(t.time_ms / times[0]) if t.ok and t.time_ms else FAILED)
            bounds.append((start, len(y)))
        if len(bounds) < MIN_GROUPS:
            return None
        from threadpoolctl import threadpool_limits  # comes with scikit-learn

        try:
            from tilecraft.autotune.ranker import fit_ranker
        except ImportError as e:
            raise ImportError("the learned cost model needs scikit-learn") from e
        with threadpool_limits(1):  # small data: threads cost more than they save
            trees, weight = fit_ranker(np.asarray(x), np.asarray(y), bounds, seed)
        regressor: Any = _Sum(trees, weight)
        # plain arrays predict alike and are cached without pickle; a scikit-learn whose
        # internals moved keeps its own trees, uncached
        with suppress(AttributeError, KeyError, TypeError, ValueError):
            extra = (len(bounds), len(y))
            regressor = TreeEnsemble.from_decision_trees(trees, weight, extra=extra)
        return cls(regressor, len(bounds), len(y))

    def predict(self, desc: dict[str, Any], configs: Sequence[Config]) -> list[float]:
        """Predicted log2(time / best time of this kernel and shape) of each config, up
        to a constant per kernel and shape (differences are what it is good for)."""
        if not configs:
            return []
        vectors = np.asarray([features(desc, c) for c in configs])
        return [float(v) for v in self.regressor.predict(vectors)]

    def rank(
        self, desc: dict[str, Any], configs: Sequence[Config], distinct: bool = False
    ) -> list[Config]:
        """`configs`, the fastest predicted first (ties keep their order). `distinct`
        keeps one config per feature vector: knobs that change nothing the model sees
        are not worth a trial."""
        if not configs:
            return []
        vectors = [tuple(features(desc, c)) for c in configs]
        scores = self.regressor.predict(np.asarray(vectors))
        order = sorted(range(len(configs)), key=lambda i: (scores[i], i))
        if distinct:
            first: dict[tuple[float, ...], int] = {}  # feature vector -> best-ranked config
            for i in order:
                first.setdefault(vectors[i], i)
            order = list(first.values())
        return [configs[i] for i in order]


@dataclass
class _Sum:
    """`weight` times the summed predictions of fitted trees (when they cannot become
    arrays)."""

    trees: list[Any]
    weight: float

    def predict(self, x: np.ndarray) -> np.ndarray:
        return self.weight * sum(t.predict(x) for t in self.trees)


# per database and machine: (what the model was fitted on, the model), the latest only
_LOADED: dict[str, tuple[str, CostModel | None]] = {}


def from_database(db: TuningDB, hardware: str, cache_dir: Path) -> CostModel | None:
    """The model of every trial on `hardware` in `db`, refitted only when trials were
    added since (kept in memory and in `cache_dir`, so a new process need not refit)."""
    slot = hashlib.sha256(f"{hardware}|{db.path}".encode()).hexdigest()[:16]
    stamp = f"{db.count()}|{VERSION}.{MODEL_VERSION}|{_sklearn_version()}"
    held = _LOADED.get(slot)
    if held is None or held[0] != stamp:
        path = subdir(cache_dir, "models") / f"cost-{slot}.npz"
        model = _read(path, stamp)
        if model is None:
            model = CostModel.fit(database_groups(db, hardware))
            _write(path, stamp, model)
        held = _LOADED[slot] = (stamp, model)
    return held[1]


def database_groups(db: TuningDB, hardware: str) -> list[Group]:
    """(description, trials) per kernel and specialization with a stored description."""
    descriptions = db.descriptions(hardware)
    trials: dict[tuple[str, str], list[Trial]] = {}
    for row in db.trials(hardware=hardware):
        key = (row["kernel"], row["spec_key"])
        if key in descriptions and row["config"] is not None:
            trial = Trial(row["config"], row["status"], row["time_ms"], row["compile_s"])
            trials.setdefault(key, []).append(trial)
    return [(descriptions[key], found) for key, found in trials.items()]


def _read(path: Path, stamp: str) -> CostModel | None:
    """The cached model, if it was fitted on what `stamp` describes. The file is numbers
    only (see `trees`): a planted or damaged one is refused and the model refitted."""
    if not path.exists():
        return None
    try:
        trees = TreeEnsemble.load(path, stamp)
    except Exception as e:  # whatever the file holds, it is refitted, never fatal
        warnings.warn(f"tilecraft: ignoring cached cost model {path}: {e}", stacklevel=3)
        return None
    if trees is None:
        return None
    groups, rows = (trees.extra + (0, 0))[:2]
    return CostModel(trees, groups=groups, rows=rows)


def _write(path: Path, stamp: str, model: CostModel | None) -> None:
    if model is None or not isinstance(model.regressor, TreeEnsemble):
        return
    try:
        model.regressor.save(path, stamp)
    except OSError as e:
        warnings.warn(f"tilecraft: cost model not cached: {e}", stacklevel=3)


def _sklearn_version() -> str:
    """scikit-learn's version, read without importing it (seconds, for a cached model)."""
    try:
        return importlib.metadata.version("scikit-learn")
    except importlib.metadata.PackageNotFoundError:
        return "none"
