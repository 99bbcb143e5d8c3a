"""A tiny transformer block trained with tilecraft ops, checked against plain PyTorch.

The forward runs differentiable tilecraft operators: multi-head causal attention
(`tilecraft.nn.attention`, flash attention forward and backward), rms_norm and
cross_entropy from their backward examples, and linear layers on two kernels: the
tilecraft matmul, whose PyTorch-style backward calls the same kernel on transposed views,
and `linear_fused` (`examples/linear_fused.py`), which folds the residual adds (after the
attention's projection and after the MLP) and the MLP's ReLU into its matrix products, in
the forward and the backward, so no training step runs them as separate ops. The same
model in plain PyTorch (`scaled_dot_product_attention`), from the same initial weights,
trains with the same optimizer; the losses match. It trains in float32 or bfloat16 (on a
GPU; on the CPU bfloat16 needs the eager mode, as Triton's interpreter computes bfloat16
wrongly).

The only kernel here is `matmul`, imported from `examples/matmul.py`, so `inputs` and
`reference` are that kernel's.
"""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any

import cross_entropy_backward as ce  # modules, so the example tests only see `matmul` here
import linear_fused as lf
import matmul as mm
import rms_norm_backward as rms
import torch
import torch.nn.functional as F

import tilecraft.nn
from tilecraft.testing import default_device, matrices

matmul = mm.matmul
reference = mm.reference


def inputs(shape=(100, 200, 70), dtype=torch.float32, device=None) -> tuple:
    return matrices(shape, dtype, device)


def _save_inputs(ctx: Any, inputs: tuple, output: torch.Tensor) -> None:
    ctx.save_for_backward(*inputs)


def _matmul_backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    x, w = ctx.saved_tensors
    # the kernel reads strided views, so the transposes need no copies
    return matmul_op(grad, w.t()), matmul_op(x.t(), grad)


# x @ w as a differentiable PyTorch operator: torch.ops.examples.matmul
matmul_op = mm.matmul.as_torch_op(
    "examples::matmul", backward=_matmul_backward, setup_context=_save_inputs
)


def _linear_add(x: torch.Tensor, w: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
    return lf.linear_fused_op(x, w, residual, lf.absent(x), False)


def _relu_linear_add(x: torch.Tensor, w: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
    return lf.linear_fused_op(x, w, residual, lf.absent(x), True)


TILECRAFT = SimpleNamespace(
    matmul=matmul_op,
    linear_add=_linear_add,  # x @ w + residual
    relu_linear_add=_relu_linear_add,  # relu(x) @ w + residual
    rms_norm=rms.rms_norm_op,
    attention=lambda q, k, v: tilecraft.nn.attention(q, k, v, causal=True),
    cross_entropy=ce.cross_entropy_op,
)


def _rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


TORCH = SimpleNamespace(
    matmul=torch.matmul,
    linear_add=lambda x, w, residual: torch.matmul(x, w) + residual,
    relu_linear_add=lambda x, w, residual: torch.matmul(torch.relu(x), w) + residual,
    rms_norm=_rms_norm,
    attention=lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
    cross_entropy=F.cross_entropy,
)


class Block(torch.nn.Module):
    """Embedding, causal multi-head attention and an MLP, each with a residual and a
    pre-norm, then a norm and a projection to the vocabulary; `ops` supplies the kernels."""

    def __init__(
        self,
        ops: SimpleNamespace,
        vocab: int = 50,
        dim: int = 32,
        seq: int = 12,
        heads: int = 2,
    ) -> None:
        super().__init__()
        self.ops, self.seq, self.heads = ops, seq, heads

        def weight(*shape: int) -> torch.nn.Parameter:
            return torch.nn.Parameter(torch.randn(shape) / math.sqrt(shape[0]))

        self.embed = torch.nn.Embedding(vocab, dim)
        self.norms = torch.nn.ParameterList([torch.ones(dim) for _ in range(3)])
        self.qkv, self.proj = weight(dim, 3 * dim), weight(dim, dim)
        self.up, self.down = weight(dim, 4 * dim), weight(4 * dim, dim)
        self.head = weight(dim, vocab)

    def attention(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        """`residual` plus the attention over `x`, its projection and the add fused."""
        ops, dim = self.ops, x.size(-1)
        # (batch * seq, 3 * dim) -> q, k, v of (batch, heads, seq, head_dim)
        qkv = ops.matmul(x, self.qkv).view(-1, self.seq, 3, self.heads, dim // self.heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
        out = ops.attention(q, k, v).transpose(1, 2).reshape(x.shape)
        return ops.linear_add(out, self.proj, residual)

    def forward(self, tokens: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        ops = self.ops
        h = self.embed(tokens.flatten())
        h = self.attention(ops.rms_norm(h, self.norms[0]), h)
        up = ops.matmul(ops.rms_norm(h, self.norms[1]), self.up)
        h = ops.relu_linear_add(up, self.down, h)
        logits = ops.matmul(ops.rms_norm(h, self.norms[2]), self.head)
        return ops.cross_entropy(logits, targets.flatten())


def data(batch: int = 2, seq: int = 12, vocab: int = 50, seed: int = 0) -> tuple:
    """Random tokens and, as targets, the next token of each, on the default device (the
    same tokens on every device: drawn on the CPU)."""
    gen = torch.Generator().manual_seed(seed)
    tokens = torch.randint(vocab, (batch, seq + 1), generator=gen, device="cpu")
    tokens = tokens.to(torch.get_default_device())
    return tokens[:, :-1], tokens[:, 1:]


def models(
    seed: int = 0, dtype: torch.dtype = torch.float32, device: Any = None, **sizes: int
) -> tuple[Block, Block]:
    """The tilecraft model and the PyTorch model, from the same initial weights, in `dtype`
    on `device` (None: the default device).

    `sizes` (vocab, dim, seq, heads) go to `Block`.
    """
    torch.manual_seed(seed)
    ours = Block(TILECRAFT, **sizes)
    theirs = Block(TORCH, **sizes)
    theirs.load_state_dict(ours.state_dict())
    return ours.to(device=device, dtype=dtype), theirs.to(device=device, dtype=dtype)


def train(model: Block, steps: int = 4, lr: float = 1e-2) -> list[float]:
    """Adam steps on one batch; the loss before each step."""
    tokens, targets = data(seq=model.seq, vocab=model.embed.num_embeddings)
    device = model.head.device
    tokens, targets = tokens.to(device), targets.to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    losses = []
    for _ in range(steps):
        optimizer.zero_grad()
        loss = model(tokens, targets)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


# how closely the losses of the two models agree, in each dtype the example trains in
LOSS_RTOL = {torch.float32: 1e-3, torch.bfloat16: 3e-2}


def main() -> None:
    device = default_device()
    # bfloat16 on a GPU; on the CPU Triton's interpreter computes bfloat16 wrongly
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    ours, theirs = models(dtype=dtype, device=device)
    got, expected = train(ours), train(theirs)
    for a, b in zip(got, expected, strict=True):
        assert math.isclose(a, b, rel_tol=LOSS_RTOL[dtype]), f"losses differ: {got} vs {expected}"
    assert got[-1] < got[0], f"the loss did not decrease: {got}"
    print(f"losses ({str(dtype).removeprefix('torch.')}):", " ".join(f"{x:.4f}" for x in got))
    print("transformer_block: ok")


if __name__ == "__main__":
    main()
