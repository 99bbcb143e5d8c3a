"""Matrix product with a float32 accumulator carried through the k-loop."""

from __future__ import annotations

import torch

import tilecraft as tc
from tilecraft.testing import assert_close, matrices


@tc.kernel
def matmul(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    m, k = x.size()
    k2, n = y.size()
    assert k == k2, f"size mismatch {k} != {k2}"
    out = torch.empty([m, n], dtype=torch.promote_types(x.dtype, y.dtype), device=x.device)
    for tile_m, tile_n in tc.tile([m, n]):
        acc = tc.zeros([tile_m, tile_n], dtype=torch.float32)
        for tile_k in tc.tile(k):
            acc = torch.addmm(acc, x[tile_m, tile_k], y[tile_k, tile_n])
        out[tile_m, tile_n] = acc.to(out.dtype)
    return out


def reference(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.matmul(x.float(), y.float()).to(torch.promote_types(x.dtype, y.dtype))


def inputs(shape=(100, 200, 70), dtype=torch.float32, device=None) -> tuple:
    return matrices(shape, dtype, device)


def main() -> None:
    args = inputs()
    assert_close(matmul(*args), reference(*args))
    print("matmul: ok")


if __name__ == "__main__":
    main()
