"""Prediction instead of search (autotune/predict.py), replayed on the H200 landscapes:
the "predict" search, the confidence of the untuned path and its hook."""

from __future__ import annotations

import math
import statistics
from dataclasses import replace
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from landscapes import RECORDED, recorded_names
from landscapes import Landscape as Synthetic

from tilecraft.autotune import predict, tune
from tilecraft.autotune.db import TuningDB
from tilecraft.autotune.features import describe
from tilecraft.autotune.landscape import Landscape, import_landscapes
from tilecraft.autotune.model import CostModel
from tilecraft.autotune.replay import Replay
from tilecraft.autotune.search import make_search
from tilecraft.autotune.search.common import normalize
from tilecraft.autotune.seeds import heuristic_seeds, nearest_bests
from tilecraft.autotune.trees import TreeEnsemble
from tilecraft.autotune.trial import Budget
from tilecraft.exc import SettingsError
from tilecraft.runtime.config import Config
from tilecraft.runtime.settings import Settings

LANDSCAPES = RECORDED
TARGET = "sum_rows-4096x4096"  # held out; the model learns from the others
CONFIDENT = "conv2d_gemm-32x256x14x256x3x1"  # held out; the untuned path is confident here


@cache
def prepared(name: str) -> tuple[Landscape, Any, dict[str, Any]]:
    land = Landscape.load(LANDSCAPES / f"{name}-bfloat16.jsonl.gz")
    _, bound, _ = land.case.bind("meta")
    return land, land.space(bound), describe(bound, land.hardware)


def names() -> list[str]:
    return recorded_names()


@cache
def model_without(kernel: str = "", shape: str = "") -> CostModel:
    """Trained on every landscape but `shape` and those of `kernel`."""
    kept = [n for n in names() if n != shape and not n.startswith(kernel + "-")]
    model = CostModel.fit([(prepared(n)[2], prepared(n)[0].trials) for n in kept])
    assert model is not None
    return model


def seeds_of(name: str) -> list[Any]:
    """The best configs of the kernel's other shapes, then heuristic seeds."""
    land, space, _ = prepared(name)
    kernel = name.split("-")[0]
    others = [n for n in names() if n.startswith(kernel + "-") and n != name]
    bests = [
        min((t for t in prepared(n)[0].trials if t.ok), key=lambda t: t.time_ms) for n in others
    ]
    return [t.config for t in bests] + heuristic_seeds(space)


def run_predict(name: str, model: CostModel | None) -> Replay:
    land, space, desc = prepared(name)
    replay = Replay(land, space)
    search = make_search(
        "predict",
        space,
        replay,
        Budget(4, 10.0, clock=replay.clock),
        seeds=seeds_of(name),
        model=model,
        description=desc,
    )
    search.run()
    return replay


def test_predict_measures_the_top_three_and_beats_the_default() -> None:
    land, space, desc = prepared(TARGET)
    model = model_without(shape=TARGET)
    replay = run_predict(TARGET, model)
    picks = predict.top_picks(model, desc, space, seeds_of(TARGET))
    assert [t.config for t in replay.history] == picks and len(picks) == 3
    default_ms = Replay(land, space).lookup(space.default()).time_ms
    best = replay.best_ms()
    assert best is not None and default_ms is not None
    assert best < default_ms / 2  # the default is 2.8x off the landscape's best here
    assert best <= 1.05 * land.best_ms
    assert replay.now < 3.0  # simulated seconds: one batch of three compiles and timings


def test_predict_is_deterministic() -> None:
    model = model_without(shape=TARGET)
    first = [t.config for t in run_predict(TARGET, model).history]
    assert first == [t.config for t in run_predict(TARGET, model).history]


def test_predict_without_a_model_measures_the_default() -> None:
    synthetic = Synthetic(0)
    search = make_search("predict", synthetic.space, synthetic, synthetic.budget(4))
    best = search.run()
    assert [t.config for t in search.trials] == [synthetic.space.default()]
    assert best is not None and best.config == synthetic.space.default()


def test_confident_on_a_new_shape_of_a_known_kernel_only() -> None:
    land, space, desc = prepared(CONFIDENT)
    kernel = CONFIDENT.split("-")[0]
    same_kernel = [prepared(n)[2] for n in names() if n.startswith(kernel + "-") and n != CONFIDENT]
    model = model_without(shape=CONFIDENT)
    pick = predict.judge(model, desc, space, seeds_of(CONFIDENT), same_kernel)
    assert pick.confident and pick.distance <= predict.NEAR and pick.margin >= predict.MARGIN
    replay = Replay(land, space)
    assert replay.lookup(pick.config).time_ms < replay.lookup(space.default()).time_ms / 1.3  # 1.36
    unknown = predict.judge(model_without(kernel=kernel), desc, space, heuristic_seeds(space), [])
    assert not unknown.confident and unknown.distance == float("inf")
    matmul = [prepared("matmul-1024x1024x1024")[2]]
    far = predict.judge(model, desc, space, seeds_of(CONFIDENT), matmul)
    assert far.distance > predict.NEAR and not far.confident


def test_top_picks_differ_in_several_knobs() -> None:
    _, space, desc = prepared(TARGET)
    picks = predict.top_picks(model_without(shape=TARGET), desc, space, seeds_of(TARGET))
    assert len(picks) == predict.TOP
    for i, a in enumerate(picks):
        for b in picks[:i]:
            assert predict.knob_differences(space, a, b) >= predict.DIFFER


def test_diverse_fills_up_in_rank_order() -> None:
    space = Synthetic(0).space
    base = space.default()
    near = space.neighbors(base)[:3]  # each one knob away from the default
    assert all(predict.knob_differences(space, base, c) == 1 for c in near)
    assert predict.diverse(space, [base, *near], 3) == [base, *near[:2]]
    far = space.config({k.name: k.choices[-1] for k in space.knobs})
    assert predict.knob_differences(space, base, far) >= predict.DIFFER
    assert predict.diverse(space, [base, *near, far], 2) == [base, far]
    assert predict.diverse(space, [base], 3) == [base]


def test_untuned_config_from_the_database(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The untuned path's hook: the confident pick of a model trained on the database;
    nothing on a CPU or without a database."""
    settings = Settings(cache_dir=tmp_path)
    land, _, _ = prepared(CONFIDENT)
    _, bound, args = land.case.bind("meta")
    assert predict.untuned_config(bound, args, settings) is None  # a CPU, no database
    folder = tmp_path / "lands"
    folder.mkdir()
    for n in names():  # the database knows every landscape but the target's
        if n != CONFIDENT:
            name = f"{n}-bfloat16.jsonl.gz"
            (folder / name).write_bytes((LANDSCAPES / name).read_bytes())
    with TuningDB(tune.db_path(settings)) as db:
        import_landscapes(db, folder)
    key = tune.tune_key(bound, args)
    monkeypatch.setattr(
        tune, "tune_key", lambda b, a: replace(key, hardware=land.hardware, versions=land.versions)
    )
    config = predict.untuned_config(bound, args, settings)
    assert config is not None and config != bound.default_config
    replay = Replay(land, land.space(bound))
    assert replay.lookup(config).time_ms < replay.lookup(land.space(bound).default()).time_ms


def test_predict_effort_is_a_setting() -> None:
    assert "predict" in tune.EFFORTS
    tune._check_options(None, "predict", None, "time")
    with pytest.raises(SettingsError, match="predict"):
        tune._check_options(None, "guess", None, "time")
    assert Settings(autotune_effort="predict").autotune_effort == "predict"


class ReplayBench:
    """A Benchmarker answering from a landscape (as on the H200), recording what it runs."""

    runs: list[list[Any]] = []

    def __init__(self, bound: Any, args: tuple, **options: Any) -> None:
        land, space, _ = prepared(TARGET)
        self.replay, self.on_gpu = Replay(land, space), True
        ReplayBench.runs.append([])

    def __enter__(self) -> ReplayBench:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def __call__(self, configs: list[Any]) -> list[Any]:
        ReplayBench.runs[-1] += configs
        return self.replay(configs)

    def retime(self, configs: list[Any], rounds: int = 2) -> dict[Any, float]:
        return {}

    def samples(self, configs: list[Any], rounds: int = 2) -> dict[Any, list[float]]:
        return {}


@pytest.mark.parametrize("effort", ["quick", "predict"])
def test_same_seed_and_database_same_configs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, effort: str
) -> None:
    """Tuning is reproducible: `autotune` with a replayed benchmarker, each run on its own
    copy of one database, tries the same configs in the same order for the same seed."""
    land, _, _ = prepared(TARGET)
    folder = tmp_path / "lands"
    folder.mkdir()
    for n in names():
        if n != TARGET:
            name = f"{n}-bfloat16.jsonl.gz"
            (folder / name).write_bytes((LANDSCAPES / name).read_bytes())
    with TuningDB(tmp_path / "original.sqlite3") as db:
        import_landscapes(db, folder)
    monkeypatch.setattr(tune, "Benchmarker", ReplayBench)
    monkeypatch.setattr(tune, "hardware", lambda args: land.hardware)
    monkeypatch.setattr(tune, "versions", lambda: land.versions)
    _, bound, args = land.case.bind("meta")

    def tried(seed: int, run: int) -> list[Any]:
        settings = Settings(cache_dir=tmp_path / f"run{run}", autotune_quiet=True)
        settings.cache_dir.mkdir()
        tune.db_path(settings).write_bytes((tmp_path / "original.sqlite3").read_bytes())
        tune.autotune(bound, args, settings, effort=effort, budget_s=600, seed=seed)
        return ReplayBench.runs[-1]

    first = tried(1, 0)
    assert len(first) > 1 and first == tried(1, 1)
    if effort == "quick":  # its pool of candidates is drawn at random
        assert tried(2, 2) != first


def test_seed_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TILECRAFT_AUTOTUNE_SEED", "7")
    assert Settings().autotune_seed == 7
    monkeypatch.setenv("TILECRAFT_AUTOTUNE_SEED", "-1")
    with pytest.raises(SettingsError, match="TILECRAFT_AUTOTUNE_SEED"):
        Settings().validate()


def test_blended_trees_predict_the_weighted_sum(tmp_path: Path) -> None:
    """`TreeEnsemble.blend` (the cost model's two regressors as one set of arrays)
    predicts what the weighted regressors predict, also once saved and loaded."""
    np = pytest.importorskip("numpy")
    ensemble = pytest.importorskip("sklearn.ensemble")
    rng = np.random.default_rng(0)
    x = rng.normal(size=(300, 4))
    x[::17, 2] = np.nan  # missing values take each node's learned side
    fitted = [
        ensemble.HistGradientBoostingRegressor(max_iter=20, random_state=0).fit(x, y)
        for y in (x[:, 0] * 2 + np.nan_to_num(x[:, 2]), np.abs(x[:, 1]))
    ]
    parts = [(TreeEnsemble.from_regressor(r), w) for r, w in zip(fitted, (0.5, 3.0), strict=True)]
    blend = TreeEnsemble.blend(parts)
    test = rng.normal(size=(50, 4))
    test[::5, 2] = np.nan
    expected = 0.5 * fitted[0].predict(test) + 3.0 * fitted[1].predict(test)
    np.testing.assert_allclose(blend.predict(test), expected, rtol=1e-9, atol=1e-9)
    assert len(blend.roots) == sum(len(p.roots) for p, _ in parts)
    blend.save(tmp_path / "m.npz", "stamp")
    again = TreeEnsemble.load(tmp_path / "m.npz", "stamp")
    assert again is not None
    np.testing.assert_allclose(again.predict(test), expected, rtol=1e-9, atol=1e-9)
    other = ensemble.HistGradientBoostingRegressor(max_iter=2).fit(x[:, :3], x[:, 0])
    with pytest.raises(ValueError, match="different features"):
        TreeEnsemble.blend([parts[0], (TreeEnsemble.from_regressor(other), 1.0)])
    with pytest.raises(ValueError, match="nothing to blend"):
        TreeEnsemble.blend([])


def test_ranker_orders_a_group_and_its_trees_become_arrays(tmp_path: Path) -> None:
    """The LambdaMART-like ranker learns which rows of each group are fastest (time
    relative to the group best, as log2), its scale reads as log2 time, and its trees as
    one `TreeEnsemble` predict what scikit-learn's do, also once saved and loaded."""
    np = pytest.importorskip("numpy")
    pytest.importorskip("sklearn")
    from tilecraft.autotune.ranker import fit_ranker

    rng = np.random.default_rng(0)
    x = rng.uniform(0, 4, size=(240, 3))
    bounds = [(0, 80), (80, 160), (160, 240)]
    # the fastest rows have x0 near 1 (a V shape), x2 is noise, groups differ in scale
    raw = np.abs(x[:, 0] - 1.0) * np.repeat([1.0, 2.0, 0.5], 80) + 0.05 * x[:, 2]
    y = np.concatenate([raw[a:b] - raw[a:b].min() for a, b in bounds])
    trees, weight = fit_ranker(x, y, bounds)
    assert weight < 0  # a higher score means faster, a lower log2 time
    test = np.column_stack([np.linspace(0, 4, 41), np.full(41, 2.0), np.full(41, 2.0)])
    guess = weight * sum(t.predict(test) for t in trees)
    assert abs(test[int(np.argmin(guess)), 0] - 1.0) <= 0.3
    assert guess[-1] - guess[int(np.argmin(guess))] > 1.0  # 3 units of x0 off: slower
    ensemble = TreeEnsemble.from_decision_trees(trees, weight)
    np.testing.assert_allclose(ensemble.predict(test), guess, rtol=1e-9, atol=1e-9)
    ensemble.save(tmp_path / "r.npz", "stamp")
    again = TreeEnsemble.load(tmp_path / "r.npz", "stamp")
    assert again is not None
    np.testing.assert_allclose(again.predict(test), guess, rtol=1e-9, atol=1e-9)
    assert fit_ranker(x, y, bounds)[1] == weight  # deterministic
    with pytest.raises(ValueError, match="no trees"):
        TreeEnsemble.from_decision_trees([])


# Each example kernel's shape held out in turn (benchmarks/predict_eval.py's protocol). What
# the model gives reliably is a top three holding a near-best config; which of three
# near-tied predictions comes first moves whenever unrelated landscapes change: when
# attention's forward landscapes were recorded again, add's and rms_norm's held-out top picks
# went from 1.03x and 1.02x their best to 1.05x and 1.06x, the same three configs reordered.
# Thresholds below the medians measured then (best of 3 1.031, top-1 1.056-1.076, 17-18 of 27
# shapes within 5%), above what the untuned default gets (median 1.14x).
NEAR_BEST = 14  # shapes whose best of the top three is within 5% of the best, of 27
MEDIAN_TOP3, MEDIAN_TOP1 = 1.05, 1.12


def nearest_seeds(name: str) -> list[Any]:
    """`seeds_of` in predict_eval's order: the kernel's other shapes nearest first."""
    land, space, _ = prepared(name)
    kernel = name.split("-")[0]
    best = {}
    for other in names():
        if other.startswith(kernel + "-") and other != name:
            trials = [t for t in prepared(other)[0].trials if t.ok and t.time_ms]
            best[spec_key(other)] = (0.0, min(trials, key=lambda t: t.time_ms).config)
    found = [normalize(space, c) for c in nearest_bests(best, spec_key(name))]
    return [c for c in found if c is not None] + heuristic_seeds(space)


@cache
def spec_key(name: str) -> str:
    return prepared(name)[0].case.bind("meta")[1].spec_key


def held_out_times(name: str) -> list[float]:
    """The model's top picks for `name`, trained without it, as times over the best."""
    land, space, desc = prepared(name)
    model = model_without(shape=name)
    picks = predict.top_picks(model, desc, space, nearest_seeds(name))
    assert picks == predict.top_picks(model, desc, space, nearest_seeds(name))  # replayable
    replay = Replay(land, space)
    trials = [replay.lookup(c) for c in picks]
    return [t.time_ms / land.best_ms if t.ok and t.time_ms else math.inf for t in trials]


def test_picks_on_held_out_shapes() -> None:
    """Over the example kernels' shapes, each held out: the best of the top three (what the
    "predict" effort keeps after timing them) within 5% of the best on most, and the
    medians of the best of three and of the top pick near the best."""
    examples = [n for n in names() if prepared(n)[0].case.example != "tilecraft.nn.cases"]
    times = [held_out_times(n) for n in examples]
    assert len(examples) == 27
    assert sum(min(t) <= 1.05 for t in times) >= NEAR_BEST
    assert statistics.median(min(t) for t in times) <= MEDIAN_TOP3
    assert statistics.median(t[0] for t in times) <= MEDIAN_TOP1


def test_weighted_lookup_follows_the_tile() -> None:
    """An unrecorded pick (rows of 1 x 1024, 8 warps) takes the time of its nearest
    recorded config: with equal weights that is a 1 x 1 tile that shares its loop order
    and 276x slower than the best; with the tile knobs weighted, a 1 x 512 tile."""
    land, space, _ = prepared("bias_gelu-2048x1024")
    pick = Config(
        block_sizes=[1, 1024],
        loop_orders=[[1, 0]],
        l2_groupings=[8],
        pid_type="flat",
        indexing=["block_ptr", "pointer", "pointer"],
        load_eviction_policies=[None, None],
        num_warps=8,
        num_stages=4,
    )
    plain, weighted = Replay(land, space), Replay(land, space, tile_weight=10.0)
    assert plain.lookup(pick).time_ms > 100 * land.best_ms
    assert weighted.lookup(pick).time_ms < 3 * land.best_ms
    assert plain.imputed == weighted.imputed == 1
    recorded = land.trials[0]
    assert weighted.lookup(recorded.config).time_ms == recorded.time_ms
    assert weighted.imputed == 1  # a recorded config is looked up, not imputed


def test_cost_model_of_kind_rank() -> None:
    """`CostModel.fit(kind="rank")`: the ranker as arrays, predicting per config; an
    unknown kind is refused."""
    groups = [
        (prepared(n)[2], prepared(n)[0].trials) for n in ("sum_rows-4096x4096", "add-4096x4096")
    ]
    model = CostModel.fit(groups, kind="rank")
    assert model is not None and model.groups == 2
    assert isinstance(model.regressor, TreeEnsemble)
    land, space, desc = prepared("sum_rows-1024x16384")
    configs = [space.default(), *heuristic_seeds(space)]
    scores = model.predict(desc, configs)
    assert len(scores) == len(configs) and len(set(scores)) > 1
    assert model.rank(desc, configs)[0] == configs[scores.index(min(scores))]
    with pytest.raises(ValueError, match="kind"):
        CostModel.fit(groups, kind="guess")


def test_a_model_that_cannot_be_fitted_leaves_tuning_without_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stored trial the features cannot take (a fault, as an empty dim's division was)
    warns and tunes without the model instead of failing the user's call."""
    settings = Settings(cache_dir=str(tmp_path))
    land, _, _ = prepared(CONFIDENT)
    _, bound, args = land.case.bind("meta")

    def broken(*_: Any) -> None:
        raise ZeroDivisionError("division by zero")

    monkeypatch.setattr(tune, "from_database", broken)
    with TuningDB(tune.db_path(settings)) as db, pytest.warns(UserWarning, match="no cost model"):
        model, description = tune._learned(db, tune.tune_key(bound, args), bound, settings)
    assert model is None and description["blocks"]
