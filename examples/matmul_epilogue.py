"""A matrix product that takes its epilogue as an argument, as Helion's matmul does.

`epilogue(acc, tile)` gets the float32 accumulator of one output tile and the tile pair
`(tile_m, tile_n)`; it is compiled into the kernel (inlined), and tensors it captures,
such as a bias, become kernel arguments. The same function, called with whole slices,
is the PyTorch reference.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

import tilecraft as tc
from tilecraft.testing import assert_close, matrices

Epilogue = Callable[[torch.Tensor, tuple], torch.Tensor]


@tc.kernel
def matmul_epilogue(
    x: torch.Tensor, y: torch.Tensor, epilogue: Epilogue = lambda acc, tile: acc
) -> torch.Tensor:
    m, k = x.size()
    _, n = y.size()
    out = torch.empty([m, n], dtype=torch.promote_types(x.dtype, y.dtype), device=x.device)
    for tile_m, tile_n in tc.tile([m, n]):
        acc = tc.zeros([tile_m, tile_n], dtype=torch.float32)
        for tile_k in tc.tile(k):
            acc = torch.addmm(acc, x[tile_m, tile_k], y[tile_k, tile_n])
        out[tile_m, tile_n] = epilogue(acc, (tile_m, tile_n)).to(out.dtype)
    return out


def bias_relu(bias: torch.Tensor) -> Epilogue:
    """`relu(acc + bias)`, the bias indexed by the output tile's columns."""
    return lambda acc, tile: torch.relu(acc + bias[tile[1]].to(torch.float32))


def reference(x: torch.Tensor, y: torch.Tensor, epilogue: Epilogue) -> torch.Tensor:
    whole = (slice(None), slice(None))
    out = epilogue(torch.matmul(x.float(), y.float()), whole)
    return out.to(torch.promote_types(x.dtype, y.dtype))


def inputs(shape=(100, 200, 70), dtype=torch.float32, device=None) -> tuple:
    x, y = matrices(shape, dtype, device)
    bias = torch.randn(y.size(1), dtype=dtype, device=y.device)
    return x, y, bias_relu(bias)


def main() -> None:
    args = inputs()
    assert_close(matmul_epilogue(*args), reference(*args))
    print("matmul_epilogue: ok")


if __name__ == "__main__":
    main()
