"""Elementwise exp over a flattened view: host-side `view(-1)` and a 1-D tile loop."""

from __future__ import annotations

import torch

import tilecraft as tc
from tilecraft.testing import assert_close, default_device


@tc.kernel
def exp(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    flat_x, flat_out = x.view(-1), out.view(-1)
    for tile in tc.tile(flat_x.size(0)):
        flat_out[tile] = torch.exp(flat_x[tile])
    return out


def reference(x: torch.Tensor) -> torch.Tensor:
    return torch.exp(x)


def inputs(shape=(37, 129), dtype=torch.float32, device=None) -> tuple:
    return (torch.randn(shape, dtype=dtype, device=device or default_device()),)


def main() -> None:
    args = inputs()
    assert_close(exp(*args), reference(*args))
    print("exp: ok")


if __name__ == "__main__":
    main()
