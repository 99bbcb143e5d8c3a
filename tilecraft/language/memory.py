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


def _in_range(tensor: torch.Tensor, key: tuple) -> tuple:
    """`key` with out-of-range entries of its index tensors replaced by 0.

    Under a mask, compiled kernels never touch the masked-off elements, whatever their
    indices; eager mode reads (or computes the positions of) every element, so indices
    there must be valid first. The masked-off results are then discarded.
    """
    out, dim = [], 0
    for item in key:
        if item is Ellipsis:
            return key  # dims unknown from here: leave PyTorch to check the indices
        if isinstance(item, torch.Tensor) and not item.dtype.is_floating_point:
            if item.dtype == torch.bool:
                dim += item.dim()
                out.append(item)
                continue
            size = tensor.size(dim)
            item = torch.where((item >= -size) & (item < size), item, torch.zeros_like(item))
        out.append(item)
        dim += item is not None
    return tuple(out)


def _positions(tensor: torch.Tensor, key: tuple) -> torch.Tensor:
    """The (row-major) position in `tensor` of each element that `tensor[key]` touches."""
    return torch.arange(tensor.numel(), device=tensor.device).view(tensor.shape)[key]


def _put(
    tensor: torch.Tensor,
    key: tuple,
    value: torch.Tensor | float,
    extra_mask: torch.Tensor | None,
    accumulate: bool,
) -> None:
    """Write (or add) `value` to `tensor[key]` element by element where `extra_mask` holds,
    as a kernel does: masked-off elements are untouched, repeated ones all add up."""
    positions = _positions(tensor, key)
    values = torch.as_tensor(value, device=tensor.device).to(tensor.dtype)
    values = values.expand(positions.shape)
    if extra_mask is not None:
        keep = extra_mask.expand(positions.shape)
        positions, values = positions[keep], values[keep]
    tensor.put_(positions.reshape(-1), values.reshape(-1), accumulate=accumulate)


def load(
    tensor: torch.Tensor,
    index: Sequence[object],
    extra_mask: torch.Tensor | None = None,
    other: float = 0,
) -> torch.Tensor:
    """Load `tensor[index]`; elements where `extra_mask` is False read as `other` (0).

    Under a mask, indices of masked-off elements may be out of range (they are not read).

    Example::

        x_tile = tc.load(x, [tile_m, tile_n], extra_mask=keep)
    """
    eager_context("load")
    key = eager_key(tuple(index))
    if extra_mask is None:
        return tensor[key]
    value = tensor[_in_range(tensor, key)]
    return torch.where(extra_mask, value, torch.tensor(other, dtype=value.dtype))


def store(
    tensor: torch.Tensor,
    index: Sequence[object],
    value: torch.Tensor | float,
    extra_mask: torch.Tensor | None = None,
) -> None:
    """Store `value` to `tensor[index]`, skipping elements where `extra_mask` is False.

    Under a mask, indices of masked-off elements may be out of range (they are not written).

    Example::

        tc.store(out, [tile_m], values, extra_mask=values > 0)
    """
    eager_context("store")
    key = eager_key(tuple(index))
    if extra_mask is None:
        tensor[key] = value
    else:
        _put(tensor, _in_range(tensor, key), value, extra_mask, accumulate=False)


def atomic_add(
    tensor: torch.Tensor,
    index: Sequence[object],
    value: torch.Tensor | float,
    extra_mask: torch.Tensor | None = None,
) -> None:
    """Atomically add `value` to `tensor[index]` (safe when programs overlap; elements
    indexed more than once get every addition), skipping where `extra_mask` is False.

    Example::

        tc.atomic_add(out, [tile_m], partial_sum)
    """
    eager_context("atomic_add")
    key = eager_key(tuple(index))
    if extra_mask is not None:
        key = _in_range(tensor, key)
    _put(tensor, key, value, extra_mask, accumulate=True)
