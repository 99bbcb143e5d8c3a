"""`LLMContext`: what the LLM-guided searches know beyond the config space (the bound
kernel, the settings, earlier tuning results), and how tuning gathers it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tilecraft.runtime.config import Config
from tilecraft.runtime.settings import Settings

if TYPE_CHECKING:
    from tilecraft.autotune.db import TuneKey, TuningDB
    from tilecraft.autotune.llm.providers import Provider
    from tilecraft.runtime.bound import BoundKernel

# (config, time in ms, spec_key): a result of the same kernel at another specialization
DBEntry = tuple[Config, float, str]


@dataclass
class LLMContext:
    """The kernel being tuned (None: the prompt shows only the space), the settings that
    pick the provider, the closest tuning-database entries, and optionally a provider
    to use instead of the one the settings name."""

    bound: BoundKernel | None = None
    settings: Settings = field(default_factory=Settings)
    db_entries: list[DBEntry] = field(default_factory=list)
    provider: Provider | None = None
    # re-times configs together (config -> ms), so the model sees fair leader times
    retime: Callable[[list[Config]], dict[Config, float]] | None = None


def closest_entries(db: TuningDB, key: TuneKey, limit: int = 8) -> list[DBEntry]:
    """The best ok result of this kernel per other specialization on this hardware,
    fastest first, at most `limit`."""
    best: dict[str, DBEntry] = {}
    for row in db.trials(kernel=key.kernel, hardware=key.hardware):
        if row["status"] != "ok" or row["config"] is None or row["time_ms"] is None:
            continue
        if row["spec_key"] == key.spec_key:
            continue
        held = best.get(row["spec_key"])
        if held is None or row["time_ms"] < held[1]:
            best[row["spec_key"]] = (row["config"], float(row["time_ms"]), row["spec_key"])
    return sorted(best.values(), key=lambda entry: entry[1])[:limit]
