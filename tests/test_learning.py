"""Learning from recorded trials: features, the cost model, replay and the fast search.

Uses the landscapes recorded on the H200 (benchmarks/landscapes/h200), replayed on CPU.
"""

from __future__ import annotations

import dataclasses
import math
import sqlite3
import statistics
import warnings
from functools import cache
from pathlib import Path

import numpy as np
import pytest
import torch
from landscapes import RECORDED, recorded_names

import tilecraft as tc
from tilecraft.autotune import model as model_module
from tilecraft.autotune.db import TuningDB, TuningDBWarning
from tilecraft.autotune.features import describe, features, kernel_numbers
from tilecraft.autotune.landscape import Landscape, import_landscapes
from tilecraft.autotune.model import CostModel, charged_seconds, database_groups, from_database
from tilecraft.autotune.replay import Replay
from tilecraft.autotune.search import LearnedSearch, make_search
from tilecraft.autotune.seeds import heuristic_seeds, nearest_bests, spec_distance
from tilecraft.autotune.trial import Budget, Trial

LANDSCAPES = RECORDED


@cache
def prepared(name: str) -> tuple[Landscape, object, dict]:
    """A recorded landscape, its space and the kernel's description."""
    land = Landscape.load(LANDSCAPES / f"{name}-bfloat16.jsonl.gz")
    _, bound, _ = land.case.bind("meta")
    return land, land.space(bound), describe(bound, land.hardware)


@cache
def model_without(*names: str) -> CostModel:
    """A model trained on every landscape but `names`."""
    groups = []
    for name in recorded_names():
        if name not in names:
            land, _, desc = prepared(name)
            groups.append((desc, land.trials))
    model = CostModel.fit(groups)
    assert model is not None
    return model


def best_config(land: Landscape) -> tc.Config:
    return min((t for t in land.trials if t.ok), key=lambda t: t.time_ms or 0.0).config


def test_features_have_one_length_and_follow_the_config() -> None:
    _, _, soft = prepared("softmax-4096x4096")
    _, _, mm = prepared("matmul-2048x2048x2048")
    assert soft["counts"]["reduce"] == 2 and soft["counts"]["dot"] == 0
    assert mm["counts"]["dot"] == 1 and 2 * 2048**3 <= mm["flops"] < 2.01 * 2048**3
    a = features(mm, tc.Config(block_sizes=[64, 64, 32], num_warps=4))
    b = features(mm, tc.Config(block_sizes=[128, 128, 32], num_warps=8))
    assert len(a) == len(b) == len(features(soft, tc.Config(block_sizes=[1])))
    assert a != b


@pytest.mark.parametrize("m,k,n", [(0, 5, 3), (4, 0, 3), (0, 0, 0)])
def test_features_and_the_model_take_empty_dims(m: int, k: int, n: int) -> None:
    """A GPU tuning a product with an empty dim recorded trials whose features divided by
    the empty extent, and every later cost-model fit (any kernel's first call) failed."""
    _, _, mm = prepared("matmul-2048x2048x2048")
    desc = {**mm, "blocks": [[m, False, True], [n, False, True], [k, True, True]]}
    config = tc.Config(block_sizes=[64, 64, 32], num_warps=4)
    row = features(desc, config)
    assert len(row) == len(features(mm, config)) and all(math.isfinite(v) for v in row)
    land, _, _ = prepared("matmul-2048x2048x2048")
    assert CostModel.fit([(desc, land.trials[:8]), (mm, land.trials)]) is not None


def test_landscapes_cover_eight_kernels_at_three_shapes_each() -> None:
    """The examples' kernels: eight or more, three landscapes each or more; tilecraft.nn's
    kernels (recorded per mask or layer): two each or more."""
    kernels: dict[tuple[bool, str], int] = {}
    for path in LANDSCAPES.glob("*.jsonl.gz"):
        case = Landscape.load(path).case
        key = (case.example == "tilecraft.nn.cases", case.function)
        kernels[key] = kernels.get(key, 0) + 1
    examples = [n for (nn, _), n in kernels.items() if not nn]
    assert len(examples) >= 8 and min(examples) >= 3
    assert min(n for (nn, _), n in kernels.items() if nn) >= 2
    assert (True, "attention_backward") in kernels


def test_the_model_ranks_an_unseen_shape() -> None:
    land, space, desc = prepared("softmax-4096x4096")
    model = model_without("softmax-4096x4096")
    replay = Replay(land, space)
    top = model.rank(desc, [t.config for t in land.trials])[:5]
    best = min(replay.lookup(c).time_ms or float("inf") for c in top)
    assert best <= 1.05 * land.best_ms
    worst = model.rank(desc, [t.config for t in land.trials])[-5:]
    assert min(replay.lookup(c).time_ms or float("inf") for c in worst) > best


def run_search(name: str, target: str, model: CostModel | None, seed: int = 0) -> Replay:
    land, space, desc = prepared(target)
    replay = Replay(land, space)
    budget = Budget(20, 60.0, clock=replay.clock)
    seeds = heuristic_seeds(space)
    search = make_search(
        name, space, replay, budget, seed=seed, seeds=seeds, model=model, description=desc
    )
    search.run()
    return replay


def test_replay_is_deterministic_and_keeps_simulated_time() -> None:
    for name in ("fast", "classifier"):
        model = model_without("rms_norm-1024x1024")
        one, two = (run_search(name, "rms_norm-1024x1024", model) for _ in range(2))
        assert [t.config for t in one.history] == [t.config for t in two.history]
        assert one.now == two.now and 0 < one.now <= 60.0 + 30.0


def test_replay_answers_unrecorded_configs_from_the_nearest() -> None:
    land, space, _ = prepared("add-4096x4096")
    replay = Replay(land, space)
    recorded = land.trials[0]
    assert replay.lookup(recorded.config).time_ms == recorded.time_ms and replay.imputed == 0
    values = space.values(recorded.config)
    odd = space.config({**values, "num_warps": 32, "num_stages": 5})
    if odd not in replay.table:
        assert replay.lookup(odd).config == odd and replay.imputed == 1


@pytest.mark.parametrize(
    "target", ["softmax-4096x4096", "layer_norm-1024x1024", "matmul-2048x2048x2048"]
)
def test_fast_search_finds_the_best_region_of_held_out_shapes(target: str) -> None:
    land, _, _ = prepared(target)
    replay = run_search("fast", target, model_without(target))
    assert len(replay.history) <= 20
    assert (replay.best_ms() or float("inf")) <= 1.05 * land.best_ms


def test_fast_search_goes_on_after_its_climb_stalls() -> None:
    """The climb stalls after a few rounds; the search then explores (long moves, the
    model's picks of fresh configs) until its budget, here 40 configs, is spent, and on
    this landscape finds a better config than the climb alone."""
    target = "cross_entropy-4096x8192"
    land, space, desc = prepared(target)
    results = []
    for explore in (False, True):
        replay = Replay(land, space)
        search = make_search(
            "fast", space, replay, Budget(40, 60.0, clock=replay.clock),
            seeds=heuristic_seeds(space), model=model_without(target), description=desc,
        )  # fmt: skip
        if not explore:
            search.wide_moves = list  # type: ignore[method-assign]  # no long moves
            search.look_further = lambda to_end=False: None  # type: ignore[method-assign]
        search.run()
        results.append((len(replay.history), replay.best_ms() or float("inf")))
    (climbed, climb_ms), (explored, explore_ms) = results
    assert climbed < 30 and explored >= 39  # one kept for a combination no change called for
    assert explore_ms < 0.98 * climb_ms  # 3-5% better here (the model decides how much)


def test_fast_search_keeps_configs_for_its_finishing_stage() -> None:
    """Exploring stops where the config budget would leave the finishing stage short: its
    register caps (never in the model's picks) are measured within the 25 configs."""
    target = "softmax-4096x4096"
    land, space, desc = prepared(target)
    replay = Replay(land, space)
    search = make_search(
        "fast", space, replay, Budget(25, 1000.0, clock=replay.clock),
        seeds=heuristic_seeds(space), model=model_without(target), description=desc,
    )  # fmt: skip
    search.run()
    assert 24 <= len(search.trials) <= 25  # one may stay for a combination never needed
    assert {t.config.get("maxnreg") for t in search.trials} >= {None, 64, 128}


def test_fast_search_tries_the_knobs_the_model_cannot_see() -> None:
    """Eviction hints leave the model's features unchanged, so its ranking never picks
    them: the finishing stage measures each other hint on the best config and keeps the
    one that helps (here a planted 10% gain on "first")."""
    target = "softmax-4096x4096"
    land, space, desc = prepared(target)
    replay = Replay(land, space)

    def evaluate(configs: list[tc.Config]) -> list[Trial]:
        trials = replay(configs)
        for t in trials:
            if t.ok and t.config.get("load_eviction_policies") == ["first"]:
                t.time_ms = (t.time_ms or 0.0) * 0.9
        return trials

    search = make_search(
        "fast",
        space,
        evaluate,
        Budget(40, 60.0, clock=replay.clock),
        model=model_without(target),
        description=desc,
    )
    search.budget.start()
    blind = {"load_eviction_policies[0]", "maxnreg", "num_sm_multiplier"}
    assert set(search.blind_knobs) == blind
    picks = search.best_rated(search.draw(50), 10)  # random draws: random hints and caps
    assert picks and all(c.get("maxnreg") is None for c in picks)
    assert all(c.get("load_eviction_policies") == [None] for c in picks)
    leader = space.snap(space.values(best_config(land)))  # as the space spells it
    search.measure([leader])
    search.finish()
    base = space.values(leader)
    changed = [
        {k for k, v in space.values(t.config).items() if v != base[k]} for t in search.trials[1:]
    ]
    assert all(len(c) == 1 for c in changed)  # one knob at a time, and only blind ones
    assert {k for c in changed for k in c} <= {"load_eviction_policies[0]", "maxnreg"}
    hints = [t.config.get("load_eviction_policies") for t in search.trials[1:]]
    assert ["first"] in hints and ["last"] in hints
    assert search.best().config.get("load_eviction_policies") == ["first"]


def test_the_model_predicts_which_configs_compile_slowly() -> None:
    """Trained without this shape, the compile-time regressor rates the configs whose
    compile timed out (huge tiles on one or two warps) 10x slower than quick ones."""
    land, _, desc = prepared("softmax-4096x4096")
    model = model_without("softmax-4096x4096")
    timeouts = [t.config for t in land.trials if t.status == "timeout"]
    quick = [t.config for t in land.trials if t.ok and t.compile_s < 0.5]
    assert len(timeouts) >= 5
    slow_s, quick_s = (model.compile_seconds(desc, c) for c in (timeouts, quick))
    assert statistics.median(slow_s) > 10 * statistics.median(quick_s)


def test_a_trial_is_charged_its_compile_and_timing() -> None:
    config = tc.Config(num_warps=4)
    assert charged_seconds(Trial(config, "ok", 1.0, compile_s=1.5, bench_s=0.5)) == 2.0
    assert charged_seconds(Trial(config, "timeout", compile_s=0.0)) == 10.0  # at least
    assert charged_seconds(Trial(config, "compile_error", compile_s=0.0)) is None  # unknown
    assert charged_seconds(Trial(config, "runtime_error", compile_s=3.0)) == 3.0


def _many_warps(config: tc.Config) -> bool:
    return (config.get("num_warps") or 4) >= 8


class _SlowWithManyWarps(Replay):
    """A landscape where every config of 8 warps or more takes 4 s to compile."""

    def lookup(self, config: tc.Config) -> Trial:
        trial = super().lookup(config)
        return dataclasses.replace(trial, compile_s=4.0 if _many_warps(config) else trial.compile_s)


@dataclasses.dataclass
class _PlantedSeconds:
    """A compile-time regressor that knows the rule above: log(4 s) for configs of 8 warps
    or more (log2 warps >= 3 in `column` of the features), else log(0.2 s); `all_slow`
    rates every config 4 s."""

    column: int
    all_slow: bool = False

    def predict(self, x: np.ndarray) -> np.ndarray:
        slow = np.asarray(x)[:, self.column] >= 3 if not self.all_slow else np.ones(len(x), bool)
        return np.where(slow, math.log(4.0), math.log(0.2))


def test_fast_search_passes_over_configs_predicted_to_compile_slowly() -> None:
    """Under a short budget, picks predicted to compile longer than a share of the time left
    are passed over: on a landscape where configs of 8+ warps compile for 4 s, the search
    measures 64 configs in 8.8 s instead of 17, 2 slow ones (seeds) instead of 13, and
    finds the best; when every config looks slow, none is passed over."""
    target = "softmax-4096x4096"
    land, space, desc = prepared(target)
    model = dataclasses.replace(
        model_without(target), seconds=_PlantedSeconds(len(kernel_numbers(desc)))
    )
    runs = []
    for share in (math.inf, LearnedSearch.slow_share):
        replay = _SlowWithManyWarps(land, space)
        search = make_search(
            "fast", space, replay, Budget(64, 8.8, clock=replay.clock),
            seeds=heuristic_seeds(space), model=model, description=desc,
        )  # fmt: skip
        search.slow_share = share  # type: ignore[attr-defined]
        search.run()
        slow = sum(_many_warps(t.config) for t in replay.history)
        runs.append((len(replay.history), slow, replay.best_ms() or math.inf))
    (blind_n, blind_slow, blind_ms), (aware_n, aware_slow, aware_ms) = runs
    assert aware_n >= 2 * blind_n and aware_slow <= blind_slow / 4 and aware_ms <= blind_ms
    everything_slow = dataclasses.replace(model, seconds=_PlantedSeconds(0, all_slow=True))
    search = make_search(
        "fast", space, replay, Budget(64, 8.8, clock=replay.clock),
        model=everything_slow, description=desc,
    )  # fmt: skip
    search.budget.start()
    configs = search.draw(20)
    limit = search.compile_limit()  # type: ignore[attr-defined]
    assert limit is not None
    assert everything_slow.rank(desc, configs, max_seconds=limit) == everything_slow.rank(
        desc, configs
    )


def test_nearest_shapes_come_first() -> None:
    assert spec_distance("bfloat16[64, 64]", "float32[64, 64]") == float("inf")
    best = {
        "bfloat16[1024, 1024]": (1.0, tc.Config(num_warps=1)),
        "bfloat16[8192, 8192]": (1.0, tc.Config(num_warps=2)),
        "bfloat16[4096, 4096]": (1.0, tc.Config(num_warps=4)),
    }
    order = nearest_bests(best, "bfloat16[4096, 2048]")
    assert [c.num_warps for c in order] == [4, 1, 2]


# -- tuning: the database feeds the model ------------------------------------------------
@tc.kernel
def scale(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in tc.tile(x.size(0)):
        out[tile] = x[tile] * 2
    return out


def cpu_landscape(tmp_path: Path) -> Path:
    """A recorded landscape relabelled as measured on this CPU, so that CPU tuning finds
    something relevant in its database."""
    land, _, _ = prepared("add-1024x1024")
    folder = tmp_path / "landscapes"
    dataclasses.replace(land, hardware="cpu").save(folder / "add.jsonl.gz")
    return folder


def tune(tmp_path: Path, **options: object) -> dict:
    kernel = tc.kernel(scale.fn, cache_dir=tmp_path, autotune_workers=0, autotune_quiet=True)
    kernel.autotune((torch.randn(300),), max_configs=4, **options)
    return kernel.bind((torch.randn(300),)).tuning


def test_an_empty_database_falls_back_to_the_classifier_climb(tmp_path: Path) -> None:
    assert tune(tmp_path)["search"] == "quick"


def test_a_database_with_trials_makes_tuning_fast(tmp_path: Path) -> None:
    with TuningDB(tmp_path / "tuning.sqlite3") as db:
        assert import_landscapes(db, cpu_landscape(tmp_path)) == 200
        assert len(database_groups(db, "cpu")) == 1
    assert tune(tmp_path)["search"] == "fast"
    with TuningDB(tmp_path / "tuning.sqlite3") as db:  # the new kernel was described too
        assert len(db.descriptions("cpu")) == 2


def test_a_damaged_database_or_model_cache_never_stops_tuning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "tuning.sqlite3").write_bytes(b"not a database at all" * 100)
    with pytest.warns(TuningDBWarning):
        assert tune(tmp_path)["configs"] >= 1
    with TuningDB(tmp_path / "tuning.sqlite3") as db:
        import_landscapes(db, cpu_landscape(tmp_path))
        assert from_database(db, "cpu", tmp_path) is not None
        for cached in (tmp_path / "models").glob("*.npz"):
            cached.write_bytes(b"garbage")
        monkeypatch.setattr(model_module, "_LOADED", {})  # as in a new process
        with pytest.warns(UserWarning, match="ignoring cached cost model"):
            assert from_database(db, "cpu", tmp_path) is not None  # refitted


def test_foreign_descriptions_and_versions_are_ignored(tmp_path: Path) -> None:
    land, _, desc = prepared("add-1024x1024")
    old = {**desc, "version": -1}
    assert CostModel.fit([(old, land.trials)]) is None
    path = tmp_path / "t.sqlite3"
    with TuningDB(path) as db:
        db.save_description("k", "s", "cpu", desc)
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE specs SET description = 'not json'")
    with TuningDB(path) as db, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert db.descriptions("cpu") == {}
    assert any("unreadable" in str(w.message) for w in caught)


def test_a_version_1_database_is_upgraded_in_place(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite3"
    with TuningDB(path) as db:
        db.record(
            [Trial(tc.Config(num_warps=4), "ok", 1.0)],
            kernel="k",
            kernel_name="k",
            spec_key="s",
            hardware="cpu",
            versions="v",
            search="t",
        )
    with sqlite3.connect(path) as conn:
        conn.execute("DROP TABLE specs")
        conn.execute("PRAGMA user_version = 1")
    with TuningDB(path) as db:
        assert db.count() == 1 and not db.in_memory
        db.save_description("k", "s", "cpu", {"version": 1})
        assert db.descriptions("cpu") == {("k", "s"): {"version": 1}}


def test_a_kernel_never_tuned_measures_its_heuristic_seeds_first() -> None:
    """Without a best config of the kernel in the database (`tuned_seeds=0`) the model only
    knows other kernels: a kernel with device loops (here a matrix product) measures its
    first heuristic seeds in its first batch, whatever the model rates them; with tuned
    seeds, only the two nearest are sure to be measured. A kernel without device loops
    keeps to the two."""
    firsts = []
    for target, tuned in (("matmul-1024x1024x1024", 0), ("matmul-1024x1024x1024", 3)):
        land, space, desc = prepared(target)
        seeds = heuristic_seeds(space)
        replay = Replay(land, space)
        search = make_search(
            "fast", space, replay, Budget(12, 60.0, clock=replay.clock), seeds=seeds,
            model=model_without(target), description=desc, tuned_seeds=tuned,
        )  # fmt: skip
        search.budget.start()
        firsts.append(search.first_batch())
    untuned, tuned_first = firsts
    heuristic = seeds[: LearnedSearch.untuned_first]
    assert all(s in untuned for s in heuristic)
    assert all(s in tuned_first for s in seeds[:2])
    assert not all(s in tuned_first for s in heuristic)  # the model passed over some
    land, space, desc = prepared("sum_rows-1024x16384")
    rows = make_search(
        "fast", space, Replay(land, space), Budget(12), seeds=heuristic_seeds(space),
        model=model_without("sum_rows-1024x16384"), description=desc, tuned_seeds=0,
    )  # fmt: skip
    assert rows.nearest == LearnedSearch.nearest  # type: ignore[attr-defined]


@tc.kernel
def chunked_kl(log_q: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    rows, vocab = log_q.shape
    loss = torch.zeros([rows], dtype=torch.float32, device=log_q.device)
    block_v = tc.register_block_size(vocab)
    block_r = tc.register_block_size(rows)  # Helion's kl_div registers its rows' tile too
    for tile_r in tc.tile(rows, block_size=block_r):
        acc = tc.zeros([tile_r, block_v], dtype=torch.float32)
        for tile_v in tc.tile(vocab, block_size=block_v):
            acc += p[tile_r, tile_v] * (torch.log(p[tile_r, tile_v]) - log_q[tile_r, tile_v])
        loss[tile_r] = acc.sum(dim=-1)
    return loss


def test_looped_seeds_include_short_chunks_unrolled() -> None:
    """A kernel streaming long rows through a device loop is seeded with long chunks and
    with short chunks whose loop is unrolled (Helion's pick for KL divergence on the H200),
    and the untuned first batch measures that seed. A registered block size that tiles the
    grid (here the rows) is a grid block, not a device loop's chunk."""
    from tilecraft.autotune.space import ConfigSpace

    x = torch.rand(64, 8192)
    bound = chunked_kl.bind((x.log(), x))
    assert [b.inner for b in bound.spec.blocks] == [True, False]
    seeds = heuristic_seeds(ConfigSpace(bound.spec, bound.default_config))
    unrolled = [s for s in seeds if s.get("range_unroll_factors") == [4]]
    assert [(s.block_sizes, s.num_warps) for s in unrolled] == [([512, 4], 16)]
    assert seeds.index(unrolled[0]) < LearnedSearch.untuned_first
    assert [s.block_sizes[0] for s in seeds[:2]] == [4096, 8192]  # long chunks stay first
