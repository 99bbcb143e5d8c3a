"""The tuning database: every trial and the best config per key, in one SQLite file.

Several processes may tune into the same file at once: it is kept in WAL mode, waits up
to `BUSY_TIMEOUT_S` for the write lock, and writes each batch in its own short
`BEGIN IMMEDIATE` transaction, so a batch lands whole or not at all. A file that cannot
be used (not a database, another program's database, a newer schema) never stops the
tuner: it is set aside or left alone with a `TuningDBWarning`, and tuning goes on.

Example::

    with TuningDB(default_db_path()) as db:
        db.record(trials, kernel=fp, kernel_name="matmul", spec_key=spec,
                  hardware="NVIDIA H200", versions=versions, search="random")
        db.save_best(TuneKey(fp, spec, "NVIDIA H200", versions), best.config, best.time_ms)
"""

from __future__ import annotations

import json
import math
import sqlite3
import threading
import time
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from tilecraft.autotune.dbfile import inode, is_corrupt, move_aside
from tilecraft.autotune.dbschema import (
    BUSY_TIMEOUT_S,
    MEMORY,
    Unusable,
    connect,
)
from tilecraft.autotune.trial import Trial
from tilecraft.runtime.cache import usable_dir
from tilecraft.runtime.config import Config
from tilecraft.runtime.settings import Settings

DB_NAME = "tuning.sqlite3"

_TRIAL_COLUMNS = (
    "id",
    "created",
    "kernel",
    "kernel_name",
    "spec_key",
    "hardware",
    "versions",
    "search",
    "config",
    "status",
    "time_ms",
    "compile_s",
    "error",
    "energy_j",  # joules per call; None where not measured (and in rows made before it)
)
_INSERT_TRIAL = (
    f"INSERT INTO trials ({', '.join(_TRIAL_COLUMNS[1:])})"
    f" VALUES ({', '.join('?' * (len(_TRIAL_COLUMNS) - 1))})"
)
_BEST_COLUMNS = ("kernel", "spec_key", "hardware", "versions", "config", "time_ms", "created")
# Concurrent tuners of one key each offer their winner: the fastest measured one stays.
_UPSERT_BEST = (
    "INSERT INTO best (kernel, spec_key, hardware, versions, config, time_ms, created)"
    " VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (kernel, spec_key, hardware, versions)"
    " DO UPDATE SET config = excluded.config, time_ms = excluded.time_ms,"
    " created = excluded.created WHERE excluded.time_ms < best.time_ms"
)
_REPLACE_BEST = (
    f"INSERT OR REPLACE INTO best ({', '.join(_BEST_COLUMNS)}) VALUES (?, ?, ?, ?, ?, ?, ?)"
)
# A trial is new unless one with the same value in every column is stored (`IS` matches
# NULL times of failed trials); the index on (kernel, spec_key, hardware) keeps it fast.
_INSERT_NEW_TRIAL = (
    f"INSERT INTO trials ({', '.join(_TRIAL_COLUMNS[1:])})"
    f" SELECT {', '.join('?' * (len(_TRIAL_COLUMNS) - 1))} WHERE NOT EXISTS"
    f" (SELECT 1 FROM trials WHERE {' AND '.join(f'{c} IS ?' for c in _TRIAL_COLUMNS[1:])})"
)
_DELETE_BEST = (
    "DELETE FROM best WHERE kernel = ? AND spec_key = ? AND hardware = ? AND versions = ?"
)
_SELECT_BEST = (
    "SELECT config FROM best WHERE kernel = ? AND spec_key = ? AND hardware = ? AND versions = ?"
)


class TuningDBWarning(UserWarning):
    """The tuning database file could not be used as it is; tuning goes on without it."""


@dataclass(frozen=True)
class TuneKey:
    """What a best config is valid for: kernel fingerprint, specialization, machine, versions."""

    kernel: str
    spec_key: str
    hardware: str
    versions: str


def default_db_path() -> Path:
    """The shared tuning database under `Settings().cache_dir` (TILECRAFT_CACHE_DIR)."""
    return usable_dir(Settings().cache_dir) / DB_NAME


class TuningDB:
    """Trials and best configs in one SQLite file, safe to share between processes.

    `in_memory` is True when the file could not be used and results only last as long
    as this object (a `TuningDBWarning` said why).
    """

    def __init__(self, path: Path | str, check: bool = False) -> None:
        self.path = Path(path)
        self.in_memory = str(path) == MEMORY
        self.check = check  # run SQLite's quick_check on open (tuning does)
        # One connection per instance, shared by threads; the lock keeps their
        # transactions from interleaving on it.
        self._lock = threading.RLock()
        self._conn: sqlite3.Connection | None = self._open()
        self._inode = None if self.in_memory else inode(self.path)

    def record(
        self,
        trials: Sequence[Trial],
        *,
        kernel: str,
        kernel_name: str,
        spec_key: str,
        hardware: str,
        versions: str,
        search: str,
    ) -> None:
        """Store a batch of trials in one transaction: all of them or none."""
        now = time.time()
        head = (now, kernel, kernel_name, spec_key, hardware, versions, search)
        rows = [head + _trial_values(trial) for trial in trials]
        with self._write() as conn:
            conn.executemany(_INSERT_TRIAL, rows)

    def record_for(
        self, key: TuneKey, trials: Sequence[Trial], kernel_name: str, search: str
    ) -> None:
        """`record` for the kernel, specialization, machine and versions of `key`."""
        self.record(
            trials,
            kernel=key.kernel,
            kernel_name=kernel_name,
            spec_key=key.spec_key,
            hardware=key.hardware,
            versions=key.versions,
            search=search,
        )

    def trials(
        self, kernel: str | None = None, spec_key: str | None = None, hardware: str | None = None
    ) -> list[dict[str, Any]]:
        """Stored trials in insertion order, filtered by the keys given; `config` is a Config."""
        filters = {"kernel": kernel, "spec_key": spec_key, "hardware": hardware}
        given = {name: value for name, value in filters.items() if value is not None}
        where = " AND ".join(f"{name} = ?" for name in given) or "1"
        sql = f"SELECT {', '.join(_TRIAL_COLUMNS)} FROM trials WHERE {where} ORDER BY id"
        with self._read() as conn:
            rows = conn.execute(sql, tuple(given.values())).fetchall()
        return [_trial_dict(row) for row in rows]

    def save_best(
        self, key: TuneKey, config: Config, time_ms: float, replace: bool = False
    ) -> None:
        """Make `config` the best for `key` unless a faster one is stored already (another
        process may have tuned the same key at the same time); `replace` keeps it even
        then (a winner under another objective than time, see tune.best_key)."""
        if not math.isfinite(time_ms) or time_ms < 0:
            raise ValueError(f"not a time: {time_ms!r} ms")
        values = (key.kernel, key.spec_key, key.hardware, key.versions)
        sql = _REPLACE_BEST if replace else _UPSERT_BEST
        with self._write() as conn:
            conn.execute(sql, (*values, config.to_json(), time_ms, time.time()))

    def forget_best(self, key: TuneKey) -> None:
        """Drop the best config of `key` (one that no longer fits), so a re-tune replaces it."""
        with self._write() as conn:
            conn.execute(_DELETE_BEST, (key.kernel, key.spec_key, key.hardware, key.versions))

    def gone(self) -> bool:
        """Whether the file was removed or replaced since it was opened: what is written
        now would be lost."""
        return not self.in_memory and inode(self.path) != self._inode

    def load_best(self, key: TuneKey) -> Config | None:
        """The best config saved for `key`, or None; a row this version cannot read is
        dropped with a warning."""
        values = (key.kernel, key.spec_key, key.hardware, key.versions)
        with self._read() as conn:
            row = conn.execute(_SELECT_BEST, values).fetchone()
        config = None if row is None else _parse_config(row[0])
        if row is not None and config is None:
            self.forget_best(key)  # else its stored time would keep a re-tune's winner out
        return config

    def save_description(
        self, kernel: str, spec_key: str, hardware: str, description: dict[str, Any]
    ) -> None:
        """Keep what a cost model needs to know of this kernel and specialization."""
        row = (kernel, spec_key, hardware, json.dumps(description, sort_keys=True))
        with self._write() as conn:
            conn.execute("INSERT OR REPLACE INTO specs VALUES (?, ?, ?, ?)", row)

    def descriptions(self, hardware: str) -> dict[tuple[str, str], dict[str, Any]]:
        """(kernel, spec_key) -> description, for one machine; unreadable ones are skipped."""
        sql = "SELECT kernel, spec_key, description FROM specs WHERE hardware = ?"
        with self._read() as conn:
            rows = conn.execute(sql, (hardware,)).fetchall()
        out = {}
        for kernel, spec_key, text in rows:
            try:
                out[kernel, spec_key] = json.loads(text)
            except ValueError:
                warnings.warn(
                    f"tilecraft: unreadable description of {spec_key}", TuningDBWarning, 2
                )
        return out

    def count(self) -> int:
        """How many trials are stored."""
        with self._read() as conn:
            return int(conn.execute("SELECT count(*) FROM trials").fetchone()[0])

    def export_jsonl(self, path: Path | str) -> int:
        """Write every trial as one JSON object per line (config as a dict); return the count."""
        sql = f"SELECT {', '.join(_TRIAL_COLUMNS)} FROM trials ORDER BY id"
        with self._read() as conn:
            rows = conn.execute(sql).fetchall()
        with open(path, "w", encoding="utf-8") as out:
            for row in rows:
                record = dict(zip(_TRIAL_COLUMNS, row, strict=True))
                record["config"] = json.loads(record["config"])
                out.write(json.dumps(record, sort_keys=True) + "\n")
        return len(rows)

    def trial_rows(
        self, kernel: str | None = None, spec_key: str | None = None
    ) -> list[dict[str, Any]]:
        """Stored trials as plain JSON-ready dicts (config as its JSON text, no `id`):
        what `add_trial_rows` takes on another machine."""
        given = {k: v for k, v in {"kernel": kernel, "spec_key": spec_key}.items() if v}
        where = " AND ".join(f"{name} = ?" for name in given) or "1"
        sql = f"SELECT {', '.join(_TRIAL_COLUMNS[1:])} FROM trials WHERE {where} ORDER BY id"
        with self._read() as conn:
            rows = conn.execute(sql, tuple(given.values())).fetchall()
        return [dict(zip(_TRIAL_COLUMNS[1:], row, strict=True)) for row in rows]

    def add_trial_rows(self, rows: Sequence[dict[str, Any]]) -> int:
        """Store trials made elsewhere (`trial_rows`' dicts), skipping any stored already
        (same values in every column): merging twice adds nothing. Returns how many were
        new; all land in one transaction."""
        values = [tuple(_field(row, name) for name in _TRIAL_COLUMNS[1:]) for row in rows]
        with self._write() as conn:
            before = conn.total_changes
            conn.executemany(_INSERT_NEW_TRIAL, [v + v for v in values])
            return conn.total_changes - before

    def best_rows(
        self, kernel: str | None = None, spec_key: str | None = None
    ) -> list[dict[str, Any]]:
        """Stored best configs as plain dicts (config as JSON text), filtered by the keys given."""
        given = {k: v for k, v in {"kernel": kernel, "spec_key": spec_key}.items() if v}
        where = " AND ".join(f"{name} = ?" for name in given) or "1"
        sql = f"SELECT {', '.join(_BEST_COLUMNS)} FROM best WHERE {where}"
        with self._read() as conn:
            rows = conn.execute(sql, tuple(given.values())).fetchall()
        return [dict(zip(_BEST_COLUMNS, row, strict=True)) for row in rows]

    def add_best_rows(self, rows: Sequence[dict[str, Any]]) -> int:
        """Offer best configs made elsewhere: each is kept unless a faster one is stored
        for its key (as with `save_best`); rows whose config does not parse are skipped."""
        kept = 0
        for row in rows:
            config = _parse_config(row["config"])
            key = TuneKey(row["kernel"], row["spec_key"], row["hardware"], row["versions"])
            if config is not None:
                self.save_best(key, config, float(row["time_ms"]))
                kept += 1
        return kept

    def merge_from(self, other: TuningDB) -> dict[str, int]:
        """Add another database's trials (without duplicates), best configs (the faster one
        of a key stays) and descriptions; returns counts of what was offered and added."""
        trials = other.trial_rows()
        best = other.best_rows()
        with other._read() as conn:
            specs = conn.execute("SELECT * FROM specs").fetchall()
        added = self.add_trial_rows(trials)
        self.add_best_rows(best)
        with self._write() as conn:
            conn.executemany("INSERT OR IGNORE INTO specs VALUES (?, ?, ?, ?)", specs)
        return {"trials": len(trials), "new_trials": added, "best": len(best)}

    def close(self) -> None:
        """Close the connection; further calls on this object raise."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def __enter__(self) -> TuningDB:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        where = "in memory" if self.in_memory else str(self.path)
        return f"TuningDB({where})"

    @contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        with self._lock, self._recovering():
            yield self._connection()

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One short IMMEDIATE transaction: takes the write lock up front (waiting for it up
        to the busy timeout) so that it never fails half-way on a lock upgrade."""
        with self._lock, self._recovering():
            conn = self._connection()
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise

    @contextmanager
    def _recovering(self) -> Iterator[None]:
        """Damage found while working (a bad page deep in the file) sets the file aside and
        goes on with a fresh one; the operation itself still raises its DatabaseError."""
        try:
            yield
        except sqlite3.DatabaseError as error:
            if self.in_memory or not is_corrupt(error) or self._conn is None:
                raise
            self._conn.close()
            self._conn = self._replace_corrupt(error)
            self._inode = None if self.in_memory else inode(self.path)
            raise

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            raise sqlite3.ProgrammingError(f"{self!r} is closed")
        return self._conn

    def _open(self) -> sqlite3.Connection:
        """Open the file, setting aside a damaged one; fall back to memory if it is unusable."""
        if self.in_memory:
            return connect(MEMORY)
        try:
            return _connect_when_free(self.path, self.check)
        except Unusable as problem:
            return self._fall_back(f"{problem}; it is left untouched")
        except sqlite3.DatabaseError as error:
            if not is_corrupt(error):
                return self._fall_back(f"it cannot be opened ({error})")
            return self._replace_corrupt(error)
        except OSError as error:
            return self._fall_back(f"it cannot be opened ({error})")

    def _replace_corrupt(self, error: sqlite3.DatabaseError) -> sqlite3.Connection:
        aside = move_aside(self.path)
        _warn(self.path, f"it is damaged ({error}); moved it to {aside.name} and started anew")
        try:
            return connect(self.path)
        except (sqlite3.Error, Unusable, OSError) as again:
            return self._fall_back(f"a fresh database cannot be made there either ({again})")

    def _fall_back(self, reason: str) -> sqlite3.Connection:
        _warn(self.path, f"{reason}; results of this run are kept in memory only")
        self.in_memory = True
        return connect(MEMORY)


def _connect_when_free(path: Path, check: bool) -> sqlite3.Connection:
    """`connect`, waiting out another process that holds the file while it creates it or
    switches it to WAL (SQLite answers "locked" there without waiting for the busy
    timeout); a writer that fell back to memory then lost all its trials."""
    deadline = time.monotonic() + BUSY_TIMEOUT_S
    while True:
        try:
            return connect(path, check)
        except sqlite3.OperationalError as error:
            busy = "locked" in str(error) or "busy" in str(error)
            if not busy or time.monotonic() > deadline:
                raise
            time.sleep(0.02)


def _warn(path: Path, reason: str) -> None:
    warnings.warn(f"tilecraft: ignoring tuning database {path}: {reason}", TuningDBWarning, 4)


def _trial_values(trial: Trial) -> tuple[Any, ...]:
    time_ms = None if trial.time_ms is None else float(trial.time_ms)
    config = trial.config.to_json()
    energy_j = None if trial.energy_j is None else float(trial.energy_j)
    return (config, trial.status, time_ms, float(trial.compile_s), trial.error, energy_j)


# Columns added after rows were first exported: rows written before them lack them.
_OPTIONAL = ("energy_j",)


def _field(row: dict[str, Any], name: str) -> Any:
    """A trial row's value of a column (KeyError if it lacks a required one)."""
    return row.get(name) if name in _OPTIONAL else row[name]


def _trial_dict(row: Sequence[Any]) -> dict[str, Any]:
    record = dict(zip(_TRIAL_COLUMNS, row, strict=True))
    record["config"] = _parse_config(record["config"])
    return record


def _parse_config(text: str) -> Config | None:
    """A stored config, or None with a warning when it no longer validates (whatever the
    text holds: deep nesting, wrong types, unknown fields)."""
    try:
        return Config.from_json(text)
    except Exception as error:  # noqa: BLE001 - a bad row must never stop a kernel
        warnings.warn(f"tilecraft: unreadable stored config {text!r}: {error}", TuningDBWarning, 3)
        return None
