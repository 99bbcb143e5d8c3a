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
from rich.table import Table

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
        self.best: tuple[float, str] | None = None  # the best score and its objective
        self.started = time.monotonic()

    def __enter__(self) -> TuneProgress:
        self.progress.start()
        total = self.budget.max_configs
        self.task = self.progress.add_task(
            f"tuning {self.kernel} ({self.search})", total=total, status=""
        )
        if not self.on_gpu and not self.quiet:
            self.console.print(
                "[yellow]tilecraft: CPU tensors, so candidates run under Triton's "
                "interpreter: their times mean nothing for speed[/]"
            )
        return self

    def update(self, trials: list[Trial]) -> None:
        self.done += len(trials)
        self.failed += sum(not t.ok for t in trials)
        for t in trials:
            if t.score is not None and (self.best is None or t.score < self.best[0]):
                self.best = (t.score, t.objective)
        best = "-" if self.best is None else show_score(*self.best)
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

    def finish(
        self,
        best: Trial,
        tuning_j: float | None = None,
        front: list[Trial] | None = None,
        phases: str = "",
    ) -> None:
        """Print the winner as a decorator line, what tuning took (and the energy it used
        when a meter read it; where the time went when `phases` is given), and the
        time/energy Pareto front when trials have energy."""
        self.progress.stop()
        if self.quiet:
            return
        took = time.monotonic() - self.started
        timing = f"{best.time_ms:.4f} ms" if best.time_ms is not None else "no timing"
        if best.energy_j is not None:
            timing += f", {best.energy_j * 1e3:.4g} mJ per call"
        used = "" if tuning_j is None else f" using {tuning_j:.1f} J"
        self.console.print(
            f"tilecraft: tuned {self.kernel} in {took:.1f} s{used}, {self.done} configs "
            f"({self.failed} failed), best {timing}:"
        )
        if phases:
            self.console.print(f"tilecraft: phases (s): {phases}", markup=False, highlight=False)
        line = f"@tc.kernel(config={best.config!r})"
        self.console.print(line, markup=False, highlight=False, soft_wrap=True)
        if front:
            self.console.print(pareto_table(front, best))

    def __exit__(self, *exc: Any) -> None:
        self.progress.stop()


def show_score(score: float, objective: str) -> str:
    """A score in its objective's unit."""
    if objective == "energy":
        return f"{score * 1e3:.4g} mJ"
    if objective == "edp":
        return f"{score * 1e3:.4g} mJ*ms"
    return f"{score:.4f} ms"


def pareto_table(front: list[Trial], best: Trial | None = None) -> Table:
    """The time/energy Pareto front as a rich table, fastest first; the winner marked."""
    table = Table(title="time/energy Pareto front", title_justify="left")
    for column in ("", "time (ms)", "energy (mJ/call)", "power (W)", "config"):
        table.add_column(column, justify="right" if "(" in column else "left")
    for t in front:
        ms, joules = t.time_ms or 0.0, t.energy_j or 0.0
        watts = f"{joules / ms * 1e3:.0f}" if ms > 0 else "-"
        mark = "*" if best is not None and t.config == best.config else ""
        table.add_row(mark, f"{ms:.4f}", f"{joules * 1e3:.4g}", watts, repr(t.config))
    return table


def _row(t: Trial) -> dict[str, Any]:
    return {
        "config": t.config.to_json(),
        "status": t.status,
        "time_ms": t.time_ms,
        "compile_s": round(t.compile_s, 4),
        "error": t.error,
        "energy_j": t.energy_j,
    }
