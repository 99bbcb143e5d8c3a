"""The tune_vs_helion kernels, in Helion's API: one source for both. Loaded with
`BACKEND = "tilecraft"` preset in the module's globals (tune_vs_helion.py does), the
imports are tilecraft's (the port is the imports alone); else Helion's (needs Helion
1.5.0's wheel). Helion needs module-level functions, hence a module.

The bodies are tilecraft's examples character for character (softmax, rms_norm,
cross_entropy, matmul, softmax_two_pass: the tuning database knows them by their source,
so tilecraft's recorded landscapes seed them) and the Helion-style kernels of
tests/helion_dialect.py (kl_div_rows, long_sum). layer_norm computes the variance as the
mean of squared deviations: Helion 1.5.0 cannot lower `torch.var` ("reductions with >1
input"), so it is not examples/layer_norm.py's source.
"""

from __future__ import annotations

import torch

BACKEND = globals().get("BACKEND", "helion")
# `tc` is the namespace of tile, zeros, full, register_block_size: tilecraft's package, or
# helion.language. Spelled `tc.` as in tilecraft's examples, so that the bodies match
# theirs to the character (a kernel's source is its key in the tuning database).
if BACKEND == "tilecraft":
    import tilecraft as tc
    from tilecraft import kernel
else:
    import helion.language as tc
    from helion import kernel

QUICK = {"autotune_effort": "quick"}


@kernel(**QUICK)
def softmax(x: torch.Tensor) -> torch.Tensor:
    m, n = x.size()
    out = torch.empty_like(x)
    for tile_m in tc.tile(m):
        out[tile_m, :] = torch.nn.functional.softmax(x[tile_m, :], dim=1)
    return out


@kernel(**QUICK)
def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    m, n = x.size()
    assert weight.size(0) == n, f"weight has size {weight.size(0)}, expected {n}"
    out = torch.empty_like(x)
    for tile_m in tc.tile(m):
        row = x[tile_m, :].to(torch.float32)
        inv_rms = torch.rsqrt(torch.mean(row * row, dim=-1) + eps)
        normed = row * inv_rms[:, None] * weight[:].to(torch.float32)
        out[tile_m, :] = normed.to(out.dtype)
    return out


@kernel(**QUICK)
def layer_norm(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float = 1e-5
) -> torch.Tensor:
    m, n = x.size()
    out = torch.empty_like(x)
    for tile_m in tc.tile(m):
        row = x[tile_m, :].to(torch.float32)
        mean = torch.mean(row, dim=-1, keepdim=True)
        centered = row - mean
        var = torch.mean(centered * centered, dim=-1, keepdim=True)
        normed = centered * torch.rsqrt(var + eps)
        result = normed * weight[:].to(torch.float32) + bias[:].to(torch.float32)
        out[tile_m, :] = result.to(out.dtype)
    return out


@kernel(**QUICK)
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


@kernel(**QUICK)
def matmul(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    m, k = x.size()
    k2, n = y.size()
    assert k == k2, f"size mismatch {k} != {k2}"
    out = torch.empty([m, n], dtype=torch.promote_types(x.dtype, y.dtype), device=x.device)
    for tile_m, tile_n in tc.tile([m, n]):
        acc = tc.zeros([tile_m, tile_n], dtype=torch.float32)
        for tile_k in tc.tile(k):
            acc = torch.addmm(acc, x[tile_m, tile_k], y[tile_k, tile_n])
        out[tile_m, tile_n] = acc.to(out.dtype)
    return out


@kernel(**QUICK)
def softmax_two_pass(x: torch.Tensor) -> torch.Tensor:
    m, n = x.size()
    out = torch.empty_like(x)
    for tile_m in tc.tile(m):
        row_max = tc.full([tile_m], float("-inf"), dtype=torch.float32)
        row_sum = tc.zeros([tile_m], dtype=torch.float32)
        for tile_n in tc.tile(n):
            values = x[tile_m, tile_n].to(torch.float32)
            new_max = torch.maximum(row_max, torch.amax(values, dim=1))
            scale = torch.exp(row_max - new_max)
            row_sum = row_sum * scale + torch.exp(values - new_max[:, None]).sum(dim=1)
            row_max = new_max
        for tile_n in tc.tile(n):
            values = x[tile_m, tile_n].to(torch.float32)
            probs = torch.exp(values - row_max[:, None]) / row_sum[:, None]
            out[tile_m, tile_n] = probs.to(out.dtype)
    return out


@kernel(**QUICK)
def kl_div_rows(log_q: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """Per-row KL(p || q) from log q, both tile sizes registered (Helion's kl_div shape)."""
    rows, vocab = log_q.shape
    loss = torch.zeros([rows], dtype=torch.float32, device=log_q.device)
    block_v = tc.register_block_size(vocab)
    block_r = tc.register_block_size(rows)
    for tile_r in tc.tile(rows, block_size=block_r):
        acc = tc.zeros([tile_r, block_v], dtype=torch.float32)
        for tile_v in tc.tile(vocab, block_size=block_v):
            target = p[tile_r, tile_v]
            log_p = torch.log(torch.clamp(target, min=1e-10))
            acc += target * (log_p - log_q[tile_r, tile_v])
        loss[tile_r] = acc.sum(dim=-1)
    return loss


@kernel(**QUICK)
def long_sum(x: torch.Tensor) -> torch.Tensor:
    m, n = x.size()
    out = torch.empty([m], dtype=x.dtype, device=x.device)
    block_size_n = tc.register_block_size(n)
    for tile_m in tc.tile(m):
        acc = tc.zeros([tile_m, block_size_n], dtype=x.dtype)
        for tile_n in tc.tile(n, block_size=block_size_n):
            acc += x[tile_m, tile_n]
        out[tile_m] = acc.sum(-1)
    return out


# Flash attention forward in Helion's style (bench_attention.py's Helion peer, and the same
# source under tilecraft): one program per (batch * head, query tile), a 3-D batch tile of
# one row, every key tile visited (causal ones masked, as Helion's example does). Two
# kernels that repeat the online-softmax step, as Helion's example does: with the step as a
# helper function Helion 1.5.0 failed to compile them (an InductorLoweringError), and a
# `causal` flag becomes a branch in its key loop at run time.
@kernel(**QUICK)
def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    m, n = q.size(-2), k.size(-2)
    head_dim = tc.specialize(q.size(-1))
    q_rows, k_rows = q.reshape([-1, m, head_dim]), k.reshape([-1, n, head_dim])
    v_rows = v.reshape([-1, n, head_dim])
    out = torch.empty_like(q_rows)
    qk_scale = head_dim**-0.5 * 1.4426950408889634  # base-2 exponentials: times log2(e)
    for tile_b, tile_m in tc.tile([q_rows.size(0), m]):
        row_max = tc.full([tile_b, tile_m], float("-inf"), dtype=torch.float32)
        row_sum = tc.zeros([tile_b, tile_m], dtype=torch.float32)
        acc = tc.zeros([tile_b, tile_m, head_dim], dtype=torch.float32)
        query = q_rows[tile_b, tile_m, :]
        for tile_n in tc.tile(n):
            keys = k_rows[tile_b, tile_n, :]
            scores = torch.bmm(query, keys.transpose(1, 2), torch.float32) * qk_scale
            new_max = torch.maximum(row_max, torch.amax(scores, -1))
            p = torch.exp2(scores - new_max[:, :, None])
            alpha = torch.exp2(row_max - new_max)
            row_sum = row_sum * alpha + torch.sum(p, -1)
            acc = torch.baddbmm(acc * alpha[:, :, None], p.to(v.dtype), v_rows[tile_b, tile_n, :])
            row_max = new_max
        out[tile_b, tile_m, :] = (acc / row_sum[:, :, None]).to(out.dtype)
    return out.view(q.size())


@kernel(**QUICK)
def causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    m, n = q.size(-2), k.size(-2)
    head_dim = tc.specialize(q.size(-1))
    q_rows, k_rows = q.reshape([-1, m, head_dim]), k.reshape([-1, n, head_dim])
    v_rows = v.reshape([-1, n, head_dim])
    out = torch.empty_like(q_rows)
    qk_scale = head_dim**-0.5 * 1.4426950408889634
    for tile_b, tile_m in tc.tile([q_rows.size(0), m]):
        row_max = tc.full([tile_b, tile_m], float("-inf"), dtype=torch.float32)
        row_sum = tc.zeros([tile_b, tile_m], dtype=torch.float32)
        acc = tc.zeros([tile_b, tile_m, head_dim], dtype=torch.float32)
        query = q_rows[tile_b, tile_m, :]
        for tile_n in tc.tile(n):
            keys = k_rows[tile_b, tile_n, :]
            scores = torch.bmm(query, keys.transpose(1, 2), torch.float32) * qk_scale
            seen = tile_m.index[None, :, None] >= tile_n.index[None, None, :]
            scores = torch.where(seen, scores, float("-inf"))
            new_max = torch.maximum(row_max, torch.amax(scores, -1))
            p = torch.exp2(scores - new_max[:, :, None])
            alpha = torch.exp2(row_max - new_max)
            row_sum = row_sum * alpha + torch.sum(p, -1)
            acc = torch.baddbmm(acc * alpha[:, :, None], p.to(v.dtype), v_rows[tile_b, tile_n, :])
            row_max = new_max
        out[tile_b, tile_m, :] = (acc / row_sum[:, :, None]).to(out.dtype)
    return out.view(q.size())
