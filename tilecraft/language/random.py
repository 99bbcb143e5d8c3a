"""Counter-based random numbers: `rand` and `randint`, from a seed, reproducibly.

Element i of the result is Philox 4x32-10 of the counter i and the key `seed`, where i is
the element's row-major position in the full extents of the shape's dims (a tile stands
for its whole loop range). The numbers therefore do not depend on block sizes, and this
eager implementation gives the same bits as Triton's `tl.rand`/`tl.randint`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from tilecraft.language.state import eager_context
from tilecraft.language.tiles import Tile

M32 = 0xFFFFFFFF
KEY_A, KEY_B = 0x9E3779B9, 0xBB67AE85  # Philox's key increments (Weyl sequence)
ROUND_A, ROUND_B = 0xD2511F53, 0xCD9E8D57  # its multipliers
ROUNDS = 10
UNIFORM_SCALE = 4.6566127342e-10  # Triton's: the largest with (2**31 - 1) * scale < 1.0


def _mul_hi_lo(a: int, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The high and low 32 bits of a * b (b < 2**32), without int64 overflow."""
    low_part = a * (b & 0xFFFF)  # < 2**48
    high_part = a * (b >> 16)  # < 2**48
    s = low_part + ((high_part & 0xFFFF) << 16)  # < 2**49
    return ((high_part >> 16) + (s >> 32)) & M32, s & M32


def philox(seed: int, offsets: torch.Tensor) -> torch.Tensor:
    """The first 32-bit output of Philox 4x32-10 for counters (offset, offset >> 32, 0, 0)
    and key (seed low, seed high), as int64 values in [0, 2**32)."""
    offsets = offsets.to(torch.int64)
    c0, c1 = offsets & M32, (offsets >> 32) & M32
    c2 = torch.zeros_like(c0)
    c3 = torch.zeros_like(c0)
    seed = int(seed) & 0xFFFFFFFFFFFFFFFF
    k0, k1 = seed & M32, (seed >> 32) & M32
    for _ in range(ROUNDS):
        hi_b, lo_b = _mul_hi_lo(ROUND_B, c2)
        hi_a, lo_a = _mul_hi_lo(ROUND_A, c0)
        c0, c1, c2, c3 = hi_b ^ c1 ^ k0, lo_b, hi_a ^ c3 ^ k1, lo_a
        k0, k1 = (k0 + KEY_A) & M32, (k1 + KEY_B) & M32
    return c0


def _signed(bits: torch.Tensor) -> torch.Tensor:
    """32 random bits read as a signed int32 (held in int64)."""
    return torch.where(bits >= 2**31, bits - 2**32, bits)


def _offsets(shape: Sequence[Any], device: torch.device) -> torch.Tensor:
    sizes, extents, indices = [], [], []
    for item in shape:
        if isinstance(item, Tile):
            lo, hi = item.span if item.span is not None else (item.begin, item.end)
            sizes.append(len(item))
            extents.append(hi - lo)
            indices.append(torch.arange(item.begin, item.end, device=device))
        else:
            sizes.append(int(item))
            extents.append(int(item))
            indices.append(torch.arange(int(item), device=device))
    offsets = torch.zeros(sizes, dtype=torch.int64, device=device)
    stride = 1
    for i in reversed(range(len(sizes))):
        view = [1] * len(sizes)
        view[i] = sizes[i]
        offsets = offsets + indices[i].reshape(view) * stride
        stride *= extents[i]
    return offsets


def _seed_value(seed: Any) -> int:
    if isinstance(seed, torch.Tensor):
        return int(seed.item())
    return int(seed)


def rand(shape: Sequence[Any], seed: int | torch.Tensor, device: Any = None) -> torch.Tensor:
    """Uniform float32 random numbers in [0, 1) of `shape` (tiles and ints), from `seed`.

    Reproducible: the same seed gives the same numbers in every mode and for every block
    size (Philox, counted by each element's global position). Use different seeds (or
    shapes) for independent streams.

    Example::

        for tile_m, tile_n in tc.tile([m, n]):
            keep = tc.rand([tile_m, tile_n], seed) > p
            out[tile_m, tile_n] = torch.where(keep, x[tile_m, tile_n] / (1 - p), 0.0)
    """
    ctx = eager_context("rand")
    return philox_uniform(seed, _offsets(shape, ctx.device))


def randint(
    shape: Sequence[Any], low: int, high: int, seed: int | torch.Tensor, device: Any = None
) -> torch.Tensor:
    """Random int32 values in [low, high) of `shape` (tiles and ints), from `seed`.

    Example::

        for tile in tc.tile(n):
            out[tile] = tc.randint([tile], 0, 10, seed=42)
    """
    ctx = eager_context("randint")
    if low >= high:
        raise ValueError(f"tc.randint needs low < high, got {low}, {high}")
    bits = _signed(philox(_seed_value(seed), _offsets(shape, ctx.device)))
    return (low + bits.abs() % (high - low)).to(torch.int32)


def philox_uniform(seed: int | torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    """On the host: the float32 numbers `tc.rand` draws for these element `offsets`
    (row-major positions), e.g. to check a kernel's random mask.

    Example::

        expected = philox_uniform(seed, torch.arange(m * n).view(m, n))
    """
    bits = _signed(philox(_seed_value(seed), offsets))
    magnitude = torch.where(bits < 0, -bits - 1, bits).to(torch.float32)  # ~x for x < 0
    return magnitude * torch.tensor(UNIFORM_SCALE, dtype=torch.float32, device=bits.device)
