"""RMS normalization over the last dim, computed in float32, with a weight."""

from __future__ import annotations

import torch

import tilecraft as tc
from tilecraft.testing import assert_close, default_device


@tc.kernel
def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    m, n = x.size()
    assert weight.size(0) == n, f"weight has size {weight.size(0)}, expected {n}"
    out = torch.empty_like(x)
    for tile_m in tc.tile(m):
        row = x[tile_m, :].to(torch.float32)
        inv_rms = torch.rsqrt(torch.mean(row * row, dim=-1) + eps)
        normed = row * inv_rms[:, None] * weight[:].to(torch.float32)
        out[tile_m, :] = normed.to(out.dtype)
    return out


def reference(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    row = x.float()
    normed = row * torch.rsqrt(row.pow(2).mean(-1, keepdim=True) + eps) * weight.float()
    return normed.to(x.dtype)


def inputs(shape=(129, 1000), dtype=torch.float32, device=None) -> tuple:
    device = device or default_device()
    x = torch.randn(shape, dtype=dtype, device=device)
    return x, torch.randn(shape[1], dtype=dtype, device=device)


def main() -> None:
    args = inputs()
    assert_close(rms_norm(*args), reference(*args))
    print("rms_norm: ok")


if __name__ == "__main__":
    main()
