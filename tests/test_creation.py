"""New tiles inside device loops, written as PyTorch writes them: *_like, new_*,
torch.zeros/ones/full with tile shapes, torch.tensor constants and torch.arange; both
modes against PyTorch on ragged shapes."""

from __future__ import annotations

import pytest
import torch

import tilecraft as tc
from tilecraft.exc import UnsupportedOperation
from tilecraft.testing import check_modes


@tc.kernel
def likes(x: torch.Tensor) -> torch.Tensor:
    m, n = x.size()
    out = torch.empty([4, m, n], dtype=x.dtype, device=x.device)
    for tile_m in tc.tile(m):
        t = x[tile_m, :]
        out[0, tile_m, :] = torch.zeros_like(t) + t
        out[1, tile_m, :] = torch.ones_like(t) * 2 + torch.empty_like(t) * 0
        out[2, tile_m, :] = torch.full_like(t, -1.5) + torch.full_like(t, 3, dtype=torch.int32)
        out[3, tile_m, :] = t.new_zeros([tile_m, n]) + t.new_full([tile_m, 1], 7) + t.new_ones(n)
    return out


def _likes_ref(x: torch.Tensor) -> torch.Tensor:
    return torch.stack([x, torch.full_like(x, 2), torch.full_like(x, 1.5), torch.full_like(x, 8)])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_like_and_new(dtype: torch.dtype) -> None:
    check_modes(likes, (torch.randn(13, 5, dtype=dtype),), _likes_ref)


@tc.kernel
def int_likes(x: torch.Tensor) -> torch.Tensor:
    m = x.size(0)
    out = torch.empty_like(x)
    for tile_m in tc.tile(m):
        t = x[tile_m]
        out[tile_m] = torch.full_like(t, 7) - torch.ones_like(t) + t.new_full([tile_m], 2)
    return out


def test_like_keeps_integer_dtypes() -> None:
    x = torch.randint(-9, 9, (11,), dtype=torch.int32)
    check_modes(int_likes, (x,), lambda x: torch.full_like(x, 8))


@tc.kernel
def factories(x: torch.Tensor) -> torch.Tensor:
    m, n = x.size()
    out = torch.empty([m, n], dtype=torch.float32, device=x.device)
    for tile_m in tc.tile(m):
        acc = torch.zeros([tile_m, n], dtype=torch.float32, device=x.device)
        acc = acc + torch.ones(tile_m, 1, device=x.device)
        acc = acc + torch.full([tile_m, n], 0.5, device=x.device)
        out[tile_m, :] = acc + x[tile_m, :]
    return out


def test_torch_factories_with_tile_shapes() -> None:
    check_modes(factories, (torch.randn(21, 6),), lambda x: x + 1.5)


@tc.kernel
def constants(x: torch.Tensor) -> torch.Tensor:
    m = x.size(0)
    out = torch.empty([m, 3], dtype=torch.float32, device=x.device)
    for tile_m in tc.tile(m):
        weights = torch.tensor([0.5, -2.0, 4.0], device=x.device)
        shift = torch.tensor(1.0, device=x.device)
        steps = torch.arange(3, device=x.device)
        out[tile_m, :] = x[tile_m, None] * weights + shift + steps
    return out


def test_tensor_literals_and_arange() -> None:
    def ref(x: torch.Tensor) -> torch.Tensor:
        return x[:, None] * torch.tensor([0.5, -2.0, 4.0]) + 1.0 + torch.arange(3)

    check_modes(constants, (torch.randn(17),), ref)


@tc.kernel
def int_constants(x: torch.Tensor) -> torch.Tensor:
    m = x.size(0)
    out = torch.empty([m, 5], dtype=torch.int64, device=x.device)
    for tile_m in tc.tile(m):
        table = torch.tensor([3, -1, 4, 1, 5], device=x.device)
        out[tile_m, :] = x[tile_m, None] * table + torch.arange(10, 0, -2, device=x.device)
    return out


def test_integer_literals_and_stepped_arange() -> None:
    def ref(x: torch.Tensor) -> torch.Tensor:
        return x[:, None] * torch.tensor([3, -1, 4, 1, 5]) + torch.arange(10, 0, -2)

    check_modes(int_constants, (torch.randint(-5, 5, (9,)),), ref)


@tc.kernel
def tensor_of_a_tile(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile_m in tc.tile(x.size(0)):
        out[tile_m] = torch.tensor([x[tile_m], x[tile_m]]).sum(0)
    return out


def test_tensor_of_tiles_is_refused() -> None:
    with pytest.raises(UnsupportedOperation, match="constant numbers"):
        tensor_of_a_tile(torch.randn(4))


@tc.kernel
def helion_full(x: torch.Tensor) -> torch.Tensor:
    m, n = x.size()
    out = torch.empty([m, n], dtype=torch.float32, device=x.device)
    for tile_m in tc.tile(m):
        low = tc.full([tile_m, n], float("-inf"), dtype=torch.float32)
        acc = tc.zeros([tile_m, n], dtype=torch.float32, device=x.device)
        out[tile_m, :] = torch.maximum(low, x[tile_m, :]) + acc
    return out


def test_hl_full_and_zeros_with_dtype_keywords() -> None:
    check_modes(helion_full, (torch.randn(10, 3),), lambda x: x.float())
