"""The tuning database's file: its schema, and connections that find it ready (created,
upgraded, or refused as not ours)."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

from tilecraft.autotune.dbfile import create_private, quick_check

SCHEMA_VERSION = 3  # 2 added `specs`, 3 `trials.energy_j`; older files upgrade in place
#: Stamped in the file header so that another program's SQLite file is never mistaken
#: for ours ("TCdb").
APPLICATION_ID = 0x54436462
BUSY_TIMEOUT_S = 30.0
MEMORY = ":memory:"

_SCHEMA = """
CREATE TABLE trials (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    created REAL NOT NULL,
    kernel TEXT NOT NULL,
    kernel_name TEXT NOT NULL,
    spec_key TEXT NOT NULL,
    hardware TEXT NOT NULL,
    versions TEXT NOT NULL,
    search TEXT NOT NULL,
    config TEXT NOT NULL,
    status TEXT NOT NULL,
    time_ms REAL,
    compile_s REAL NOT NULL,
    error TEXT NOT NULL,
    energy_j REAL
);
CREATE INDEX trials_by_key ON trials (kernel, spec_key, hardware);
CREATE TABLE best (
    kernel TEXT NOT NULL,
    spec_key TEXT NOT NULL,
    hardware TEXT NOT NULL,
    versions TEXT NOT NULL,
    config TEXT NOT NULL,
    time_ms REAL NOT NULL,
    created REAL NOT NULL,
    PRIMARY KEY (kernel, spec_key, hardware, versions)
);
CREATE TABLE IF NOT EXISTS specs (
    kernel TEXT NOT NULL,
    spec_key TEXT NOT NULL,
    hardware TEXT NOT NULL,
    description TEXT NOT NULL,
    PRIMARY KEY (kernel, spec_key, hardware)
);
"""
_SPECS = _SCHEMA[_SCHEMA.index("CREATE TABLE IF NOT EXISTS specs") :]  # new in version 2


def _add_column(table: str, column: str, kind: str) -> Callable[[sqlite3.Connection], None]:
    """An upgrade step adding a nullable column, unless the table has it already."""

    def add(conn: sqlite3.Connection) -> None:
        present = {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}
        if column not in present:
            conn.execute(f"ALTER TABLE {table} ADD COLUMN {column} {kind}")

    return add


# The step from the version before to each version, applied in order inside one
# transaction that first re-reads the version (another process may have upgraded); each
# is safe to run again.
_UPGRADES: dict[int, Callable[[sqlite3.Connection], None]] = {
    2: lambda conn: _run_script(conn, _SPECS),
    # joules per call of a trial (NULL where not measured: older rows, no energy meter)
    3: _add_column("trials", "energy_j", "REAL"),
}


class Unusable(Exception):
    """A readable SQLite file that is not (or not yet) a tilecraft tuning database."""


def connect(path: Path | str, check: bool = False) -> sqlite3.Connection:
    """A connection in autocommit mode (we issue BEGIN ourselves) on a ready schema;
    `check` first runs SQLite's quick_check, which finds damage anywhere in the file."""
    if path != MEMORY:
        create_private(Path(path))
    conn = sqlite3.connect(
        path, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False
    )
    try:
        conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
        conn.execute("PRAGMA journal_mode = WAL")
        # WAL is durable against process crashes with NORMAL; FULL only adds power-loss
        # safety for the last commits, which a tuner can afford to lose.
        conn.execute("PRAGMA synchronous = NORMAL")
        if check:
            quick_check(conn)
        if _needs_schema(conn):
            _create_schema(conn)
        elif conn.execute("PRAGMA user_version").fetchone()[0] < SCHEMA_VERSION:
            _upgrade(conn)
    except BaseException:
        conn.close()
        raise
    return conn


def _needs_schema(conn: sqlite3.Connection) -> bool:
    """True for an empty file; raise Unusable for one that is not ours or too new."""
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    app = conn.execute("PRAGMA application_id").fetchone()[0]
    tables = conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
    if version == 0 and app == 0 and tables == 0:
        return True
    if app != APPLICATION_ID:
        raise Unusable("it is not a tilecraft tuning database")
    if version > SCHEMA_VERSION:
        raise Unusable(
            f"its schema version {version} is newer than this tilecraft's ({SCHEMA_VERSION})"
        )
    if version < 1:
        raise Unusable(f"its schema version {version} is unknown")
    return False


def _create_schema(conn: sqlite3.Connection) -> None:
    """Create the tables, unless another process did so while we waited for the lock."""

    def create() -> None:
        if _needs_schema(conn):
            _run_script(conn, _SCHEMA)
            conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    _immediately(conn, create)


def _upgrade(conn: sqlite3.Connection) -> None:
    """Bring an older file to this version (adds tables and columns; keeps every row)."""

    def upgrade() -> None:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        for step in range(version + 1, SCHEMA_VERSION + 1):
            _UPGRADES[step](conn)
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    _immediately(conn, upgrade)


def _immediately(conn: sqlite3.Connection, work: Callable[[], None]) -> None:
    """Run `work` in one IMMEDIATE transaction: all of it or nothing."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        work()
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


def _run_script(conn: sqlite3.Connection, script: str) -> None:
    for statement in script.split(";"):
        if statement.strip():
            conn.execute(statement)
