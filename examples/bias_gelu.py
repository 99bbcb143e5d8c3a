"""An elementwise fusion: bias add, then GELU (exact or tanh approximation), then a cast."""

from __future__ import annotations

import torch
import torch.nn.functional as F

import tilecraft as tc
from tilecraft.testing import assert_close, default_device


@tc.kernel
def bias_gelu(x: torch.Tensor, bias: torch.Tensor, approximate: str = "none") -> torch.Tensor:
    m, n = x.size()
    assert bias.size(0) == n, "bias must match the last dim of x"
    out = torch.empty_like(x)
    for tile_m, tile_n in tc.tile([m, n]):
        v = x[tile_m, tile_n].to(torch.float32) + bias[tile_n].to(torch.float32)[None, :]
        out[tile_m, tile_n] = F.gelu(v, approximate=approximate).to(out.dtype)
    return out


def reference(x: torch.Tensor, bias: torch.Tensor, approximate: str = "none") -> torch.Tensor:
    v = x.float() + bias.float()
    return F.gelu(v, approximate=approximate).to(x.dtype)


def inputs(shape=(300, 257), dtype=torch.float32, device=None) -> tuple:
    device = device or default_device()
    x = torch.randn(shape, dtype=dtype, device=device)
    return x, torch.randn(shape[1], dtype=dtype, device=device)


def main() -> None:
    args = inputs()
    for approximate in ("none", "tanh"):
        assert_close(bias_gelu(*args, approximate), reference(*args, approximate))
    print("bias_gelu: ok")


if __name__ == "__main__":
    main()
