"""What tuning leaves on the machine, tied to the process that made it: the temporary
directories of benchmark runs and pool logs, the GPU lock files (one candidate at a time
on a GPU), their removal once their owner is dead, and how many workers memory allows."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import threading
from pathlib import Path

DIR_PREFIX = "tilecraft-bench-"  # + the owner's pid + "-": a dead owner's dir is stale
POOL_PREFIX = "tilecraft-pool-"  # the same, for a pool's log
LOCKS_PREFIX = "tilecraft-locks-"  # the same, for the GPU lock files (kept while it lives)
WORKER_BYTES = 1 << 30  # what one worker (Python, torch, Triton, a compile) may hold


class _Locks:
    """This process's directory of GPU lock files (made at the first use)."""

    lock = threading.Lock()
    dir: Path | None = None


def gpu_lock(device: str) -> str | None:
    """The lock file that workers take to time a candidate on `device`: one for every
    tuning run of this process (runs in threads share the GPU, so they time in turns);
    None where no file can be made."""
    with _Locks.lock:
        if _Locks.dir is None or not _Locks.dir.is_dir():
            try:
                _Locks.dir = Path(tempfile.mkdtemp(prefix=f"{LOCKS_PREFIX}{os.getpid()}-"))
            except OSError:
                return None
            atexit.register(_remove_own, _Locks.dir, os.getpid())
        return str(_Locks.dir / f"{device or 'cpu'}.lock".replace(":", "-"))


def _remove_own(path: Path, owner: int) -> None:
    if os.getpid() == owner:  # not a forked child's copy of this process
        shutil.rmtree(path, ignore_errors=True)


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
        prefixes = (DIR_PREFIX, POOL_PREFIX, LOCKS_PREFIX)
        found = [(p, p.name[len(x) :]) for x in prefixes for p in root.glob(f"{x}*-*")]
    except OSError:  # no usable temporary directory at all (a full disk)
        return
    for path, rest in found:
        pid = rest.split("-", 1)[0]
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
