"""A cost model learned from every trial: which configs of a kernel will be fast.

Trials are grouped by kernel and shape. Each trial's target is its time relative to the
best of its group, as log2 (0 for the best; failures get `FAILED`), so that groups of
very different speeds teach the same lesson. A gradient-boosted tree ensemble
(scikit-learn) learns it from `features.features`, and a second one learns each trial's
rank in its group (0 for the best, below 1 for the slowest, `RANK_FAILED` for failures),
which weighs the order among the fast configs as much as the gaps to the slow ones. Their
predictions are blended (the rank model's scaled to the spread of the log2 times) into
one set of trees; for a kernel or shape never timed it ranks candidate configs by the
blend. On the recorded landscapes (held-out shapes, `benchmarks/predict_eval.py`) the
blend's top pick came within 5% of the best in 13 of 38 cases, against 9 for the log2
model alone; re-measured on later versions of the landscapes, 8 against 11, then 12
against 10: top-1 differences of that size are noise (benchmarks/RESULTS.md).

A third regressor learns how long each config holds a benchmarking worker (its compile and
timing, `charged_seconds`; a compile that timed out at least `TIMEOUT_S`), as log seconds:
the fast search skips the picks it predicts to eat a large share of a short budget. On the
landscapes, trained without the kernel, its predictions order a kernel's configs by that
time with a rank correlation of 0.4-0.8 (row kernels 0.7-0.8), not attention's (-0.2).

`CostModel.fit(groups, kind="rank")` fits a LambdaMART-like ranker instead (`ranker.py`:
the order among each group's fastest trials weighs most; its scores scaled to log2 time).
On the landscapes (six training sets) its top pick on held-out shapes was no closer to
the best beyond the noise (better median in 2, worse in 2), its best of 3 a little
closer in all six, its picks on held-out kernels worse, and it would change the fast
search's steps: it is not the default (benchmarks/RESULTS.md; `predict_eval.py --model
rank`).

Example::

    model = CostModel.fit([(desc, trials), ...])        # None with too little data
    ranked = model.rank(desc_of_new_shape, candidates)  # fastest predicted first
    seconds = model.compile_seconds(desc_of_new_shape, candidates)  # each one's compile
"""

from __future__ import annotations

import bisect
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
RANK_FAILED = 1.5  # rank target of a failed trial (ok trials rank from 0, the best, to 1)
# the regressors' settings, part of a cached model's stamp (2: leaves of 5 trials, 3: a
# second model learns each trial's rank in its group; their predictions are blended; 4: a
# third learns each trial's compile time)
MODEL_VERSION = 4
KINDS = ("blend", "rank")  # what `CostModel.fit` can fit (the cached model is a blend)

TIMEOUT_S = 10.0  # what a timed-out trial cost at least: the landscapes' shortest timeout
MIN_SECONDS = 0.01  # a floor under recorded times, for their log
Group = tuple[dict[str, Any], Sequence[Trial]]  # (describe(...) of a kernel/shape, its trials)


@dataclass
class CostModel:
    """A fitted regressor of log2(time / best of the same kernel and shape), roughly: a
    blend of two models (see the module's docstring)."""

    regressor: Any
    groups: int
    rows: int
    seconds: Any = None  # a regressor of log(charged_seconds); None: compiles all alike

    @classmethod
    def fit(cls, groups: Sequence[Group], seed: int = 0, kind: str = "blend") -> CostModel | None:
        """Train on the groups that are usable (current feature version, enough ok trials);
        None when none is. `kind`: "blend" (the two regressors) or "rank" (`ranker.py`)."""
        if kind not in KINDS:
            raise ValueError(f"no cost model kind {kind!r}: one of {', '.join(KINDS)}")
        x: list[list[float]] = []
        y: list[float] = []
        ranks: list[float] = []
        bounds: list[tuple[int, int]] = []
        for desc, trials in groups:
            if desc.get("version") != VERSION:
                continue
            times = sorted(t.time_ms for t in trials if t.ok and t.time_ms)
            if len(times) < MIN_OK:
                continue
            bounds.append((len(y), len(y) + len(trials)))
            for t in trials:
                x.append(features(desc, t.config))
                if t.ok and t.time_ms:
                    y.append(math.log2(t.time_ms / times[0]))
                    ranks.append(bisect.bisect_left(times, t.time_ms) / len(times))
                else:
                    y.append(FAILED)
                    ranks.append(RANK_FAILED)
        used = len(bounds)
        if used < MIN_GROUPS:
            return None
        if kind == "rank":
            model = cls._ranked(np.asarray(x), np.asarray(y), bounds, seed)
        else:
            model = cls._blended(np.asarray(x), y, ranks, used, seed)
        model.seconds = _seconds_model(groups, seed)
        return model

    @classmethod
    def _blended(
        cls, x: np.ndarray, y: list[float], ranks: list[float], used: int, seed: int
    ) -> CostModel:
        """The blend of the log2-time and rank regressors (kind "blend")."""
        from threadpoolctl import threadpool_limits  # comes with scikit-learn

        with threadpool_limits(1):  # small data: threads cost more than they save
            fitted = [_regressor(seed).fit(x, np.asarray(t)) for t in (y, ranks)]
        # the rank model's predictions scaled to the spread of log2 times, so the blend
        # reads as log2(time / best) (the untuned path's margin is judged on that scale)
        weights = (0.5, 0.5 * float(np.std(y)) / max(float(np.std(ranks)), 1e-9))
        regressor: Any = _Blend(list(zip(fitted, weights, strict=True)))
        # plain arrays predict alike and are cached without pickle; a scikit-learn whose
        # internals moved keeps its own models, uncached
        with suppress(AttributeError, KeyError, TypeError, ValueError):
            parts = [(TreeEnsemble.from_regressor(r), w) for r, w in regressor.parts]
            regressor = TreeEnsemble.blend(parts, extra=(used, len(y)))
        return cls(regressor, used, len(y))

    @classmethod
    def _ranked(
        cls, x: np.ndarray, y: np.ndarray, bounds: list[tuple[int, int]], seed: int
    ) -> CostModel:
        """The ranker's model (kind "rank"), as arrays where scikit-learn allows."""
        from threadpoolctl import threadpool_limits  # comes with scikit-learn

        try:
            from tilecraft.autotune.ranker import fit_ranker
        except ImportError as e:
            raise ImportError("the learned cost model needs scikit-learn") from e
        with threadpool_limits(1):
            trees, weight = fit_ranker(x, y, bounds, seed)
        regressor: Any = _Sum(trees, weight)
        with suppress(AttributeError, KeyError, TypeError, ValueError):
            extra = (len(bounds), len(y))
            regressor = TreeEnsemble.from_decision_trees(trees, weight, extra=extra)
        return cls(regressor, len(bounds), len(y))

    def predict(self, desc: dict[str, Any], configs: Sequence[Config]) -> list[float]:
        """Predicted log2(time / best time of this kernel and shape) of each config (up to
        a constant per kernel and shape for kind "rank": differences are what it gives)."""
        if not configs:
            return []
        vectors = np.asarray([features(desc, c) for c in configs])
        return [float(v) for v in self.regressor.predict(vectors)]

    def compile_seconds(self, desc: dict[str, Any], configs: Sequence[Config]) -> list[float]:
        """Predicted seconds each config would hold a benchmarking worker (its compile and
        timing, see `charged_seconds`); zeros without that regressor."""
        if self.seconds is None or not configs:
            return [0.0] * len(configs)
        vectors = np.asarray([features(desc, c) for c in configs])
        return [math.exp(float(v)) for v in self.seconds.predict(vectors)]

    def rank(
        self,
        desc: dict[str, Any],
        configs: Sequence[Config],
        distinct: bool = False,
        max_seconds: float | None = None,
    ) -> list[Config]:
        """`configs`, the fastest predicted first (ties keep their order). `distinct`
        keeps one config per feature vector: knobs that change nothing the model sees
        are not worth a trial. `max_seconds` leaves out the configs predicted to hold a
        worker longer (`compile_seconds`), unless that leaves none."""
        if not configs:
            return []
        vectors = [tuple(features(desc, c)) for c in configs]
        x = np.asarray(vectors)
        scores = self.regressor.predict(x)
        order = sorted(range(len(configs)), key=lambda i: (scores[i], i))
        if max_seconds is not None and self.seconds is not None:
            quick = np.exp(self.seconds.predict(x)) <= max_seconds
            order = [i for i in order if quick[i]] if quick.any() else order
        if distinct:
            first: dict[tuple[float, ...], int] = {}  # feature vector -> best-ranked config
            for i in order:
                first.setdefault(vectors[i], i)
            order = list(first.values())
        return [configs[i] for i in order]


@dataclass
class _Blend:
    """Weighted sum of fitted regressors' predictions (when they cannot become arrays)."""

    parts: list[tuple[Any, float]]

    def predict(self, x: np.ndarray) -> np.ndarray:
        return sum(w * r.predict(x) for r, w in self.parts)


@dataclass
class _Sum:
    """`weight` times the summed predictions of fitted trees (when they cannot become
    arrays)."""

    trees: list[Any]
    weight: float

    def predict(self, x: np.ndarray) -> np.ndarray:
        return self.weight * sum(t.predict(x) for t in self.trees)


def charged_seconds(trial: Trial) -> float | None:
    """The seconds `trial` held a benchmarking worker: its compile and timing, at least
    `TIMEOUT_S` for a compile that timed out; None for a failure whose compile time was
    not recorded (0: shared memory or codegen refused it before any compile was timed)."""
    spent = trial.compile_s + trial.bench_s
    if trial.status == "timeout":
        return max(spent, TIMEOUT_S)
    return spent if trial.ok or trial.compile_s > 0 else None


def _seconds_model(groups: Sequence[Group], seed: int) -> Any:
    """A regressor of log(`charged_seconds`) over the trials of the current feature
    version that have one, as arrays where scikit-learn allows (None without trials)."""
    x, y = [], []
    for desc, trials in groups:
        if desc.get("version") != VERSION:
            continue
        for t in trials:
            seconds = charged_seconds(t)
            if seconds is not None:
                x.append(features(desc, t.config))
                y.append(math.log(max(seconds, MIN_SECONDS)))
    if not y:
        return None
    from threadpoolctl import threadpool_limits  # comes with scikit-learn

    with threadpool_limits(1):
        fitted = _regressor(seed).fit(np.asarray(x), np.asarray(y))
    with suppress(AttributeError, KeyError, TypeError, ValueError):
        return TreeEnsemble.from_regressor(fitted)
    return fitted


def _regressor(seed: int) -> Any:
    try:
        from sklearn.ensemble import HistGradientBoostingRegressor
    except ImportError as e:
        raise ImportError("the learned cost model needs scikit-learn") from e
    # leaves of 5 trials, not 10: the configs worth running differ by a few percent, and
    # finer leaves tell them apart (on the 38 landscapes, held-out shapes, with the diverse
    # top 3 of `predict.top_picks`: best of 3 within 3% of the best in 21 cases, not 16)
    return HistGradientBoostingRegressor(
        max_iter=100, learning_rate=0.15, max_leaf_nodes=31, min_samples_leaf=5, random_state=seed
    )


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
    """The cached model, if it was fitted on what `stamp` describes. The files are numbers
    only (see `trees`): a planted or damaged one is refused and the model refitted."""
    if not path.exists():
        return None
    try:
        trees = TreeEnsemble.load(path, stamp)
        seconds = trees and TreeEnsemble.load(_seconds_path(path), stamp)
    except Exception as e:  # whatever the files hold, it is refitted, never fatal
        warnings.warn(f"tilecraft: ignoring cached cost model {path}: {e}", stacklevel=3)
        return None
    if trees is None or seconds is None:
        return None
    groups, rows = (trees.extra + (0, 0))[:2]
    return CostModel(trees, groups=groups, rows=rows, seconds=seconds)


def _write(path: Path, stamp: str, model: CostModel | None) -> None:
    if model is None or not all(
        isinstance(r, TreeEnsemble) for r in (model.regressor, model.seconds)
    ):
        return
    try:
        model.seconds.save(_seconds_path(path), stamp)
        model.regressor.save(path, stamp)  # last: its file is what `_read` looks for first
    except OSError as e:
        warnings.warn(f"tilecraft: cost model not cached: {e}", stacklevel=3)


def _seconds_path(path: Path) -> Path:
    """Where the compile-time regressor of the model cached at `path` is kept."""
    return path.with_name(path.name.replace("cost-", "compile-", 1))


def _sklearn_version() -> str:
    """scikit-learn's version, read without importing it (seconds, for a cached model)."""
    try:
        return importlib.metadata.version("scikit-learn")
    except importlib.metadata.PackageNotFoundError:
        return "none"
