"""Mean of each row of a jagged tensor: rows of different lengths packed one after the
other in `values`, row `i` being `values[offsets[i]:offsets[i + 1]]`.

The loop over a row's elements takes its bounds from `offsets`, read on the device; an
`if` on the row's length (a scalar on the device) is a real branch. An empty row's mean
is 0.
"""

from __future__ import annotations

import torch

import tilecraft as tc
from tilecraft.testing import assert_close, default_device


@tc.kernel
def jagged_mean(values: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    rows = offsets.size(0) - 1
    n = values.size(1)
    out = torch.empty([rows, n], dtype=values.dtype, device=values.device)
    for row in tc.grid(rows):
        start = offsets[row]
        end = offsets[row + 1]
        for tile_n in tc.tile(n):
            acc = tc.zeros([tile_n], dtype=torch.float32)
            for tile_k in tc.tile(start, end):
                acc = acc + values[tile_k, tile_n].to(torch.float32).sum(0)
            count = end - start
            if count > 0:
                acc = acc / count.to(torch.float32)
            out[row, tile_n] = acc.to(out.dtype)
    return out


def reference(values: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    """PyTorch: the mean of each slice (0 for an empty row)."""
    bounds = offsets.tolist()
    rows = [values[a:b].float().mean(0) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
    return torch.stack(rows).nan_to_num(0.0).to(values.dtype)


def inputs(shape=(33, 100), dtype=torch.float32, device=None) -> tuple:
    """`shape` is (rows, features); rows hold 0 to 9 elements each."""
    rows, n = shape
    device = device or default_device()
    lengths = torch.randint(0, 10, (rows,), generator=torch.Generator().manual_seed(rows))
    offsets = torch.cat([torch.zeros(1, dtype=torch.int64), lengths.cumsum(0)]).to(device)
    values = torch.randn(int(lengths.sum()), n, dtype=dtype, device=device)
    return values, offsets


def main() -> None:
    args = inputs()
    assert_close(jagged_mean(*args), reference(*args))
    print("jagged_mean: ok")


if __name__ == "__main__":
    main()
