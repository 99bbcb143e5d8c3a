"""Attention with an online softmax, written as a Helion user writes it.

The kernel is plain Helion code: it runs here by the imports alone (`import tilecraft as
helion`, `import tilecraft.language as hl`). Each program takes a block of queries of one
batch-head and walks over blocks of keys and values, keeping the running row maximum
`m_i`, the running denominator `l_i` and the unnormalized output `acc` (the scores are
kept in float32 through `torch.bmm(..., torch.float32)`; base-2 exponentials with the
scale folded into the queries).
"""

from __future__ import annotations

import math

import torch

import tilecraft as helion
import tilecraft.language as hl
from tilecraft.testing import assert_close, default_device


@helion.kernel(static_shapes=True, autotune_baseline_atol=5e-2, autotune_baseline_rtol=2e-2)
def attention(q_in: torch.Tensor, k_in: torch.Tensor, v_in: torch.Tensor) -> torch.Tensor:
    m_dim, n_dim = q_in.size(-2), k_in.size(-2)
    head_dim = hl.specialize(q_in.size(-1))
    q_view = q_in.reshape([-1, m_dim, head_dim])
    k_view = k_in.reshape([-1, n_dim, head_dim])
    v_view = v_in.reshape([-1, n_dim, head_dim])
    out = torch.empty_like(q_view)
    qk_scale = 1.0 / math.sqrt(head_dim) * 1.44269504  # log2(e): exp2 instead of exp
    for tile_b, tile_m in hl.tile([q_view.size(0), m_dim]):
        m_i = hl.full([tile_b, tile_m], float("-inf"), dtype=torch.float32)
        l_i = torch.full_like(m_i, 1.0)
        acc = hl.zeros([tile_b, tile_m, head_dim], dtype=torch.float32)
        q = q_view[tile_b, tile_m, :]
        for tile_n in hl.tile(n_dim):
            k = k_view[tile_b, tile_n, :]
            qk = torch.bmm(q * qk_scale, k.transpose(1, 2), torch.float32)
            m_ij = torch.maximum(m_i, torch.amax(qk, -1, keepdim=True).squeeze(-1))
            p = torch.exp2(qk - m_ij[:, :, None])
            alpha = torch.exp2(m_i - m_ij)
            l_i = l_i * alpha + torch.sum(p, -1)
            v = v_view[tile_b, tile_n, :]
            acc = torch.baddbmm(acc * alpha[:, :, None], p.to(v.dtype), v)
            m_i = m_ij
        out[tile_b, tile_m, :] = (acc / l_i[:, :, None]).to(out.dtype)
    return out.view(q_in.size())


def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    out = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float())
    return out.to(q.dtype)


def inputs(shape=(2, 4, 200, 64), dtype=torch.float32, device=None) -> tuple:
    """q, k, v for (batch, heads, queries, head_dim), or (queries, keys) with small heads."""
    device = device or default_device()
    if len(shape) == 2:
        (m, n), (batch, heads, head_dim) = shape, (1, 2, 16)
    else:
        batch, heads, m, head_dim = shape
        n = m
    return (
        torch.randn(batch, heads, m, head_dim, dtype=dtype, device=device),
        torch.randn(batch, heads, n, head_dim, dtype=dtype, device=device),
        torch.randn(batch, heads, n, head_dim, dtype=dtype, device=device),
    )


def main() -> None:
    args = inputs(shape=(2, 3, 77, 32))
    assert_close(attention(*args), reference(*args))
    print("attention: ok")


if __name__ == "__main__":
    main()
