"""Layer normalization (forward) over the last dim, with weight and bias."""

from __future__ import annotations

import torch
import torch.nn.functional as F

import tilecraft as tc
from tilecraft.testing import assert_close, default_device


@tc.kernel
def layer_norm(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float = 1e-5
) -> torch.Tensor:
    m, n = x.size()
    out = torch.empty_like(x)
    for tile_m in tc.tile(m):
        row = x[tile_m, :].to(torch.float32)
        mean = torch.mean(row, dim=-1, keepdim=True)
        var = torch.var(row, dim=-1, keepdim=True, unbiased=False)
        normed = (row - mean) * torch.rsqrt(var + eps)
        result = normed * weight[:].to(torch.float32) + bias[:].to(torch.float32)
        out[tile_m, :] = result.to(out.dtype)
    return out


def reference(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float = 1e-5
) -> torch.Tensor:
    return F.layer_norm(x.float(), (x.size(1),), weight.float(), bias.float(), eps).to(x.dtype)


def inputs(shape=(97, 768), dtype=torch.float32, device=None) -> tuple:
    device = device or default_device()
    x = torch.randn(shape, dtype=dtype, device=device)
    w = torch.randn(shape[1], dtype=dtype, device=device)
    return x, w, torch.randn(shape[1], dtype=dtype, device=device)


def main() -> None:
    args = inputs()
    assert_close(layer_norm(*args), reference(*args))
    print("layer_norm: ok")


if __name__ == "__main__":
    main()
