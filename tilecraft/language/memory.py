"""Explicit memory ops: `load`, `store`, `atomic_add` (with an optional extra mask).

Indices computed on the device (`t.index + 1`, loaded ids) are bounded: positions out of
range read as `other` (0 unless given) and are not written, where PyTorch would raise
an IndexError (see `tilecraft.language.indexing`).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from tilecraft.language.indexing import eager_key, read, write
from tilecraft.language.state import eager_context

__all__ = ["atomic_add", "eager_key", "load", "store"]


def load(
    tensor: torch.Tensor,
    index: Sequence[object],
    extra_mask: torch.Tensor | None = None,
    eviction_policy: str | None = None,
    other: float | torch.Tensor | None = None,
) -> torch.Tensor:
    """Load `tensor[index]`; elements where `extra_mask` is False read as `other` (0).

    `index` lists one subscript per dim: tiles, slices, ints or index tiles (gathers;
    out-of-range indices read as `other` too). `eviction_policy` ("evict_first" or
    "evict_last", or Helion's "first"/"last") is passed to Triton's `tl.load` as a cache
    hint where the load is a pointer or block-pointer load, and ignored elsewhere.

    Example::

        x_tile = tc.load(x, [tile_m, tile_n], extra_mask=keep, eviction_policy="evict_last")
        shifted = tc.load(x, [tile.index - 1], other=float("-inf"))
    """
    eager_context("load")
    return read(tensor, tuple(index), extra_mask, 0 if other is None else other)


def store(
    tensor: torch.Tensor,
    index: Sequence[object],
    value: torch.Tensor | float,
    extra_mask: torch.Tensor | None = None,
) -> None:
    """Store `value` to `tensor[index]`, skipping elements where `extra_mask` is False
    (and positions whose computed index is out of range).

    Example::

        tc.store(out, [tile_m], values, extra_mask=values > 0)
    """
    write(tensor, tuple(index), value, eager_context("store").branch_mask(extra_mask))


def atomic_add(
    tensor: torch.Tensor,
    index: Sequence[object],
    value: torch.Tensor | float,
    sem: str | None = None,
    extra_mask: torch.Tensor | None = None,
) -> None:
    """Atomically add `value` to `tensor[index]` (safe when programs overlap; repeated
    positions of a gather all add), skipping elements where `extra_mask` is False.

    `sem` is the memory ordering Triton's `tl.atomic_add` takes ("relaxed", "acquire",
    "release" or "acq_rel"; Triton's default, acq_rel, when not given). A relaxed add of a
    whole tile may go through a tensor descriptor (`indexing="tensor_descriptor"`): one
    TMA reduction per tile on Hopper instead of an atomic per element.

    Example::

        tc.atomic_add(out, [tile_m], partial_sum, sem="relaxed")
    """
    mask = eager_context("atomic_add").branch_mask(extra_mask)
    write(tensor, tuple(index), value, mask, accumulate=True)
