"""Helion's atomics beyond `atomic_add` (`hl.atomic_max`, `atomic_min`, `atomic_and`,
`atomic_or`, `atomic_xor`, `atomic_xchg`, `atomic_cas`), written as Helion kernels, in both
CPU modes against PyTorch on ragged shapes: with tiles, gathers that hit a position
several times, an extra mask and an `if` on a tile."""

from __future__ import annotations

import pytest
import torch

import tilecraft as helion
import tilecraft.language as hl
from tilecraft import exc
from tilecraft.testing import check_modes


@helion.kernel()
def column_extremes(x: torch.Tensor, high: torch.Tensor, low: torch.Tensor) -> torch.Tensor:
    m, n = x.size()
    for tile_m, tile_n in hl.tile([m, n]):
        block = x[tile_m, tile_n]
        hl.atomic_max(high, [tile_n], block.amax(0), sem="relaxed")
        hl.atomic_min(low, [tile_n], block.amin(0))
    return torch.stack([high, low])


def test_atomic_max_and_min() -> None:
    x = torch.randn(45, 19)
    high, low = torch.full([19], float("-inf")), torch.full([19], float("inf"))
    check_modes(column_extremes, (x, high, low), lambda a, *_: torch.stack([a.amax(0), a.amin(0)]))


@helion.kernel()
def grouped_bits(
    x: torch.Tensor, groups: torch.Tensor, ors: torch.Tensor, ands: torch.Tensor, xors: torch.Tensor
) -> torch.Tensor:
    for tile in hl.tile(x.size(0)):
        group = groups[tile]
        hl.atomic_or(ors, [group], x[tile])
        hl.atomic_and(ands, [group], x[tile])
        hl.atomic_xor(xors, [group], x[tile])
    return torch.stack([ors, ands, xors])


def _grouped_bits(x: torch.Tensor, groups: torch.Tensor, *_: torch.Tensor) -> torch.Tensor:
    out = torch.tensor([[0] * 5, [-1] * 5, [0] * 5], dtype=torch.int32)
    for value, g in zip(x.tolist(), groups.tolist(), strict=True):
        out[0, g] |= value
        out[1, g] &= value
        out[2, g] ^= value
    return out


def test_bitwise_atomics_on_repeated_positions() -> None:
    x = torch.randint(0, 1 << 20, (53,), dtype=torch.int32)
    groups = torch.randint(0, 5, (53,))
    starts = (torch.zeros(5, dtype=torch.int32), torch.full([5], -1, dtype=torch.int32))
    args = (x, groups, starts[0], starts[1], starts[0].clone())
    check_modes(grouped_bits, args, _grouped_bits)


@helion.kernel()
def claim_and_swap(x: torch.Tensor, slots: torch.Tensor, copy: torch.Tensor) -> torch.Tensor:
    for tile in hl.tile(x.size(0)):
        hl.atomic_cas(slots, [tile], 0.0, x[tile])
        hl.atomic_xchg(copy, [tile], x[tile] * 2, extra_mask=x[tile] > 0)
    return torch.stack([slots, copy])


def test_atomic_cas_and_xchg() -> None:
    x = torch.randn(37)
    slots = torch.where(torch.rand(37) < 0.5, 0.0, torch.randn(37))
    copy = torch.randn(37)

    def reference(a: torch.Tensor, s: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        return torch.stack([torch.where(s == 0, a, s), torch.where(a > 0, a * 2, c)])

    check_modes(claim_and_swap, (x, slots, copy), reference)


@helion.kernel()
def positive_max(x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    for tile in hl.tile(x.size(0)):
        value = x[tile]
        if value > 0:
            hl.atomic_max(out, [tile.index % 4], value)
    return out


def test_atomic_in_a_branch_on_a_tile() -> None:
    x = torch.randn(41)
    out = torch.zeros(4)

    def reference(a: torch.Tensor, o: torch.Tensor) -> torch.Tensor:
        kept = a.clamp(min=0)
        return torch.stack([kept[k::4].max() for k in range(4)])

    check_modes(positive_max, (x, out), reference)


@helion.kernel()
def bad_sem(x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    for tile in hl.tile(x.size(0)):
        hl.atomic_min(out, [tile], x[tile], sem="sequential")
    return out


def test_bad_sem_is_refused_by_name() -> None:
    with pytest.raises(exc.UnsupportedOperation, match=r"tc.atomic_min\(sem='sequential'\)"):
        bad_sem(torch.randn(5), torch.zeros(5))
