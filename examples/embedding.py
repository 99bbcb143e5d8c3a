"""Embedding lookup: a gather through a loaded index tile, `weight[ids[tile_t], tile_e]`."""

from __future__ import annotations

import torch
import torch.nn.functional as F

import tilecraft as tc
from tilecraft.testing import assert_close, default_device


@tc.kernel
def embedding(ids: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    flat_ids = ids.reshape(-1)
    (tokens,) = flat_ids.size()
    _, dim = weight.size()
    out = torch.empty([tokens, dim], dtype=weight.dtype, device=weight.device)
    for tile_t, tile_e in tc.tile([tokens, dim]):
        out[tile_t, tile_e] = weight[flat_ids[tile_t], tile_e]
    return out.view(*ids.shape, dim)


def reference(ids: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    return F.embedding(ids, weight)


def inputs(shape=(7, 129), dtype=torch.float32, device=None) -> tuple:
    device = device or default_device()
    vocab, dim = 1000, shape[1]
    ids = torch.randint(0, vocab, (shape[0], 5), device=device)
    return ids, torch.randn(vocab, dim, dtype=dtype, device=device)


def main() -> None:
    args = inputs()
    assert_close(embedding(*args), reference(*args))
    print("embedding: ok")


if __name__ == "__main__":
    main()
