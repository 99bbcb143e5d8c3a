"""Row sums: the whole row in one block (`sum_rows`), or a loop over a long row (`long_sum`)."""

from __future__ import annotations

import torch

import tilecraft as tc
from tilecraft.testing import assert_close, default_device


@tc.kernel
def sum_rows(x: torch.Tensor) -> torch.Tensor:
    m, n = x.size()
    out = torch.empty(m, dtype=x.dtype, device=x.device)
    for tile_m in tc.tile(m):
        out[tile_m] = x[tile_m, :].sum(-1)
    return out


@tc.kernel
def long_sum(x: torch.Tensor) -> torch.Tensor:
    m, n = x.size()
    out = torch.empty(m, dtype=x.dtype, device=x.device)
    block_n = tc.register_block_size(n)
    for tile_m in tc.tile(m):
        acc = tc.zeros([tile_m], dtype=torch.float32)
        for tile_n in tc.tile(n, block_size=block_n):
            acc = acc + x[tile_m, tile_n].to(torch.float32).sum(-1)
        out[tile_m] = acc.to(out.dtype)
    return out


def reference(x: torch.Tensor) -> torch.Tensor:
    return x.float().sum(-1).to(x.dtype)


def inputs(shape=(33, 5000), dtype=torch.float32, device=None) -> tuple:
    return (torch.randn(shape, dtype=dtype, device=device or default_device()),)


def main() -> None:
    args = inputs()
    assert_close(sum_rows(*args), reference(*args))
    assert_close(long_sum(*args), reference(*args))
    print("sum: ok")


if __name__ == "__main__":
    main()
