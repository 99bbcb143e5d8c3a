"""The k largest values of each row, in order (`torch.topk` on a tile)."""

from __future__ import annotations

import torch

import tilecraft as tc
from tilecraft.testing import assert_close, default_device


@tc.kernel
def topk_rows(x: torch.Tensor) -> torch.Tensor:
    m, n = x.size()
    k = min(4, n)
    out = torch.empty([m, k], dtype=x.dtype, device=x.device)
    for tile_m in tc.tile(m):
        values, _ = torch.topk(x[tile_m, :].float(), k, dim=1)
        out[tile_m, :] = values.to(x.dtype)
    return out


def topk_with_indices(x: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    m, n = x.size()
    values = torch.empty([m, k], dtype=x.dtype, device=x.device)
    indices = torch.empty([m, k], dtype=torch.int64, device=x.device)
    for tile_m in tc.tile(m):
        top = x[tile_m, :].topk(k)
        values[tile_m, :] = top.values
        indices[tile_m, :] = top.indices
    return values, indices


def reference(x: torch.Tensor) -> torch.Tensor:
    return torch.topk(x.float(), min(4, x.shape[1]), dim=1).values.to(x.dtype)


def inputs(shape=(100, 200), dtype=torch.float32, device=None) -> tuple:
    return (torch.randn(shape, dtype=dtype, device=device or default_device()),)


def main() -> None:
    (x,) = inputs()
    assert_close(topk_rows(x), reference(x))
    values, indices = tc.kernel(topk_with_indices)(x, 8)
    expected = torch.topk(x, 8, dim=1)
    assert_close(values, expected.values)
    assert torch.equal(indices, expected.indices)
    print("topk: ok")


if __name__ == "__main__":
    main()
