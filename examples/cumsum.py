"""Row cumulative sum: the whole row in one block, or chunks carrying a running total."""

from __future__ import annotations

import torch

import tilecraft as tc
from tilecraft.testing import assert_close, default_device


@tc.kernel
def cumsum_rows(x: torch.Tensor) -> torch.Tensor:
    m, n = x.size()
    out = torch.empty_like(x)
    for tile_m in tc.tile(m):
        out[tile_m, :] = torch.cumsum(x[tile_m, :], dim=1)
    return out


def add(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return a + b


@tc.kernel
def cumsum_by_scan(x: torch.Tensor) -> torch.Tensor:
    """The same with Helion's `associative_scan` and a combine function of our own."""
    m, n = x.size()
    out = torch.empty_like(x)
    for tile_m in tc.tile(m):
        out[tile_m, :] = tc.associative_scan(add, x[tile_m, :], dim=1)
    return out


def reference(x: torch.Tensor) -> torch.Tensor:
    return torch.cumsum(x.float(), dim=1).to(x.dtype)


def inputs(shape=(100, 1000), dtype=torch.float32, device=None) -> tuple:
    return (torch.randn(shape, dtype=dtype, device=device or default_device()),)


def main() -> None:
    args = inputs()
    assert_close(cumsum_rows(*args), reference(*args))
    assert_close(cumsum_by_scan(*args), reference(*args))
    # the row in chunks of 128: each chunk's scan continues from the total before it
    looped = tc.kernel(cumsum_rows.fn, config=tc.Config(reduction_loops=[128]))
    assert_close(looped(*args), reference(*args))
    print("cumsum: ok")


if __name__ == "__main__":
    main()
