"""What a tuning run found: its summary (`bound.tuning`), the warning where most configs
disagreed with the reference, and its leaders without repeats."""

from __future__ import annotations

import warnings
from typing import Any

from tilecraft.autotune.energy import pareto_front
from tilecraft.autotune.trial import Trial
from tilecraft.runtime.config import Config


class ReferenceWarning(UserWarning):
    """Most configs of a tuning run disagreed with the default config's outputs."""


def check_reference(name: str, trials: list[Trial]) -> None:
    """Warn where most configs disagreed with the reference (the default config's outputs):
    a compiler that miscompiles the default config makes every config that agrees with it
    the wrong one (Triton 3.6 did, at small convolution shapes), and a kernel whose result
    depends on its config (a race, an output left unwritten) looks the same."""
    wrong = sum(t.status == "wrong_result" for t in trials)
    agreed = sum(t.ok for t in trials)
    if wrong >= 3 and wrong > agreed:
        warnings.warn(
            f"tilecraft: {wrong} configs of `{name}` gave outputs that differ from its default "
            f"config's and {agreed} agreed: the default config may be miscompiled, or the "
            "kernel's result depends on its config (a race, an output not written "
            "everywhere); check its output against PyTorch",
            ReferenceWarning,
            3,
        )


def summary(
    trials: list[Trial], search: str, best: Trial, objective: str, tuning_j: float | None
) -> dict[str, Any]:
    """What a tuning run did (kept as `bound.tuning`): counts, the winner's time and energy,
    the energy the run used, and the time/energy Pareto front of its trials."""
    front = [
        {"config": t.config, "time_ms": t.time_ms, "energy_j": t.energy_j}
        for t in pareto_front(trials)
    ]
    return {
        "configs": len(trials),
        "failed": sum(not t.ok for t in trials),
        "search": search,
        "objective": objective,
        "best_ms": best.time_ms,
        "best_energy_j": best.energy_j,
        "tuning_energy_j": tuning_j,
        "pareto": front,
        **status_counts(trials),
    }


def distinct(ranked: list[Trial]) -> list[Trial]:
    """`ranked` without repeats of a config (a search may measure one twice)."""
    seen: set[Config] = set()
    out = []
    for trial in ranked:
        if trial.config not in seen:
            seen.add(trial.config)
            out.append(trial)
    return out


def status_counts(trials: list[Trial]) -> dict[str, Any]:
    """Counts of trials by status."""
    counts: dict[str, Any] = {}
    for t in trials:
        counts[t.status] = counts.get(t.status, 0) + 1
    return counts
