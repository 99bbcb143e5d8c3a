"""A linear layer (`x @ w.T`) with scaling and a residual add fused into the epilogue."""

from __future__ import annotations

import torch
import torch.nn.functional as F

import tilecraft as tc
from tilecraft.testing import assert_close, default_device


@tc.kernel
def linear_residual(
    x: torch.Tensor, w: torch.Tensor, residual: torch.Tensor, scale: float = 0.5
) -> torch.Tensor:
    m, k = x.size()
    n, _ = w.size()  # w is [out_features, in_features], as in torch.nn.Linear
    out = torch.empty([m, n], dtype=x.dtype, device=x.device)
    for tile_m, tile_n in tc.tile([m, n]):
        acc = tc.zeros([tile_m, tile_n], dtype=torch.float32)
        for tile_k in tc.tile(k):
            acc = torch.addmm(acc, x[tile_m, tile_k], w[tile_n, tile_k].T)
        result = acc * scale + residual[tile_m, tile_n].to(torch.float32)
        out[tile_m, tile_n] = result.to(out.dtype)
    return out


def reference(
    x: torch.Tensor, w: torch.Tensor, residual: torch.Tensor, scale: float = 0.5
) -> torch.Tensor:
    return (F.linear(x.float(), w.float()) * scale + residual.float()).to(x.dtype)


def inputs(shape=(96, 80, 72), dtype=torch.float32, device=None) -> tuple:
    device = device or default_device()
    m, k, n = shape if len(shape) == 3 else (*shape, shape[0])
    return (
        torch.randn(m, k, dtype=dtype, device=device) / k**0.5,
        torch.randn(n, k, dtype=dtype, device=device),
        torch.randn(m, n, dtype=dtype, device=device),
    )


def main() -> None:
    args = inputs()
    assert_close(linear_residual(*args), reference(*args))
    print("linear_residual: ok")


if __name__ == "__main__":
    main()
