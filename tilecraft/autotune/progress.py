"""What the user sees while tuning: a rich progress bar, the result, and an optional log."""

from __future__ import annotations

import csv
import json
import sys
import time
import warnings
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from tilecraft.autotune.trial import Budget, Trial
from tilecraft.runtime.settings import Settings


class TuneProgress:
    """Shows configs done, failures, best so far and elapsed time; writes the trial log."""

    def __init__(
        self, kernel: str, search: str, budget: Budget, settings: Settings, on_gpu: bool
    ) -> None:
        self.kernel, self.search, self.budget = kernel, search, budget
        self.quiet, self.on_gpu = settings.autotune_quiet, on_gpu
        self.log = Path(settings.autotune_log) if settings.autotune_log else None
        self.console = Console(file=sys.stderr)
        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            TextColumn("{task.fields[status]}"),
            TimeElapsedColumn(),
            console=self.console,
            disable=self.quiet,
            transient=True,
        )
        self.done = self.failed = 0
        self.best: float | None = None
        self.started = time.monotonic()

    def __enter__(self) -> TuneProgress:
        self.progress.start()
        total = self.budget.max_configs
        self.task = self.progress.add_task(
            f"tuning {self.kernel} ({self.search})", total=total, status=""
        )
        if not self.on_gpu and not self.quiet:
            self.console.print(
                "[yellow]tilecraft: no GPU, so candidates run under Triton's "
                "interpreter: their times mean nothing for speed[/]"
            )
        return self

    def update(self, trials: list[Trial]) -> None:
        self.done += len(trials)
        self.failed += sum(not t.ok for t in trials)
        for t in trials:
            if t.ok and (self.best is None or (t.time_ms or 0) < self.best):
                self.best = t.time_ms
        best = "-" if self.best is None else f"{self.best:.4f} ms"
        status = f"{self.done} configs, {self.failed} failed, best {best}"
        self.progress.update(self.task, completed=self.done, status=status)
        if self.log is not None:
            try:
                self._write_log(trials)
            except OSError as e:  # a log that cannot be written must not stop the tuning
                warnings.warn(f"tilecraft: not logging trials to {self.log}: {e}", stacklevel=3)
                self.log = None

    def _write_log(self, trials: list[Trial]) -> None:
        assert self.log is not None
        rows = [_row(t) for t in trials]
        if self.log.suffix == ".jsonl":
            with self.log.open("a") as f:
                f.writelines(json.dumps(r) + "\n" for r in rows)
            return
        new = not self.log.exists()
        with self.log.open("a", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]))
            if new:
                writer.writeheader()
            writer.writerows(rows)

    def finish(self, best: Trial, phases: str = "") -> None:
        """Print the result (and `phases`, where the time went, when given)."""
        self.progress.stop()
        if self.quiet:
            return
        took = time.monotonic() - self.started
        timing = f"{best.time_ms:.4f} ms" if best.time_ms is not None else "no timing"
        self.console.print(
            f"tilecraft: tuned {self.kernel} in {took:.1f} s, {self.done} configs "
            f"({self.failed} failed), best {timing}:"
        )
        if phases:
            self.console.print(f"tilecraft: phases (s): {phases}", markup=False, highlight=False)
        line = f"@tc.kernel(config={best.config!r})"
        self.console.print(line, markup=False, highlight=False, soft_wrap=True)

    def __exit__(self, *exc: Any) -> None:
        self.progress.stop()


def _row(t: Trial) -> dict[str, Any]:
    return {
        "config": t.config.to_json(),
        "status": t.status,
        "time_ms": t.time_ms,
        "compile_s": round(t.compile_s, 4),
        "error": t.error,
    }
