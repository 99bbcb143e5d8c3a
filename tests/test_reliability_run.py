"""Reliability suite, part 3: settings with bad values, leaked temporary directories,
runaway worker counts, an unwritable trial log, and gradients a plain kernel drops."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

import pytest
import torch
from reliability_faults import fresh_kernel, read_only_dir, scale

import tilecraft as tc
from tilecraft.autotune import housekeeping
from tilecraft.autotune.bench import Benchmarker
from tilecraft.autotune.housekeeping import DIR_PREFIX, capped_workers, remove_stale_dirs
from tilecraft.exc import SettingsError

CONFIGS = [tc.Config(block_sizes=[16]), tc.Config(block_sizes=[32])]


# -- settings: validated lazily, by name ----------------------------------------------------


@pytest.mark.parametrize(
    ("variable", "value", "accepted"),
    [
        ("TILECRAFT_AUTOTUNE_BUDGET_S", "abc", "seconds > 0"),
        ("TILECRAFT_AUTOTUNE_BUDGET_S", "nan", "seconds > 0"),
        ("TILECRAFT_AUTOTUNE_BUDGET_S", "0", "seconds > 0"),
        ("TILECRAFT_AUTOTUNE_TIMEOUT_S", "-1", "seconds > 0"),
        ("TILECRAFT_AUTOTUNE_EFFORT", "fastest", "none, predict, quick, full"),
        ("TILECRAFT_AUTOTUNE_WORKERS", "-2", ">= 0"),
        ("TILECRAFT_LLM_MAX_ROUNDS", "0", ">= 1"),
        ("TILECRAFT_AUTOTUNE_QUIET", "maybe", "true"),
    ],
)
def test_bad_setting_is_named_when_tuning_starts_never_at_decoration(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, variable: str, value: str, accepted: str
) -> None:
    monkeypatch.setenv(variable, value)
    kernel = tc.kernel(scale, cache_dir=tmp_path, autotune_workers=0)  # decoration: fine
    x = torch.randn(17)
    torch.testing.assert_close(kernel(x), x * 2.0 + 1.0)  # a plain call on a CPU: fine
    kernel.configs = CONFIGS
    with pytest.raises(SettingsError, match=variable) as error:
        kernel.autotune((x,))
    assert accepted in str(error.value) and repr(value) in str(error.value)


@pytest.mark.parametrize(
    "options",
    [
        {"autotune_timeout_s": -1.0},
        {"autotune_budget_s": float("nan")},
        {"autotune_effort": "fastest"},
        {"llm_timeout_s": 0},
    ],
)
def test_nonsensical_keyword_setting_is_rejected_when_tuning_starts(
    tmp_path: Path, options: dict
) -> None:
    kernel = fresh_kernel(tmp_path, **options)
    kernel.configs = CONFIGS
    with pytest.raises(SettingsError, match=next(iter(options))):
        kernel.autotune((torch.randn(9),))


def test_bad_tuning_option_is_named(tmp_path: Path) -> None:
    kernel, x = fresh_kernel(tmp_path), torch.randn(9)
    with pytest.raises(SettingsError, match="budget_s"):
        kernel.autotune((x,), budget_s=-5)
    with pytest.raises(SettingsError, match="search 'bogus'"):
        kernel.autotune((x,), search="bogus")


def test_unwritable_log_path_warns_and_tuning_goes_on(tmp_path: Path) -> None:
    with read_only_dir(tmp_path / "ro") as folder:
        kernel = fresh_kernel(tmp_path / "cache", autotune_log=str(folder / "trials.csv"))
        x = torch.randn(21)
        with pytest.warns(UserWarning, match="not logging trials") as caught:
            kernel.autotune((x,), search="random", max_configs=6)
    assert kernel.bind((x,)).tuning["configs"] == 6
    assert sum("not logging" in str(w.message) for w in caught.list) == 1


# -- temporary directories and workers ------------------------------------------------------


def bench_dirs() -> set[Path]:
    return set(Path(tempfile.gettempdir()).glob(f"{DIR_PREFIX}{os.getpid()}-*"))


def test_benchmark_temp_dir_is_removed_when_the_run_ends(tmp_path: Path) -> None:
    before, x = bench_dirs(), torch.randn(30)
    with Benchmarker(fresh_kernel(tmp_path).bind((x,)), (x,), workers=1, timeout_s=30) as bench:
        assert bench([tc.Config(block_sizes=[16])])[0].ok
        assert bench.dir.exists() and (bench.dir / "args.pt").exists()
    assert bench_dirs() == before


def test_stale_temp_dirs_of_dead_processes_are_removed_at_start(tmp_path: Path) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    root = Path(tempfile.gettempdir())
    stale = Path(tempfile.mkdtemp(prefix=f"{DIR_PREFIX}{dead.pid}-", dir=root))
    (stale / "args.pt").write_bytes(b"copies of the user's inputs")
    live = Path(tempfile.mkdtemp(prefix=f"{DIR_PREFIX}{os.getpid()}-", dir=root))
    try:
        x = torch.randn(8)
        Benchmarker(fresh_kernel(tmp_path).bind((x,)), (x,), workers=0).close()
        assert not stale.exists() and live.exists()
    finally:
        live.rmdir()


def test_worker_count_is_capped_by_cores_and_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    x = torch.randn(1000)
    monkeypatch.setenv("TILECRAFT_AUTOTUNE_WORKERS", "1000")
    requested = tc.kernel(scale).settings.autotune_workers
    assert requested == 1000
    assert capped_workers(requested, (x,)) <= (os.cpu_count() or 1)
    monkeypatch.setattr(housekeeping, "_available_memory", lambda: 3 << 30)
    assert capped_workers(requested, (x,)) <= 3
    assert capped_workers(0, (x,)) == 0  # in-process stays in-process
    remove_stale_dirs(Path("/nonexistent"))  # a missing temp root is not an error


# -- autograd -------------------------------------------------------------------------------


def test_plain_kernel_with_grad_inputs_warns_once(tmp_path: Path) -> None:
    kernel = fresh_kernel(tmp_path)
    x = torch.randn(12, requires_grad=True)
    with pytest.warns(UserWarning, match=r"as_torch_op\(.*backward=") as caught:
        kernel(x)
        kernel(x)
    assert sum("require grad" in str(w.message) for w in caught.list) == 1
    quiet = fresh_kernel(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with torch.no_grad():
            quiet(x)
        quiet(x.detach())


def test_stale_lock_dirs_of_dead_processes_are_removed(tmp_path: Path) -> None:
    """The GPU lock files' directory lives as long as its process; a dead one's goes."""
    from tilecraft.autotune.housekeeping import LOCKS_PREFIX

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = Path(tempfile.mkdtemp(prefix=f"{LOCKS_PREFIX}{dead.pid}-", dir=tmp_path))
    live = Path(tempfile.mkdtemp(prefix=f"{LOCKS_PREFIX}{os.getpid()}-", dir=tmp_path))
    remove_stale_dirs(tmp_path)
    assert not stale.exists() and live.exists()
