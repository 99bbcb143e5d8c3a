"""`tc.jagged_tile` (Helion's `hl.jagged_tile`): a loop over a dimension whose length
differs per lane of the enclosing tiles.

`for tile_k in tc.jagged_tile(lengths)` is compiled as a `tc.tile` loop up to the
largest of `lengths`, plus a mask `tile_k.index < lengths[..., None]` over the parent
tiles' dims and `tile_k`'s. The mask is applied where a value over `tile_k` meets memory
or loses that dim: loads read 0 (or `other`) past a lane's length, stores skip those
positions, reductions over `tile_k` see only the lane's elements, and matrix products
over it multiply only those. The Builder keeps the masks of the enclosing jagged loops
(`Builder.jagged`, by block).
"""

from __future__ import annotations

from typing import Any

import torch

from tilecraft.exc import UnsupportedOperation, UnsupportedSyntax
from tilecraft.frontend.builder import Builder, Operand
from tilecraft.frontend.ops import OPS, reduce_dims, view
from tilecraft.ir.nodes import Value
from tilecraft.ir.types import Dim


def parent_of(b: Builder, args: list[Any], kwargs: dict[str, Any]) -> Value:
    """The lengths `tc.jagged_tile(parent)` takes: an integer tile over enclosing tiles
    (a scalar read on the device is a plain `tc.tile` bound)."""
    if len(args) + len(kwargs) != 1 or (kwargs and "parent" not in kwargs):
        raise UnsupportedSyntax("tc.jagged_tile takes one argument: the lengths of the lanes")
    parent = args[0] if args else kwargs["parent"]
    if not isinstance(parent, Value):
        raise UnsupportedSyntax(
            "tc.jagged_tile needs lengths read on the device (`lengths[tile_b]`); for a "
            "bound known on the host use tc.tile(n)"
        )
    if parent.type.dtype == torch.bool or parent.type.dtype.is_floating_point:
        raise UnsupportedSyntax(f"tc.jagged_tile lengths must be integers, not {parent.type.dtype}")
    if any(d is None or b.blocks[d].kind != "tile" for d in parent.type.dims):
        raise UnsupportedSyntax(
            "every dim of tc.jagged_tile's lengths must come from an enclosing tile loop"
        )
    return parent


def loop_end(b: Builder, parent: Value) -> Value:
    """The loop's bound: the largest length over the parent's lanes."""
    if not parent.type.dims:
        return parent
    return reduce_dims(b, "max", parent, None, False)


def lane_mask(b: Builder, parent: Value, index: Value) -> Value:
    """`index < parent[..., None]`: where each lane's positions are inside its length."""
    rank = parent.type.rank
    lengths = view(b, parent, (":",) * rank + ("None",))
    positions = view(b, index, ("None",) * rank + (":",))
    return OPS["lt"](b, positions, lengths)


def aligned(b: Builder, block: int, dims: tuple[Dim, ...], what: str) -> Value:
    """The mask of jagged `block` viewed to broadcast over `dims` (which hold it)."""
    mask = b.jagged[block]
    positions = [dims.index(d) if d in dims else -1 for d in mask.type.dims]
    if -1 in positions:
        missing = [d for d in mask.type.dims if d not in dims]
        raise UnsupportedSyntax(
            f"{what} over the jagged tile {b.describe((block,))} must also span its parent "
            f"tiles {b.describe(tuple(missing))}, whose lanes give its lengths "
            "(index with the parent tile too, e.g. `x[tile_b, tile_k]`)",
            b.loc,
        )
    if positions != sorted(positions):  # a transposed value (`a.T`): permute the mask
        order = sorted(range(len(positions)), key=positions.__getitem__)
        mask = OPS["permute"](b, mask, *order)
        positions.sort()
    index = tuple(":" if i in positions else "None" for i in range(len(dims)))
    return mask if len(index) == mask.type.rank else view(b, mask, index)


def access_mask(b: Builder, dims: tuple[Dim, ...], extra: Value | None, what: str) -> Value | None:
    """`extra` joined with the masks of the jagged tiles an access spans."""
    for block in dims:
        if block is not None and block in b.jagged:
            mask = aligned(b, block, dims, what)
            extra = mask if extra is None else OPS["bitwise_and"](b, extra, mask)
    return extra


def masked(b: Builder, x: Value, axis: int, fill: Operand, what: str) -> Value:
    """`x` with `fill` past each lane's length, if dim `axis` is a jagged tile's."""
    block = x.type.dims[axis]
    if block is None or block not in b.jagged:
        return x
    return OPS["where"](b, aligned(b, block, x.type.dims, what), x, fill)


def reduce_identity(kind: str, dtype: torch.dtype) -> Operand:
    """What a position past a lane's length holds in a reduction of `kind`."""
    if kind == "sum":
        return False if dtype == torch.bool else 0
    if kind == "prod":
        return True if dtype == torch.bool else 1
    if kind not in ("max", "min", "argmax", "argmin"):
        raise UnsupportedOperation(f"a {kind} reduction over a jagged tile")
    high = kind in ("min", "argmin")
    if dtype == torch.bool:
        return high
    if dtype.is_floating_point:
        return float("inf") if high else float("-inf")
    info = torch.iinfo(dtype)
    return info.max if high else info.min


def is_jagged(b: Builder, x: Value, axis: int) -> bool:
    block = x.type.dims[axis]
    return block is not None and block in b.jagged


def refuse(b: Builder, x: Value, axis: int, what: str, instead: str) -> None:
    """Ops that cannot skip the positions past a lane's length raise over a jagged dim."""
    if is_jagged(b, x, axis):
        raise UnsupportedOperation(f"{what} over a jagged tile's dim: {instead}", b.loc)
