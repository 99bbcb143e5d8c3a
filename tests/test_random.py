"""tc.rand / tc.randint: Philox from a seed, the same bits in eager mode (PyTorch integer
ops) and compiled (Triton's tl.rand), whatever the block sizes."""

from __future__ import annotations

import pytest
import torch
from conftest import DEVICE

import tilecraft as tc
from tilecraft.testing import run_mode


@tc.kernel
def uniform(x: torch.Tensor, seed: int) -> torch.Tensor:
    m, n = x.shape
    out = torch.empty([m, n], device=x.device)
    for tile_m, tile_n in tc.tile([m, n]):
        out[tile_m, tile_n] = tc.rand([tile_m, tile_n], seed)
    return out


@tc.kernel
def integers(x: torch.Tensor, seed: int) -> torch.Tensor:
    (n,) = x.shape
    out = torch.empty([n], dtype=torch.int32, device=x.device)
    for tile in tc.tile(n):
        out[tile] = tc.randint([tile], -3, 7, seed)
    return out


@tc.kernel(fp_fusion=False)  # a GPU would fuse tl.rand's scaling with the add: one rounding
def row_noise(x: torch.Tensor, seed: torch.Tensor) -> torch.Tensor:
    m, n = x.shape
    out = torch.empty([m, n], device=x.device)
    for tile in tc.tile(m):
        out[tile, :] = x[tile, :] + tc.rand([tile, n], seed)
    return out


def test_rand_is_the_same_in_both_modes_and_for_any_block_size() -> None:
    x = torch.empty(13, 37, device=DEVICE)
    eager = run_mode(uniform, (x, 1234), "eager")
    for sizes in ([4, 8], [16, 64], [1, 32]):
        compiled = run_mode(uniform, (x, 1234), "triton", tc.Config(block_sizes=sizes))
        assert torch.equal(compiled, eager), sizes
    assert eager.min() >= 0.0 and eager.max() < 1.0
    assert abs(eager.mean().item() - 0.5) < 0.05
    other = run_mode(uniform, (x, 1235), "eager")
    assert not torch.equal(other, eager)


@pytest.mark.parametrize("seed", [0, 2**40 + 5])
def test_randint_is_in_range_and_the_same_in_both_modes(seed: int) -> None:
    x = torch.empty(1000, device=DEVICE)
    eager = run_mode(integers, (x, seed), "eager")
    compiled = run_mode(integers, (x, seed), "triton")
    assert torch.equal(compiled, eager)
    assert eager.dtype == torch.int32
    assert eager.min() == -3 and eager.max() == 6


def test_rand_with_an_int_dim_and_a_tensor_seed() -> None:
    x = torch.randn(5, 9, device=DEVICE)
    seed = torch.tensor(77, device=DEVICE)
    eager = run_mode(row_noise, (x, seed), "eager")
    compiled = run_mode(row_noise, (x, seed), "triton", tc.Config(block_sizes=[2]))
    assert torch.equal(compiled, eager)
    assert torch.all((eager - x >= 0) & (eager - x < 1))


def test_eager_philox_matches_tl_rand_directly() -> None:
    import triton
    import triton.language as tl

    from tilecraft.language.random import philox

    @triton.jit
    def bits(out, seed, N: tl.constexpr):
        offs = tl.arange(0, N)
        tl.store(out + offs, tl.randint(seed, offs).to(tl.int64) & 0xFFFFFFFF)

    out = torch.empty(64, dtype=torch.int64, device=DEVICE)
    bits[(1,)](out, 99, N=64)
    assert torch.equal(out.cpu(), philox(99, torch.arange(64)))
