"""Tuning runs read back from the tuning database, for pictures and listings.

A tuning run is what one call of the tuner recorded: batches of trials of one kernel,
specialization, machine, versions and search. The database keeps no run id (trials are
recorded batch by batch, each batch stamped with the time it was stored), so runs are
told apart by time: a batch stored more than `RUN_GAP_S` after the previous batch of the
same key and search starts a new run. A run's id is the database id of its first trial,
which never changes. Trials imported from recorded landscapes (search "landscape") were
not tuned here and are no run.

The file is opened read-only: reading never creates, upgrades or repairs it. An
`energy_j` column (joules per call, where energy was measured) is read when present.

Example::

    runs = read_runs(default_db_path(), kernel="softmax", shape="4096x4096")
    for run in runs:
        print(run.id, run.search, len(run.trials), run.best_ms())
"""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Iterable
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tilecraft.autotune.dbschema import APPLICATION_ID
from tilecraft.exc import ReportError

RUN_GAP_S = 120.0  # a longer pause between two batches of one key and search: a new run
IMPORTED = "landscape"  # the search name of trials imported from recorded landscapes
_COLUMNS = (
    "id, created, kernel, kernel_name, spec_key, hardware, versions, search, config,"
    " status, time_ms, compile_s"
)


@dataclass(frozen=True)
class RunTrial:
    """One trial of a run: its place (1 = first), wall seconds since the run began, the
    kernel time (None unless it ran and was right), status, joules per call (None when
    not measured) and config (as stored, a dict)."""

    index: int
    wall_s: float
    time_ms: float | None
    status: str
    energy_j: float | None
    config: dict[str, Any]


@dataclass
class TuningRun:
    """The trials one tuning of one kernel at one specialization recorded, in order."""

    id: int
    kernel: str
    kernel_name: str
    spec_key: str
    hardware: str
    versions: str
    search: str
    started: float  # seconds since the epoch (estimated: see `_wall_times`)
    trials: list[RunTrial] = field(default_factory=list)

    @property
    def group(self) -> tuple[str, str, str]:
        """What makes runs comparable: the same kernel source, specialization and machine."""
        return (self.kernel, self.spec_key, self.hardware)

    def best_so_far(self) -> list[float | None]:
        """After each trial, the fastest time found so far (None before the first ok one)."""
        best: list[float | None] = []
        for trial in self.trials:
            best.append(_faster(best[-1] if best else None, trial.time_ms))
        return best

    def best_ms(self) -> float | None:
        """The fastest time the run found."""
        return self.best_so_far()[-1] if self.trials else None

    def wall_s(self) -> float:
        """How long the run took, in seconds (estimated)."""
        return self.trials[-1].wall_s if self.trials else 0.0

    def failed(self) -> int:
        """How many trials did not run, or gave wrong results."""
        return sum(t.time_ms is None for t in self.trials)

    def has_energy(self) -> bool:
        """Whether any trial's energy was measured."""
        return any(t.energy_j is not None for t in self.trials)

    def label(self) -> str:
        """A short name for listings: kernel, shape and search."""
        return f"{self.kernel_name} {self.spec_key} ({self.search})"


def _faster(best: float | None, time_ms: float | None) -> float | None:
    if time_ms is None:
        return best
    return time_ms if best is None else min(best, time_ms)


def read_runs(
    path: Path | str,
    kernel: str | None = None,
    shape: str | None = None,
    ids: Iterable[int] = (),
) -> list[TuningRun]:
    """The tuning runs stored in the database at `path`, oldest first; `kernel` (a
    kernel's name or a prefix of its fingerprint), `shape` ("4096x4096" or part of the
    specialization's text) and `ids` (run ids) keep only the runs that match."""
    rows, has_energy = _trial_rows(Path(path))
    runs = _split_runs(rows, has_energy)
    runs = [r for r in runs if matches(r, kernel, shape)]
    wanted = set(ids)
    return [r for r in runs if r.id in wanted] if wanted else runs


def matches(run: TuningRun, kernel: str | None, shape: str | None) -> bool:
    """Whether `run` is of the kernel and shape asked for (None: any)."""
    if kernel and kernel != run.kernel_name and not run.kernel.startswith(kernel):
        return False
    return not shape or shape_pattern(shape) in run.spec_key


def shape_pattern(shape: str) -> str:
    """ "4096x4096" as a specialization writes it ("[4096, 4096]"); other text unchanged."""
    if re.fullmatch(r"\d+(x\d+)*", shape):
        return "[" + ", ".join(shape.split("x")) + "]"
    return shape


def open_read_only(path: Path, what: str) -> sqlite3.Connection:
    """A read-only connection to an existing SQLite file; ReportError when there is none."""
    if not path.is_file():
        raise ReportError(f"no {what} at {path}")
    try:
        return sqlite3.connect(f"file:{path.resolve()}?mode=ro", uri=True)
    except sqlite3.Error as error:
        raise ReportError(f"cannot open the {what} {path}: {error}") from None


def _trial_rows(path: Path) -> tuple[list[tuple[Any, ...]], bool]:
    """Every trial but imported ones, in id order; and whether energy was a column."""
    with closing(open_read_only(path, "tuning database")) as conn:
        try:
            if conn.execute("PRAGMA application_id").fetchone()[0] != APPLICATION_ID:
                raise ReportError(f"{path} is not a tilecraft tuning database")
            names = {row[1] for row in conn.execute("PRAGMA table_info(trials)")}
            energy = ", energy_j" if "energy_j" in names else ""
            sql = f"SELECT {_COLUMNS}{energy} FROM trials WHERE search != ? ORDER BY id"
            return conn.execute(sql, (IMPORTED,)).fetchall(), bool(energy)
        except sqlite3.DatabaseError as error:
            raise ReportError(f"cannot read the tuning database {path}: {error}") from None


def _split_runs(rows: list[tuple[Any, ...]], has_energy: bool) -> list[TuningRun]:
    """Rows grouped into runs (see the module's docstring), ordered by their first trial."""
    open_runs: dict[tuple[str, ...], tuple[TuningRun, float]] = {}  # key -> (run, last batch)
    runs: list[TuningRun] = []
    batches: dict[int, list[tuple[Any, ...]]] = {}
    for row in rows:
        ident, created, kernel, name, spec, hardware, versions, search = row[:8]
        key = (kernel, spec, hardware, versions, search)
        current = open_runs.get(key)
        if current is None or created - current[1] > RUN_GAP_S:
            run = TuningRun(ident, kernel, name, spec, hardware, versions, search, created)
            runs.append(run)
            current = (run, created)
        open_runs[key] = (current[0], created)
        batches.setdefault(current[0].id, []).append(row)
    for run in runs:
        run.trials, run.started = _trials(batches[run.id], has_energy)
    return runs


def _trials(rows: list[tuple[Any, ...]], has_energy: bool) -> tuple[list[RunTrial], float]:
    """A run's trials, and when it began: its first batch was stored when that batch was
    done, so it began about the batch's longest compile earlier (compiles run in parallel)."""
    first = rows[0][1]
    started = first - max(row[11] or 0.0 for row in rows if row[1] == first)
    trials = [
        RunTrial(
            index=i + 1,
            wall_s=row[1] - started,
            time_ms=row[10] if row[9] == "ok" else None,
            status=row[9],
            energy_j=row[12] if has_energy else None,
            config=_config(row[8]),
        )
        for i, row in enumerate(rows)
    ]
    return trials, started


def _config(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}
