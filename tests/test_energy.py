"""Energy as a tuning objective, against simulated meters: measuring windows of a stepping
counter, objectives and their scores, the time/energy Pareto front, the searches and the
tuner minimizing energy or energy x delay, the tuning database's energy column (and the
upgrade of older files), and names checked up front."""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path

import pytest
import torch
from landscapes import Landscape

import tilecraft as tc
from tilecraft.autotune import dbschema
from tilecraft.autotune.db import TuneKey, TuningDB
from tilecraft.autotune.energy import (
    EnergyMeter,
    EnergyUse,
    SimulatedMeter,
    meter_from_job,
    pareto_front,
    windowed_per_call,
)
from tilecraft.autotune.progress import pareto_table
from tilecraft.autotune.search import make_search
from tilecraft.autotune.trial import Trial
from tilecraft.autotune.tune import cached_config, db_path
from tilecraft.exc import SettingsError
from tilecraft.runtime.config import Config
from tilecraft.runtime.settings import Settings

WARPS = (8, 2, 4)  # under SimulatedMeter, 2 warps draw least power


@tc.kernel
def double(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in tc.tile(x.size(0)):
        out[tile] = x[tile] * 2
    return out


class SteppingCounter:
    """An energy counter like NVML's: `watts` drawn all the time, read in steps of `step_s`."""

    def __init__(self, watts: float, step_s: float = 0.02) -> None:
        self.watts, self.step_s, self.began = watts, step_s, time.perf_counter()

    def __call__(self) -> float:
        steps = (time.perf_counter() - self.began) // self.step_s
        return self.watts * steps * self.step_s


def spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def test_a_window_between_counter_updates_gives_the_energy_of_one_call() -> None:
    counter, call_s = SteppingCounter(watts=300.0), 0.0005
    took: list[float] = []  # each call's wall time (more than call_s on a busy machine)

    def run() -> None:
        start = time.perf_counter()
        spin(call_s)
        took.append(time.perf_counter() - start)

    began = time.perf_counter()
    joules = windowed_per_call(run, lambda: None, counter, call_s * 1e3, window_s=0.1)
    assert joules is not None and time.perf_counter() - began >= 0.1
    # 300 W for the length of a call, within the counter's steps against the window
    assert joules == pytest.approx(300 * sum(took) / len(took), rel=0.25)


def test_a_counter_that_never_moves_measures_nothing() -> None:
    assert windowed_per_call(lambda: None, lambda: None, lambda: 5.0, 0.01, 0.01) is None


def trial(ms: float | None, joules: float | None, status: str = "ok", objective: str = "time"):
    return Trial(Config(num_warps=4), status, ms, energy_j=joules, objective=objective)


def test_scores_under_each_objective() -> None:
    assert trial(2.0, 0.5).score == 2.0
    assert trial(2.0, 0.5, objective="energy").score == 0.5
    assert trial(2.0, 0.5, objective="edp").score == 1.0
    assert trial(2.0, None, objective="energy").score is None  # no meter reading
    assert trial(None, None, "compile_error", "energy").score is None


def test_pareto_front_keeps_only_the_trials_nothing_beats_on_both() -> None:
    trials = [
        trial(1.0, 5.0),  # fastest
        trial(2.0, 3.0),
        trial(2.0, 4.0),  # dominated by (2, 3): as fast, more energy
        trial(3.0, 3.0),  # dominated by (2, 3): slower, same energy
        trial(4.0, 1.0),  # least energy
        trial(5.0, 6.0),  # dominated by all of the above
        trial(0.5, None),  # no energy: not on a time/energy front
        trial(None, None, "compile_error"),
    ]
    front = pareto_front(trials)
    assert [(t.time_ms, t.energy_j) for t in front] == [(1.0, 5.0), (2.0, 3.0), (4.0, 1.0)]
    assert pareto_front([trial(1.0, 1.0), trial(1.0, 1.0)]) != []  # equal points both stay
    assert pareto_front([trial(1.0, None)]) == []
    assert "time/energy Pareto front" in pareto_table(front, front[0]).title  # type: ignore[operator]


def energy_landscape(objective: str):
    """The synthetic landscape of the search tests, with energy: its fastest config (4
    warps, 4 stages) draws more power than slower ones with fewer warps and stages."""
    landscape, meter = Landscape(0), SimulatedMeter()

    def evaluate(configs: list[Config]) -> list[Trial]:
        trials = landscape(configs)
        for t in trials:
            t.objective = objective
            if t.ok:
                t.energy_j = meter.watts(t.config) * (t.time_ms or 0.0) / 1e3
        return trials

    return landscape, evaluate


@pytest.mark.parametrize("objective", ["time", "energy", "edp"])
def test_the_search_minimizes_the_objective(objective: str) -> None:
    landscape, evaluate = energy_landscape(objective)
    search = make_search("pattern", landscape.space, evaluate, landscape.budget(120), seed=0)
    best = search.run()
    assert best is not None
    values = {
        "time": lambda t: t.time_ms,
        "energy": lambda t: t.energy_j,
        "edp": lambda t: t.energy_j * t.time_ms,
    }[objective]
    assert values(best) == min(values(t) for t in search.trials if t.ok)
    optimum = landscape.space.values(landscape.optimum)
    found = landscape.space.values(best.config)
    if objective == "time":
        assert found["num_warps"] == optimum["num_warps"]
    else:  # fewer warps or stages: slower than the optimum, but less energy per call
        fastest = evaluate([landscape.optimum])[0]
        assert (best.energy_j or 0.0) < (fastest.energy_j or 0.0)
        assert (best.time_ms or 0.0) > (fastest.time_ms or 0.0)
        assert found["num_warps"] * found["num_stages"] < 16


def tuned(tmp_path: Path, objective: str, **options):
    kernel = tc.kernel(double.fn, cache_dir=tmp_path, autotune_workers=0, autotune_quiet=True)
    kernel.configs = [tc.Config(block_sizes=[32], num_warps=w) for w in WARPS]
    x = torch.randn(100)
    return kernel, x, kernel.autotune((x,), objective=objective, **options)


def test_tuning_for_energy_picks_the_frugal_config_and_records_energy(tmp_path: Path) -> None:
    meter = SimulatedMeter(fixed_ms=1.0)  # energy independent of the CPU's noisy times
    kernel, x, config = tuned(tmp_path, "energy", meter=meter)
    assert config.num_warps == 2
    summary = kernel.bind((x,)).tuning
    assert summary["objective"] == "energy" and summary["best_energy_j"] == pytest.approx(0.19)
    assert summary["tuning_energy_j"] > 0  # the simulated idle power over the run
    energies = sorted(p["energy_j"] for p in summary["pareto"])
    assert energies[0] == pytest.approx(0.19)
    with TuningDB(db_path(kernel.settings)) as db:
        rows = {r["config"].num_warps: r["energy_j"] for r in db.trials()}
    assert rows == pytest.approx({8: 0.43, 2: 0.19, 4: 0.27})
    energy = Settings(cache_dir=tmp_path, autotune_objective="energy")
    assert cached_config(kernel.bind((x,)), (x,), energy) == config
    # the energy winner is kept apart: it never stands in for the fastest config
    assert cached_config(kernel.bind((x,)), (x,), kernel.settings) is None


def test_edp_weighs_energy_by_time(tmp_path: Path) -> None:
    kernel, x, config = tuned(tmp_path, "edp", meter=SimulatedMeter())
    front = kernel.bind((x,)).tuning["pareto"]
    assert front and all(p["energy_j"] is not None for p in front)
    with TuningDB(db_path(kernel.settings)) as db:
        rows = [r for r in db.trials() if r["status"] == "ok"]
    best = min(rows, key=lambda r: r["energy_j"] * r["time_ms"])
    assert config == best["config"]


def test_tuning_for_time_measures_no_energy_per_trial(tmp_path: Path) -> None:
    kernel, x, _ = tuned(tmp_path, "time", meter=SimulatedMeter())
    summary = kernel.bind((x,)).tuning
    assert summary["pareto"] == [] and summary["tuning_energy_j"] > 0
    with TuningDB(db_path(kernel.settings)) as db:
        assert all(r["energy_j"] is None for r in db.trials())


def test_bad_objectives_and_missing_meters_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(SettingsError, match="objective 'joules'.*time, energy, edp"):
        tuned(tmp_path, "joules")
    with pytest.raises(SettingsError, match="nvidia-ml-py"):  # a CPU has no energy counter
        tuned(tmp_path, "energy")
    monkeypatch.setenv("TILECRAFT_AUTOTUNE_OBJECTIVE", "watts")
    with pytest.raises(SettingsError, match="TILECRAFT_AUTOTUNE_OBJECTIVE='watts'"):
        Settings().validate()
    monkeypatch.setenv("TILECRAFT_AUTOTUNE_OBJECTIVE", "EDP")
    assert Settings().autotune_objective == "edp"


def test_meters_travel_to_worker_processes_as_json() -> None:
    meter = SimulatedMeter(warp_w=7.0, fixed_ms=2.0)
    again = meter_from_job(json.loads(json.dumps(meter.to_job())))
    assert again == meter and isinstance(again, EnergyMeter)
    assert again.per_call(lambda: None, lambda: None, Config(num_warps=2), 9.0) == pytest.approx(
        (100 + 7 * 2 + 10) * 2e-3
    )


def test_energy_use_without_a_meter_is_unknown() -> None:
    assert EnergyUse(None).joules() is None


VERSION_2_TRIALS = """
CREATE TABLE trials (
    id INTEGER PRIMARY KEY AUTOINCREMENT, created REAL NOT NULL, kernel TEXT NOT NULL,
    kernel_name TEXT NOT NULL, spec_key TEXT NOT NULL, hardware TEXT NOT NULL,
    versions TEXT NOT NULL, search TEXT NOT NULL, config TEXT NOT NULL, status TEXT NOT NULL,
    time_ms REAL, compile_s REAL NOT NULL, error TEXT NOT NULL
)"""


def old_database(path: Path, version: int) -> None:
    """A file as tilecraft wrote it at schema `version` (1 or 2), with one trial."""
    with sqlite3.connect(path) as conn:
        conn.execute(VERSION_2_TRIALS)
        conn.execute(
            "CREATE TABLE best (kernel TEXT, spec_key TEXT, hardware TEXT, versions TEXT,"
            " config TEXT, time_ms REAL, created REAL,"
            " PRIMARY KEY (kernel, spec_key, hardware, versions))"
        )
        if version == 2:
            conn.execute(dbschema._SPECS.strip().rstrip(";"))
        conn.execute(
            "INSERT INTO trials VALUES (NULL, 0, 'k', 'k', 's', 'cpu', 'v', 't', ?, 'ok', 1.5,"
            " 0.1, '')",
            (Config(num_warps=4).to_json(),),
        )
        conn.execute(f"PRAGMA application_id = {dbschema.APPLICATION_ID}")
        conn.execute(f"PRAGMA user_version = {version}")


@pytest.mark.parametrize("version", [1, 2])
def test_an_older_database_gains_the_energy_column(tmp_path: Path, version: int) -> None:
    path = tmp_path / "old.sqlite3"
    old_database(path, version)
    with TuningDB(path) as db:
        assert not db.in_memory
        assert [(r["time_ms"], r["energy_j"]) for r in db.trials()] == [(1.5, None)]
        meta = dict(kernel_name="k", spec_key="s", hardware="cpu", versions="v", search="t")
        db.record([trial(2.0, 0.25)], kernel="k", **meta)
        assert [r["energy_j"] for r in db.trials()] == [None, 0.25]
        db.save_description("k", "s", "cpu", {"version": 1})  # version 1 lacked `specs`
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == dbschema.SCHEMA_VERSION
    with TuningDB(path) as db:  # opening again upgrades nothing twice
        assert db.count() == 2


def test_rows_exported_before_energy_import_without_it(tmp_path: Path) -> None:
    with TuningDB(tmp_path / "a.sqlite3") as db:
        meta = dict(kernel_name="k", spec_key="s", hardware="cpu", versions="v", search="t")
        db.record([trial(2.0, None)], kernel="k", **meta)
        rows = db.trial_rows()
    old_rows = [{k: v for k, v in row.items() if k != "energy_j"} for row in rows]
    with TuningDB(tmp_path / "b.sqlite3") as other:
        assert other.add_trial_rows(old_rows) == 1
        assert other.add_trial_rows(rows) == 0  # the same trial: energy NULL in both
        other.save_best(TuneKey("k", "s", "cpu", "v"), Config(num_warps=2), 3.0)
        other.save_best(TuneKey("k", "s", "cpu", "v"), Config(num_warps=8), 4.0, replace=True)
        assert other.load_best(TuneKey("k", "s", "cpu", "v")) == Config(num_warps=8)


def test_the_summary_shows_the_energy_used_and_the_front(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tilecraft.autotune.progress import TuneProgress
    from tilecraft.autotune.trial import Budget

    settings = Settings(cache_dir=tmp_path, autotune_quiet=False)
    front = [trial(1.0, 0.5, objective="energy"), trial(2.0, 0.25, objective="energy")]
    with TuneProgress("double", "fast", Budget(4), settings, on_gpu=True) as shown:
        shown.update(front)
        shown.finish(front[1], 123.4, front)
    err = capsys.readouterr().err
    assert "using 123.4 J" in err and "250 mJ per call" in err
    assert "time/energy Pareto front" in err and "2.0000" in err and "500" in err
