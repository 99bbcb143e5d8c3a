"""Tuning a manifest over a Dask cluster (the optional `tilecraft[cluster]` extra).

Each entry is one Dask task, tuned on a worker into a private temporary database; the
task streams its trials to this process through a Dask queue every `STREAM_S` seconds
and returns them all with its winner at the end, and this process stores them in its
own tuning database (rows it has already are skipped). Dask's scheduler reruns the task
of a worker that dies on another worker (at most its last `STREAM_S` seconds of trials
are lost), and a stopped run resumes by skipping entries whose best config is stored.

Example::

    from distributed import Client
    tune_manifest(manifest, options, client=Client("scheduler:8786"))
"""

from __future__ import annotations

import dataclasses
import tempfile
import threading
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tilecraft.autotune.fleet import (
    Outcome,
    RunState,
    Slot,
    TuneOptions,
    outcome_from,
    safe_tune_entry,
)
from tilecraft.autotune.manifest import Entry, ManifestError

STREAM_S = 1.0  # how often a task sends the trials it has stored so far


def tune_remote(
    entry: dict[str, Any], options: dict[str, Any], queue_name: str | None = None
) -> dict[str, Any]:
    """The Dask task: tune one entry in a private cache; its outcome with the trials and
    winners that the driver stores. With `queue_name`, trials also go to the driver's
    Dask queue as they are stored, so those of an entry whose worker dies are kept."""
    from tilecraft.autotune.db import DB_NAME, TuningDB

    with tempfile.TemporaryDirectory(prefix="tilecraft-task-") as cache:
        path = Path(cache) / DB_NAME
        stop = threading.Event()
        sender = _sender(path, queue_name, stop) if queue_name else None
        try:
            local = dataclasses.replace(TuneOptions(**options), cache_dir=cache, retune=True)
            result = safe_tune_entry(Entry.from_dict(entry), local)
        finally:
            stop.set()
            if sender is not None:
                sender.join()
        with TuningDB(path) as db:
            result["trial_rows"] = db.trial_rows()
            result["best_rows"] = db.best_rows()
    return result


def _sender(path: Path, queue_name: str, stop: threading.Event) -> threading.Thread:
    """A thread sending the task's new trial rows to the queue every STREAM_S seconds."""
    from distributed import Queue

    queue = Queue(queue_name)  # made in the task's thread, where the worker's client is

    def send() -> None:
        sent = 0
        while not stop.wait(STREAM_S):
            sent = _send_new(path, queue, sent)

    thread = threading.Thread(target=send, name="tilecraft-trials", daemon=True)
    thread.start()
    return thread


def _send_new(path: Path, queue: Any, sent: int) -> int:
    from tilecraft.autotune.db import TuningDB

    if not path.exists():
        return sent  # the tuner has not opened its database yet
    try:
        with TuningDB(path) as db:
            rows = db.trial_rows()
        if rows[sent:]:
            queue.put(rows[sent:])
        return len(rows)
    except Exception:  # noqa: BLE001 - the final result carries every trial anyway
        return sent


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
        from distributed import Queue, wait
    except ImportError:
        raise ManifestError(
            "tuning on a cluster needs Dask: pip install 'tilecraft[cluster]'"
        ) from None
    from tilecraft.autotune.db import TuningDB
    from tilecraft.autotune.tune import db_path
    from tilecraft.runtime.settings import Settings

    settings = Settings(cache_dir=Path(options.cache_dir)) if options.cache_dir else Settings()
    state = RunState(len(entries), [Slot("cluster", {})], dict(known or {}))
    name = f"tilecraft-trials-{uuid.uuid4().hex}"
    queue = Queue(name, client=client)
    with TuningDB(db_path(settings)) as db:
        futures = {}
        for i, entry in enumerate(entries):
            if i not in state.outcomes:
                task = client.submit(
                    tune_remote, entry.to_dict(), options.to_dict(), name, pure=False
                )
                futures[task] = i
        pending = set(futures)
        while pending:
            try:
                done, pending = wait(pending, timeout=STREAM_S, return_when="FIRST_COMPLETED")
            except TimeoutError:
                done = set()
            _drain(queue, db)
            for task in done:
                state.outcomes[futures[task]] = _store(entries[futures[task]], task, db)
                state.slots[0].done += 1
            if on_update is not None:
                on_update(state)
        _drain(queue, db)
    return [state.outcomes[i] for i in range(len(entries))]


def _drain(queue: Any, db: Any) -> None:
    """Store the trial rows tasks have streamed so far (rows stored already are skipped)."""
    for rows in queue.get(batch=True):
        db.add_trial_rows(rows)


def _store(entry: Entry, task: Any, db: Any) -> Outcome:
    try:
        result = task.result()
    except Exception as e:  # noqa: BLE001 - Dask gave up on the task (its workers died)
        return Outcome(entry, "failed", error=f"{type(e).__name__}: {e}", worker="cluster")
    db.add_trial_rows(result.pop("trial_rows", []))
    db.add_best_rows(result.pop("best_rows", []))
    return outcome_from(entry, result, "cluster")
