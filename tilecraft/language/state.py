"""Whether DSL ops may run eagerly: set while a kernel body runs in interpret mode."""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from dataclasses import dataclass, field

import torch

from tilecraft.exc import NotInKernel


@dataclass
class EagerContext:
    """What eager ops need: the device for new tiles and the chosen tunable values."""

    device: torch.device
    block_size: int = 32
    tunables: dict[str, object] = field(default_factory=dict)

    def next_block_size(self, explicit: int | None) -> int:
        return self.block_size if explicit is None else int(explicit)


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


@contextlib.contextmanager
def running_eagerly(ctx: EagerContext) -> Iterator[EagerContext]:
    """Run a kernel body eagerly: DSL ops compute with PyTorch on `ctx.device`."""
    token = _current.set(ctx)
    try:
        yield ctx
    finally:
        _current.reset(token)
