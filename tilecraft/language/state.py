"""Whether DSL ops may run eagerly: set while a kernel body runs in interpret mode."""

from __future__ import annotations

import contextlib
import contextvars
import functools
import linecache
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, TypeVar

import torch

from tilecraft.exc import NotInKernel, SourceLoc
from tilecraft.language.host import next_power_of_2

F = TypeVar("F", bound=Callable[..., Any])
# the block sizes of the dims of each tile loop, by the place of its call (file, line)
Sites = dict[tuple[str, int], tuple[int, ...]]


@dataclass
class EagerContext:
    """What eager ops need: the device for new tiles, the config's block sizes and the
    chosen tunable values."""

    device: torch.device
    block_size: int = 32  # a tile loop's where the config's is not known
    sites: Sites = field(default_factory=dict)  # BlockTable.sites
    registered: list[int] = field(default_factory=list)  # `register_block_size`'s, in order
    tunables: dict[str, object] = field(default_factory=dict)
    masks: list[torch.Tensor] = field(default_factory=list)  # enclosing `if` arms on tiles
    check: bool = False  # TILECRAFT_CHECK: an index out of range raises instead of reading 0

    def branch_mask(self, extra: torch.Tensor | None = None) -> torch.Tensor | None:
        """Where a store may write: `extra` and the conditions of enclosing `if` arms."""
        mask = self.masks[-1] if self.masks else None
        if mask is None or extra is None:
            return extra if mask is None else mask
        return extra & mask

    def tile_sizes(self, explicit: list[int | None], caller: FrameType) -> list[int]:
        """The block sizes of the tile loop `caller` calls: those given, else the
        config's, as compiled code tiles (a scan or a sort of a tile sees one block)."""
        chosen = self.sites.get((caller.f_code.co_filename, caller.f_lineno), ())
        return [
            int(b) if b is not None else chosen[i] if i < len(chosen) else self.block_size
            for i, b in enumerate(explicit)
        ]

    def next_registered(self, most: int | None = None, least: int | None = None) -> int:
        """The config's value of the next `register_block_size` call; without one (the
        kernel did not compile), the eager block size within `most`'s power of two and at
        least `least`'s."""
        if self.registered:
            return self.registered.pop(0)
        size = min(self.block_size, next_power_of_2(int(most))) if most else self.block_size
        return max(size, next_power_of_2(int(least))) if least else size


_current: contextvars.ContextVar[EagerContext | None] = contextvars.ContextVar(
    "tilecraft_eager", default=None
)


def eager_context(op: str) -> EagerContext:
    """The running eager context, or a NotInKernel error naming `op`."""
    ctx = _current.get()
    if ctx is None:
        raise NotInKernel(
            f"tc.{op}() can only be used inside a @tc.kernel function "
            "(called outside one, or in host code where a device loop is needed)"
        )
    return ctx


_plain: contextvars.ContextVar[bool] = contextvars.ContextVar("tilecraft_plain", default=False)


def plain_indexing(fn: F) -> F:
    """An eager op of tilecraft's own whose subscripts are PyTorch's: the body's are
    bounded and masked by its `if` arms as compiled (runtime/interpret.py), and the op
    bounds and masks its accesses itself (an atomic inside an `if` on a tile read its
    positions under the arm's mask again)."""

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        token = _plain.set(True)
        try:
            return fn(*args, **kwargs)
        finally:
            _plain.reset(token)

    return run  # type: ignore[return-value]


def indexing_is_plain() -> bool:
    """Whether an op under `plain_indexing` is running."""
    return _plain.get()


@contextlib.contextmanager
def running_eagerly(ctx: EagerContext) -> Iterator[EagerContext]:
    """Run a kernel body eagerly: DSL ops compute with PyTorch on `ctx.device`."""
    token = _current.set(ctx)
    try:
        yield ctx
    finally:
        _current.reset(token)


# code that is not the user's: tilecraft's own and PyTorch's
_LIBRARIES = (str(Path(torch.__file__ or "").parent), str(Path(__file__).resolve().parent.parent))


def user_frame() -> FrameType:
    """The innermost frame outside tilecraft and PyTorch: the user's line calling in (in
    eager mode, the kernel's body)."""
    frame = sys._getframe(1)
    while frame.f_back is not None and frame.f_code.co_filename.startswith(_LIBRARIES):
        frame = frame.f_back
    return frame


def user_loc() -> SourceLoc:
    """The user's line calling in, for an error raised by a DSL function itself."""
    frame = user_frame()
    filename, line = frame.f_code.co_filename, frame.f_lineno
    return SourceLoc(filename, line, linecache.getline(filename, line))
