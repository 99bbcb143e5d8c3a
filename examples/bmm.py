"""Batched matrix product: a grid over (batch, m, n) with 3-D tiles and `torch.bmm`."""

from __future__ import annotations

import torch

import tilecraft as tc
from tilecraft.testing import assert_close, default_device


@tc.kernel
def bmm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    batch, m, k = a.size()
    _, _, n = b.size()
    out = torch.empty([batch, m, n], dtype=torch.promote_types(a.dtype, b.dtype), device=a.device)
    for tile_b, tile_m, tile_n in tc.tile([batch, m, n]):
        acc = tc.zeros([tile_b, tile_m, tile_n], dtype=torch.float32)
        for tile_k in tc.tile(k):
            acc = torch.baddbmm(acc, a[tile_b, tile_m, tile_k], b[tile_b, tile_k, tile_n])
        out[tile_b, tile_m, tile_n] = acc.to(out.dtype)
    return out


def reference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.bmm(a.float(), b.float()).to(torch.promote_types(a.dtype, b.dtype))


def inputs(shape=(3, 65, 70, 33), dtype=torch.float32, device=None) -> tuple:
    device = device or default_device()
    batch, m, k, n = shape if len(shape) == 4 else (2, *shape, shape[0])
    return (
        torch.randn(batch, m, k, dtype=dtype, device=device),
        torch.randn(batch, k, n, dtype=dtype, device=device),
    )


def main() -> None:
    args = inputs()
    assert_close(bmm(*args), reference(*args))
    print("bmm: ok")


if __name__ == "__main__":
    main()
