"""Elementwise add over every dimension at once: `tc.tile(out.size())`."""

from __future__ import annotations

import torch

import tilecraft as tc
from tilecraft.testing import assert_close, default_device


@tc.kernel
def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    x, y = torch.broadcast_tensors(x, y)
    out = torch.empty(x.shape, dtype=torch.promote_types(x.dtype, y.dtype), device=x.device)
    for tile in tc.tile(out.size()):
        out[tile] = x[tile] + y[tile]
    return out


def reference(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return x + y


def inputs(shape=(1000, 333), dtype=torch.float32, device=None) -> tuple:
    device = device or default_device()
    return torch.randn(shape, dtype=dtype, device=device), torch.randn(
        shape, dtype=dtype, device=device
    )


def main() -> None:
    args = inputs()
    assert_close(add(*args), reference(*args))
    print("add: ok")


if __name__ == "__main__":
    main()
