"""The bounds-check mode's launcher side (TILECRAFT_CHECK=1): each launch gets a flag the
kernel raises to the number of the first out-of-range access it saw, and a raised flag
becomes an IndexOutOfBounds naming the user's line."""

from __future__ import annotations

import linecache
from collections.abc import Callable
from typing import Any

import torch

from tilecraft.exc import IndexOutOfBounds, SourceLoc


def checked_launch(launch: Callable[[torch.Tensor], Any], like: Any, checks: list[str]) -> None:
    """Run `launch(flag)`, then raise if the kernel flagged an access (this waits for the
    kernel: the check mode is for finding bugs, not for speed)."""
    device = like.device if isinstance(like, torch.Tensor) else None
    flag = torch.zeros(1, dtype=torch.int32, device=device)
    launch(flag)
    number = int(flag.item())
    if number:
        raise _error(checks[number - 1])


def _error(check: str) -> IndexOutOfBounds:
    where, _, what = check.partition(": ")
    filename, _, line = where.rpartition(":")
    return out_of_bounds(filename, int(line), what)


def out_of_bounds(filename: str, line: int, what: str) -> IndexOutOfBounds:
    """The check mode's error, compiled or eager: `what` (`weight[...]`) at the user's line."""
    loc = SourceLoc(filename, line, linecache.getline(filename, line))
    message = f"an index computed on the device is outside the tensor in {what}"
    return IndexOutOfBounds(message + " (TILECRAFT_CHECK=1 found it)", loc)
