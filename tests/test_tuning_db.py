"""The tuning database: round trips, best configs, concurrent and killed writers, bad files."""

from __future__ import annotations

import json
import random
import signal
import sqlite3
import subprocess
import sys
import threading
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from tilecraft.autotune.db import TuneKey, TuningDB, TuningDBWarning, default_db_path
from tilecraft.autotune.trial import Trial
from tilecraft.runtime.config import Config

PACKAGE = Path(__file__).resolve().parent.parent / "tilecraft"
KEY = {"kernel": "fp1", "spec_key": "f32[64,64]", "hardware": "cpu", "versions": "torch=2;tc=0.1"}

# Child processes register `tilecraft` as a bare package so that importing the database
# does not run tilecraft/__init__.py, which imports torch (about 5 s per process).
BOOT = """
import sys, types
package = types.ModuleType("tilecraft")
package.__path__ = [sys.argv[1]]
sys.modules["tilecraft"] = package
from tilecraft.autotune.db import TuningDB
from tilecraft.autotune.trial import Trial
from tilecraft.runtime.config import Config
META = dict(kernel_name="k", spec_key="s", hardware="cpu", versions="v", search="test")
"""

# Waits for the `go` file so that both writers really overlap, then writes 200 batches.
WRITER = (
    BOOT
    + """
import os, time
db, go, name = TuningDB(sys.argv[2]), sys.argv[3], sys.argv[4]
print("ready", flush=True)
while not os.path.exists(go):
    time.sleep(0.005)
for batch in range(200):
    trials = [Trial(Config(num_warps=4, tag=f"{name}-{batch}-{i}"), "ok", 1.0) for i in range(5)]
    db.record(trials, kernel=name, **META)
db.close()
"""
)

# Inserts a large batch, with a tiny page cache so that uncommitted pages spill into the
# WAL file, then stalls just before COMMIT until the parent kills it.
KILLED = (
    BOOT
    + """
import time
db = TuningDB(sys.argv[2])
db._conn.execute("PRAGMA cache_size = 5")

class StallBeforeCommit:
    def __init__(self, conn):
        self.conn = conn
    def __getattr__(self, name):
        return getattr(self.conn, name)
    def execute(self, sql, *args):
        if sql == "COMMIT":
            print("inserting", flush=True)
            time.sleep(120)
        return self.conn.execute(sql, *args)

db._conn = StallBeforeCommit(db._conn)
trials = [Trial(Config(num_warps=2, tag=i), "ok", 0.5) for i in range(20000)]
db.record(trials, kernel="killed", **META)
"""
)


def make_trials(tag: str, n: int = 5) -> list[Trial]:
    return [
        Trial(Config(block_sizes=[16, 32], num_warps=4, tag=f"{tag}{i}"), "ok", 1.0 + i)
        for i in range(n)
    ]


def record(db: TuningDB, trials: list[Trial], **overrides: str) -> None:
    meta = dict(KEY, kernel_name="matmul", search="random") | overrides
    db.record(trials, **meta)


def spawn(script: str, *args: object) -> subprocess.Popen[str]:
    argv = [sys.executable, "-c", script, str(PACKAGE), *map(str, args)]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def integrity(path: Path) -> str:
    with closing(sqlite3.connect(path)) as conn:
        return str(conn.execute("PRAGMA integrity_check").fetchone()[0])


def test_round_trip_with_filters(tmp_path: Path) -> None:
    good = Trial(Config(block_sizes=[64, 32], num_warps=8, num_stages=3), "ok", 0.25, 1.5)
    broken = Trial(Config(block_sizes=[128, 128]), "compile_error", None, 0.75, "out of smem")
    slow = Trial(Config(num_warps=2, unroll=4), "timeout", None, 2.0, "took > 1s")
    with TuningDB(tmp_path / "t.sqlite3") as db:
        record(db, [good, broken])
        record(db, [slow], hardware="NVIDIA H200")
        record(db, make_trials("x", 3), kernel="fp2")
        assert db.count() == 6
        rows = db.trials(kernel="fp1", hardware="cpu")
        all_fp1 = db.trials(kernel="fp1")
        h200 = db.trials(hardware="NVIDIA H200", spec_key=KEY["spec_key"])
    assert [r["config"] for r in rows] == [good.config, broken.config]
    assert [r["status"] for r in rows] == ["ok", "compile_error"]
    assert (rows[0]["time_ms"], rows[0]["compile_s"], rows[0]["error"]) == (0.25, 1.5, "")
    assert (rows[1]["time_ms"], rows[1]["error"]) == (None, "out of smem")
    assert rows[0]["kernel_name"] == "matmul" and rows[0]["versions"] == KEY["versions"]
    assert rows[0]["search"] == "random" and rows[0]["created"] > 0
    assert len(all_fp1) == 3 and [r["config"] for r in h200] == [slow.config]


def test_batch_is_all_or_nothing(tmp_path: Path) -> None:
    bad = Trial(Config(num_warps=4), None)  # type: ignore[arg-type]  # violates NOT NULL
    with TuningDB(tmp_path / "t.sqlite3") as db:
        with pytest.raises(sqlite3.IntegrityError):
            record(db, [*make_trials("a"), bad])
        assert db.count() == 0
        record(db, make_trials("b"))  # no transaction was left open
        assert db.count() == 5


def test_best_upserts_per_key(tmp_path: Path) -> None:
    key = TuneKey(**KEY)
    newer = TuneKey(**(KEY | {"versions": "torch=3;tc=0.2"}))
    other_gpu = TuneKey(**(KEY | {"hardware": "NVIDIA H200"}))
    first, second, third = Config(num_warps=4), Config(num_warps=8), Config(block_sizes=[64])
    with TuningDB(tmp_path / "t.sqlite3") as db:
        assert db.load_best(key) is None
        db.save_best(key, first, 2.0)
        db.save_best(newer, third, 1.0)
        db.save_best(key, second, 1.5)
        assert db.load_best(key) == second
        assert db.load_best(newer) == third
        assert db.load_best(other_gpu) is None
    with TuningDB(tmp_path / "t.sqlite3") as db:
        assert db.load_best(key) == second


def test_two_processes_write_concurrently(tmp_path: Path) -> None:
    path, go = tmp_path / "shared.sqlite3", tmp_path / "go"
    writers = [spawn(WRITER, path, go, name) for name in ("w1", "w2")]
    for writer in writers:
        assert writer.stdout is not None and writer.stdout.readline() == "ready\n"
    go.touch()
    for writer in writers:
        _, err = writer.communicate(timeout=60)
        assert writer.returncode == 0, err
    with TuningDB(path) as db:
        rows = db.trials()
        assert db.count() == 2000
    tags = {row["config"].get("tag") for row in rows}
    assert len(tags) == 2000 and all(row["status"] == "ok" for row in rows)
    assert len([row for row in rows if row["kernel"] == "w1"]) == 1000
    assert integrity(path) == "ok"


def test_writer_killed_mid_transaction(tmp_path: Path) -> None:
    path = tmp_path / "t.sqlite3"
    with TuningDB(path) as db:
        for batch in range(3):
            record(db, make_trials(f"kept{batch}", 10))
    child = spawn(KILLED, path)
    assert child.stdout is not None
    line = child.stdout.readline()
    assert line == "inserting\n", child.communicate()[1]
    assert Path(f"{path}-wal").stat().st_size > 1_000_000  # uncommitted pages on disk
    child.send_signal(signal.SIGKILL)
    child.communicate(timeout=30)
    assert child.returncode == -signal.SIGKILL
    assert integrity(path) == "ok"
    with TuningDB(path) as db:
        assert db.count() == 30
        assert db.trials(kernel="killed") == []
        record(db, make_trials("after"))  # the dead writer's lock is gone
        assert db.count() == 35


def test_corrupt_file_is_set_aside(tmp_path: Path) -> None:
    path = tmp_path / "tuning.sqlite3"
    path.write_bytes(random.Random(0).randbytes(16384))
    with pytest.warns(TuningDBWarning, match="damaged"):
        db = TuningDB(path)
    with db:
        assert not db.in_memory
        record(db, make_trials("a"))
        assert len(db.trials(kernel=KEY["kernel"])) == 5
    assert len(list(tmp_path.glob("tuning.sqlite3.corrupt-*"))) == 1
    with TuningDB(path) as db:
        assert db.count() == 5


def test_newer_schema_is_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "tuning.sqlite3"
    with TuningDB(path) as db:
        record(db, make_trials("old"))
    with closing(sqlite3.connect(path)) as conn:
        conn.execute("PRAGMA user_version = 99")
    with pytest.warns(TuningDBWarning, match="newer"):
        db = TuningDB(path)
    with db:
        assert db.in_memory and db.count() == 0
        record(db, make_trials("new", 3))
        assert [r["config"] for r in db.trials()] == [t.config for t in make_trials("new", 3)]
    with closing(sqlite3.connect(path)) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 99
        assert conn.execute("SELECT count(*) FROM trials").fetchone()[0] == 5


def test_foreign_database_and_unusable_path(tmp_path: Path) -> None:
    foreign = tmp_path / "notes.sqlite3"
    with closing(sqlite3.connect(foreign)) as conn:
        conn.execute("CREATE TABLE notes (text TEXT)")
    with pytest.warns(TuningDBWarning, match="not a tilecraft"), TuningDB(foreign) as db:
        record(db, make_trials("a"))
        assert db.in_memory and db.count() == 5
    (tmp_path / "file").write_text("")
    with pytest.warns(TuningDBWarning, match="cannot be opened"):
        db = TuningDB(tmp_path / "file" / "tuning.sqlite3")
    with db:
        record(db, make_trials("b"))
        assert db.count() == 5


def test_threads_share_one_instance(tmp_path: Path) -> None:
    path = tmp_path / "t.sqlite3"
    with TuningDB(path) as db:

        def work(name: str) -> None:
            for batch in range(25):
                record(db, make_trials(f"{name}-{batch}-", 4), kernel=name)

        threads = [threading.Thread(target=work, args=(f"t{i}",)) for i in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert db.count() == 400
    assert integrity(path) == "ok"


def test_export_jsonl(tmp_path: Path) -> None:
    trials = [*make_trials("a", 2), Trial(Config(num_warps=2), "compile_error", None, 0.1, "e")]
    out = tmp_path / "trials.jsonl"
    with TuningDB(tmp_path / "t.sqlite3") as db:
        record(db, trials)
        assert db.export_jsonl(out) == 3
    lines: list[dict[str, Any]] = [json.loads(line) for line in out.read_text().splitlines()]
    assert [Config(**line["config"]) for line in lines] == [t.config for t in trials]
    assert [line["status"] for line in lines] == ["ok", "ok", "compile_error"]
    assert lines[2]["time_ms"] is None and lines[2]["kernel"] == KEY["kernel"]


def test_wal_mode_and_default_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TILECRAFT_CACHE_DIR", str(tmp_path / "cache"))
    assert default_db_path() == tmp_path / "cache" / "tuning.sqlite3"
    with TuningDB(default_db_path()) as db:
        record(db, make_trials("a"))
    with closing(sqlite3.connect(default_db_path())) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_opening_waits_out_another_process_setting_the_file_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SQLite answers "database is locked" at once while another connection creates the
    file or switches it to WAL: opening must wait, not fall back to memory (a writer that
    did lost every trial it then recorded)."""
    import tilecraft.autotune.db as db_module

    real, answers = db_module.connect, []

    def locked_twice(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        answers.append(1)
        if len(answers) <= 2:
            raise sqlite3.OperationalError("database is locked")
        return real(*args, **kwargs)

    monkeypatch.setattr(db_module, "connect", locked_twice)
    with TuningDB(tmp_path / "t.sqlite3") as db:
        assert not db.in_memory
        record(db, make_trials("k", 3))
        assert db.count() == 3
    assert len(answers) == 3


KERNELS_FILE = """
import torch
import tilecraft as tc


@tc.kernel
def double(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in tc.tile(x.size(0)):
        out[tile] = x[tile] * 2
    return out


@tc.kernel
def triple(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in tc.tile(x.size(0)):
        out[tile] = x[tile] * 3
    return out
"""


def test_kernels_of_an_unregistered_module_are_keyed_by_their_own_source(tmp_path: Path) -> None:
    """A module loaded from its file without sys.modules (as benchmark scripts load theirs)
    still keys each kernel by its source: two kernels never share tuned configs."""
    import importlib.util

    import torch

    from tilecraft.autotune.tune import tune_key

    path = tmp_path / "unregistered_kernels.py"
    path.write_text(KERNELS_FILE)
    spec = importlib.util.spec_from_file_location("unregistered_kernels", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    args = (torch.randn(10),)
    double, triple = (tune_key(k.bind(args), args).kernel for k in (module.double, module.triple))
    assert double != triple
    assert "def double(" in "".join(module.double.bind(args).src.lines)
    torch.testing.assert_close(module.triple(*args), args[0] * 3)
