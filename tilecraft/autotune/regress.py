"""Regression tracking: benchmark runs stored by name, compared with a statistical test.

A run is, per kernel, several timing samples (each the median of one `do_bench`), kept
with the GPU, the library versions and the git commit in a small SQLite file beside the
tuning database (`bench.sqlite3`). Two runs are compared kernel by kernel as asv does:
a one-sided Mann-Whitney U test says whether the new samples are larger than the
reference's, and a change is flagged only when that is significant (p < `ALPHA`) *and*
the medians differ by more than the threshold, so timing noise is not a regression.

Example::

    store_run(path, "main", {"softmax": [0.071, 0.070, ...]}, gpu, versions, commit)
    changes = compare(load_run(path, "main"), load_run(path, "pr"), threshold=0.05)
    if any(c.verdict == "regression" for c in changes): ...
"""

from __future__ import annotations

import sqlite3
import statistics
import time
from collections.abc import Mapping, Sequence
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

BENCH_DB = "bench.sqlite3"
ALPHA = 0.01  # significance of the Mann-Whitney U test
THRESHOLD = 0.05  # least relative change of the median that counts
MIN_SAMPLES = 3  # fewer samples on a side: no verdict ("unknown")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS samples (
    run TEXT NOT NULL, kernel TEXT NOT NULL, ms REAL NOT NULL,
    gpu TEXT, versions TEXT, git_commit TEXT, created REAL
)
"""


@dataclass(frozen=True)
class Change:
    """One kernel's comparison: medians, their ratio (new / reference), the test's p
    value and the verdict: "regression", "improvement", "same" or "unknown"."""

    kernel: str
    ref_ms: float | None
    new_ms: float | None
    ratio: float | None
    p_value: float | None
    verdict: str


def _connect(path: Path | str) -> sqlite3.Connection:
    conn = sqlite3.connect(path)
    conn.execute(_SCHEMA)
    return conn


def store_run(
    path: Path | str,
    run: str,
    timings: Mapping[str, Sequence[float]],
    gpu: str = "",
    versions: str = "",
    commit: str = "",
) -> None:
    """Store (replacing a run of the same name) every kernel's timing samples."""
    now = time.time()
    rows = [
        (run, kernel, float(ms), gpu, versions, commit, now)
        for kernel, samples in timings.items()
        for ms in samples
    ]
    with closing(_connect(path)) as conn, conn:
        conn.execute("DELETE FROM samples WHERE run = ?", (run,))
        conn.executemany("INSERT INTO samples VALUES (?, ?, ?, ?, ?, ?, ?)", rows)


def load_run(path: Path | str, run: str) -> dict[str, list[float]]:
    """A stored run's samples per kernel; KeyError (naming the stored runs) if none."""
    with closing(_connect(path)) as conn:
        rows = conn.execute(
            "SELECT kernel, ms FROM samples WHERE run = ? ORDER BY rowid", (run,)
        ).fetchall()
    if not rows:
        raise KeyError(f"no benchmark run {run!r}; stored: {', '.join(runs(path)) or 'none'}")
    out: dict[str, list[float]] = {}
    for kernel, ms in rows:
        out.setdefault(kernel, []).append(ms)
    return out


@dataclass(frozen=True)
class BenchRun:
    """One kernel's samples in one stored run, with the GPU, versions and commit it ran on."""

    run: str
    kernel: str
    samples: tuple[float, ...]
    gpu: str
    versions: str
    commit: str
    created: float


def history(path: Path | str) -> dict[str, list[BenchRun]]:
    """Each kernel's stored runs, oldest run first (as `runs` orders them); the file is
    only read (ReportError when there is none)."""
    from tilecraft.autotune.runs import open_read_only

    with closing(open_read_only(Path(path), "benchmark database")) as conn:
        try:
            rows = conn.execute(_HISTORY).fetchall()
        except sqlite3.OperationalError:  # no samples table: nothing was ever stored
            return {}
    grouped: dict[tuple[str, str], list[tuple]] = {}
    for row in rows:
        grouped.setdefault((row[0], row[1]), []).append(row)
    out: dict[str, list[BenchRun]] = {}
    for (run, kernel), group in grouped.items():
        _, _, _, gpu, versions, commit, created = group[0]
        samples = tuple(float(r[2]) for r in group)
        out.setdefault(kernel, []).append(
            BenchRun(run, kernel, samples, gpu or "", versions or "", commit or "", created or 0)
        )
    return out


# Runs in the order they were first stored, each run's samples in the order stored.
_HISTORY = """
SELECT s.run, s.kernel, s.ms, s.gpu, s.versions, s.git_commit, s.created FROM samples s
JOIN (SELECT run, min(rowid) AS first FROM samples GROUP BY run) f ON s.run = f.run
ORDER BY f.first, s.rowid
"""


def runs(path: Path | str) -> list[str]:
    """The stored runs' names, oldest first (a run stored again counts as new)."""
    with closing(_connect(path)) as conn:
        rows = conn.execute(
            "SELECT run, min(rowid) AS first FROM samples GROUP BY run ORDER BY first"
        ).fetchall()
    return [r[0] for r in rows]


def compare(
    ref: dict[str, list[float]],
    new: dict[str, list[float]],
    threshold: float = THRESHOLD,
    alpha: float = ALPHA,
) -> list[Change]:
    """Every kernel of either run, compared (see the module's docstring)."""
    return [
        _change(kernel, ref.get(kernel, []), new.get(kernel, []), threshold, alpha)
        for kernel in sorted(set(ref) | set(new))
    ]


def _change(
    kernel: str, ref: list[float], new: list[float], threshold: float, alpha: float
) -> Change:
    ref_ms = statistics.median(ref) if ref else None
    new_ms = statistics.median(new) if new else None
    if ref_ms is None or new_ms is None or min(len(ref), len(new)) < MIN_SAMPLES:
        return Change(kernel, ref_ms, new_ms, None, None, "unknown")
    from scipy.stats import mannwhitneyu  # comes with scikit-learn

    ratio = new_ms / ref_ms
    slower = float(mannwhitneyu(new, ref, alternative="greater").pvalue)
    faster = float(mannwhitneyu(new, ref, alternative="less").pvalue)
    if slower < alpha and ratio > 1 + threshold:
        return Change(kernel, ref_ms, new_ms, ratio, slower, "regression")
    if faster < alpha and ratio < 1 / (1 + threshold):
        return Change(kernel, ref_ms, new_ms, ratio, faster, "improvement")
    return Change(kernel, ref_ms, new_ms, ratio, min(slower, faster), "same")


def report(changes: list[Change]) -> str:
    """The comparison as a table, one kernel a line."""
    lines = [f"{'kernel':32} {'ref ms':>10} {'new ms':>10} {'ratio':>7} {'p':>8}  verdict"]
    for c in changes:
        cells = [_num(c.ref_ms, ".4f"), _num(c.new_ms, ".4f"), _num(c.ratio, ".3f")]
        lines.append(
            f"{c.kernel:32} {cells[0]:>10} {cells[1]:>10} {cells[2]:>7}"
            f" {_num(c.p_value, '.2g'):>8}  {c.verdict}"
        )
    return "\n".join(lines)


def _num(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)
