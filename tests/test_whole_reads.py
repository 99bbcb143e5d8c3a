"""A tensor's rows read whole in a device loop and then indexed by a tile (`rows =
x[b, :, h, :]`, then `rows[tile_n, :]`), and `torch.matmul`'s rank rules (a vector
operand, a matrix meeting a batch), in both modes against PyTorch."""

from __future__ import annotations

import pytest
import torch
from conftest import DEVICE

import tilecraft as tc
from tilecraft.testing import check_modes


@tc.kernel
def rows_by_key_tiles(x: torch.Tensor, heads: torch.Tensor) -> torch.Tensor:
    """Per batch row b: the sum over keys of `x[b, :, heads[b], :]`, read a key tile at a
    time from the whole read."""
    batch, keys, _, dim = x.shape
    out = torch.empty([batch, dim], dtype=torch.float32, device=x.device)
    for tile_b in tc.tile(batch, block_size=1):
        b = tile_b.begin
        rows = x[b, :, heads[b], :]
        acc = tc.zeros([dim], dtype=torch.float32)
        for tile_n in tc.tile(keys):
            acc += rows[tile_n, :].to(torch.float32).sum(0)
        out[b, :] = acc
    return out


def _by_key_tiles(x: torch.Tensor, heads: torch.Tensor) -> torch.Tensor:
    return torch.stack([x[b, :, heads[b]].float().sum(0) for b in range(x.size(0))])


@pytest.mark.parametrize("keys", [1, 37])
def test_a_whole_read_indexed_by_a_tile_reads_that_tile(keys: int) -> None:
    """Only the tile's rows are read, from the tensor itself; the whole read, used for
    nothing else, is not in the generated code."""
    x = torch.randn(3, keys, 4, 5, device=DEVICE)
    heads = torch.tensor([2, 0, 3], device=DEVICE)
    config = tc.Config(block_sizes=[8])
    check_modes(rows_by_key_tiles, (x, heads), _by_key_tiles, config=config)
    code = rows_by_key_tiles.bind((x, heads)).to_triton_code(config)
    assert code.count("tl.load(x +") == 1
    loads = [line for line in code.splitlines() if "tl.load(x +" in line]
    assert loads[0].startswith(" " * 8)  # inside the key loop


@tc.kernel
def rows_whole_and_by_tiles(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Both: the whole read's own maximum, and its key tiles' sums."""
    batch, keys, dim = x.shape
    top = torch.empty([batch, dim], device=x.device)
    total = torch.empty([batch, dim], device=x.device)
    for tile_b in tc.tile(batch, block_size=1):
        rows = x[tile_b.begin, :, :]
        top[tile_b.begin, :] = rows.amax(0)
        acc = tc.zeros([dim], dtype=torch.float32)
        for tile_n in tc.tile(keys):
            acc += rows[tile_n].sum(0)
        total[tile_b.begin, :] = acc
    return top, total


def test_a_whole_read_used_whole_and_by_tiles() -> None:
    x = torch.randn(2, 19, 6, device=DEVICE)
    x[1, 3, 2] = float("nan")
    config = tc.Config(block_sizes=[4])
    check_modes(rows_whole_and_by_tiles, (x,), lambda x: (x.amax(1), x.sum(1)), config=config)
    code = rows_whole_and_by_tiles.bind((x,)).to_triton_code(config)
    assert code.count("tl.load(x +") == 2


@tc.kernel
def products(a: torch.Tensor, c: torch.Tensor, v: torch.Tensor) -> tuple:
    """`[b, m, k] @ [k, n]` and `[n, k] @ [b, k, m]`: a matrix meeting a batch either way; and
    vector operands (a row first, a column second, both)."""
    b, m, n = a.size(0), a.size(1), c.size(1)
    o1, o2 = a.new_empty([b, m, n]), a.new_empty([b, n, m])
    o3, o4, o5 = a.new_empty([b, n]), a.new_empty([b, m]), a.new_empty([b])
    for tile_b in tc.tile(b):
        batch, c, v = a[tile_b, :, :], c[:, :], v[:]
        o1[tile_b, :, :] = torch.matmul(batch, c)
        o2[tile_b, :, :] = c.T @ batch.transpose(1, 2)
        o3[tile_b, :] = (v @ c)[None, :] + tc.zeros([tile_b, n])
        o4[tile_b, :] = batch @ v
        o5[tile_b] = batch[:, 0, :] @ v + batch[:, 1, :] @ v
    return o1, o2, o3, o4, o5


def _products(a: torch.Tensor, c: torch.Tensor, v: torch.Tensor) -> tuple:
    both = (a[:, 0, :] * v).sum(-1) + (a[:, 1, :] * v).sum(-1)
    vc = (v @ c)[None, :].expand(a.size(0), -1)
    return torch.matmul(a, c), c.T @ a.transpose(1, 2), vc, a @ v, both


@pytest.mark.parametrize("batch", [1, 5])
def test_matmul_broadcasts_as_pytorch(batch: int) -> None:
    a = torch.randn(batch, 16, 16, device=DEVICE)
    c, v = torch.randn(16, 16, device=DEVICE), torch.randn(16, device=DEVICE)
    check_modes(products, (a, c, v), _products, config=tc.Config(block_sizes=[2]))
