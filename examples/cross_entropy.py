"""Cross-entropy loss: log-sum-exp of each row minus the logit of its target class.

The target logit is gathered from memory through the loaded labels; it comes first so
that its two dependent loads overlap with the loads of the row."""

from __future__ import annotations

import torch
import torch.nn.functional as F

import tilecraft as tc
from tilecraft.testing import assert_close, default_device


@tc.kernel
def cross_entropy(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    n, v = logits.size()
    losses = torch.empty(n, dtype=torch.float32, device=logits.device)
    flat = logits.view(-1)
    for tile_n in tc.tile(n):
        target = flat[tile_n.index * v + labels[tile_n]].to(torch.float32)
        row = logits[tile_n, :].to(torch.float32)
        row_max = torch.amax(row, dim=-1)
        lse = row_max + torch.log(torch.exp(row - row_max[:, None]).sum(dim=-1))
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
