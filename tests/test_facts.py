"""Tile loops with device-computed bounds proven multiples of their tile (frontend/facts):
no mask where no tile can stop short, a mask wherever one might, in both modes."""

from __future__ import annotations

import pytest
import torch

import tilecraft as tc
from tilecraft.frontend.facts import Facts, facts_of
from tilecraft.ir.types import Block


@tc.kernel
def causal_rowsums(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """out[i] = sum over j <= i (j < len(y)) of x[i] * y[j]: the keys before a row tile in a
    first loop (no mask when its bounds are multiples of its tile), the tile's diagonal in
    a second one (masked)."""
    m, n = x.size(0), y.size(0)
    out = torch.empty_like(x)
    for tile_m in tc.tile(m):
        acc = tc.zeros([tile_m], dtype=torch.float32)
        split = min(tile_m.begin, n)
        for tile_n in tc.tile(0, split):
            acc = acc + torch.sum(x[tile_m][:, None] * y[tile_n][None, :], -1)
        for tile_n in tc.tile(split, min(tile_m.end, n)):
            keep = tile_n.index[None, :] <= tile_m.index[:, None]
            acc = acc + torch.sum(torch.where(keep, x[tile_m][:, None] * y[tile_n][None, :], 0), -1)
        out[tile_m] = acc
    return out


@tc.kernel
def rounded_prefix(x: torch.Tensor) -> torch.Tensor:
    """out[i] = the sum of x over [0, begin of i's tile rounded down to 8 and past 3)."""
    n = x.size(0)
    out = torch.zeros_like(x)
    for tile in tc.tile(n, block_size=32):
        total = tc.zeros([tile], dtype=torch.float32)
        for part in tc.tile(0, max(tile.begin // 8 * 8 - 3, 0), block_size=8):
            total = total + torch.sum(x[part])
        out[tile] = total
    return out


def _guarded(values: torch.Tensor) -> torch.Tensor:
    """`values` followed in memory by NaNs: a read past its end (an unmasked lane) shows."""
    padded = torch.cat([values, torch.full((64,), float("nan"))])
    return padded[: values.numel()]


@pytest.mark.parametrize(
    ("m", "n", "blocks", "aligned"),
    [
        (37, 50, [16, 16, 16], (True, False)),  # ragged: the keys before a tile still aligned
        (64, 64, [32, 16, 16], (True, True)),  # row tiles larger than key tiles
        (64, 64, [16, 32, 32], (False, False)),  # key tiles larger: no proof, masked
        (50, 37, [16, 16, 16], (False, False)),  # more rows than keys: min(begin, 37)
        (1, 1, [16, 16, 16], (True, False)),
    ],
)
def test_causal_loops(mode, monkeypatch, m: int, n: int, blocks: list, aligned: tuple) -> None:
    x, y = torch.randn(m), torch.randn(n)
    config = tc.Config(block_sizes=blocks)
    monkeypatch.setattr(causal_rowsums, "config", config)
    got = mode(causal_rowsums)(x, _guarded(y))
    keep = torch.ones(m, n).tril()
    torch.testing.assert_close(got, (x[:, None] * y[None, :] * keep).sum(-1))
    if n > 1:  # the mask matters: without it the sums differ
        assert not torch.allclose(got, (x[:, None] * y[None, :]).sum(-1))
    kernel = causal_rowsums.bind((x, y)).analyze(config).kernels[0]
    inner = [b for b in kernel.blocks.values() if b.dynamic]
    assert tuple(b.aligned for b in inner) == aligned
    last = (m - 1) // blocks[0] * blocks[0]  # the last row tile's begin
    assert inner[0].bounds == (0, min(last, n))
    code = causal_rowsums.bind((x, y)).to_triton_code(config)
    for block, proven in zip(inner, aligned, strict=True):
        assert (f"mask_{block.id} = " in code) != proven


@pytest.mark.parametrize("n", [100, 37, 5])
def test_rounded_bounds_keep_their_mask(mode, n: int) -> None:
    """`begin // 8 * 8` is a multiple of 8, minus 3 is not: the loop stays masked (with one
    row tile, the loop is provably empty: (0, 0) is aligned)."""
    x = torch.randn(n)
    got = mode(rounded_prefix)(_guarded(x))
    ends = [max(i // 32 * 32 // 8 * 8 - 3, 0) for i in range(n)]
    torch.testing.assert_close(got, torch.stack([x[:e].sum() for e in ends]))
    kernel = rounded_prefix.bind((x,)).analyze(tc.Config()).kernels[0]
    assert [b.aligned for b in kernel.blocks.values() if b.dynamic] == [n <= 32]


def test_facts_rules() -> None:
    """Tile offsets, host ints and min, max, +, -, *, // over them."""
    from tilecraft.frontend import facts

    tile = Block(0, "tile", extent=100, fixed_size=32)
    assert facts._tile_facts(tile, end=False) == Facts(32, 0, 96)
    assert facts._tile_facts(tile, end=True) == Facts(4, 32, 100)  # 32, 64, 96, 100
    begin = Facts(32, 0, 96)
    assert facts._minimum(begin, Facts(128, 128, 128)) == begin  # never above 128
    assert facts._minimum(begin, Facts(50, 50, 50)) == Facts(2, 0, 50)
    assert facts._maximum(Facts(32, -31, 65), Facts(0, 0, 0)) == Facts(32, 0, 65)
    assert facts._sum(begin, Facts(3, 3, 3), -1) == Facts(1, -3, 93)
    assert facts._product(Facts(1, 0, 12), Facts(8, 8, 8)) == Facts(8, 0, 96)
    assert facts._quotient(begin, Facts(8, 8, 8)) == Facts(4, 0, 12)
    assert facts._quotient(begin, Facts(1, 0, 9)) == facts.UNKNOWN  # not one constant
    assert facts_of(7, [], {}) == Facts(7, 7, 7) and facts_of(True, [], {}) == facts.UNKNOWN


def test_unproven_masks_every_loop() -> None:
    """Inside `unproven()` (the bench's baseline) nothing is proven: both loops masked."""
    from tilecraft.frontend.facts import unproven

    x, config = torch.randn(64), tc.Config(block_sizes=[32, 16, 16])
    with unproven():
        kernel = causal_rowsums.bind((x, x)).analyze(config).kernels[0]
    assert [b.aligned for b in kernel.blocks.values() if b.dynamic] == [False, False]
