"""Explicit memory ops: `load`, `store`, `atomic_add` (with an optional extra mask)."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from tilecraft.language.state import eager_context
from tilecraft.language.tiles import Tile


def _flatten(key: object) -> list[object]:
    items = key if isinstance(key, tuple) else (key,)
    out: list[object] = []
    for item in items:
        is_tiles = isinstance(item, tuple) and item and all(isinstance(t, Tile) for t in item)
        out.extend(item if is_tiles else [item])  # type: ignore[arg-type]
    return out


def eager_key(key: object) -> tuple:
    """Turn a subscript with tiles into one PyTorch understands (tiles become slices)."""
    return tuple(slice(i.begin, i.end) if isinstance(i, Tile) else i for i in _flatten(key))


def _masked(value: torch.Tensor, extra_mask: torch.Tensor | None) -> torch.Tensor:
    return value if extra_mask is None else torch.where(extra_mask, value, 0).to(value.dtype)


def load(
    tensor: torch.Tensor, index: Sequence[object], extra_mask: torch.Tensor | None = None
) -> torch.Tensor:
    """Load `tensor[index]`; elements where `extra_mask` is False read as zero.

    Example::

        x_tile = tc.load(x, [tile_m, tile_n], extra_mask=keep)
    """
    eager_context("load")
    return _masked(tensor[eager_key(tuple(index))], extra_mask)


def store(
    tensor: torch.Tensor,
    index: Sequence[object],
    value: torch.Tensor | float,
    extra_mask: torch.Tensor | None = None,
) -> None:
    """Store `value` to `tensor[index]`, skipping elements where `extra_mask` is False.

    Example::

        tc.store(out, [tile_m], values, extra_mask=values > 0)
    """
    extra_mask = eager_context("store").branch_mask(extra_mask)
    key = eager_key(tuple(index))
    if extra_mask is None:
        tensor[key] = value
    else:
        tensor[key] = torch.where(extra_mask, value, tensor[key])


def atomic_add(tensor: torch.Tensor, index: Sequence[object], value: torch.Tensor | float) -> None:
    """Atomically add `value` to `tensor[index]` (safe when programs overlap).

    Example::

        tc.atomic_add(out, [tile_m], partial_sum)
    """
    mask = eager_context("atomic_add").branch_mask()
    key = eager_key(tuple(index))
    view = tensor[key]
    added = torch.as_tensor(value, device=view.device).to(view.dtype)
    tensor[key] = view + (added if mask is None else torch.where(mask, added, 0))
