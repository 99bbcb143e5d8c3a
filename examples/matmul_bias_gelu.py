"""A matrix product with a fused epilogue: bias add and GELU before the store."""

from __future__ import annotations

import torch
import torch.nn.functional as F

import tilecraft as tc
from tilecraft.testing import assert_close, default_device


@tc.kernel
def matmul_bias_gelu(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    m, k = x.size()
    _, n = w.size()
    out = torch.empty([m, n], dtype=x.dtype, device=x.device)
    for tile_m, tile_n in tc.tile([m, n]):
        acc = tc.zeros([tile_m, tile_n], dtype=torch.float32)
        for tile_k in tc.tile(k):
            acc = tc.dot(x[tile_m, tile_k], w[tile_k, tile_n], acc=acc)
        acc = acc + bias[tile_n].to(torch.float32)[None, :]
        out[tile_m, tile_n] = F.gelu(acc, approximate="tanh").to(out.dtype)
    return out


def reference(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    return F.gelu(x.float() @ w.float() + bias.float(), approximate="tanh").to(x.dtype)


def inputs(shape=(96, 80, 72), dtype=torch.float32, device=None) -> tuple:
    device = device or default_device()
    m, k, n = shape if len(shape) == 3 else (*shape, shape[0])
    return (
        torch.randn(m, k, dtype=dtype, device=device) / k**0.5,
        torch.randn(k, n, dtype=dtype, device=device),
        torch.randn(n, dtype=dtype, device=device),
    )


def main() -> None:
    args = inputs()
    assert_close(matmul_bias_gelu(*args), reference(*args))
    print("matmul_bias_gelu: ok")


if __name__ == "__main__":
    main()
