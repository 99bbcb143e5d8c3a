"""Tuning a manifest over a Dask cluster (the optional `tilecraft[cluster]` extra).

Each entry is one Dask task, tuned on a worker into a private temporary database; the
task returns its trials and winner, which this process stores in its own tuning
database as each task finishes. Dask's scheduler retries the task of a worker that
dies on another worker; the trials of an entry still running there are lost (those of
finished entries are stored already), and a stopped run resumes by skipping entries
whose best config is stored.

Example::

    from distributed import Client
    tune_manifest(manifest, options, client=Client("scheduler:8786"))
"""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tilecraft.autotune.fleet import (
    Outcome,
    RunState,
    Slot,
    TuneOptions,
    safe_tune_entry,
)
from tilecraft.autotune.manifest import Entry, ManifestError


def tune_remote(entry: dict[str, Any], options: dict[str, Any]) -> dict[str, Any]:
    """The Dask task: tune one entry in a private cache; its outcome with the trials,
    winners and descriptions that the driver stores."""
    from tilecraft.autotune.db import DB_NAME, TuningDB

    with tempfile.TemporaryDirectory(prefix="tilecraft-task-") as cache:
        local = dataclasses.replace(TuneOptions(**options), cache_dir=cache, retune=True)
        result = safe_tune_entry(Entry.from_dict(entry), local)
        with TuningDB(f"{cache}/{DB_NAME}") as db:
            result["trial_rows"] = db.trial_rows()
            result["best_rows"] = db.best_rows()
    return result


def run_cluster(
    entries: Sequence[Entry],
    options: TuneOptions,
    client: Any,
    on_update: Callable[[RunState], None] | None = None,
    known: dict[int, Outcome] | None = None,
) -> list[Outcome]:
    """Tune `entries` as Dask tasks on `client`'s cluster, but for those with `known`
    outcomes; outcomes in the entries' order."""
    try:
        from distributed import as_completed
    except ImportError:
        raise ManifestError(
            "tuning on a cluster needs Dask: pip install 'tilecraft[cluster]'"
        ) from None
    from tilecraft.autotune.db import TuningDB
    from tilecraft.autotune.tune import db_path
    from tilecraft.runtime.settings import Settings

    settings = Settings(cache_dir=Path(options.cache_dir)) if options.cache_dir else Settings()
    state = RunState(len(entries), [Slot("cluster", {})], dict(known or {}))
    with TuningDB(db_path(settings)) as db:
        futures = {}
        for i, entry in enumerate(entries):
            if i in state.outcomes:
                continue
            task = client.submit(tune_remote, entry.to_dict(), options.to_dict(), pure=False)
            futures[task] = i
        for task in as_completed(list(futures)):
            i = futures[task]
            state.outcomes[i] = _store(entries[i], task, db)
            state.slots[0].done += 1
            if on_update is not None:
                on_update(state)
    return [state.outcomes[i] for i in range(len(entries))]


def _store(entry: Entry, task: Any, db: Any) -> Outcome:
    try:
        result = task.result()
    except Exception as e:  # noqa: BLE001 - Dask gave up on the task (its workers died)
        return Outcome(entry, "failed", error=f"{type(e).__name__}: {e}", worker="cluster")
    db.add_trial_rows(result.pop("trial_rows", []))
    db.add_best_rows(result.pop("best_rows", []))
    return Outcome(
        entry,
        result.get("status", "failed"),
        result.get("config"),
        int(result.get("trials", 0)),
        int(result.get("failed_trials", 0)),
        result.get("best_ms"),
        result.get("error", ""),
        "cluster",
    )
