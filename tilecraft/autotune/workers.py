"""A pool of worker processes that run candidate kernels with a timeout each."""

from __future__ import annotations

import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

SKIPPED_RESULT = {"status": "skipped", "error": "the tuning budget ran out first"}


def past(deadline: float | None) -> bool:
    """Whether `deadline` (time.monotonic; None: never) has passed."""
    return deadline is not None and time.monotonic() >= deadline


@dataclass
class Worker:
    """One `python -m tilecraft.autotune.worker` process."""

    command: list[str]
    log: Path
    proc: subprocess.Popen[str] | None = None
    job: dict | None = None
    deadline: float = 0.0
    ready: bool = False  # finished starting up (imports, loading the arguments)

    def start(self) -> None:
        self.ready = False
        stderr: IO[str] = open(self.log, "a")  # noqa: SIM115 - owned by the process
        self.proc = subprocess.Popen(
            self.command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            env=_environment(),
        )

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def submit(self, job: dict, timeout_s: float) -> None:
        if not self.alive():
            self.start()
        assert self.proc is not None and self.proc.stdin is not None
        self.job, self.deadline = job, time.monotonic() + timeout_s
        self.proc.stdin.write(json.dumps(job) + "\n")
        self.proc.stdin.flush()

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
        self.proc, self.job = None, None


@dataclass
class WorkerPool:
    """Runs jobs on `size` workers; a job that crashes or outlives its timeout fails alone."""

    args_path: Path
    ref_path: Path
    size: int
    timeout_s: float
    startup_s: float = 120.0
    workers: list[Worker] = field(default_factory=list)

    def __post_init__(self) -> None:
        command = [
            sys.executable,
            "-m",
            "tilecraft.autotune.worker",
            str(self.args_path),
            str(self.ref_path),
        ]
        log = self.args_path.with_name("workers.log")
        self.workers = [Worker(command, log) for _ in range(self.size)]
        for w in self.workers:
            w.start()

    def run(self, jobs: list[dict], deadline: float | None = None) -> list[dict]:
        """Results in the order of `jobs`. Past `deadline` (time.monotonic) no job starts
        and running ones are stopped: their results are SKIPPED_RESULT."""
        results: dict[int, dict] = {}
        pending = list(enumerate(jobs))
        while pending or any(w.job is not None for w in self.workers):
            if past(deadline):
                results.update((i, SKIPPED_RESULT) for i, _ in pending)
                pending = []
                self._stop_running(results)
                continue
            for w in self.workers:
                if w.job is None and pending:
                    i, job = pending.pop(0)
                    startup = 0.0 if w.ready and w.alive() else self.startup_s
                    w.submit({**job, "_index": i}, self.timeout_s + startup)
            self._collect(results)
        return [results[i] for i in range(len(jobs))]

    def _stop_running(self, results: dict[int, dict]) -> None:
        for w in self.workers:
            if w.job is not None:
                results[w.job["_index"]] = SKIPPED_RESULT
                w.kill()

    def _collect(self, results: dict[int, dict]) -> None:
        busy = [w for w in self.workers if w.job is not None and w.proc and w.proc.stdout]
        streams: dict[int, Worker] = {w.proc.stdout.fileno(): w for w in busy}  # type: ignore[union-attr]
        ready, _, _ = select.select(list(streams), [], [], 0.05)
        for fd in ready:
            self._read(streams[fd], results)
        for w in busy:
            if w.job is not None and time.monotonic() > w.deadline:
                results[w.job["_index"]] = {
                    "status": "timeout",
                    "error": f"no answer in {self.timeout_s:.0f} s",
                }
                w.kill()

    def _read(self, w: Worker, results: dict[int, dict]) -> None:
        assert w.proc is not None and w.proc.stdout is not None and w.job is not None
        line = w.proc.stdout.readline()
        if line and json.loads(line).get("ready"):
            w.ready, w.deadline = True, time.monotonic() + self.timeout_s  # the job's clock
            return
        index = w.job["_index"]
        if not line:
            code = w.proc.wait()
            results[index] = {"status": "runtime_error", "error": f"worker died (exit {code})"}
            w.kill()
            return
        results[index] = json.loads(line)
        w.job = None

    def close(self) -> None:
        for w in self.workers:
            w.kill()


def _environment() -> dict[str, str]:
    """The parent's environment, with its import path, so user modules import in workers."""
    path = os.pathsep.join(p for p in sys.path if p)
    return {**os.environ, "PYTHONPATH": path}


DIR_PREFIX = "tilecraft-bench-"  # + the owner's pid + "-": a dead owner's dir is stale
WORKER_BYTES = 1 << 30  # what one worker (Python, torch, Triton, a compile) may hold


def capped_workers(requested: int, args: tuple) -> int:
    """`requested` workers, at most one per core and as many as free memory holds (each
    loads its own copy of the arguments and the reference outputs)."""
    if requested <= 0:
        return 0
    data = sum(a.numel() * a.element_size() for a in args if hasattr(a, "element_size"))
    by_memory = _available_memory() // (WORKER_BYTES + 3 * data)
    return max(1, min(requested, os.cpu_count() or 1, by_memory))


def _available_memory() -> int:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 1 << 40  # unknown: the core count caps alone


def remove_stale_dirs(root: Path | None = None) -> None:
    """Remove the benchmark temporary directories of this user's processes that died
    without cleaning up (killed, or the machine lost power)."""
    try:
        root = Path(root or tempfile.gettempdir())
        found = list(root.glob(f"{DIR_PREFIX}*-*"))
    except OSError:  # no usable temporary directory at all (a full disk)
        return
    for path in found:
        pid = path.name[len(DIR_PREFIX) :].split("-", 1)[0]
        if pid.isdigit() and _is_ours(path) and not _alive(int(pid)):
            shutil.rmtree(path, ignore_errors=True)


def _is_ours(path: Path) -> bool:
    try:
        return path.is_dir() and not path.is_symlink() and path.stat().st_uid == os.getuid()
    except OSError:
        return False


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    return True
