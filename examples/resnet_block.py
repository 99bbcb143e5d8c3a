"""A ResNet basic block trained with tilecraft ops, checked against plain PyTorch.

`relu(norm(conv3x3(relu(norm(conv3x3(x))))) + x)` on channels-last images: the convolutions
are `tilecraft.nn.conv2d` (an implicit GEMM and its input and weight gradients), the norms
`batch_norm_backward.py`'s fused batch norm operator (training mode; the second one adds
the shortcut and applies the ReLU in the same pass). The same block in plain PyTorch, from
the same initial weights, trains with the same optimizer; the losses match.

Once the batch statistics are known, each norm folds into its convolution's weights and
bias, and the block becomes two convolutions with fused epilogues (`fused_forward`): bias
and ReLU, then bias, the shortcut and ReLU.

The kernel this example checks on its own is the convolution's (`conv2d_gemm`, with a bias,
a residual and SiLU), so `inputs` and `reference` are that kernel's.
"""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any

import batch_norm_backward as bn  # a module, so the example tests only see `conv2d_gemm`
import torch
import torch.nn.functional as F

import tilecraft.nn
from tilecraft.nn.conv2d_kernels import SILU, conv2d_gemm
from tilecraft.testing import assert_close, default_device

EPS = 1e-5


def inputs(shape=(30, 45), dtype=torch.float32, device=None) -> tuple:
    """`conv2d_gemm`'s arguments: two channels-last images of `shape` pixels (at most 7 a
    side on a CPU, 64 on a GPU) and 8 channels, 8 filters of 3x3 (padding 1), a bias, a
    residual and SiLU."""
    device = device or default_device()
    limit = 64 if torch.device(device).type == "cuda" else 7
    height, width = (min(s, limit) for s in shape)
    x = torch.randn(2, 8, height, width, dtype=dtype, device=device)
    x = x.to(memory_format=torch.channels_last)
    weight = torch.randn(8, 8, 3, 3, dtype=dtype, device=device) / math.sqrt(72)
    bias = torch.randn(8, dtype=dtype, device=device)
    residual = torch.randn(2, 8, height, width, dtype=dtype, device=device)
    geometry = (1, 1, 1, 1, 1, 1, 1, height, width)  # stride, padding, dilation, groups, size
    return x, weight, bias, residual, *geometry, SILU, True, True, True


def reference(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, *args: Any) -> tuple:
    """`conv2d_gemm`'s outputs from PyTorch (float32): the output and the pre-activation."""
    residual = args[0]
    pre = F.conv2d(x.float(), weight.float(), bias.float(), padding=1) + residual.float()
    return F.silu(pre).to(x.dtype), pre.to(x.dtype)


def _rows(x: torch.Tensor) -> torch.Tensor:
    """A channels-last batch as [pixels, channels] (a view: no copy)."""
    return (
        x.contiguous(memory_format=torch.channels_last).permute(0, 2, 3, 1).reshape(-1, x.size(1))
    )


def _tilecraft_norm(
    x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, residual: torch.Tensor | None = None
) -> torch.Tensor:
    """relu(batch_norm(x) + residual) by the tilecraft operator, on [pixels, channels] views."""
    res = _rows(residual) if residual is not None else x.new_empty(0)
    out, _, _ = bn.batch_norm_op(_rows(x), w, b, res, EPS, True, residual is not None)
    n, c, h, width = x.shape
    return out.view(n, h, width, c).permute(0, 3, 1, 2)


def _torch_norm(
    x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, residual: torch.Tensor | None = None
) -> torch.Tensor:
    out = F.batch_norm(x, None, None, w, b, training=True, eps=EPS)
    return torch.relu(out if residual is None else out + residual)


TILECRAFT = SimpleNamespace(conv=tilecraft.nn.conv2d, norm=_tilecraft_norm)
TORCH = SimpleNamespace(conv=F.conv2d, norm=_torch_norm)


class Block(torch.nn.Module):
    """The basic block of ResNet-18/34 (no downsampling); `ops` supplies conv and norm."""

    def __init__(self, ops: SimpleNamespace, channels: int = 4) -> None:
        super().__init__()
        self.ops = ops

        def filters() -> torch.nn.Parameter:
            shape = (channels, channels, 3, 3)
            return torch.nn.Parameter(torch.randn(shape) / math.sqrt(9 * channels))

        self.conv1, self.conv2 = filters(), filters()
        self.scales = torch.nn.ParameterList([torch.ones(channels) for _ in range(2)])
        self.shifts = torch.nn.ParameterList([torch.zeros(channels) for _ in range(2)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        ops = self.ops
        h = ops.norm(ops.conv(x, self.conv1, padding=1), self.scales[0], self.shifts[0])
        h = ops.conv(h, self.conv2, padding=1)
        return ops.norm(h, self.scales[1], self.shifts[1], residual=x)


def data(channels: int = 4, size: tuple[int, int] = (5, 6), seed: int = 0, device=None) -> tuple:
    """Two channels-last images (ragged sizes) and a target for each."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(2, channels, *size, generator=gen).to(memory_format=torch.channels_last)
    target = torch.randn(2, channels, *size, generator=gen)
    return x.to(device or default_device()), target.to(device or default_device())


def models(seed: int = 0, channels: int = 4, device=None) -> tuple[Block, Block]:
    """The tilecraft block and the PyTorch block, from the same initial weights."""
    torch.manual_seed(seed)
    ours = Block(TILECRAFT, channels).to(device or default_device())
    theirs = Block(TORCH, channels).to(device or default_device())
    theirs.load_state_dict(ours.state_dict())
    return ours, theirs


def train(model: Block, steps: int = 3, lr: float = 1e-2) -> list[float]:
    """Adam steps on one batch, mean squared error to a target; the loss before each step."""
    x, target = data(model.conv1.size(0), device=model.conv1.device)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    losses = []
    for _ in range(steps):
        optimizer.zero_grad()
        loss = F.mse_loss(model(x), target)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def _fold(conv: torch.Tensor, scale: torch.Tensor, shift: torch.Tensor, stats: tuple) -> tuple:
    """A conv's weights and bias with a batch norm of these statistics folded in."""
    mean, rstd = stats
    factor = scale * rstd
    return conv * factor[:, None, None, None], shift - mean * factor


def _stats(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The per-channel mean and reciprocal standard deviation of a batch (tilecraft's norm)."""
    ones, zeros = x.new_ones(x.size(1)), x.new_zeros(x.size(1))
    _, mean, rstd = bn.forward.batch_norm(_rows(x), ones, zeros, x.new_empty(0))
    return mean, rstd


@torch.no_grad()
def fused_forward(block: Block, x: torch.Tensor) -> torch.Tensor:
    """The training-mode block as two convolutions with fused epilogues: each norm's batch
    statistics folded into its conv, then bias + ReLU, and bias + shortcut + ReLU."""
    conv = tilecraft.nn.conv2d
    w1, b1 = _fold(
        block.conv1, block.scales[0], block.shifts[0], _stats(conv(x, block.conv1, padding=1))
    )
    h = conv(x, w1, b1, padding=1, activation="relu")
    w2, b2 = _fold(
        block.conv2, block.scales[1], block.shifts[1], _stats(conv(h, block.conv2, padding=1))
    )
    return conv(h, w2, b2, padding=1, activation="relu", residual=x)


def main() -> None:
    args = inputs()
    assert_close(conv2d_gemm(*args), reference(*args))
    ours, theirs = models()
    # float32 products on both sides (cuDNN would use TF32 on a GPU, tilecraft does not)
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=False):
        got, expected = train(ours), train(theirs)
    for a, b in zip(got, expected, strict=True):
        assert math.isclose(a, b, rel_tol=1e-4), f"losses differ: {got} vs {expected}"
    assert got[-1] < got[0], f"the loss did not decrease: {got}"
    x, _ = data()
    with torch.no_grad():
        assert_close(fused_forward(ours, x), ours(x), msg="folded norms")
    print("losses:", " ".join(f"{loss:.4f}" for loss in got))
    print("resnet_block: ok")


if __name__ == "__main__":
    main()
