"""Row softmax: the whole row in one block, or a loop over chunks (`reduction_loops`)."""

from __future__ import annotations

import torch

import tilecraft as tc
from tilecraft.testing import assert_close, default_device


@tc.kernel
def softmax(x: torch.Tensor) -> torch.Tensor:
    m, n = x.size()
    out = torch.empty_like(x)
    for tile_m in tc.tile(m):
        out[tile_m, :] = torch.nn.functional.softmax(x[tile_m, :], dim=1)
    return out


@tc.kernel
def softmax_decomposed(x: torch.Tensor) -> torch.Tensor:
    m, n = x.size()
    out = torch.empty_like(x)
    for tile_m in tc.tile(m):
        values = x[tile_m, :].to(torch.float32)
        shifted = values - torch.amax(values, dim=1, keepdim=True)
        numerator = torch.exp(shifted)
        out[tile_m, :] = (numerator / numerator.sum(dim=1, keepdim=True)).to(out.dtype)
    return out


def reference(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x.float(), dim=1).to(x.dtype)


def inputs(shape=(123, 1000), dtype=torch.float32, device=None) -> tuple:
    return (torch.randn(shape, dtype=dtype, device=device or default_device()),)


def main() -> None:
    args = inputs()
    assert_close(softmax(*args), reference(*args))
    assert_close(softmax_decomposed(*args), reference(*args))
    looped = tc.kernel(softmax.fn, config=tc.Config(reduction_loops=[256]))
    assert_close(looped(*args), reference(*args))
    print("softmax: ok")


if __name__ == "__main__":
    main()
