"""Reliability suite, part 1: the cache directory and the tuning database under real
faults (planted files, damaged pages, foreign, read-only, full or vanished directories).
One test per fault, named after it; see also test_reliability_llm.py and
test_reliability_run.py."""

from __future__ import annotations

import multiprocessing
import os
import pickle
import shutil
import sqlite3
import stat
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
from reliability_faults import (
    fill_disk,
    flip_page,
    foreign_dir,
    fresh_kernel,
    mounted_tmpfs,
    read_only_dir,
)

import tilecraft as tc
from tilecraft.autotune import model as model_module
from tilecraft.autotune.bench import Benchmarker
from tilecraft.autotune.db import TuneKey, TuningDB, TuningDBWarning
from tilecraft.autotune.landscape import Landscape, import_landscapes
from tilecraft.autotune.model import from_database
from tilecraft.autotune.trial import Trial
from tilecraft.autotune.tune import cached_config, db_path, tune_key
from tilecraft.runtime.cache import CacheWarning

LANDSCAPE = Path(__file__).resolve().parents[1] / "benchmarks/landscapes/h200"
CONFIGS = [tc.Config(block_sizes=[16]), tc.Config(block_sizes=[32])]


def expected(x: torch.Tensor) -> torch.Tensor:
    return x * 2.0 + 1.0


def recorded(caught: list[warnings.WarningMessage], kind: type[Warning]) -> list[str]:
    return [str(w.message) for w in caught if issubclass(w.category, kind)]


# -- the cache directory is trusted for nothing ---------------------------------------------


def test_planted_generated_module_is_replaced_not_run(tmp_path: Path) -> None:
    x = torch.randn(37)
    path = fresh_kernel(tmp_path).bind((x,)).code_path()
    honest = path.read_text()
    path.write_text(honest.replace("* 2.0", "* 3.0"))  # what an attacker would plant
    with pytest.warns(CacheWarning, match="differs from the code tilecraft writes"):
        out = fresh_kernel(tmp_path)(x)
    torch.testing.assert_close(out, expected(x))
    assert path.read_text() == honest


def test_planted_module_cannot_poison_the_tuning_reference(tmp_path: Path) -> None:
    x = torch.randn(37)
    kernel = fresh_kernel(tmp_path)
    path = kernel.bind((x,)).code_path()  # the default config's module: the reference
    path.write_text(path.read_text().replace("* 2.0", "* 3.0"))
    kernel.configs = CONFIGS
    with pytest.warns(CacheWarning):
        kernel.autotune((x,))
    assert kernel.bind((x,)).tuning["failed"] == 0  # no correct config marked wrong_result


def test_loose_files_of_an_older_version_are_made_private_silently(tmp_path: Path) -> None:
    x = torch.randn(37)
    kernel = fresh_kernel(tmp_path)
    kernel(x)
    path, db = kernel.bind((x,)).code_path(), tmp_path / "tuning.sqlite3"
    path.chmod(0o664)
    db.chmod(0o664)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        torch.testing.assert_close(fresh_kernel(tmp_path)(x), expected(x))
    assert stat.S_IMODE(path.stat().st_mode) == stat.S_IMODE(db.stat().st_mode) == 0o600


def test_module_edited_after_the_check_is_not_what_runs(tmp_path: Path) -> None:
    x = torch.randn(37)
    bound = fresh_kernel(tmp_path).bind((x,))
    launcher = bound.compile()
    path = bound.code_path()
    path.write_text(path.read_text().replace("* 2.0", "* 3.0"))  # between check and launch
    torch.testing.assert_close(launcher(x), expected(x))


def test_worker_never_reads_the_module_back_from_disk(tmp_path: Path) -> None:
    x = torch.randn(37)
    with Benchmarker(fresh_kernel(tmp_path).bind((x,)), (x,), workers=1, timeout_s=60) as bench:
        job = bench._job(tc.Config(block_sizes=[16]))
        Path(job["code_path"]).write_text("import os\nos._exit(9)\n")  # planted meanwhile
        [result] = bench._run([job])  # the reference computed by a worker too
    assert result["status"] == "ok", result


def test_cache_files_are_private_under_a_permissive_umask(tmp_path: Path) -> None:
    old = os.umask(0o002)
    try:
        kernel = fresh_kernel(tmp_path / "cache")
        x = torch.randn(20)
        kernel.configs = CONFIGS
        kernel.autotune((x,))
    finally:
        os.umask(old)
    for path in (tmp_path / "cache").rglob("*"):
        mode = stat.S_IMODE(path.stat().st_mode)
        assert mode == (0o700 if path.is_dir() else 0o600), (path, oct(mode))


def test_cache_dir_open_to_others_is_closed(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o777)
    cache.chmod(0o777)
    fresh_kernel(cache)(torch.randn(5))
    assert stat.S_IMODE(cache.stat().st_mode) == 0o700


class Planted:
    """A pickle that would create `marker` when loaded."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple:
        return (Path.touch, (self.marker,))


def test_planted_pickle_cost_model_never_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    land = Landscape.load(LANDSCAPE / "add-1024x1024-bfloat16.jsonl.gz")
    land.hardware = "cpu"
    land.save(tmp_path / "landscapes" / "add.jsonl.gz")
    marker = tmp_path / "pwned"
    with TuningDB(tmp_path / "tuning.sqlite3") as db:
        import_landscapes(db, tmp_path / "landscapes")
        fitted = from_database(db, "cpu", tmp_path)
        assert fitted is not None
        [saved] = (tmp_path / "models").glob("cost-*.npz")
        [seconds] = (tmp_path / "models").glob("compile-*.npz")  # the compile-time model
        monkeypatch.setattr(model_module, "_LOADED", {})  # as in a new process
        again = from_database(db, "cpu", tmp_path)  # read back from the file
        assert again is not None and (again.groups, again.rows) == (fitted.groups, fitted.rows)
        desc = db.descriptions("cpu")
        configs = [t.config for t in land.trials[:40]]
        first = next(iter(desc.values()))
        assert again.rank(first, configs) == fitted.rank(first, configs)
        assert again.compile_seconds(first, configs) == fitted.compile_seconds(first, configs)
        for planted in (saved, saved.with_suffix(".pkl"), seconds):  # and the old name
            planted.write_bytes(pickle.dumps(Planted(marker)))
        monkeypatch.setattr(model_module, "_LOADED", {})
        with pytest.warns(UserWarning, match="ignoring cached cost model"):
            assert from_database(db, "cpu", tmp_path) is not None  # refitted
    assert not marker.exists()


def test_cache_dir_owned_by_another_user_is_refused(tmp_path: Path) -> None:
    theirs = foreign_dir(tmp_path)
    x = torch.randn(19)
    with pytest.warns(CacheWarning, match="belongs to another user") as caught:
        kernel = fresh_kernel(theirs)
        torch.testing.assert_close(kernel(x), expected(x))
        kernel.configs = CONFIGS
        kernel.autotune((x,))
    assert len(recorded(caught.list, CacheWarning)) == 1
    assert not any(p.name == "code" for p in theirs.iterdir())


# -- database and cache faults degrade, never stop -------------------------------------------


def filled_db(path: Path, rows: int = 200) -> None:
    with TuningDB(path) as db:
        for i in range(rows // 10):
            trials = [Trial(tc.Config(num_warps=4), "runtime_error", error="e" * 500)] * 10
            db.record(
                trials,
                kernel="k",
                kernel_name="k",
                spec_key=f"s{i}",
                hardware="cpu",
                versions="v",
                search="random",
            )


def test_damaged_page_is_found_when_tuning_opens_the_database(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    filled_db(cache / "tuning.sqlite3")
    flip_page(cache / "tuning.sqlite3", 10)  # a trials page, deep in the file
    kernel, x = fresh_kernel(cache), torch.randn(23)
    kernel.configs = CONFIGS
    with pytest.warns(TuningDBWarning, match="damaged"):
        winner = kernel.autotune((x,))
    assert list(cache.glob("tuning.sqlite3.corrupt-*"))
    assert cached_config(kernel.bind((x,)), (x,), kernel.settings) == winner
    kernel.autotune((x,))  # and every later run works


def test_damage_found_mid_run_sets_the_file_aside(tmp_path: Path) -> None:
    path = tmp_path / "tuning.sqlite3"
    filled_db(path)
    flip_page(path, 10)
    with TuningDB(path) as db:  # no check on open: found by the first read of that page
        with pytest.raises(sqlite3.DatabaseError), pytest.warns(TuningDBWarning, match="damaged"):
            db.trials()
        assert db.trials() == []  # a fresh file from then on
    assert list(tmp_path.glob("tuning.sqlite3.corrupt-*"))


def stored_best(kernel: tc.Kernel, x: torch.Tensor, text: str) -> None:
    """Save a best row for `x`, then replace its config by `text` behind tilecraft's back."""
    key = tune_key(kernel.bind((x,)), (x,))
    path = db_path(kernel.settings)
    with TuningDB(path) as db:
        db.save_best(key, tc.Config(block_sizes=[16]), 0.5)
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE best SET config = ?", (text,))


@pytest.mark.parametrize(
    "row",
    ["[" * 100_000, '{"block_sizes": [16, 16, 16]}', '{"num_warps": 3}', '"text"'],
    ids=["deeply_nested", "too_many_blocks", "invalid_value", "not_an_object"],
)
def test_bad_or_stale_best_row_is_ignored_with_one_warning(tmp_path: Path, row: str) -> None:
    kernel, x = fresh_kernel(tmp_path), torch.randn(29)
    stored_best(kernel, x, row)
    with pytest.warns(TuningDBWarning) as caught:
        torch.testing.assert_close(fresh_kernel(tmp_path)(x), expected(x))
    assert len(recorded(caught.list, TuningDBWarning)) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the row is gone: no second warning
        torch.testing.assert_close(fresh_kernel(tmp_path)(x), expected(x))


@pytest.mark.parametrize("missing", [False, True], ids=["read_only", "missing_under_read_only"])
def test_read_only_cache_dir_runs_from_memory_with_one_warning(
    tmp_path: Path, missing: bool
) -> None:
    x = torch.randn(31)
    with read_only_dir(tmp_path / "ro") as folder, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cache = folder / "cache" if missing else folder
        kernel = fresh_kernel(cache)
        torch.testing.assert_close(kernel(x), expected(x))
        kernel.configs = CONFIGS
        winner = kernel.autotune((x,))
        assert cached_config(kernel.bind((x,)), (x,), kernel.settings) == winner
    assert len(recorded(caught, CacheWarning)) == 1
    assert not recorded(caught, TuningDBWarning)


def test_cache_path_that_is_a_file_runs_from_memory(tmp_path: Path) -> None:
    (tmp_path / "cache").write_text("not a directory")
    x = torch.randn(31)
    with pytest.warns(CacheWarning, match="not a directory"):
        torch.testing.assert_close(fresh_kernel(tmp_path / "cache")(x), expected(x))


def test_full_disk_keeps_the_winner_in_memory(tmp_path: Path) -> None:
    x = torch.randn(41)
    with mounted_tmpfs(tmp_path / "small", "1m") as cache:
        kernel = fresh_kernel(cache)
        kernel.configs = CONFIGS
        kernel(x)  # the database exists before the disk fills
        fill_disk(cache)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            winner = kernel.autotune((x,))
            again = fresh_kernel(cache)
            assert cached_config(again.bind((x,)), (x,), again.settings) == winner
            torch.testing.assert_close(again(x), expected(x))
    said = " ".join(recorded(caught, UserWarning))
    assert "in memory" in said


FILE_SIZE_LIMITED = """
import resource, signal, sys, warnings
import torch
import tilecraft as tc
from reliability_faults import fresh_kernel
from tilecraft.autotune.tune import cached_config
x = torch.randn(41)
kernel = fresh_kernel(sys.argv[1])
kernel.configs = [tc.Config(block_sizes=[16]), tc.Config(block_sizes=[32])]
kernel(x)  # the database exists before the limit
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG
resource.setrlimit(resource.RLIMIT_FSIZE, (0, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
warnings.simplefilter("always")
winner = kernel.autotune((x,))
again = fresh_kernel(sys.argv[1])
assert cached_config(again.bind((x,)), (x,), again.settings) == winner
torch.testing.assert_close(again(x), x * 2.0 + 1.0)
print("kept", winner)
"""


def test_no_file_can_grow_keeps_the_winner_in_memory(tmp_path: Path) -> None:
    # where no tmpfs can be mounted: a file size limit of 0 fails every write, as a full
    # disk does (with EFBIG rather than ENOSPC)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), *sys.path])}
    done = subprocess.run(
        [sys.executable, "-c", FILE_SIZE_LIMITED, str(tmp_path / "cache")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0 and "kept" in done.stdout, done.stderr[-2000:]
    assert "in memory" in done.stderr


def test_cache_dir_removed_during_tuning_keeps_the_winner(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache, x = tmp_path / "cache", torch.randn(43)
    kernel = fresh_kernel(cache)
    kernel.configs = CONFIGS
    measure = Benchmarker.__call__

    def measure_then_remove(self: Benchmarker, configs: list[tc.Config]) -> list[Trial]:
        trials = measure(self, configs)
        shutil.rmtree(cache)
        return trials

    monkeypatch.setattr(Benchmarker, "__call__", measure_then_remove)
    with pytest.warns(TuningDBWarning, match="removed during tuning"):
        winner = kernel.autotune((x,))
    monkeypatch.undo()
    assert cached_config(kernel.bind((x,)), (x,), kernel.settings) == winner


KEY = TuneKey("k", "f32[8]", "cpu", "v")


def _save(path: str, config: tc.Config, time_ms: float, start: multiprocessing.Barrier) -> None:
    start.wait()
    with TuningDB(path) as db:
        db.save_best(KEY, config, time_ms)


def test_best_row_keeps_the_fastest_under_concurrent_writers(tmp_path: Path) -> None:
    path = str(tmp_path / "tuning.sqlite3")
    TuningDB(path).close()
    offers = [(tc.Config(num_warps=w), ms) for w, ms in ((1, 28.5), (2, 3.9), (4, 12.0), (8, 7.0))]
    ctx = multiprocessing.get_context("fork")
    start = ctx.Barrier(len(offers))
    writers = [ctx.Process(target=_save, args=(path, c, ms, start)) for c, ms in offers]
    for w in writers:
        w.start()
    for w in writers:
        w.join(30)
    assert [w.exitcode for w in writers] == [0] * len(offers)
    with TuningDB(path) as db:
        assert db.load_best(KEY) == tc.Config(num_warps=2)
        db.save_best(KEY, tc.Config(num_warps=16), 28.0)  # a slower one later: kept out
        assert db.load_best(KEY) == tc.Config(num_warps=2)
