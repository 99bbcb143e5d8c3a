"""Low-precision inputs (fp16 x bf16 promotes to float32 here), float32 output."""

from __future__ import annotations

import torch

import tilecraft as tc
from tilecraft.testing import assert_close, matrices


@tc.kernel
def matmul_fp32_out(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    m, k = x.size()
    _, n = y.size()
    out = torch.empty([m, n], dtype=torch.float32, device=x.device)
    for tile_m, tile_n in tc.tile([m, n]):
        acc = tc.zeros([tile_m, tile_n], dtype=torch.float32)
        for tile_k in tc.tile(k):
            acc = tc.dot(x[tile_m, tile_k], y[tile_k, tile_n], acc=acc)
        out[tile_m, tile_n] = acc
    return out


def reference(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    common = torch.promote_types(x.dtype, y.dtype)
    return x.to(common).float() @ y.to(common).float()


def inputs(shape=(70, 90, 50), dtype=torch.bfloat16, device=None) -> tuple:
    return matrices(shape, dtype, device)


def main() -> None:
    for dtype in (torch.float16, torch.bfloat16):
        args = inputs(dtype=dtype)
        assert_close(matmul_fp32_out(*args), reference(*args), dtype)
    x, y = inputs(dtype=torch.float16)
    assert_close(matmul_fp32_out(x, y.bfloat16()), reference(x, y.bfloat16()), torch.bfloat16)
    print("matmul_mixed: ok")


if __name__ == "__main__":
    main()
