"""Fused epilogues: bias + GELU, and a linear layer with scaling and a residual add."""

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
            acc = acc + x[tile_m, tile_k] @ w[tile_n, tile_k].T
        result = acc * scale + residual[tile_m, tile_n].to(torch.float32)
        out[tile_m, tile_n] = result.to(out.dtype)
    return out


def reference_bias_gelu(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    return F.gelu(x.float() @ w.float() + bias.float(), approximate="tanh").to(x.dtype)


def reference_linear_residual(
    x: torch.Tensor, w: torch.Tensor, residual: torch.Tensor, scale: float = 0.5
) -> torch.Tensor:
    return (F.linear(x.float(), w.float()) * scale + residual.float()).to(x.dtype)


def inputs_bias_gelu(shape=(96, 80, 72), dtype=torch.float32, device=None) -> tuple:
    device = device or default_device()
    m, k, n = shape
    return (
        torch.randn(m, k, dtype=dtype, device=device) / k**0.5,
        torch.randn(k, n, dtype=dtype, device=device),
        torch.randn(n, dtype=dtype, device=device),
    )


def inputs_linear_residual(shape=(96, 80, 72), dtype=torch.float32, device=None) -> tuple:
    device = device or default_device()
    m, k, n = shape
    return (
        torch.randn(m, k, dtype=dtype, device=device) / k**0.5,
        torch.randn(n, k, dtype=dtype, device=device),
        torch.randn(m, n, dtype=dtype, device=device),
    )


CASES = {
    matmul_bias_gelu: (inputs_bias_gelu, reference_bias_gelu),
    linear_residual: (inputs_linear_residual, reference_linear_residual),
}


def main() -> None:
    for kernel, (make_inputs, reference) in CASES.items():
        args = make_inputs()
        assert_close(kernel(*args), reference(*args))
    print("matmul_epilogue: ok")


if __name__ == "__main__":
    main()
