"""Helion's view helpers on tiles: `join` and `split` (pairs along a last dim of size 2),
and `subscript` (indexing written as a call)."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from tilecraft.language.state import eager_context


def join(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Two tiles side by side along a new last dim of size 2 (`torch.stack([a, b], -1)`).

    Example::

        pairs = tc.join(real, imag)  # [tile_m, 2]
    """
    eager_context("join")
    return torch.stack(torch.broadcast_tensors(a, b), -1)


def split(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The two halves of a tile whose last dim has size 2 (the inverse of `join`).

    Example::

        real, imag = tc.split(pairs)
    """
    eager_context("split")
    if x.size(-1) != 2:
        raise ValueError(f"tc.split needs a last dim of size 2, got {tuple(x.shape)}")
    first, second = x.unbind(-1)
    return first, second


def subscript(x: torch.Tensor, index: Sequence[object]) -> torch.Tensor:
    """`x[index]` for a tile, the subscripts given as a list: `:` (`slice(None)`),
    `None` (a new dim of size 1), `...` and ints.

    Example::

        column = tc.subscript(row, [slice(None), None])  # row[:, None]
    """
    eager_context("subscript")
    return x[tuple(index)]  # type: ignore[index]
