"""Tile loops, memory ops, tile creation and tunables against PyTorch, in both modes."""

from __future__ import annotations

import pytest
import torch
from conftest import DEVICE

import tilecraft as tc
from tilecraft.testing import assert_close

SHAPES = [(37, 19), (1, 1), (19, 1), (16, 64)]  # ragged, single element, one column, divisible


def shape_id(shape: tuple[int, ...]) -> str:
    return "x".join(map(str, shape))


def randn(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(shape, device=DEVICE).to(dtype)


# -- creation, masks, atomics --------------------------------------------------------------


@tc.kernel
def creation(x: torch.Tensor) -> torch.Tensor:
    m, n = x.size()
    out = torch.empty_like(x)
    for tile_m in tc.tile(m):
        twos = tc.full([tile_m, n], 2.0, dtype=torch.float32)
        columns = tc.arange(n).to(torch.float32)
        out[tile_m, :] = twos * x[tile_m, :] + columns[None, :] + tc.zeros([tile_m, 1])
    return out


@pytest.mark.parametrize("shape", SHAPES, ids=shape_id)
def test_zeros_full_arange(shape, mode) -> None:
    x = randn(*shape)
    expected = 2 * x + torch.arange(shape[1], device=DEVICE)[None, :]
    assert_close(mode(creation)(x), expected)


@tc.kernel
def positions(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty(x.shape, dtype=torch.int32, device=x.device)
    for tile in tc.tile(x.size(0)):
        out[tile] = tc.arange(tile.begin, tile.end)
    return out


@pytest.mark.parametrize("n", [1, 37])
def test_arange_over_a_tile(n, mode) -> None:
    assert torch.equal(mode(positions)(randn(n)), torch.arange(n, dtype=torch.int32, device=DEVICE))


@tc.kernel
def masked_copy(x: torch.Tensor, threshold: float) -> torch.Tensor:
    out = torch.zeros_like(x)
    for tile in tc.tile(x.size(0)):
        even = tile.index % 2 == 0
        values = tc.load(x, [tile], extra_mask=even)
        tc.store(out, [tile], values, extra_mask=values > threshold)
    return out


@pytest.mark.parametrize("n", [1, 37, 64])
def test_load_store_extra_mask(n, mode) -> None:
    x = randn(n)
    even = torch.arange(n, device=DEVICE) % 2 == 0
    expected = torch.where(even & (x > 0.1), x, 0.0)
    assert_close(mode(masked_copy)(x, 0.1), expected)


@tc.kernel
def column_sums(x: torch.Tensor) -> torch.Tensor:
    m, n = x.size()
    out = torch.zeros(n, dtype=torch.float32, device=x.device)
    for tile_m, tile_n in tc.tile([m, n]):
        tc.atomic_add(out, [tile_n], x[tile_m, tile_n].to(torch.float32).sum(0))
    return out


@pytest.mark.parametrize("shape", [*SHAPES, (300, 5)], ids=shape_id)
def test_atomic_add_across_row_tiles(shape, mode) -> None:
    x = randn(*shape)
    assert_close(mode(column_sums)(x), x.sum(0))


# -- loops and tile attributes -------------------------------------------------------------


@tc.kernel
def scale_rows(x: torch.Tensor) -> torch.Tensor:
    m, n = x.size()
    out = torch.empty_like(x)
    for i in tc.grid(m):
        for tile in tc.tile(n):
            out[i, tile] = x[i, tile] * (i + 1)
    return out


@pytest.mark.parametrize("shape", SHAPES, ids=shape_id)
def test_grid(shape, mode) -> None:
    x = randn(*shape)
    expected = x * torch.arange(1, shape[0] + 1, device=DEVICE)[:, None]
    assert_close(mode(scale_rows)(x), expected)


@tc.kernel
def add_one_in_range(x: torch.Tensor, begin: int, end: int) -> torch.Tensor:
    out = torch.zeros_like(x)
    for tile in tc.tile(begin, end):
        out[tile] = x[tile] + 1
    return out


@pytest.mark.parametrize(("begin", "end"), [(5, 30), (0, 37), (36, 37), (3, 19)])
def test_tile_begin_end(begin, end, mode) -> None:
    x = randn(37)
    expected = torch.zeros_like(x)
    expected[begin:end] = x[begin:end] + 1
    assert_close(mode(add_one_in_range)(x, begin, end), expected)


@tc.kernel
def tile_attributes(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    n = x.size(0)
    outs = [torch.empty(n, dtype=torch.int32, device=x.device) for _ in range(5)]
    index, begin, end, block_size, ids = outs
    for tile in tc.tile(n, block_size=16):
        index[tile] = tile.index
        begin[tile] = tile.begin
        end[tile] = tile.end
        block_size[tile] = tile.block_size
        ids[tile] = tile.id
    return index, begin, end, block_size, ids


@pytest.mark.parametrize("n", [1, 16, 37])
def test_tile_attributes(n, mode) -> None:
    positions = torch.arange(n, device=DEVICE)
    begins = positions // 16 * 16
    expected = (positions, begins, (begins + 16).clamp(max=n), torch.full_like(positions, 16))
    outs = mode(tile_attributes)(randn(n))
    for out, want in zip(outs, (*expected, positions // 16), strict=True):
        assert torch.equal(out.long(), want)


@tc.kernel
def broadcast(x: torch.Tensor, col: torch.Tensor, row: torch.Tensor) -> torch.Tensor:
    m, n = x.size()
    out = torch.empty_like(x)
    for tile_m, tile_n in tc.tile([m, n]):
        out[tile_m, tile_n] = x[tile_m, tile_n] * col[tile_m][:, None] + row[None, tile_n]
    return out


@pytest.mark.parametrize("shape", SHAPES, ids=shape_id)
def test_broadcasting(shape, mode) -> None:
    x, col, row = randn(*shape), randn(shape[0]), randn(shape[1])
    assert_close(mode(broadcast)(x, col, row), x * col[:, None] + row[None, :])


@tc.kernel
def embedding(idx: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    (b,) = idx.size()
    e = weight.size(1)
    out = torch.empty(b, e, dtype=weight.dtype, device=weight.device)
    for tile_b, tile_e in tc.tile([b, e]):
        out[tile_b, tile_e] = weight[idx[tile_b], tile_e]
    return out


@pytest.mark.parametrize(("batch", "dim"), [(37, 19), (1, 1), (5, 64)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_gather_embedding(batch, dim, dtype, mode) -> None:
    idx = torch.randint(0, 50, (batch,), device=DEVICE)
    weight = randn(50, dim, dtype=dtype)
    assert torch.equal(mode(embedding)(idx, weight), weight[idx])


@tc.kernel
def double_flat(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    flat_x, flat_out = x.reshape(-1), out.view(-1)
    for tile in tc.tile(flat_x.size(0)):
        flat_out[tile] = flat_x[tile] * 2
    return out


@pytest.mark.parametrize("shape", [(37, 19), (1, 1), (3, 5, 7)], ids=shape_id)
def test_host_views(shape, mode) -> None:
    x = randn(*shape)
    assert_close(mode(double_flat)(x), 2 * x)


@tc.kernel
def center_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    m, n = x.size()
    sums = torch.empty(m, dtype=torch.float32, device=x.device)
    for tile_m in tc.tile(m):
        acc = tc.zeros([tile_m], dtype=torch.float32)
        for tile_n in tc.tile(n):
            acc = acc + x[tile_m, tile_n].to(torch.float32).sum(1)
        sums[tile_m] = acc
    out = torch.empty_like(x)
    for tile_m, tile_n in tc.tile([m, n]):
        out[tile_m, tile_n] = (x[tile_m, tile_n] - sums[tile_m][:, None]).to(out.dtype)
    return sums, out


@pytest.mark.parametrize("shape", SHAPES, ids=shape_id)
def test_two_loops_returning_a_tuple(shape, mode) -> None:
    x = randn(*shape)
    sums = x.sum(1)
    assert_close(mode(center_rows)(x), (sums, x - sums[:, None]))


# -- block sizes and tunables --------------------------------------------------------------


@tc.kernel
def chunked_row_sums(x: torch.Tensor) -> torch.Tensor:
    m, n = x.size()
    out = torch.empty(m, dtype=torch.float32, device=x.device)
    block_n = tc.register_block_size(n)
    for tile_m in tc.tile(m):
        acc = tc.zeros([tile_m], dtype=torch.float32)
        for tile_n in tc.tile(n, block_size=block_n):
            acc = acc + x[tile_m, tile_n].sum(1)
        out[tile_m] = acc
    return out


@pytest.mark.parametrize("block_n", [None, 1, 16, 64])
@pytest.mark.parametrize("shape", SHAPES, ids=shape_id)
def test_register_block_size(shape, block_n, mode) -> None:
    kernel = tc.kernel(chunked_row_sums.fn, config=tc.Config(block_sizes=[block_n]))
    x = randn(*shape)
    assert_close(mode(kernel)(x), x.sum(1))


FACTORS = tc.language.Choice(1, 2, 4)


@tc.kernel
def scale(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    factor = tc.register_tunable("factor", FACTORS)
    for tile in tc.tile(x.size(0)):
        out[tile] = x[tile] * factor
    return out


@tc.kernel
def scale_inline_choice(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    factor = tc.register_tunable("factor", tc.language.Choice(1, 2, 4))
    for tile in tc.tile(x.size(0)):
        out[tile] = x[tile] * factor
    return out


@pytest.mark.parametrize("factor", [None, 1, 2, 4])
def test_register_tunable_choice(factor, mode) -> None:
    kernel = tc.kernel(scale.fn, config=tc.Config(factor=factor))
    x = randn(37)
    assert_close(mode(kernel)(x), x * (factor or 1))


def test_register_tunable_inline_choice(mode) -> None:
    kernel = tc.kernel(scale_inline_choice.fn, config=tc.Config(factor=4))
    x = randn(37)
    assert_close(mode(kernel)(x), 4 * x)


@tc.kernel
def tuple_state(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Row sums and maxima carried across the column loop as one tuple of tiles."""
    m, n = x.size()
    sums = torch.empty([m], dtype=torch.float32, device=x.device)
    maxima = torch.empty([m], dtype=torch.float32, device=x.device)
    for tile_m in tc.tile(m):
        zero = tc.zeros([tile_m], dtype=torch.float32)
        state = (zero, zero - float("inf"))
        for tile_n in tc.tile(n):
            part = x[tile_m, tile_n]
            state = (state[0] + torch.sum(part, -1), torch.maximum(state[1], torch.amax(part, -1)))
        total, top = state
        sums[tile_m] = total
        maxima[tile_m] = top
    return sums, maxima


@tc.kernel
def tuple_grows(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile_m in tc.tile(x.size(0)):
        state = (x[tile_m],)
        for _ in tc.tile(4):
            state = (state[0], state[0])
        out[tile_m] = state[0]
    return out


def test_tuple_carried_across_a_loop(mode) -> None:
    """A tuple of tiles updated in a loop carries each item (it was silently dropped)."""
    x = randn(37, 50)
    assert_close(mode(tuple_state)(x), (x.sum(-1), x.amax(-1)))


def test_tuple_changing_length_in_a_loop() -> None:
    with pytest.raises(tc.exc.UnsupportedSyntax, match="tuple of 1 tiles"):
        tuple_grows(randn(8))
