"""Online softmax: one pass for the running max and sum, one pass to normalize."""

from __future__ import annotations

import torch

import tilecraft as tc
from tilecraft.testing import assert_close, default_device


@tc.kernel
def softmax_two_pass(x: torch.Tensor) -> torch.Tensor:
    m, n = x.size()
    out = torch.empty_like(x)
    for tile_m in tc.tile(m):
        row_max = tc.full([tile_m], float("-inf"), dtype=torch.float32)
        row_sum = tc.zeros([tile_m], dtype=torch.float32)
        for tile_n in tc.tile(n):
            values = x[tile_m, tile_n].to(torch.float32)
            new_max = torch.maximum(row_max, torch.amax(values, dim=1))
            scale = torch.exp(row_max - new_max)
            row_sum = row_sum * scale + torch.exp(values - new_max[:, None]).sum(dim=1)
            row_max = new_max
        for tile_n in tc.tile(n):
            values = x[tile_m, tile_n].to(torch.float32)
            probs = torch.exp(values - row_max[:, None]) / row_sum[:, None]
            out[tile_m, tile_n] = probs.to(out.dtype)
    return out


def reference(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x.float(), dim=1).to(x.dtype)


def inputs(shape=(77, 1500), dtype=torch.float32, device=None) -> tuple:
    return (torch.randn(shape, dtype=dtype, device=device or default_device()),)


def main() -> None:
    args = inputs()
    assert_close(softmax_two_pass(*args), reference(*args))
    print("softmax_two_pass: ok")


if __name__ == "__main__":
    main()
