"""Facts about blocks and tiles that the code generator's modules share."""

from __future__ import annotations

import torch

from tilecraft.ir.nodes import Op
from tilecraft.ir.types import Block


def next_power_of_2(n: int) -> int:
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


def is_rolled(block: Block) -> bool:
    """A whole-dimension block computed as a loop over chunks."""
    return block.kind == "reduction" and (block.fixed_size or 0) < next_power_of_2(block.extent)


def needs_mask(block: Block) -> bool:
    if block.kind == "grid":
        return False
    if block.dynamic:  # unless its bounds are proven multiples of its size (frontend/facts)
        return not block.aligned
    # an empty dim still has a block of one lane, which must touch nothing
    return block.extent == 0 or block.extent % (block.fixed_size or 1) != 0


def expand(expr: str, rank: int, pos: int, width: int = 1) -> str:
    """`expr` (of `width` dims) placed at `pos` in a tile of `rank` dims."""
    if rank == width or width == 0:
        return expr
    items = ["None"] * pos + [":"] * width + ["None"] * (rank - pos - width)
    return f"{expr}[{', '.join(items)}]"


NO_NAN = 2**31 - 1  # "no NaN here", as a position


def reduce_compute(op: Op) -> torch.dtype:
    """The dtype a reduction accumulates in."""
    assert op.out is not None
    if op.attrs["kind"] in ("sum", "prod") and not op.out.type.dtype.is_floating_point:
        return torch.int64
    return op.attrs["compute"]
