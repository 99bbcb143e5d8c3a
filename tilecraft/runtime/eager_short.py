"""Eager mode's tiles of one element at a loop's end, as compiled code sees them.

Compiled code loads a tile cut short at the end of its loop as a whole block whose extra
lanes read 0. Eagerly it is a tensor of its real length; where that is 2 or more, mixing
it with a block-sized accumulator fails to broadcast and `interpret._padded` pads it. A
tile of *one* element broadcasts silently instead (`acc[16, 4] + x[1, 4]` adds the row
16 times), so such loads are marked with the dims they were cut in, and elementwise ops
pad a marked dim of length 1 with zeros to the block size of a block-sized operand.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import torch

from tilecraft.language.tiles import Tile
from tilecraft.runtime.eager_index import kernel_frame

_MARK = "_tilecraft_short"  # {result dim: block size} on a tensor read through a short tile


def mark(result: Any, key: Any) -> Any:
    """Mark `result` (read as `tensor[key]`) with the dims cut to one element by a tile."""
    if not isinstance(result, torch.Tensor):
        return result
    items = key if isinstance(key, tuple) else (key,)
    short, dim = {}, 0
    for item in items:
        if isinstance(item, Tile) and len(item) == 1 and item.block_size > 1:
            short[dim] = item.block_size
        if item is None or isinstance(item, (Tile, slice)):
            dim += 1
        elif not isinstance(item, int):
            return result  # index vectors, ellipses: not the simple case marked here
    if short:
        setattr(result, _MARK, short)
    return result


def widen(args: tuple) -> tuple:
    """`args` with each marked one-element dim padded to the block size of another operand
    that has it (its lanes past the tile's end read 0, as compiled)."""
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    if not any(hasattr(t, _MARK) for t in tensors):
        return args
    return tuple(_widened(a, tensors) if isinstance(a, torch.Tensor) else a for a in args)


def _widened(t: torch.Tensor, tensors: list[torch.Tensor]) -> torch.Tensor:
    for d, block in getattr(t, _MARK, {}).items():
        full = any(o.dim() == t.dim() and o.size(d) == block for o in tensors if o is not t)
        if d < t.dim() and t.size(d) == 1 and full:
            zeros = t.new_zeros([block - 1 if i == d else n for i, n in enumerate(t.shape)])
            t = torch.cat([t, zeros], dim=d)
    return t


def carry(result: Any, args: tuple) -> Any:
    """Keep the marks of same-rank operands on `result` where its dim is still one long
    (`x[tile].to(torch.float32)` stays marked)."""
    if not isinstance(result, torch.Tensor):
        return result
    short: dict[int, int] = {}
    for a in args:
        if isinstance(a, torch.Tensor) and a.dim() == result.dim():
            marks = getattr(a, _MARK, {})
            short.update({d: b for d, b in marks.items() if result.size(d) == 1})
    if short:
        setattr(result, _MARK, short)
    return result


def padded_inner(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """`a @ b` operands whose contracted dims differ (one a tile cut short at a loop's end,
    the other block-sized, as `x[t_m, s : s + block]` against an unpacked block is): the
    shorter padded with zeros, as compiled code's masked lanes read 0."""
    if a.dim() < 2 or b.dim() < 2 or a.size(-1) == b.size(-2):
        return a, b
    k = max(a.size(-1), b.size(-2))
    if not is_block(k):  # not a block against a short tile: PyTorch's error stands
        return a, b
    a = torch.nn.functional.pad(a, (0, k - a.size(-1)))
    b = torch.nn.functional.pad(b, (0, 0, 0, k - b.size(-2)))
    return a, b


def is_block(n: int) -> bool:
    """Whether a dim of `n` may be a block (block sizes are powers of two)."""
    return n > 0 and n & (n - 1) == 0


def grown_to_reshape(x: torch.Tensor, shape: list[int]) -> torch.Tensor | None:
    """`x` padded with zeros so that it reshapes to `shape`, where a tile cut short at its
    loop's end is merged with the dims after it into a block-sized dim
    (`pairs.reshape(t.block_size * 2, n)`): of each run of `x`'s dims merged into one
    target dim, the first grows (the least growth of all the ways to split `x`'s dims into
    runs). None where no such padding fits."""
    ways = list(_growths(list(x.shape), list(shape)))
    if not ways:
        return None
    cut = _cut_tiles()

    def cost(way: list[tuple[int, int]]) -> tuple[bool, int]:  # a cut tile's growth first
        grown = {(x.shape[d], x.shape[d] + g) for d, g in way if g}
        return (not grown <= cut, sum(g for _, g in way))

    for dim, grow in min(ways, key=cost):
        x = torch.nn.functional.pad(x, [0, 0] * (x.dim() - 1 - dim) + [0, grow])
    return x.reshape(shape)


def _cut_tiles() -> set[tuple[int, int]]:
    """(length, block size) of each tile the kernel body holds that its loop's end cut."""
    frame = kernel_frame()
    values = list(frame.f_locals.values()) if frame is not None else []
    tiles = [t for v in values for t in (v if isinstance(v, tuple) else (v,))]
    return {(len(t), t.block_size) for t in tiles if isinstance(t, Tile) and len(t) < t.block_size}


def _growths(sizes: list[int], shape: list[int], at: int = 0) -> Iterator[list[tuple[int, int]]]:
    """Each way to split `sizes[at:]` into runs, one per target in `shape`, as a list of
    (first dim of the run, how much it grows)."""
    if not shape:
        if at == len(sizes):
            yield []
        return
    for end in range(at + 1, len(sizes) - len(shape) + 2):
        inner = math.prod(sizes[at + 1 : end])
        if inner and shape[0] % inner == 0 and sizes[at] <= shape[0] // inner:
            for rest in _growths(sizes, shape[1:], end):
                yield [(at, shape[0] // inner - sizes[at]), *rest]
