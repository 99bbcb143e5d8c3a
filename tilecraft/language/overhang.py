"""Eager subscripts where tiles reach past a tensor's end beside index tensors.

A tile is a slice, and PyTorch clips a slice at the end of its dim, so `x[tile_m,
ids[tile_n]]` with `tile_m` reaching past `x`'s rows would give fewer rows than the tile
has (a shape the kernel's other tiles then fail to broadcast with, or broadcast wrongly).
Turning the tile into its index vector (as `indexing.tensor_key` does for a lone tile)
would pair it up with the other index tensors. So the subscript indexes instead a copy
of the part of the tensor it reaches, padded to the tiles' whole ranges, with a mask of
the positions inside the tensor; writes go to the copy and are copied back.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import torch

from tilecraft.language.tiles import Tile


class Padded(NamedTuple):
    """What a subscript indexes: `tensor` (the original, or a padded copy), the `key`
    that indexes it, `inside` (over `tensor`: the positions the original has; None when
    it is the original) and `write_back` (copies what was written to the original)."""

    tensor: torch.Tensor
    key: tuple[Any, ...]
    inside: torch.Tensor | None
    write_back: Callable[[], None]


def padded(tensor: torch.Tensor, items: list[object], tiles: list[tuple[int, int]]) -> Padded:
    """`tensor[items]`, whose tiles at (position, dim) `tiles` reach past its dims, as a
    subscript of a copy padded to those tiles' ranges (other tiles stay slices)."""
    shape, part, into = list(tensor.shape), tensor, [slice(None)] * tensor.dim()
    key: list[Any] = [slice(i.begin, i.end) if isinstance(i, Tile) else i for i in items]
    for k, dim in tiles:
        tile = items[k]
        assert isinstance(tile, Tile)
        lo, hi = (min(max(b, 0), shape[dim]) for b in (tile.begin, tile.end))
        width = max(hi - lo, 0)
        part = part.narrow(dim, lo, width)
        start = lo - tile.begin if width else 0  # (a tile wholly past the end copies nothing)
        into[dim] = slice(start, start + width)
        shape[dim] = tile.end - tile.begin
        key[k] = slice(None)
    copy = tensor.new_zeros(shape)
    copy[tuple(into)] = part
    inside = torch.zeros(shape, dtype=torch.bool, device=tensor.device)
    inside[tuple(into)] = True

    def write_back() -> None:
        part.copy_(copy[tuple(into)])

    return Padded(copy, tuple(key), inside, write_back)
