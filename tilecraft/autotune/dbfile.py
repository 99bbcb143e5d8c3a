"""The file under the tuning database: made private, checked for damage, set aside.

Split from `db` so that the database's logic reads apart from the file system's.
"""

from __future__ import annotations

import os
import sqlite3
import stat
import time
from contextlib import suppress
from pathlib import Path

# SQLite's primary result codes for a damaged file: SQLITE_CORRUPT and SQLITE_NOTADB.
_CORRUPT_CODES = (11, 26)


def create_private(path: Path) -> None:
    """Make the file (and its folder) readable by this user only, whatever the umask;
    SQLite gives its journals the database file's permissions."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
    except FileExistsError:
        info = path.stat()
        if info.st_uid == os.getuid() and stat.S_IMODE(info.st_mode) & 0o077:
            with suppress(OSError):  # made by an older tilecraft under a loose umask
                os.chmod(path, 0o600)


def quick_check(conn: sqlite3.Connection) -> None:
    """Raise a corrupt-file DatabaseError unless SQLite finds every page sound."""
    rows = conn.execute("PRAGMA quick_check").fetchall()
    if rows != [("ok",)]:
        problem = "; ".join(str(r[0]) for r in rows[:3])
        raise sqlite3.DatabaseError(f"database disk image is malformed ({problem})")


def inode(path: Path) -> tuple[int, int] | None:
    try:
        info = path.stat()
    except OSError:
        return None
    return info.st_dev, info.st_ino


def is_corrupt(error: sqlite3.DatabaseError) -> bool:
    code = getattr(error, "sqlite_errorcode", None)
    if code is not None:
        return (code & 0xFF) in _CORRUPT_CODES
    text = str(error)
    return "not a database" in text or "malformed" in text


def move_aside(path: Path) -> Path:
    """Rename a damaged file (and its journals) to `<name>.corrupt-<timestamp>`."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    aside = path.with_name(f"{path.name}.corrupt-{stamp}-{os.getpid()}")
    # A stale WAL would be replayed into the fresh file, so it goes with the database.
    for suffix in ("", "-wal", "-journal"):
        rename_if_present(Path(f"{path}{suffix}"), Path(f"{aside}{suffix}"))
    Path(f"{path}-shm").unlink(missing_ok=True)
    return aside


def rename_if_present(source: Path, target: Path) -> None:
    # Another process may have set the same file aside a moment ago.
    with suppress(FileNotFoundError):
        os.replace(source, target)
