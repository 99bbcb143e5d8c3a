"""More of Helion's example kernels, written anew on the same surface and ported by the
imports alone (as tests/helion_examples.py): a policy-gradient loss's forward and
backward, a causal depthwise 1-D convolution, attention over a KV cache while decoding,
and HSTU's attention over packed sequences. What a port needed is in each docstring.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

import tilecraft as helion
import tilecraft.language as hl

LOG2E = 1.4426950408889634


@helion.kernel(ignore_warnings=[helion.exc.TensorOperationInWrapper])
def policy_loss(
    logits: torch.Tensor,
    chosen: torch.Tensor,
    old_logp: torch.Tensor | None,
    advantages: torch.Tensor,
    mask: torch.Tensor | None,
    temperature: float,
    clip: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """A clipped policy-gradient loss per token (GRPO's) and the log-sum-exp it saves:
    the logits of `[B, L + 1, V]` less the last position, a log-sum-exp over V in chunks.

    Needed: `helion.exc.TensorOperationInWrapper` (only to silence Helion's warning),
    optional tensors tested with `is None` on the device, a host view of the input."""
    batch, positions, vocab = logits.shape
    logits = logits[:, :-1, :]
    loss = torch.zeros([batch, positions - 1], dtype=torch.float32, device=logits.device)
    lse = torch.zeros_like(loss)
    for tile_b, tile_l in hl.tile([batch, positions - 1]):
        top = hl.full([tile_b, tile_l], float("-inf"), dtype=torch.float32)
        total = hl.zeros([tile_b, tile_l], dtype=torch.float32)
        for tile_v in hl.tile(vocab):
            scaled = logits[tile_b, tile_l, tile_v].to(torch.float32) / temperature
            new_top = torch.maximum(top, torch.amax(scaled, dim=-1))
            total = total * torch.exp(top - new_top) + torch.exp(scaled - new_top[:, :, None]).sum(
                -1
            )
            top = new_top
        row_lse = top + torch.log(total)
        lse[tile_b, tile_l] = row_lse
        logp = chosen[tile_b, tile_l] - row_lse
        before = logp if old_logp is None else old_logp[tile_b, tile_l]
        ratio = torch.exp(logp - before)
        gain = advantages[tile_b][:, None]
        per_token = -torch.minimum(ratio * gain, torch.clamp(ratio, 1 - clip, 1 + clip) * gain)
        if mask is not None:
            per_token *= mask[tile_b, tile_l]
        loss[tile_b, tile_l] = per_token
    return loss, lse


@helion.kernel(ignore_warnings=[helion.exc.TensorOperationInWrapper])
def policy_loss_backward(
    grad: torch.Tensor,
    logits: torch.Tensor,
    ids: torch.Tensor,
    advantages: torch.Tensor,
    lse: torch.Tensor,
    temperature: float,
) -> torch.Tensor:
    """The loss's gradient to the logits where the old log-probabilities are the new ones
    detached (the ratio is 1, inside the clip: each token's log-probability has gradient
    `-advantage`), through the softmax: `(onehot(id) - probs) / temperature`.

    Needed: `tile.index` compared with a tile of ids, and a host write to the result
    after the device loop (`out[:, -1, :] = 0`)."""
    batch, positions, vocab = logits.shape
    shown = logits[:, :-1, :]
    out = torch.zeros_like(logits, dtype=torch.float32)
    for tile_b, tile_l in hl.tile([batch, positions - 1]):
        d_logp = -advantages[tile_b][:, None] * grad[tile_b, tile_l] / temperature
        row_lse = lse[tile_b, tile_l]
        picked = ids[tile_b, tile_l]
        for tile_v in hl.tile(vocab):
            scaled = shown[tile_b, tile_l, tile_v].to(torch.float32) / temperature
            probs = torch.exp(scaled - row_lse[:, :, None])
            hit = tile_v.index[None, None, :] == picked[:, :, None]
            out[tile_b, tile_l, tile_v] = d_logp[:, :, None] * (hit.float() - probs)
    out[:, -1, :] = 0
    return out


def _policy_loss_reference(logits, chosen, old_logp, advantages, mask, temperature, clip):
    scaled = logits[:, :-1].float() / temperature
    lse = torch.logsumexp(scaled, -1)
    logp = chosen - lse
    ratio = torch.exp(logp - (logp if old_logp is None else old_logp))
    gain = advantages[:, None]
    loss = -torch.minimum(ratio * gain, ratio.clamp(1 - clip, 1 + clip) * gain)
    return (loss if mask is None else loss * mask), lse


def _policy_grad_reference(grad, logits, ids, advantages, lse, temperature):
    leaf = logits.detach().float().clone().requires_grad_()
    picked = leaf[:, :-1].gather(2, ids[..., None])[..., 0] / temperature
    logp = picked - torch.logsumexp(leaf[:, :-1] / temperature, -1)
    ratio = torch.exp(logp - logp.detach())
    gain = advantages[:, None]
    loss = -torch.minimum(ratio * gain, ratio.clamp(0.8, 1.2) * gain)
    loss.backward(grad)
    return leaf.grad


@helion.kernel()
def causal_depthwise_conv1d(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """`[batch, channels, time]` convolved per channel with `w` `[channels, taps]`, each
    output seeing only inputs at or before it (zero before the start).

    Needed: `hl.load` with a subscript mixing a tile's first index, a tile and shifted
    indices, masked by `extra_mask`; a loop over taps known at compile time. One batch
    row a program (`block_size=1`): the subscript reads the tile's first row only."""
    batch, channels, time = x.shape
    taps = hl.specialize(w.size(1))
    out = torch.empty_like(x)
    for tile_b, tile_c, tile_t in hl.tile([batch, channels, time], block_size=[1, None, None]):
        at = tile_t.index
        acc = hl.zeros([tile_c, tile_t], dtype=torch.float32) + bias[tile_c][:, None]
        for tap in range(taps):
            lag = taps - 1 - tap
            seen = hl.load(x, [tile_b.begin, tile_c, at - lag], extra_mask=(at >= lag)[None, :])
            acc = acc + seen * w[tile_c, tap][:, None]
        out[tile_b, tile_c, tile_t] = acc[None, :, :].to(out.dtype)
    return out


def _causal_conv1d_reference(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor):
    taps = w.size(1)
    out = F.conv1d(F.pad(x.float(), (taps - 1, 0)), w.float()[:, None], bias, groups=x.size(1))
    return out.to(x.dtype)


@helion.kernel(static_shapes=False)
def decode_attention(
    q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, lengths: torch.Tensor
) -> torch.Tensor:
    """Queries `[batch, queries, heads, dim]` against a cache `[batch, slots, kv_heads,
    dim]` of which each sequence fills its first `lengths[b]` slots (grouped heads).

    Needed: a whole read of the cache's rows for this head in the device loop
    (`k_cache[b, :, h, :]`) that the key loop then indexes by its tile (read from the
    cache itself, only that tile); `continue` on a tile's `torch.all`; a host 0-d tensor
    met on the device."""
    batch, queries, heads, dim = q.shape
    dim = hl.specialize(dim)
    slots, kv_heads = k_cache.size(1), k_cache.size(2)
    q_rows = q.permute(0, 2, 1, 3).reshape(batch * heads, queries, dim)
    out = torch.empty_like(q_rows)
    cap = torch.tensor(slots, device=q.device, dtype=torch.int32)
    for tile_bh, tile_q in hl.tile([batch * heads, queries], block_size=[1, None]):
        row = tile_bh.begin
        seq, kv = row // heads, (row % heads) * kv_heads // heads
        keys, values = k_cache[seq, :, kv, :], v_cache[seq, :, kv, :]
        filled = torch.minimum(torch.clamp(lengths[seq], min=0).to(torch.int32), cap)
        query = q_rows[row, tile_q, :].to(torch.float32)
        m_i = hl.full([tile_q], float("-inf"), dtype=torch.float32)
        l_i = hl.zeros([tile_q], dtype=torch.float32)
        acc = hl.zeros([tile_q, dim], dtype=torch.float32)
        for tile_n in hl.tile(slots, block_size=16):
            valid = tile_n.index[None, :] < filled
            if torch.all(~valid):
                continue
            scores = query @ keys[tile_n, :].to(torch.float32).T * (LOG2E / math.sqrt(dim))
            scores = torch.where(valid, scores, float("-inf"))
            m_new = torch.maximum(m_i, scores.amax(-1))
            p = torch.where(valid, torch.exp2(scores - m_new[:, None]), 0.0)
            alpha = torch.where(torch.isfinite(m_i), torch.exp2(m_i - m_new), 0.0)
            l_i = l_i * alpha + p.sum(-1)
            acc = acc * alpha[:, None] + p @ values[tile_n, :].to(torch.float32)
            m_i = torch.where(torch.isfinite(m_new), m_new, m_i)
        done = torch.where(l_i[:, None] > 0, acc / torch.where(l_i > 0, l_i, 1.0)[:, None], 0.0)
        out[row, tile_q, :] = done.to(out.dtype)
    return out.reshape(batch, heads, queries, dim).permute(0, 2, 1, 3)


def _decode_attention_reference(q, k_cache, v_cache, lengths):
    batch, _, heads, dim = q.shape
    out = torch.zeros_like(q)
    for b in range(batch):
        n = max(0, min(k_cache.size(1), int(lengths[b])))
        for h in range(heads):
            kv = h * k_cache.size(2) // heads
            if n:
                scores = q[b, :, h].float() @ k_cache[b, :n, kv].float().T / math.sqrt(dim)
                out[b, :, h] = (scores.softmax(-1) @ v_cache[b, :n, kv].float()).to(q.dtype)
    return out


@helion.kernel()
def jagged_silu_attention(
    max_len: int, alpha: float, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
    offsets: torch.Tensor,
) -> torch.Tensor:  # fmt: skip
    """HSTU's causal attention over packed sequences `[tokens, heads, dim]` (sequence i is
    `offsets[i]:offsets[i + 1]`): SiLU of the scaled scores instead of a softmax.

    Needed: `hl.vtile`, Helion's newer name for `hl.jagged_tile`, in eager mode too (its
    lanes are run one at a time there); flat loads and stores by computed offsets."""
    heads = hl.specialize(q.size(1))
    dim = hl.specialize(v.size(2))
    out = torch.zeros_like(v)
    q_flat, k_flat, v_flat, out_flat = q.view(-1), k.view(-1), v.view(-1), out.view(-1)
    for tile_b, tile_h in hl.tile([offsets.size(0) - 1, heads], block_size=[None, 1]):
        starts = offsets[tile_b]
        lengths = offsets[tile_b.index + 1] - starts
        for tile_q in hl.vtile(lengths):
            lanes = hl.arange(dim)
            rows = (starts[:, None] + tile_q.index[None, :]) * heads + tile_h.begin
            at = rows[:, :, None] * dim + lanes[None, None, :]
            query = hl.load(q_flat, [at])
            acc = hl.zeros([tile_b, tile_q, dim], dtype=torch.float32)
            for tile_k in hl.vtile(lengths):
                keys = (starts[:, None] + tile_k.index[None, :]) * heads + tile_h.begin
                kv_at = keys[:, :, None] * dim + lanes[None, None, :]
                scores = torch.matmul(query, hl.load(k_flat, [kv_at]).transpose(1, 2)) * alpha
                scores = F.silu(scores) / max_len
                scores = torch.where(tile_q.index[:, None] >= tile_k.index[None, :], scores, 0.0)
                acc = hl.dot(scores.to(v.dtype), hl.load(v_flat, [kv_at]), acc=acc)
            hl.store(out_flat, [at], acc.to(out.dtype))
    return out


def _jagged_silu_attention_reference(max_len, alpha, q, k, v, offsets):
    out = torch.zeros_like(v)
    for i in range(offsets.numel() - 1):
        a, e = int(offsets[i]), int(offsets[i + 1])
        qs, ks, vs = (t[a:e].transpose(0, 1).float() for t in (q, k, v))
        scores = F.silu(qs @ ks.transpose(1, 2) * alpha) / max_len
        scores = torch.tril(scores)
        out[a:e] = (scores @ vs).transpose(0, 1).to(v.dtype)
    return out


def CASES() -> dict[str, tuple[Any, tuple, Callable[..., Any]]]:
    """(kernel, inputs, reference) by name: ragged shapes, lengths of 0 and 1."""
    logits = torch.randn(3, 12, 37)
    ids = torch.randint(0, 37, (3, 11))
    chosen = logits[:, :-1].gather(2, ids[..., None])[..., 0] / 0.9
    old, gains = torch.randn(3, 11) * 0.1 - 3.5, torch.randn(3)
    mask = (torch.rand(3, 11) > 0.2).float()
    lse = torch.logsumexp(logits[:, :-1] / 0.9, -1)
    x, w, bias = torch.randn(2, 5, 37), torch.randn(5, 4), torch.randn(5)
    q, k_cache = torch.randn(3, 2, 4, 32), torch.randn(3, 45, 2, 32)
    v_cache, lengths = torch.randn(3, 45, 2, 32), torch.tensor([0, 1, 37], dtype=torch.int32)
    loss_args = (logits, chosen, old, gains, mask, 0.9, 0.2)
    # packed sequences of 5, 0, 17, 1 and 9 tokens, 2 heads of 16
    jagged_offsets = torch.tensor([0, 5, 5, 22, 23, 32], dtype=torch.int32)
    packed = [torch.randn(32, 2, 16) for _ in range(3)]
    return {
        "policy_loss": (policy_loss, loss_args, _policy_loss_reference),
        "policy_loss_no_old": (
            policy_loss,
            (logits, chosen, None, gains, None, 0.9, 0.2),
            _policy_loss_reference,
        ),
        "policy_loss_backward": (
            policy_loss_backward,
            (torch.randn(3, 11), logits, ids, gains, lse, 0.9),
            _policy_grad_reference,
        ),
        "causal_conv1d": (causal_depthwise_conv1d, (x, w, bias), _causal_conv1d_reference),
        "causal_conv1d_taps3": (
            causal_depthwise_conv1d,
            (x, w[:, :3], bias),
            _causal_conv1d_reference,
        ),
        "jagged_silu_attention": (
            jagged_silu_attention,
            (17, 1 / 256, *packed, jagged_offsets),
            _jagged_silu_attention_reference,
        ),
        "decode_attention": (
            decode_attention,
            (q, k_cache, v_cache, lengths),
            _decode_attention_reference,
        ),
    }
