"""What names stand for on the device besides tile values: loop tiles and host tensors."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from tilecraft.ir.nodes import Param, Value


@dataclass(frozen=True)
class TileRef:
    """A `tc.tile` loop variable: one block of indices."""

    block: int


class TileSizeInt(int):
    """`tile.block_size`: an int in arithmetic, the tile's own dim in a shape (`tc.zeros`,
    `x.reshape(t.block_size, ...)`), as Helion's symbolic block size is."""

    block: int

    def __new__(cls, value: int, block: int) -> TileSizeInt:
        obj = super().__new__(cls, value)
        obj.block = block
        return obj


@dataclass(frozen=True)
class HostTensor:
    """A host tensor used on the device: its kernel parameter and its meta tensor."""

    param: Param
    meta: torch.Tensor


def on_device(args: list[Any], kwargs: dict[str, Any]) -> bool:
    """Whether a call's arguments hold device values (tiles, tensors, loop variables)."""
    stack = [*args, *kwargs.values()]
    while stack:
        a = stack.pop()
        if isinstance(a, (Value, HostTensor, TileRef)):
            return True
        if isinstance(a, (tuple, list)):
            stack += list(a)
    return False
