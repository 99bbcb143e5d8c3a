"""Pools of worker processes that run candidate kernels with a timeout each.

A worker takes seconds to start (PyTorch, Triton, a CUDA context), more than a short
tuning run spends benchmarking, so the process keeps one warm pool (`acquire`/`give_back`)
for its tuning runs: the next run finds its workers started. Idle workers exit after
`IDLE_S` seconds (the pool retires them earlier, so none exits under a job), and with this
process. A pool in use by one run (another thread) is never shared: that run gets its own.
"""

from __future__ import annotations

import atexit
import json
import math
import os
import select
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from tilecraft.autotune.housekeeping import POOL_PREFIX
from tilecraft.autotune.worker import IDLE_S

RETIRE = 0.75  # a worker idle this fraction of its idle limit is replaced, not used
SKIPPED_RESULT = {"status": "skipped", "error": "the tuning budget ran out first"}


def timed(result: dict) -> bool:
    """Whether a job's result holds a time (not a failure, nor a skip)."""
    return result.get("time_ms") is not None


def past(deadline: float | None) -> bool:
    """Whether `deadline` (time.monotonic; None: never) has passed."""
    return deadline is not None and time.monotonic() >= deadline


@dataclass
class Worker:
    """One `python -m tilecraft.autotune.worker` process."""

    command: list[str]
    log: str
    env: dict[str, str]
    proc: subprocess.Popen[bytes] | None = None
    job: dict | None = None
    deadline: float = 0.0
    ready: bool = False  # finished starting up (imports, the CUDA context)
    spawned: float = 0.0  # time.monotonic() at the start
    ready_s: float | None = None  # how long it took to start up
    ready_at: float = 0.0  # when it was ready (time.monotonic, as it said)
    last_used: float = 0.0  # when it last finished a job (or started)
    unread: bytes = b""  # the start of a line it is writing

    def start(self) -> None:
        self.ready, self.ready_s, self.unread = False, None, b""
        self.spawned = self.last_used = time.monotonic()
        stderr: IO[str] = open(self.log, "a")  # noqa: SIM115 - owned by the process
        self.proc = subprocess.Popen(
            self.command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            env=self.env,
        )
        stderr.close()  # the child holds its own descriptor

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def idle_for(self) -> float:
        return time.monotonic() - self.last_used

    def submit(self, job: dict, timeout_s: float, idle_s: float) -> bool:
        """Send `job`, (re)starting the process when it is gone or about to exit idle;
        False when no process would take it."""
        if self.alive() and self.idle_for() > RETIRE * idle_s:
            self.kill()
        for _ in range(2):  # one that died since its last job (a broken pipe): once more
            try:
                if not self.alive():
                    self.start()
                self._write(job)
            except OSError:
                self.kill()
                continue
            self.job, self.deadline = job, time.monotonic() + timeout_s
            return True
        return False

    def _write(self, message: dict) -> None:
        assert self.proc is not None and self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(message).encode() + b"\n")
        self.proc.stdin.flush()

    def messages(self) -> list[dict] | None:
        """The messages it wrote since the last call (None once its output has ended).
        Read from the descriptor, unbuffered: a line a buffered reader took ahead would
        not wake `select` again."""
        assert self.proc is not None and self.proc.stdout is not None
        data = os.read(self.proc.stdout.fileno(), 1 << 16)
        if not data:
            return None
        *lines, self.unread = (self.unread + data).split(b"\n")
        return [m for m in map(_decoded, lines) if m is not None]

    def release(self) -> None:
        """Tell an idle worker to drop the data it loaded."""
        if self.job is None and self.alive():
            try:
                self._write({"release": True})
            except OSError:
                self.kill()

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            for stream in (self.proc.stdin, self.proc.stdout):
                if stream is not None:
                    stream.close()
        self.proc, self.job, self.ready = None, None, False


class WorkerPool:
    """Runs jobs on `size` workers; a job that crashes or outlives its timeout fails alone.

    `interpret` starts workers under Triton's interpreter (CPU arguments); `device`
    (e.g. "cuda:0") is where they create their CUDA context while starting."""

    def __init__(
        self,
        size: int,
        timeout_s: float = 60.0,
        *,
        interpret: bool = False,
        device: str = "",
        idle_s: float = IDLE_S,
        startup_s: float = 120.0,
    ) -> None:
        self.timeout_s, self.idle_s, self.startup_s = timeout_s, idle_s, startup_s
        self.command, self.env = _command(interpret, device, idle_s), _environment()
        self.key = _key(self.command, self.env)
        self.owner = os.getpid()
        self.dir = _log_dir()
        self.log = str(self.dir / "workers.log") if self.dir else os.devnull
        self.workers: list[Worker] = []
        self.grow(size)

    def grow(self, size: int) -> None:
        """Start workers until there are `size` (they start in the background)."""
        while len(self.workers) < size:
            worker = Worker(self.command, self.log, self.env)
            worker.start()
            self.workers.append(worker)

    def run(
        self,
        jobs: list[dict],
        deadline: float | None = None,
        timeout_s: float | None = None,
        hold: Callable[[], bool] | None = None,
        wait_for_one: bool = False,
        on_result: Callable[[int, dict], None] | None = None,
    ) -> list[dict]:
        """Results in the order of `jobs`, each job given `timeout_s` (default: the pool's).
        Past `deadline` (time.monotonic) no job starts and running ones are abandoned: their
        results are SKIPPED_RESULT, and what their workers answer later is dropped (they
        stay warm for the next run; one that overruns its timeout is killed then); with
        `wait_for_one`, only once one job has been timed (or none is left).
        While `hold()` is true, running jobs' clocks stop (they wait for the reference
        outputs), but for a job that `publish`es the reference; what it raises stops the
        run. `on_result(index, result)` hears of each result as it comes."""
        timeout_s = self.timeout_s if timeout_s is None else timeout_s
        results: dict[int, dict] = {}
        pending = list(enumerate(jobs))
        order = sorted(self.workers, key=lambda w: not (w.ready and w.alive()))
        heard: set[int] = set()
        try:
            while pending or any(_running(w) for w in self.workers):
                if on_result is not None:
                    _report(results, heard, on_result)
                if past(deadline) and (not wait_for_one or any(map(timed, results.values()))):
                    results.update((i, SKIPPED_RESULT) for i, _ in pending)
                    pending = []
                    self._stop_running(results)
                    continue
                for w in order:
                    if w.job is None and pending:
                        i, job = pending.pop(0)
                        startup = 0.0 if w.ready and w.alive() else self.startup_s
                        if not w.submit({**job, "_index": i}, timeout_s + startup, self.idle_s):
                            results[i] = {"status": "runtime_error", "error": "no worker started"}
                if hold is not None and hold():
                    self._hold(timeout_s)
                self._collect(results, timeout_s)
            if on_result is not None:
                _report(results, heard, on_result)
        finally:  # interrupted (Ctrl-C): a job left running would answer the next run
            for w in self.workers:
                if _running(w):
                    w.kill()
        return [results[i] for i in range(len(jobs))]

    def _hold(self, timeout_s: float) -> None:
        for w in self.workers:
            if _running(w) and not w.job.get("publish"):  # type: ignore[union-attr]
                w.deadline = max(w.deadline, time.monotonic() + timeout_s)

    def _stop_running(self, results: dict[int, dict]) -> None:
        for w in self.workers:
            if _running(w):
                results[w.job["_index"]] = SKIPPED_RESULT  # type: ignore[index]
                w.job["_abandoned"] = True  # type: ignore[index]

    def _collect(self, results: dict[int, dict], timeout_s: float) -> None:
        busy = [w for w in self.workers if w.job is not None and w.proc and w.proc.stdout]
        streams: dict[int, Worker] = {w.proc.stdout.fileno(): w for w in busy}  # type: ignore[union-attr]
        ready, _, _ = select.select(list(streams), [], [], 0.05)
        for fd in ready:
            self._read(streams[fd], results, timeout_s)
        for w in busy:
            if w.job is not None and time.monotonic() > w.deadline:
                _answer(
                    w, results, {"status": "timeout", "error": f"no answer in {timeout_s:.0f} s"}
                )
                w.kill()

    def _read(self, w: Worker, results: dict[int, dict], timeout_s: float) -> None:
        assert w.proc is not None and w.job is not None
        messages = w.messages()
        if messages is None:
            code = w.proc.wait()
            _answer(w, results, {"status": "runtime_error", "error": f"worker died (exit {code})"})
            w.kill()
            return
        for message in messages:
            if message.get("ready"):
                w.ready, w.deadline = True, time.monotonic() + timeout_s  # the job's clock
                w.ready_at = float(message.get("at", time.monotonic()))
                w.ready_s = w.ready_at - w.spawned
            elif message.get("waiting"):  # for other jobs' timings: its clock stops
                w.deadline = math.inf
            elif message.get("timing"):  # its own timing gets a whole timeout
                w.deadline = time.monotonic() + timeout_s
            elif w.job is not None:
                _answer(w, results, message)
                w.job, w.last_used = None, time.monotonic()
                if message.get("exiting"):  # its process is broken: the next job starts one
                    w.kill()

    def started_since(self, since: float) -> float:
        """The longest start-up of the workers that became ready after `since`: how long
        a run begun then may have waited for them (0 when all were ready)."""
        times = [w.ready_s for w in self.workers if w.ready_s is not None and w.ready_at >= since]
        return max(times, default=0.0)

    def release(self) -> None:
        """Workers drop what they loaded for the run that ends."""
        for w in self.workers:
            w.release()

    def close(self) -> None:
        """Stop the workers and remove the log."""
        if self.owner == os.getpid():  # a forked child must not kill its parent's workers
            for w in self.workers:
                w.kill()
        self.workers = []
        if self.dir is not None and self.owner == os.getpid():
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None


def _running(w: Worker) -> bool:
    """Whether `w` runs a job of the current run (not one a past deadline abandoned)."""
    return w.job is not None and not w.job.get("_abandoned")


def _answer(w: Worker, results: dict[int, dict], result: dict) -> None:
    """Record `w`'s answer to its job, unless the job was abandoned (an earlier run's)."""
    if w.job is not None and not w.job.get("_abandoned"):
        results[w.job["_index"]] = result


def _report(results: dict[int, dict], heard: set[int], on_result: Callable) -> None:
    """Tell `on_result` of the results it has not heard of yet."""
    for i in sorted(results.keys() - heard):
        heard.add(i)
        on_result(i, results[i])


class _Shared:
    """The process's warm pools: those idle, and those a tuning run holds."""

    lock = threading.Lock()
    idle: list[WorkerPool] = []
    held: list[WorkerPool] = []
    most = 1  # warm pools kept: one per tuning run this process runs at once
    idle_s = 0.0  # how long their workers may idle (0: IDLE_S)


def keep_warm(pools: int, idle_s: float) -> None:
    """Keep up to `pools` warm pools (for as many tuning runs at once, in threads), whose
    workers idle up to `idle_s` seconds: a process tuning entry after entry (a manifest
    run's worker) must not restart them between entries."""
    with _Shared.lock:
        _Shared.most, _Shared.idle_s = max(1, pools), idle_s


def _idle_s() -> float:
    return _Shared.idle_s or IDLE_S


def acquire(
    size: int, timeout_s: float = 60.0, *, interpret: bool = False, device: str = ""
) -> WorkerPool:
    """An idle warm pool, grown to `size` workers, for one tuning run (a new one while
    fewer than `keep_warm`'s number exist; a private pool otherwise). Hand it back with
    `give_back`."""
    idle_s = _idle_s()
    wanted = _key(_command(interpret, device, idle_s), _environment())
    with _Shared.lock:
        for stale in [p for p in _Shared.idle if p.owner != os.getpid() or p.key != wanted]:
            _Shared.idle.remove(stale)  # started for other arguments or another environment
            stale.close()
        if _Shared.idle:
            pool = max(_Shared.idle, key=lambda p: len(p.workers))
            _Shared.idle.remove(pool)
        elif len(_Shared.held) < _Shared.most:
            pool = WorkerPool(size, timeout_s, interpret=interpret, device=device, idle_s=idle_s)
        else:
            return WorkerPool(size, timeout_s, interpret=interpret, device=device)
        pool.timeout_s = timeout_s
        pool.grow(size)
        _Shared.held.append(pool)
        return pool


def warm_pools() -> list[WorkerPool]:
    """The process's warm pools, held or idle."""
    with _Shared.lock:
        return _Shared.held + _Shared.idle


def start_early(
    size: int, timeout_s: float = 60.0, *, interpret: bool = False, device: str = ""
) -> None:
    """Start a warm pool's workers now for a run about to `acquire` them (nothing when
    every warm pool is held)."""
    with _Shared.lock:
        if not _Shared.idle and len(_Shared.held) >= _Shared.most:
            return
    give_back(acquire(size, timeout_s, interpret=interpret, device=device))


def give_back(pool: WorkerPool) -> None:
    """End a tuning run's use of `pool`: a warm pool stays, its workers drop what they
    loaded; a private pool stops."""
    with _Shared.lock:
        if pool in _Shared.held:
            _Shared.held.remove(pool)
            pool.release()
            _Shared.idle.append(pool)
            return
    pool.close()


def shutdown() -> None:
    """Stop the warm pools' workers now (they also stop with this process, or idle)."""
    with _Shared.lock:
        pools, _Shared.idle, _Shared.held = _Shared.idle + _Shared.held, [], []
    for pool in pools:
        pool.close()


atexit.register(shutdown)


def _command(interpret: bool, device: str, idle_s: float) -> list[str]:
    command = [sys.executable, "-m", "tilecraft.autotune.worker", "--idle-s", str(idle_s)]
    return command + ["--interpret"] * interpret + (["--device", device] if device else [])


# Variables whose change makes warm workers stale (libraries set others, e.g. KMP_*, at import)
KEYED = ("TRITON_", "TILECRAFT_", "TORCH", "PYTORCH_", "CUDA_", "NVIDIA_", "LD_", "PYTHON", "HOME")


def _key(command: list[str], env: dict[str, str]) -> tuple:
    """What makes two pools' workers alike: their command line and the environment
    variables that change how they compile and run kernels."""
    return tuple(command), tuple(sorted(i for i in env.items() if i[0].startswith(KEYED)))


def _log_dir() -> Path | None:
    """A private directory for the workers' stderr (None where none can be made)."""
    try:
        return Path(tempfile.mkdtemp(prefix=f"{POOL_PREFIX}{os.getpid()}-"))
    except OSError:
        return None


def _decoded(line: bytes) -> dict | None:
    """A worker's message; None for anything else (a native library writing to stdout)."""
    try:
        message = json.loads(line)
    except ValueError:
        return None
    return message if isinstance(message, dict) else None


def _environment() -> dict[str, str]:
    """The parent's environment, with its import path, so user modules import in workers."""
    path = os.pathsep.join(p for p in sys.path if p)
    return {**os.environ, "PYTHONPATH": path}
