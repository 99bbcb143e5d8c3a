"""`continue` in device loops, in both modes: the rest of the trip moves into the arms of
the `if` around it (a branch on a device scalar, masked arms on a tile)."""

from __future__ import annotations

import torch
from conftest import DEVICE

import tilecraft as tc
from tilecraft.testing import assert_close


def randn(*shape: int) -> torch.Tensor:
    return torch.randn(shape, device=DEVICE)


@tc.kernel
def skip_rows(x: torch.Tensor, flags: torch.Tensor) -> torch.Tensor:
    m, n = x.size()
    out = torch.zeros_like(x)
    for i in tc.grid(m):
        for tile_n in tc.tile(n):
            if flags[i] > 0:
                continue
            out[i, tile_n] = x[i, tile_n] * 2
        if flags[i] < 0:
            continue
        out[i, 0] = -1.0
    return out


@tc.kernel
def skip_lanes(x: torch.Tensor) -> torch.Tensor:
    out = torch.zeros_like(x)
    for tile in tc.tile(x.size(0)):
        v = x[tile]
        if v < 0:
            continue
        out[tile] = v + 1
    return out


def test_continue_on_a_device_scalar(mode) -> None:
    x, flags = randn(9, 5), torch.tensor([1, 0, -1, 0, 2, -3, 0, 0, 1], device=DEVICE)
    expected = torch.where(flags[:, None] > 0, 0.0, x * 2)
    expected[:, 0] = torch.where(flags < 0, expected[:, 0], -1.0)
    assert_close(mode(skip_rows)(x, flags), expected)


def test_continue_on_a_tile_skips_its_lanes(mode) -> None:
    x = randn(37)
    assert_close(mode(skip_lanes)(x), torch.where(x < 0, 0.0, x + 1))
