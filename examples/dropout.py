"""Dropout from a seed: the mask comes from `tc.rand` (Philox, counted by each element's
position), so it is reproducible, independent of block sizes, and the same in eager mode."""

from __future__ import annotations

import torch

import tilecraft as tc
from tilecraft.language.random import philox_uniform
from tilecraft.testing import assert_close, default_device, run_mode


@tc.kernel
def dropout(x: torch.Tensor, p: float, seed: int) -> torch.Tensor:
    m, n = x.size()
    out = torch.empty_like(x)
    for tile_m, tile_n in tc.tile([m, n]):
        keep = tc.rand([tile_m, tile_n], seed) > p
        scaled = x[tile_m, tile_n].float() / (1.0 - p)
        out[tile_m, tile_n] = torch.where(keep, scaled, 0.0).to(x.dtype)
    return out


def reference(x: torch.Tensor, p: float, seed: int) -> torch.Tensor:
    """The same mask, drawn on the host: element (i, j) uses Philox counter i * n + j."""
    offsets = torch.arange(x.numel(), device=x.device).view(x.shape)
    keep = philox_uniform(seed, offsets) > p
    return torch.where(keep, x.float() / (1.0 - p), 0.0).to(x.dtype)


def inputs(shape=(300, 1000), dtype=torch.float32, device=None) -> tuple:
    return (torch.randn(shape, dtype=dtype, device=device or default_device()), 0.25, 1234)


def main() -> None:
    x, p, seed = inputs()
    out = dropout(x, p, seed)
    assert_close(out, reference(x, p, seed))
    keep_rate = (out != 0).float().mean().item()
    assert abs(keep_rate - (1 - p)) < 0.01, keep_rate
    ones = torch.ones_like(x)
    assert abs(dropout(ones, p, seed).mean().item() - 1.0) < 0.02  # the scale keeps the mean
    assert torch.equal(run_mode(dropout, (x, p, seed), "eager"), out)  # the identical mask
    assert not torch.equal(dropout(x, p, seed + 1), out)
    print("dropout: ok")


if __name__ == "__main__":
    main()
