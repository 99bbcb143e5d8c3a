"""Eager mode at a loop's ragged end: tiles there are cut short (slices), while values
shaped by `register_block_size` keep the whole block; they meet as compiled code's masked
lanes do (short tiles read as zero-padded, block-sized values stored only where the tile
reaches)."""

from __future__ import annotations

import pytest
import torch
from conftest import DEVICE

import tilecraft as tc
from tilecraft.testing import check_modes


@tc.kernel
def doubled_by_blocks(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    m, n = x.size()
    out = torch.empty_like(x)
    sums = torch.empty([m], dtype=x.dtype, device=x.device)
    block_n = tc.register_block_size(n)
    for tile_m in tc.tile(m):
        total = tc.zeros([tile_m, block_n], dtype=x.dtype)
        for tile_n in tc.tile(n, block_size=block_n):
            chunk = tc.zeros([tile_m, block_n], dtype=x.dtype) + x[tile_m, tile_n] * 2
            out[tile_m, tile_n] = chunk
            total += x[tile_m, tile_n]
        sums[tile_m] = total.sum(-1)
    return out, sums


def test_block_sized_values_meet_short_tiles_as_compiled(mode) -> None:
    x = torch.randn(13, 45, device=DEVICE)  # 45 is not a multiple of any block size
    config = tc.Config(block_sizes=[32, 8])
    out, sums = mode(tc.kernel(config=config)(doubled_by_blocks.fn))(x)
    torch.testing.assert_close(out, x * 2)
    torch.testing.assert_close(sums, x.sum(-1), rtol=1e-5, atol=1e-5)


def _twice_plus_one(t: torch.Tensor) -> torch.Tensor:
    return t * 2 + 1


_twice_plus_one.__module__ = "tilecraft.vision.helpers"  # as if tilecraft's kernel library


@tc.kernel
def uses_library_helper(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in tc.tile(x.size(0)):
        out[tile] = _twice_plus_one(x[tile])
    return out


def test_helpers_of_tilecraft_kernel_library_are_inlined(mode) -> None:
    x = torch.randn(19, device=DEVICE)
    torch.testing.assert_close(mode(uses_library_helper)(x), x * 2 + 1)


def _shifted(x: torch.Tensor, tile: object) -> torch.Tensor:
    return x[tile.index + 1]  # type: ignore[attr-defined]


@tc.kernel
def uses_shifting_helper(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in tc.tile(x.size(0)):
        out[tile] = _shifted(x, tile)
    return out


def test_a_helpers_subscripts_are_bounded_eagerly_as_compiled(mode) -> None:
    x = torch.arange(1.0, 6.0, device=DEVICE)
    expected = torch.tensor([2.0, 3, 4, 5, 0], device=DEVICE)
    torch.testing.assert_close(mode(uses_shifting_helper)(x), expected)


def _scaled(t: torch.Tensor, tile: object) -> torch.Tensor:
    return t * SCALE + OFFSET[tile]


SCALE, OFFSET = 1.5, torch.tensor([10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0], device=DEVICE)


@tc.kernel
def uses_module_values_in_a_helper(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in tc.tile(x.size(0)):
        out[tile] = _scaled(x[tile], tile)
    return out


def test_a_helper_reads_floats_and_tensors_of_its_module(mode) -> None:
    x = torch.randn(7, device=DEVICE)
    expected = x * SCALE + OFFSET
    torch.testing.assert_close(mode(uses_module_values_in_a_helper)(x), expected)


@tc.kernel(config=tc.Config(block_sizes=[4, 4]))
def past_the_end(x: torch.Tensor, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    m = x.size(0)
    out = torch.full([m, n], -1.0, device=x.device)
    sums = torch.zeros([m], device=x.device)
    for tile_m in tc.tile(m):
        acc = tc.zeros([tile_m])
        for tile_k in tc.tile(0, n):
            v = x[tile_m, tile_k] + 1  # positions past x's end read 0
            out[tile_m, tile_k] = torch.exp(v)
            acc = acc + v.sum(1)
        sums[tile_m] = acc
    return out, sums


def test_tiles_past_a_tensors_end_read_zeros_in_both_modes(mode) -> None:
    x = torch.randn(6, 5, device=DEVICE)
    padded = torch.nn.functional.pad(x, (0, 6)) + 1  # the loop runs to 11
    out, sums = mode(past_the_end)(x, 11)
    torch.testing.assert_close(out, padded.exp())
    torch.testing.assert_close(sums, padded.sum(1))


@tc.kernel
def column_sums(x: torch.Tensor) -> torch.Tensor:
    rows, cols = x.size()
    out = torch.empty([cols], dtype=torch.float32, device=x.device)
    block_r = tc.register_block_size(16, rows)
    for tile_c in tc.tile(cols):
        acc = tc.zeros([block_r, tile_c], dtype=torch.float32)
        for tile_r in tc.tile(rows, block_size=block_r):
            acc = acc + x[tile_r, tile_c].to(torch.float32)
        out[tile_c] = torch.sum(acc, 0)
    return out


@pytest.mark.parametrize("rows", [1, 2, 17])
def test_a_last_tile_of_one_row_meets_a_block_sized_accumulator(mode, rows: int) -> None:
    """Eagerly, `acc[16, c] + x[tile of 1 row, c]` broadcast the row over all 16 lanes
    (sums 16x too big); compiled, the tile's missing lanes read 0."""
    x = torch.randn(rows, 5, device=DEVICE, dtype=torch.float16)
    torch.testing.assert_close(mode(column_sums)(x), x.float().sum(0), rtol=1e-3, atol=1e-3)


@tc.kernel
def shifted_store(x: torch.Tensor, out: torch.Tensor) -> None:
    for tile in tc.tile(1, x.size(0), block_size=4):
        out[tile.index - 3] = x[tile] * 2


def test_a_one_element_tile_stores_into_a_tensor_as_long_as_its_block() -> None:
    """The last tile, one element of a block of 4, stored through computed indices into a
    tensor of 4: eagerly, the store's own `index_put_` widened the value to the tensor's
    length, 4, as an elementwise op with a block-sized operand would (memory fuzzer, seed
    301); compiled code stores the one lane."""
    x = torch.arange(6.0, device=DEVICE)
    out = torch.full((4,), 99.0, device=DEVICE)
    expected = torch.tensor([6.0, 8, 10, 99], device=DEVICE)
    check_modes(shifted_store, (x, out), lambda x, out: (x, expected))


@tc.kernel
def carried_over_own_tiles(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Row maxima and sums of x + 1 through accumulators over their own loop's lanes, made
    by tilecraft's functions (row 0 of each output), by PyTorch's (row 1) and computed from
    those (row 2)."""
    m, n = x.size()
    top = torch.empty([3, m], dtype=x.dtype, device=x.device)
    plus = torch.empty([3, m], dtype=x.dtype, device=x.device)
    block_n = tc.register_block_size(n)
    for tile_m in tc.tile(m):
        best = tc.full([tile_m, block_n], float("-inf"), dtype=torch.float32)
        total = tc.zeros([tile_m, block_n], dtype=torch.float32)
        best_pt = torch.full([tile_m, block_n], float("-inf"), dtype=torch.float32, device=x.device)
        total_pt = x.new_zeros(tile_m, block_n, dtype=torch.float32)
        best_from = tc.zeros([tile_m, block_n], dtype=torch.float32) - float("inf")
        total_from = torch.ones([tile_m, block_n], dtype=torch.float32, device=x.device) * 2 - 2
        for tile_n in tc.tile(n, block_size=block_n):
            v = x[tile_m, tile_n]
            best, best_pt = torch.maximum(best, v), torch.maximum(best_pt, v)
            total, total_pt = total + v + 1, total_pt + v + 1
            best_from, total_from = torch.maximum(best_from, v), total_from + v + 1
        top[0, tile_m], top[1, tile_m] = best.amax(-1), best_pt.amax(-1)
        plus[0, tile_m], plus[1, tile_m] = total.sum(-1), total_pt.sum(-1)
        top[2, tile_m], plus[2, tile_m] = best_from.amax(-1), total_from.sum(-1)
    return top, plus


@pytest.mark.parametrize("n, blocks", [(13, [4, 8]), (8, [4, 8]), (1, [4, 8]), (13, [8, 8])])
def test_an_accumulator_keeps_its_lanes_past_its_loops_end(mode, n: int, blocks) -> None:
    """An accumulator over its own loop's lanes (`register_block_size`) keeps those past
    the row's end in both modes, as compiled code does: the row maximum of negative values
    and the sum of x + 1 over all lanes are PyTorch's (eager mode used to compute the lanes
    past the end from zeros: max(acc, 0), acc + 0 + 1). [8, 8]: the tile's rows and the
    accumulator's lanes have one size, so only the dim made from `block_n` is kept. The
    accumulators made by `tc.full`/`tc.zeros` or by `torch.full`/`x.new_zeros`, or
    computed from those by elementwise ops."""
    x = -torch.rand(5, n, device=DEVICE) - 1
    top, plus = mode(tc.kernel(config=tc.Config(block_sizes=blocks))(carried_over_own_tiles.fn))(x)
    torch.testing.assert_close(top, x.amax(-1).expand(3, -1))
    torch.testing.assert_close(plus, (x + 1).sum(-1).expand(3, -1), rtol=1e-5, atol=1e-5)
