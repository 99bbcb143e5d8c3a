"""F.layer_norm and F.rms_norm called on tiles: both modes against PyTorch, every float
dtype, weights and biases loaded as tiles, rows of 0 and 1 elements."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import tilecraft as tc
from tilecraft.exc import ShapeMismatch
from tilecraft.testing import check_modes

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64]


@tc.kernel
def norms(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor, eps: float) -> torch.Tensor:
    out = torch.empty([2, *x.shape], dtype=x.dtype, device=x.device)
    n = x.size(1)
    for tile in tc.tile(x.size(0)):
        row = x[tile, :]
        out[0, tile, :] = F.layer_norm(row, [n], w[:], bias[:], eps=eps)
        out[1, tile, :] = F.rms_norm(row, (n,), w[:])
    return out


def _norms(x, w, bias, eps):
    n = x.size(1)
    return torch.stack([F.layer_norm(x, [n], w, bias, eps), F.rms_norm(x, [n], w)])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(7, 33), (1, 1), (0, 8), (3, 1)])
def test_layer_norm_and_rms_norm(dtype: torch.dtype, shape: tuple) -> None:
    x = torch.randn(shape).to(dtype) * 3 + 1
    w, bias = torch.randn(shape[1]).to(dtype), torch.randn(shape[1]).to(dtype)
    check_modes(norms, (x, w, bias, 1e-3), _norms, dtype=dtype)


@tc.kernel
def plane_norm(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in tc.tile(x.size(0)):
        out[tile, :, :] = F.layer_norm(x[tile, :, :], x.shape[1:])
    return out


def test_layer_norm_over_two_trailing_dims() -> None:
    x = torch.randn(5, 3, 6)
    check_modes(plane_norm, (x,), lambda x: F.layer_norm(x, x.shape[1:]))


@tc.kernel
def wrong_shape(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in tc.tile(x.size(0)):
        out[tile, :] = F.layer_norm(x[tile, :], [4])
    return out


def test_a_normalized_shape_that_is_not_the_tiles_is_refused() -> None:
    with pytest.raises(ShapeMismatch, match="dim 1 has 6 elements") as info:
        wrong_shape(torch.randn(3, 6))
    assert "F.layer_norm(x[tile, :], [4])" in str(info.value)
