"""Fault injection for the reliability suite: small or read-only disks, damaged pages,
directories of another user. Each fault is real (a mount, flipped bytes, a chown); where
this machine does not allow it, the test that needs it is skipped, never faked."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

import tilecraft as tc

NOBODY = 65534


def scale(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in tc.tile(x.size(0)):
        out[tile] = x[tile] * 2.0 + 1.0
    return out


def fresh_kernel(cache_dir: Path, **settings: object) -> tc.Kernel:
    """A new Kernel of `scale`, as a new process would build it."""
    options = {"autotune_workers": 0, "autotune_quiet": True, **settings}
    return tc.kernel(scale, cache_dir=cache_dir, **options)


@contextlib.contextmanager
def mounted_tmpfs(path: Path, size: str, read_only: bool = False) -> Iterator[Path]:
    """A tmpfs of `size` at `path` (read-only if asked), or skip where mounting is denied."""
    path.mkdir(parents=True, exist_ok=True)
    options = f"size={size},mode=0700" + (",ro" if read_only else "")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)], capture_output=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


@contextlib.contextmanager
def read_only_dir(path: Path) -> Iterator[Path]:
    """A directory nobody can write to: a read-only mount for root (who ignores mode
    bits), mode 0500 for anyone else."""
    if os.getuid() == 0:
        with mounted_tmpfs(path, "1m", read_only=True) as mounted:
            yield mounted
        return
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(0o500)
    try:
        yield path
    finally:
        path.chmod(0o700)


def foreign_dir(tmp_path: Path) -> Path:
    """A directory that belongs to another user."""
    if os.getuid() != 0:
        return Path("/")  # root's
    path = tmp_path / "theirs"
    path.mkdir()
    os.chown(path, NOBODY, NOBODY)
    return path


def fill_disk(path: Path) -> None:
    """Fill the file system of `path` until a write fails with ENOSPC."""
    with contextlib.suppress(OSError), open(path / "filler", "wb") as f:
        while True:
            f.write(b"\0" * 4096)
            f.flush()


def flip_page(db_file: Path, page: int) -> None:
    """Overwrite the header of one b-tree page (not the file header) with garbage."""
    with open(db_file, "r+b") as f:
        f.seek(4096 * page)
        f.write(b"\xff" * 12)
