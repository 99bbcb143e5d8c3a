"""Batch normalization in training mode over channels-last images, with a fused residual
add and ReLU: `relu(batch_norm(x) + residual)`, the tail of a ResNet block.

`x` is `[rows, channels]`: a channels-last image batch `(batch, height, width, channels)`
seen as one row per pixel, so the statistics of a channel are a column's. One program per
block of channels walks down the rows three times: the mean, the variance around it (two
passes, so no cancellation), then the normalized, shifted and activated output. The mean
and the reciprocal standard deviation are returned for the backward
(`batch_norm_backward.py`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

import tilecraft as tc
from tilecraft.testing import assert_close, default_device


@tc.kernel
def batch_norm(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor,
    residual: torch.Tensor,
    eps: float = 1e-5,
    relu: bool = False,
    has_residual: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    rows, channels = x.size()
    out = torch.empty_like(x)
    mean = torch.empty([channels], dtype=torch.float32, device=x.device)
    rstd = torch.empty_like(mean)
    for tile_c in tc.tile(channels):
        total = tc.zeros([tile_c], dtype=torch.float32)
        for tile_r in tc.tile(rows):
            total = total + torch.sum(x[tile_r, tile_c].to(torch.float32), 0)
        mu = total / rows
        spread = tc.zeros([tile_c], dtype=torch.float32)
        for tile_r in tc.tile(rows):
            inside = (tile_r.index < rows)[:, None]  # rows past the end would add mu ** 2
            d = torch.where(inside, x[tile_r, tile_c].to(torch.float32) - mu[None, :], 0.0)
            spread = spread + torch.sum(d * d, 0)
        inv = torch.rsqrt(spread / rows + eps)
        mean[tile_c] = mu
        rstd[tile_c] = inv
        scale = inv * weight[tile_c].to(torch.float32)
        shift = bias[tile_c].to(torch.float32)
        for tile_r in tc.tile(rows):
            # (x - mu) * scale, not x * scale - mu * scale: where x is close to mu (one row
            # per channel) the latter cancels and loses the bias's low bits
            v = (x[tile_r, tile_c].to(torch.float32) - mu[None, :]) * scale[None, :]
            v = v + shift[None, :]
            if has_residual:
                v = v + residual[tile_r, tile_c].to(torch.float32)
            if relu:
                v = torch.relu(v)
            out[tile_r, tile_c] = v.to(out.dtype)
    return out, mean, rstd


def reference(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor,
    residual: torch.Tensor,
    eps: float = 1e-5,
    relu: bool = False,
    has_residual: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Training-mode batch norm in float32 (`F.batch_norm(x, None, None, weight, bias,
    training=True)`, which refuses a single row), and the statistics it used."""
    x32 = x.float()
    mean, rstd = x32.mean(0), torch.rsqrt(x32.var(0, unbiased=False) + eps)
    out = (x32 - mean) * rstd * weight.float() + bias.float()
    if has_residual:
        out = out + residual.float()
    if relu:
        out = torch.relu(out)
    return out.to(x.dtype), mean, rstd


def inputs(shape=(1000, 64), dtype=torch.float32, device=None) -> tuple:
    """Activations `shape` = (pixels, channels) with a residual, per-channel weights, eps, and
    both fusions on."""
    device = device or default_device()
    x = torch.randn(shape, dtype=dtype, device=device) * 2 + 1
    residual = torch.randn(shape, dtype=dtype, device=device)
    weight = torch.randn(shape[1], dtype=dtype, device=device)
    bias = torch.randn(shape[1], dtype=dtype, device=device)
    return x, weight, bias, residual, 1e-5, True, True


def main() -> None:
    args = inputs()
    assert_close(batch_norm(*args), reference(*args))
    plain = (*args[:5], False, False)
    expected = F.batch_norm(args[0], None, None, args[1], args[2], training=True)
    assert_close(batch_norm(*plain)[0], expected)
    print("batch_norm: ok")


if __name__ == "__main__":
    main()
