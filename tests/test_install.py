"""What a new user meets: CPU tensors run with no setting, the CLI, the packaged examples."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
from conftest import EXAMPLES, REPO
from test_readme import code_blocks

import tilecraft as tc
from tilecraft import cli, demo
from tilecraft.runtime import cpu
from tilecraft.shipped import examples_folder


def clean_environment(tmp_path: Path) -> dict[str, str]:
    """This process's environment without TRITON_INTERPRET and TILECRAFT_* (a new user's),
    importing this checkout's tilecraft and caching under `tmp_path`."""
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("TILECRAFT_", "TRITON_INTERPRET"))
    }
    env["PYTHONPATH"] = str(REPO)
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache")
    return env


def test_readme_first_snippet_runs_in_a_clean_environment(tmp_path: Path) -> None:
    snippet = tmp_path / "snippet.py"
    snippet.write_text(code_blocks("python")[0])
    run = subprocess.run(
        [sys.executable, "-W", "default", str(snippet)],
        env=clean_environment(tmp_path),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    assert "@triton.jit" in run.stdout
    assert run.stderr.count("SlowOnCPU") == 1, run.stderr  # said once, not per call


@tc.kernel
def double(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in tc.tile(x.size()):
        out[tile] = x[tile] * 2
    return out


def test_cpu_tensors_run_eagerly_where_the_interpreter_cannot(monkeypatch) -> None:
    monkeypatch.setattr("tilecraft.runtime.kernel.cpu_mode", lambda: "eager")
    monkeypatch.setattr(cpu, "_warned", set())
    kernel = tc.kernel(double.fn)  # a fresh kernel: nothing bound yet
    x = torch.randn(37, 5)
    with pytest.warns(cpu.SlowOnCPU, match="eagerly in PyTorch"):
        out = kernel(x)
    torch.testing.assert_close(out, x * 2)
    assert kernel.bind((x,)).cpu_mode == "eager"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # said once
        torch.testing.assert_close(kernel(x + 1), (x + 1) * 2)


def test_which_calls_run_on_the_cpu() -> None:
    assert cpu.runs_on_cpu((torch.ones(2), 3, None))
    assert not cpu.runs_on_cpu((torch.ones(2), torch.ones(2, device="meta")))


def test_a_user_who_set_triton_interpret_is_not_warned(monkeypatch) -> None:
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setattr(cpu, "_set_here", False)
    monkeypatch.setattr(cpu, "_warned", set())
    assert cpu.cpu_mode() == "triton"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cpu.warn_slow("double", "triton")


def test_version(capsys) -> None:
    with pytest.raises(SystemExit) as exit:
        cli.main(["--version"])
    assert exit.value.code == 0
    assert capsys.readouterr().out.startswith("tilecraft ")


def test_an_unknown_example_lists_the_examples(capsys) -> None:
    assert cli.main(["code", "nosuch"]) == 2
    err = capsys.readouterr().err
    assert "nosuch" in err and "softmax" in err and "layer_norm" in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("folder", ["/nonexistent", str(REPO / "tests")])
def test_learn_from_a_folder_without_landscapes_fails(capsys, folder: str) -> None:
    assert cli.main(["learn", folder]) == 2
    assert folder in capsys.readouterr().err


def test_the_examples_ship_with_the_package() -> None:
    assert examples_folder().resolve() == EXAMPLES.resolve()
    assert demo.find_examples() == examples_folder()
    setup = (REPO / "setup.py").read_text()  # the wheel maps examples/ to tilecraft.examples
    assert '"tilecraft.examples": "examples"' in setup


def test_the_demo_table_says_which_rows_were_tuned() -> None:
    tuned = demo.Row("softmax", "softmax", ok=True, tune_s=2.0, configs=4)
    default = demo.Row("add", "add", ok=True)
    failed = demo.Row("exp", "exp", check="FAIL")
    assert demo.config_cell(tuned) == "tuned: 4 in 2.0 s"
    assert demo.config_cell(default) == "default"
    line = demo.summary([tuned, default, failed], 12.3)
    assert line.startswith("3 kernels, 2 passed their check, 1 failed; tuned: softmax.softmax")
    assert line.endswith("; 12 s")


@tc.kernel
def noisy(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in tc.tile(x.size()):
        print("tile", tile)
        out[tile] = x[tile] + 1
    return out


def test_print_in_a_kernel_is_said_to_be_left_out_when_compiled(mode, capsys) -> None:
    x = torch.randn(5)
    if mode.name == "eager":
        torch.testing.assert_close(mode(noisy)(x), x + 1)
        assert "tile" in capsys.readouterr().out
        return
    with pytest.warns(UserWarning, match="leave out `print`") as record:
        torch.testing.assert_close(mode(noisy)(x), x + 1)
    assert record[0].filename == __file__


def test_cpu_tensors_still_run_eagerly_after_autotune(monkeypatch) -> None:
    """On a GPU machine CPU tensors run eagerly; tuning them must not install a launcher
    compiled for the GPU (it failed with "cannot be accessed from Triton (cpu tensor?)")."""
    monkeypatch.setattr("tilecraft.runtime.kernel.cpu_mode", lambda: "eager")
    kernel = tc.kernel(double.fn)
    x = torch.randn(9, 4)
    with pytest.warns(UserWarning, match="nothing to tune"):
        config = kernel.autotune((x,), search="random", max_configs=1)
    assert isinstance(config, tc.Config)
    calls = []
    original = kernel.run_eagerly
    monkeypatch.setattr(kernel, "run_eagerly", lambda args: calls.append(1) or original(args))
    torch.testing.assert_close(kernel(x), x * 2)
    assert calls == [1]
