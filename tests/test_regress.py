"""Regression tracking (autotune/regress.py, `tilecraft bench --compare`) on synthetic
timings: a planted regression is flagged and exits non-zero; noise is not flagged."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tilecraft import cli
from tilecraft.autotune import regress

KERNELS = ("softmax", "rms_norm", "matmul", "layer_norm")


def timings(seed: int, slower: dict[str, float] | None = None) -> dict[str, list[float]]:
    """10 samples per kernel, 2% lognormal noise (and a spike), medians 0.05-0.2 ms;
    `slower` multiplies some kernels' times."""
    rng = np.random.default_rng(seed)
    out = {}
    for i, kernel in enumerate(KERNELS):
        base = 0.05 * (i + 1) * (slower or {}).get(kernel, 1.0)
        samples = base * np.exp(rng.normal(0.0, 0.02, 10))
        samples[rng.integers(10)] *= 1.3  # one sample caught a hiccup
        out[kernel] = [float(x) for x in samples]
    return out


def verdicts(ref: dict, new: dict) -> dict[str, str]:
    return {c.kernel: c.verdict for c in regress.compare(ref, new)}


def test_noise_is_not_flagged() -> None:
    for seed in range(1, 6):
        assert set(verdicts(timings(0), timings(seed)).values()) == {"same"}, seed


def test_planted_regression_and_improvement_are_flagged() -> None:
    new = timings(1, {"matmul": 1.10, "softmax": 0.8})
    found = verdicts(timings(0), new)
    assert found == {
        "matmul": "regression",
        "softmax": "improvement",
        "rms_norm": "same",
        "layer_norm": "same",
    }
    # below the threshold: significant maybe, but not a regression
    assert verdicts(timings(0), timings(1, {"matmul": 1.03}))["matmul"] == "same"


def test_too_few_samples_or_missing_kernel_is_unknown() -> None:
    ref, new = timings(0), timings(1)
    new["matmul"] = new["matmul"][:2]
    del new["softmax"]
    found = verdicts(ref, new)
    assert found["matmul"] == "unknown" and found["softmax"] == "unknown"


def test_bench_compare_exits_non_zero_on_a_regression(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = str(tmp_path / "bench.sqlite3")
    regress.store_run(db, "ref", timings(0), "NVIDIA H200", "v", "abc")
    regress.store_run(db, "noise", timings(1), "NVIDIA H200", "v", "abd")
    assert cli.main(["bench", "--db", db, "--compare", "ref"]) == 0  # the latest: "noise"
    regress.store_run(db, "slow", timings(2, {"layer_norm": 1.2}), "NVIDIA H200", "v", "abe")
    assert cli.main(["bench", "--db", db, "--compare", "ref"]) == 1
    out, err = capsys.readouterr()
    assert "slow against ref" in out and "regressions in layer_norm" in err
    assert cli.main(["bench", "--db", db, "--compare", "ref", "--run", "noise"]) == 0
    assert regress.runs(db) == ["ref", "noise", "slow"]
    regress.store_run(db, "noise", timings(3))  # a run stored again replaces the old one
    assert len(regress.load_run(db, "noise")["matmul"]) == 10
    assert cli.main(["bench", "--db", db, "--compare", "main"]) == 2
    assert "no benchmark run 'main'; stored: ref, slow, noise" in capsys.readouterr().err
