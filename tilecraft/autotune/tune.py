"""Tuning one bound kernel: pick the search, run it under a budget, record, re-time, cache."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import math
import sqlite3
import statistics
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import triton

from tilecraft.autotune.bench import Benchmarker, prestart
from tilecraft.autotune.db import DB_NAME, TuneKey, TuningDB, TuningDBWarning
from tilecraft.autotune.energy import (
    EnergyMeter,
    EnergyUse,
    check_objective,
    default_meter,
    pareto_front,
    require_meter,
)
from tilecraft.autotune.features import describe
from tilecraft.autotune.llm.context import LLMContext, closest_entries
from tilecraft.autotune.model import CostModel, from_database
from tilecraft.autotune.outcome import check_reference, distinct, summary
from tilecraft.autotune.phases import Phases
from tilecraft.autotune.pick import pick
from tilecraft.autotune.predict import TOP
from tilecraft.autotune.progress import TuneProgress
from tilecraft.autotune.search import SEARCHES, make_search
from tilecraft.autotune.search.common import cost
from tilecraft.autotune.seeds import heuristic_seeds, nearest_bests
from tilecraft.autotune.space import ConfigSpace, space_of
from tilecraft.autotune.trial import SKIPPED, Budget, Trial
from tilecraft.exc import SettingsError
from tilecraft.runtime.bound import BoundKernel
from tilecraft.runtime.cache import usable_dir
from tilecraft.runtime.config import Config
from tilecraft.runtime.cpu import tensors_in
from tilecraft.runtime.settings import Settings

VERSION = "0.1.0"


@dataclass(frozen=True)
class Effort:
    """A tuning preset: the search and its budget."""

    search: str
    max_seconds: float
    max_configs: int


EFFORTS = {
    # once the tuning database has taught a cost model; the configs do not cap it before the
    # time does (40 ended it after 6.5 s of its 10 on short kernels)
    "quick": Effort("fast", 10.0, 64),
    "full": Effort("classifier", 300.0, 600),
    # the cost model's top 3 only (the default alone without a model); see predict.py
    "predict": Effort("predict", 10.0, 4),
}
RETIME_SHARE = 0.12  # of a GPU tuning budget kept for re-timing the leaders at the end
COLD_START = Effort("quick", 30.0, 60)  # "quick" before that: the classifier-guided climb
NOISE = 0.03  # timing noise between two runs of one kernel (relative): leads beyond it count
LEADERS = 4  # configs re-timed at the end of a search
RETIME_ROUNDS = 5  # interleaved re-timings of each leader (see pick.py)


# Winners this process could not store (full disk, unusable cache): (db path, key) -> config
_REMEMBERED: dict[tuple[str, TuneKey], Config] = {}


def db_path(settings: Settings) -> Path:
    """The tuning database under the settings' cache dir (or its private stand-in)."""
    return usable_dir(settings.cache_dir) / DB_NAME


def hardware(args: tuple) -> str:
    """The device the arguments live on, by name."""
    for t in tensors_in(args):
        if t.is_cuda:
            return torch.cuda.get_device_name(t.device)
    return "cpu"


def tune_key(bound: BoundKernel, args: tuple) -> TuneKey:
    """What a tuned config is valid for: source, specialization, hardware, versions."""
    source = "".join(bound.src.lines[bound.src.tree.lineno - 1 : bound.src.tree.end_lineno])
    fingerprint = hashlib.sha256(source.encode()).hexdigest()[:20]
    return TuneKey(fingerprint, bound.spec_key, hardware(args), versions())


COMPILER = ("language", "frontend", "ir", "codegen", "runtime")  # what makes the code


PACKAGE = Path(__file__).resolve().parent.parent


@functools.cache
def compiler_hash(root: Path = PACKAGE) -> str:
    """A hash of tilecraft's compiler sources: a winner tuned for code an older code
    generator wrote is not reused (the package version does not change with each fix)."""
    digest = hashlib.sha256()
    for part in COMPILER:
        for path in sorted((root / part).rglob("*.py")):
            digest.update(path.relative_to(root).as_posix().encode() + path.read_bytes())
    return digest.hexdigest()[:12]


def versions() -> str:
    """The versions part of a TuneKey: PyTorch, Triton, tilecraft and its compiler."""
    torch_triton = f"torch={torch.__version__};triton={triton.__version__}"
    return f"{torch_triton};tilecraft={VERSION}+{compiler_hash()}"


def cached_config(bound: BoundKernel, args: tuple, settings: Settings) -> Config | None:
    """A config tuned earlier (by any process) for exactly this kernel and setting; None
    (with one warning) when the database cannot be read or the stored config no longer
    compiles for this kernel (that row is dropped, so a re-tune replaces it)."""
    path, key = db_path(settings), best_key(tune_key(bound, args), settings.autotune_objective)
    if (str(path), key) in _REMEMBERED:
        return _REMEMBERED[str(path), key]
    try:
        with TuningDB(path) as db:
            config = db.load_best(key)
            if config is None or _compiles(bound, config):
                return config
            db.forget_best(key)
    except sqlite3.Error as e:
        warnings.warn(f"tilecraft: tuning database {path} unreadable ({e})", TuningDBWarning, 2)
        return None
    warnings.warn(
        f"tilecraft: the stored best config of `{bound.src.tree.name}` ({config!r}) no longer"
        " fits it; ignored",
        TuningDBWarning,
        2,
    )
    return None


def _compiles(bound: BoundKernel, config: Config) -> bool:
    try:
        bound.compile(config)
    except Exception:  # noqa: BLE001 - whatever a stale row causes, the default runs
        return False
    return True


def autotune(
    bound: BoundKernel,
    args: tuple,
    settings: Settings,
    *,
    configs: list[Config] | None = None,
    effort: str | None = None,
    search: str | None = None,
    budget_s: float | None = None,
    max_configs: int | None = None,
    seed: int | None = None,
    objective: str | None = None,
    meter: EnergyMeter | None = None,
) -> Config:
    """Tune `bound` on `args` and return the winning config (also cached and printed).
    `seed` (default: the `autotune_seed` setting) seeds the search: the same seed and
    tuning database give the same configs tried, in the same order. `objective` (default:
    the `autotune_objective` setting) is what the search minimizes: "time", "energy" (joules
    per call) or "edp" (energy x delay); energy is read from `meter` (default: NVML's, on
    an NVIDIA GPU), which also measures the energy the tuning run itself uses."""
    started = time.monotonic()  # the budget counts the set-up (workers, model) too
    settings.validate()
    objective = objective or settings.autotune_objective
    _check_options(search or settings.autotune_search, effort, budget_s, objective)
    workers = _pool_size(settings, effort, search, configs, max_configs)
    prestart(args, workers, settings.autotune_timeout_s)  # they start while we set up
    meter = meter if meter is not None else default_meter(args)
    require_meter(objective, meter)
    used, phases, key = EnergyUse(meter), Phases(), tune_key(bound, args)
    metered = meter if objective != "time" else None
    with (
        TuningDB(db_path(settings), check=True) as db,
        _benchmarker(bound, args, settings, workers, phases, metered) as bench,
    ):
        with phases.timed("plan"):
            preset, learned = _plan(db, key, bound, settings, effort, search)
        name = search or settings.autotune_search or preset.search
        seconds = budget_s or settings.autotune_budget_s or preset.max_seconds
        budget = _search_budget(bench, seconds, max_configs or preset.max_configs, started)
        bench.deadline = None if configs else budget.deadline()
        with TuneProgress(bound.src.tree.name, name, budget, settings, bench.on_gpu) as shown:
            run = _Run(bound, settings, db, key, bench, phases, objective, name, shown)
            trials = _trials(run, configs, budget, seed, learned)
            bench.deadline = None if configs else started + seconds  # the re-timing's share
            best = _winner(run, trials)
            tuning_j = used.joules()
            phases["total"] = time.monotonic() - started
            shown.finish(best, tuning_j, pareto_front(trials), _shown(phases, settings))
    check_reference(bound.src.tree.name, trials)
    bound.tuning = {**summary(trials, name, best, objective, tuning_j), "phases": phases.rounded()}
    return best.config


@dataclass
class _Run:
    """One tuning run's parts, which its steps share."""

    bound: BoundKernel
    settings: Settings
    db: TuningDB
    key: TuneKey
    bench: Benchmarker
    phases: Phases
    objective: str
    search: str  # the search's name
    shown: TuneProgress
    unrecorded: list[str] = dataclasses.field(default_factory=list)  # database errors

    def evaluate(self, batch: list[Config]) -> list[Trial]:
        """Measure `batch`, record its trials in the tuning database and show them."""
        with self.phases.timed("measure"):
            trials = self.bench(batch)
        for trial in trials:
            trial.objective = self.objective
        measured = [t for t in trials if t.status != SKIPPED]
        try:
            self.db.record_for(self.key, measured, self.bound.src.tree.name, self.search)
        except sqlite3.Error as e:  # a full disk or a lock must not stop the tuning
            if not self.unrecorded:
                warnings.warn(f"tilecraft: trials not recorded: {e}", TuningDBWarning, 2)
            self.unrecorded.append(str(e))
        self.shown.update(trials)
        return trials


def _benchmarker(
    bound: BoundKernel,
    args: tuple,
    settings: Settings,
    workers: int,
    phases: Phases,
    meter: EnergyMeter | None,
) -> Benchmarker:
    """The benchmarker of the run (reading energy from `meter`, None for time alone)."""
    timeout_s = settings.autotune_timeout_s
    return Benchmarker(
        bound, args, workers=workers, timeout_s=timeout_s, phases=phases, meter=meter
    )


def _search_budget(bench: Benchmarker, seconds: float, configs: int, started: float) -> Budget:
    """The search's share of the run's `seconds` (on a GPU, the rest re-times the leaders)."""
    searching = seconds * (1 - RETIME_SHARE) if bench.on_gpu else seconds
    return Budget(configs, searching, started=started)


def _trials(
    run: _Run,
    configs: list[Config] | None,
    budget: Budget,
    seed: int | None,
    learned: dict[str, Any],
) -> list[Trial]:
    """The trials of the given `configs`, or else of the run's search under `budget`."""
    if configs:
        return run.evaluate(configs)
    seed = run.settings.autotune_seed if seed is None else seed
    runner = _search(run, budget, seed, learned)
    with run.phases.timed("search"):
        runner.run()
    run.phases["search"] -= run.phases.get("measure", 0.0)  # its own thinking only
    return runner.trials


def _winner(run: _Run, trials: list[Trial]) -> Trial:
    """The best of `trials` (re-timed on a GPU), stored as the kernel's best config."""
    quick = run.search == "predict"
    best = _choose(run.bench, trials, run.bound.default_config, run.objective, quick=quick)
    if best.time_ms is not None:
        key = best_key(run.key, run.objective)
        _keep(run.db, key, best, run.settings, run.objective != "time")
    return best


def _search(run: _Run, budget: Budget, seed: int, learned: dict[str, Any]) -> Any:
    """The run's search over the kernel's config space, seeded with the database's best
    configs of other shapes and the heuristics' picks, learning from `learned` (the cost
    model and the kernel's description)."""
    bound, bench, db, key = run.bound, run.bench, run.db, run.key
    space = space_of(bound, bench.on_gpu)
    tuned = _readable(lambda: _seeds(db, key, space))
    seeds = tuned + heuristic_seeds(space)
    retime = bench.retime if bench.on_gpu else None
    entries = _readable(lambda: closest_entries(db, key))
    context = LLMContext(bound, run.settings, entries, retime=retime)
    return make_search(
        run.search,
        space,
        run.evaluate,
        budget,
        seed=seed,
        seeds=seeds,
        context=context,
        tuned_seeds=len(tuned),
        **learned,
    )


def _shown(phases: Phases, settings: Settings) -> str:
    """The phases line of the summary, when the settings ask for it."""
    return phases.summary() if settings.autotune_verbose else ""


def _pool_size(
    settings: Settings,
    effort: str | None,
    search: str | None,
    configs: list[Config] | None,
    max_configs: int | None,
) -> int:
    """Workers for the batches the search will run: the "predict" search measures its
    `TOP` picks at once, given configs are measured at once, and no search measures more
    than its config budget. Starting fewer workers saves their start-up."""
    preset = EFFORTS.get(effort or settings.autotune_effort, EFFORTS["quick"])
    name = search or settings.autotune_search or preset.search
    batch = [settings.autotune_workers]
    if configs:
        batch.append(len(configs))
    elif name == "predict":
        batch.append(TOP)
    if max_configs:
        batch.append(max_configs)
    return min(batch)


def best_key(key: TuneKey, objective: str) -> TuneKey:
    """Where the winner under `objective` is stored: the key itself for time; marked with
    the objective otherwise, so an energy winner never replaces the fastest config."""
    if objective == "time":
        return key
    return dataclasses.replace(key, versions=f"{key.versions};objective={objective}")


def _check_options(
    search: str | None, effort: str | None, budget_s: float | None, objective: str = "time"
) -> None:
    """Tuning options checked up front, by name, with the values they accept."""
    check_objective(objective)
    if search is not None and search not in SEARCHES:
        raise SettingsError(
            f"search {search!r} (TILECRAFT_AUTOTUNE_SEARCH) is not valid: expected one of"
            f" {', '.join(SEARCHES)}"
        )
    if effort is not None and effort not in EFFORTS:
        raise SettingsError(f"effort {effort!r} is not valid: expected one of {', '.join(EFFORTS)}")
    if budget_s is not None and not (math.isfinite(budget_s) and budget_s > 0):
        raise SettingsError(f"budget_s={budget_s!r} is not valid: expected seconds > 0")


def _readable(read: Callable[[], list[Any]]) -> list[Any]:
    """What `read` finds in the tuning database, or nothing when it cannot be read."""
    try:
        return read()
    except sqlite3.Error as e:
        warnings.warn(f"tilecraft: tuning database unreadable ({e})", TuningDBWarning, 4)
        return []


def _keep(
    db: TuningDB, key: TuneKey, best: Trial, settings: Settings, replace: bool = False
) -> None:
    """Store the winner (in place of the stored one with `replace`, else unless a faster
    one is stored); where it cannot be stored, keep it for this process and say so."""
    assert best.time_ms is not None
    target = db
    if db.gone():  # the cache dir was removed while tuning: a fresh file keeps the winner
        warnings.warn(
            f"tilecraft: {db.path} was removed during tuning; this run's trials are lost,"
            " its winner is stored anew",
            TuningDBWarning,
            4,
        )
        target = TuningDB(db_path(settings))
    try:
        target.save_best(key, best.config, best.time_ms, replace=replace)
        stored = not target.in_memory
    except sqlite3.Error as e:
        warnings.warn(
            f"tilecraft: the winner could not be stored ({e}); this process keeps it in memory",
            TuningDBWarning,
            4,
        )
        stored = False
    finally:
        if target is not db:
            target.close()
    if not stored:
        _REMEMBERED[str(db_path(settings)), key] = best.config


def _plan(
    db: TuningDB,
    key: TuneKey,
    bound: BoundKernel,
    settings: Settings,
    effort: str | None,
    search: str | None,
) -> tuple[Effort, dict[str, Any]]:
    """The effort's preset and what the "fast" and "predict" searches learn from; the
    cold-start preset when it would be "fast" but the database has taught no model yet."""
    preset = EFFORTS.get(effort or settings.autotune_effort, EFFORTS["quick"])
    name = search or settings.autotune_search or preset.search
    if name not in ("fast", "predict"):
        return preset, {}
    model, description = _learned(db, key, bound, settings)
    if model is None and name == "fast" and not (search or settings.autotune_search):
        return COLD_START, {}
    return preset, {"model": model, "description": description}


def _seeds(db: TuningDB, key: TuneKey, space: ConfigSpace) -> list[Config]:
    """The best configs measured before for this kernel at other shapes, nearest first."""
    best: dict[str, tuple[float, Config]] = {}
    for row in db.trials(kernel=key.kernel, hardware=key.hardware):
        usable = row["status"] == "ok" and row["config"] is not None and row["time_ms"]
        if usable and row["time_ms"] < best.get(row["spec_key"], (math.inf,))[0]:
            best[row["spec_key"]] = (row["time_ms"], row["config"])
    return [space.snap(space.values(c)) for c in nearest_bests(best, key.spec_key)]


def _learned(
    db: TuningDB, key: TuneKey, bound: BoundKernel, settings: Settings
) -> tuple[CostModel | None, dict[str, Any]]:
    """The cost model of the database's trials on this machine, and this kernel's
    description (stored, so that later models learn from this tuning too)."""
    description = describe(bound, key.hardware)
    try:
        db.save_description(key.kernel, key.spec_key, key.hardware, description)
        return from_database(db, key.hardware, Path(settings.cache_dir)), description
    # the model only guides the search: a stored trial or description it cannot read (a
    # fault of an older version, say) must not fail the call that tunes
    except (sqlite3.Error, ImportError, ValueError, ArithmeticError, KeyError, TypeError) as e:
        warnings.warn(f"tilecraft: no cost model ({e!r}); tuning without one", stacklevel=3)
        return None, description


def _choose(
    bench: Benchmarker,
    trials: list[Trial],
    default: Config,
    objective: str = "time",
    *,
    quick: bool = False,
) -> Trial:
    """The best trial under `objective`; for time, the `LEADERS` re-timed together in
    `RETIME_ROUNDS` interleaved rounds (as many as the benchmarker's deadline allows, one
    at least) and the winner chosen by `pick.pick` (the fastest relative to its rounds,
    ties within the noise going to the search's own ranking); energy is measured over
    windows long enough to need no second look. The default if nothing worked. `quick` (a
    few configs measured at once): only the leaders within `NOISE` of the fastest are
    re-timed, in one round, each keeping the best of its two timings; none when the
    fastest leads by more."""
    ranked = sorted((t for t in trials if t.ok), key=lambda t: (cost(t), t.time_ms or 0.0))
    if not ranked:
        return Trial(default, "ok", None, objective=objective)
    if objective != "time":
        return ranked[0]
    leaders = distinct(ranked)[:LEADERS]
    if quick:
        fastest = ranked[0].time_ms or 0.0
        leaders = [t for t in leaders if (t.time_ms or 0.0) <= fastest * (1 + NOISE)]
    if not bench.on_gpu or len(leaders) < 2:
        return ranked[0]
    if quick:
        times = bench.retime([t.config for t in leaders], rounds=1)
        times = {
            t.config: min(times.get(t.config, math.inf), t.time_ms or math.inf) for t in leaders
        }
        winner = min(times, key=lambda c: times[c])
        return Trial(winner, "ok", times[winner])
    order = [t.config for t in leaders]
    samples = bench.samples(order, rounds=RETIME_ROUNDS)
    chosen = pick(samples, order)
    if chosen is None:
        return ranked[0]
    return Trial(chosen, "ok", statistics.median(samples[chosen]))
