"""The benchmarking engine and the tuner, end to end under Triton's interpreter."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import tilecraft as tc
from tilecraft.autotune.bench import Benchmarker
from tilecraft.autotune.db import TuningDB
from tilecraft.autotune.outcome import ReferenceWarning
from tilecraft.autotune.tune import cached_config, db_path
from tilecraft.language import Choice


class CompilationError(Exception):
    """Stands in for Triton's compile errors (classified by name)."""


@tc.kernel
def moody(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    mode = tc.register_tunable("mode", Choice(0, 1, 2, 3, 4, 5))
    real = x.device.type != "meta"  # bind time runs host code on meta tensors
    if real and mode == 2:
        raise CompilationError("no such instruction")
    if real and mode == 3:
        raise RuntimeError("boom")
    while real and mode == 4:  # hangs
        pass
    if real and mode == 5:
        os._exit(3)  # crashes the process
    for tile in tc.tile(x.size(0)):
        out[tile] = x[tile] * 2 if mode == 1 else x[tile]  # mode 1 is wrong
    return out


@pytest.mark.slow
def test_failures_are_recorded_and_never_stop_the_engine() -> None:
    x = torch.randn(50)
    configs = [tc.Config(block_sizes=[16], mode=m) for m in range(6)]
    configs.append(tc.Config(block_sizes=[16, 16]))  # does not fit the kernel
    with Benchmarker(moody.bind((x,)), (x,), workers=2, timeout_s=8) as bench:
        trials = bench(configs)
        statuses = [t.status for t in trials]
        assert statuses == [
            "ok",
            "wrong_result",
            "compile_error",
            "runtime_error",
            "timeout",
            "runtime_error",
            "invalid",
        ]
        assert "boom" in trials[3].error and "died" in trials[5].error
        assert trials[0].time_ms is not None and trials[1].time_ms is None
        again = bench(configs[:1])  # workers were restarted after the hang and the crash
        assert again[0].ok


SCALE = 1.5  # a module constant the host code reads: workers get it by value


@tc.kernel
def scaled(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    factor = SCALE * 2
    for tile in tc.tile(x.size(0)):
        out[tile] = x[tile] * factor
    return out


def test_worker_processes_see_the_module_constants_the_host_code_reads() -> None:
    """tilecraft.nn.attention's host code reads `LOG2E`: every candidate failed in the
    workers with a NameError, so tuning it kept the default without a timing."""
    x = torch.randn(40)
    with Benchmarker(scaled.bind((x,)), (x,), workers=1, timeout_s=60) as bench:
        (trial,) = bench([tc.Config(block_sizes=[16])])
    assert trial.ok, trial.error


def test_in_process_engine_checks_results() -> None:
    x = torch.randn(40)
    with Benchmarker(moody.bind((x,)), (x,), workers=0) as bench:
        ok, wrong = bench([tc.Config(mode=0), tc.Config(mode=1)])
    assert ok.ok and wrong.status == "wrong_result"


def test_tuning_warns_when_most_configs_disagree_with_the_default(tmp_path: Path) -> None:
    """The default config's outputs are the reference: where most configs disagree with
    them, the default may be the miscompiled one (every config agreeing with it is then
    wrong too), so the tuning says so."""
    kernel = tc.kernel(moody.fn, cache_dir=tmp_path, autotune_workers=0)
    x = torch.randn(70)
    kernel.configs = [tc.Config(block_sizes=[b], mode=1) for b in (16, 32, 64)]
    kernel.configs.append(tc.Config(block_sizes=[16], mode=0))
    with pytest.warns(ReferenceWarning, match=r"3 configs of `moody` .* and 1 agreed"):
        kernel.autotune((x,))


def test_tune_records_trials_caches_the_winner_and_prints_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kernel = tc.kernel(moody.fn, cache_dir=tmp_path, autotune_workers=0)
    x = torch.randn(70)
    configs = [tc.Config(block_sizes=[b], mode=m) for b in (16, 32) for m in (0, 1)]
    kernel.configs = configs
    winner = kernel.autotune((x,))
    assert winner.tunables["mode"] == 0
    assert "@tc.kernel(config=tc.Config(" in capsys.readouterr().err
    assert torch.equal(kernel(x), x)
    with TuningDB(db_path(kernel.settings)) as db:
        rows = db.trials()
    assert sorted(r["status"] for r in rows) == ["ok", "ok", "wrong_result", "wrong_result"]
    assert cached_config(kernel.bind((x,)), (x,), kernel.settings) == winner


def test_a_search_tunes_under_a_config_budget(tmp_path: Path) -> None:
    kernel = tc.kernel(
        moody.fn,
        cache_dir=tmp_path,
        autotune_workers=2,
        autotune_timeout_s=8,
        autotune_quiet=True,
    )  # isolated: the search may try the modes that hang or crash
    x = torch.randn(70)
    config = kernel.autotune((x,), search="pattern", max_configs=6)
    assert kernel.bind((x,)).tuning["configs"] == 6
    assert config.tunables["mode"] == 0  # the wrong-result and failing modes never win


SCRIPT = """
import os, sys, torch
sys.path.insert(0, {examples!r})
import tilecraft as tc, softmax
from tilecraft.autotune.tune import cached_config
args = softmax.inputs(shape=(9, 40), device="cpu")
kernel = tc.kernel(softmax.softmax.fn, autotune_workers=0, autotune_quiet=True)
bound = kernel.bind(args)
if sys.argv[1] == "tune":
    print(kernel.autotune(args, max_configs=3).to_json())
else:
    print(cached_config(bound, args, kernel.settings).to_json())
"""


@pytest.mark.slow
def test_tuned_configs_are_reused_by_another_process(tmp_path: Path) -> None:
    script = tmp_path / "tune_once.py"
    examples = str(Path(__file__).resolve().parents[1] / "examples")
    script.write_text(textwrap.dedent(SCRIPT.format(examples=examples)))
    env = {**os.environ, "TILECRAFT_CACHE_DIR": str(tmp_path / "cache"), "TRITON_INTERPRET": "1"}
    tuned = (
        subprocess.run(
            [sys.executable, str(script), "tune"],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        .stdout.strip()
        .splitlines()[-1]
    )
    found = subprocess.run(
        [sys.executable, str(script), "lookup"], env=env, capture_output=True, text=True, check=True
    ).stdout.strip()
    assert found.splitlines()[-1] == tuned


def test_a_failing_default_config_falls_back_to_an_eager_reference(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    x = torch.randn(40)
    bound = moody.bind((x,))
    monkeypatch.setattr(bound, "default_config", tc.Config(block_sizes=[16, 16]))  # does not fit
    with Benchmarker(bound, (x,), workers=0) as bench:
        ok, wrong = bench([tc.Config(mode=0), tc.Config(mode=1)])
    assert ok.ok and wrong.status == "wrong_result"


def test_a_worker_loads_helper_functions_with_a_module_name(tmp_path: Path) -> None:
    """Triton's GPU compiler reads `__module__` of every global a kernel uses (e.g. the
    combine function of a NaN-propagating max): loaded in a worker, it must be a string,
    or every config but the first fails to compile there."""
    from cross_entropy import cross_entropy

    from tilecraft.autotune.runner import load_launcher

    kernel = tc.kernel(cross_entropy.fn, cache_dir=tmp_path)
    args = (torch.randn(6, 37), torch.randint(37, (6,)))
    bound = kernel.bind(args)
    with Benchmarker(bound, args, workers=0) as benchmarker:
        job = benchmarker._job(bound.default_config)
    launcher = load_launcher(
        job["code_path"], job["name"], job["imports"], job["code"], job["constants"]
    )
    jitted = [v for v in launcher.__globals__.values() if hasattr(v, "fn")]
    assert any("max" in v.fn.__name__ for v in jitted)  # the combine function is there
    assert all(isinstance(v.fn.__module__, str) for v in jitted)
