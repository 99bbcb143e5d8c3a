"""One progress display for a whole manifest run: entries done, trials stored so far,
failures, each worker's load and the time left (rich, on stderr)."""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

if TYPE_CHECKING:
    from tilecraft.autotune.fleet import RunState

POLL_S = 1.0  # how often the trial count is read from the tuning database


class FleetView:
    """The progress bar of a manifest run; `update` is cheap enough to call in a loop."""

    def __init__(self, total: int, enabled: bool = True) -> None:
        self.total, self.enabled = total, enabled
        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            TextColumn("{task.completed}/{task.total} entries"),
            TextColumn("{task.fields[status]}"),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            console=Console(file=sys.stderr),
            disable=not enabled,
        )
        self.stored = 0
        self._base: int | None = None
        self._polled = 0.0

    def __enter__(self) -> FleetView:
        self.progress.start()
        self.task = self.progress.add_task("tuning manifest", total=self.total, status="")
        return self

    def update(self, state: RunState, cache_dir: str | None) -> None:
        """Show `state`; the trial count comes from the database, so it moves mid-entry."""
        if not self.enabled:
            return
        self._poll(cache_dir)
        outcomes = list(state.outcomes.values())
        failed = sum(o.status == "failed" for o in outcomes)
        skipped = sum(o.status == "skipped" for o in outcomes)
        load = " ".join(f"{s.name}:{s.done}{'*' if s.job else ''}" for s in state.slots)
        status = (
            f"{self.stored} trials, {failed} failed, {skipped} skipped,"
            f" {state.retries} retried | {load}"
        )
        self.progress.update(self.task, completed=len(outcomes), status=status)

    def _poll(self, cache_dir: str | None) -> None:
        now = time.monotonic()
        if cache_dir is None or now - self._polled < POLL_S:
            return
        self._polled = now
        from tilecraft.autotune.db import DB_NAME, TuningDB
        from tilecraft.runtime.cache import usable_dir

        try:
            with TuningDB(usable_dir(cache_dir) / DB_NAME) as db:
                count = db.count()
        except Exception:  # noqa: BLE001 - a display must never stop the run
            return
        self._base = count if self._base is None else self._base
        self.stored = count - self._base

    def __exit__(self, *exc: Any) -> None:
        self.progress.stop()
