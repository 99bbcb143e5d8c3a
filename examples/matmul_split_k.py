"""Split-K matrix product: programs over (m, n, k-chunks) atomically add into float32."""

from __future__ import annotations

import torch

import tilecraft as tc
from tilecraft.testing import assert_close, matrices


@tc.kernel
def matmul_split_k(x: torch.Tensor, y: torch.Tensor, split_k: int = 4) -> torch.Tensor:
    m, k = x.size()
    _, n = y.size()
    out = torch.zeros([m, n], dtype=torch.float32, device=x.device)
    k_block = 1 << (max(k // split_k, 1) - 1).bit_length()  # a power of two >= k / split_k
    for tile_m, tile_n, outer_k in tc.tile([m, n, k], block_size=[None, None, k_block]):
        acc = tc.zeros([tile_m, tile_n], dtype=torch.float32)
        for inner_k in tc.tile(outer_k.begin, outer_k.end):
            acc = torch.addmm(acc, x[tile_m, inner_k], y[inner_k, tile_n])
        tc.atomic_add(out, [tile_m, tile_n], acc)
    return out


def reference(x: torch.Tensor, y: torch.Tensor, split_k: int = 4) -> torch.Tensor:
    return x.float() @ y.float()


def inputs(shape=(64, 1000, 48), dtype=torch.float32, device=None) -> tuple:
    return matrices(shape, dtype, device)


def main() -> None:
    args = inputs()
    assert_close(matmul_split_k(*args), reference(*args), torch.float32)
    print("matmul_split_k: ok")


if __name__ == "__main__":
    main()
