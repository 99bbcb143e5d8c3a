"""Tuning kernels that take functions (an epilogue lambda) as arguments."""

from __future__ import annotations

import warnings

import matmul_epilogue
import pytest
import torch
from conftest import DEVICE

import tilecraft as tc


def test_a_kernel_taking_a_lambda_tunes_in_process() -> None:
    """A function argument cannot travel to a worker process: tuning runs candidates in
    this process (with a warning) instead of failing."""
    args = matmul_epilogue.inputs(shape=(20, 30, 18), device=DEVICE)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        config = matmul_epilogue.matmul_epilogue.autotune(args, search="random", max_configs=3)
    assert any("run in this process" in str(w.message) for w in caught)
    tuned = tc.kernel(config=config)(matmul_epilogue.matmul_epilogue.fn)
    torch.testing.assert_close(tuned(*args), matmul_epilogue.reference(*args))


def test_tuned_winners_are_keyed_by_the_compilers_sources(tmp_path) -> None:
    """A winner tuned under an older code generator is not reused: the key's versions hold
    a hash of the compiler's sources, which any change to them changes."""
    from tilecraft.autotune.tune import compiler_hash, versions

    (tmp_path / "codegen").mkdir()
    rules = tmp_path / "codegen" / "rules.py"
    rules.write_text("EMIT = 'a + b'\n")
    before = compiler_hash(tmp_path)
    rules.write_text("EMIT = 'a - b'\n")
    compiler_hash.cache_clear()
    assert compiler_hash(tmp_path) != before
    assert versions().endswith("+" + compiler_hash())


def test_autotune_as_the_first_call_on_cpu_runs_candidates_in_process(tmp_path) -> None:
    """With no TRITON_INTERPRET set and candidates run in this process, a first call to
    `autotune` on CPU tensors sets up Triton's interpreter before Triton is imported (every
    candidate failed with "0 active drivers" before)."""
    if torch.cuda.is_available():  # the subprocess sees the GPU, so Triton never interprets
        pytest.skip("only a process without a GPU sets up Triton's interpreter for CPU tensors")
    import os
    import subprocess
    import sys

    from conftest import EXAMPLES

    script = (
        f"import sys; sys.path.insert(0, {str(EXAMPLES)!r}); import matmul\n"
        "args = matmul.inputs(shape=(20, 30, 18), device='cpu')\n"
        "matmul.matmul.autotune(args, search='random', max_configs=2)\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRITON_", "TILECRAFT_"))}
    env.update(TILECRAFT_AUTOTUNE_WORKERS="0", TILECRAFT_CACHE_DIR=str(tmp_path))
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "(0 failed)" in done.stdout + done.stderr, done.stdout + done.stderr[-1000:]


def test_a_predicted_config_that_fails_falls_back_to_the_default(monkeypatch) -> None:
    """The untuned path may run the cost model's pick; if that config cannot run here, the
    call warns and runs the default instead of failing."""
    import matmul

    kernel = tc.kernel(matmul.matmul.fn)
    bad = tc.Config(block_sizes=[16, 16, 16], loop_orders=[[0, 0]])  # not a permutation

    def predicted(bound, args):  # what config_for returns when the model is confident
        bound.predicted = bad
        return bad

    monkeypatch.setattr(kernel, "config_for", predicted)
    args = matmul.inputs(shape=(20, 30, 18), device=DEVICE)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = kernel(*args)
    assert any("predicted config failed" in str(w.message) for w in caught)
    torch.testing.assert_close(out, matmul.reference(*args))
