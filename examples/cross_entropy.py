"""Cross-entropy loss: log-sum-exp of each row minus the logit of its target class.

The target logit is picked out of the row already loaded (a compare against the column
index) rather than gathered from memory again, which would add a dependent load."""

from __future__ import annotations

import torch
import torch.nn.functional as F

import tilecraft as tc
from tilecraft.testing import assert_close, default_device


@tc.kernel
def cross_entropy(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    n, v = logits.size()
    losses = torch.empty(n, dtype=torch.float32, device=logits.device)
    for tile_n in tc.tile(n):
        row = logits[tile_n, :].to(torch.float32)
        row_max = torch.amax(row, dim=-1)
        lse = row_max + torch.log(torch.exp(row - row_max[:, None]).sum(dim=-1))
        is_target = tc.arange(v)[None, :] == labels[tile_n][:, None]
        target = torch.where(is_target, row, 0.0).sum(dim=-1)
        losses[tile_n] = lse - target
    return losses.mean()


def reference(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.float(), labels)


def inputs(shape=(130, 1000), dtype=torch.float32, device=None) -> tuple:
    device = device or default_device()
    logits = torch.randn(shape, dtype=dtype, device=device)
    return logits, torch.randint(0, shape[1], (shape[0],), device=device)


def main() -> None:
    args = inputs()
    assert_close(cross_entropy(*args), reference(*args), torch.float32)
    print("cross_entropy: ok")


if __name__ == "__main__":
    main()
