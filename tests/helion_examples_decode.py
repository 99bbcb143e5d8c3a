"""A decoding step through transformer layers as a single Helion kernel (the shape of
Helion's Gemma-3 decode megakernels, written anew at toy sizes): ported by the imports
alone, each phase a device loop, the layers a host loop around them (each phase is then
a launch per layer, the layer index passed to it), a period of layers whose last attends
globally and the others through a window.

Needed: a token's embedding row read through a loaded index (`emb[token[0], :]`); one
row sliced and reshaped into heads (`row[a:b].reshape(kv_heads, dim)`); rotary halves
(`k[:, :half]`) joined by `torch.cat`; a store into the cache at a position loaded on the
device (`k_cache[layer, :, t, :]`); 3-D `hl.dot`s of grouped heads against a cache tile's
transpose; an `if` on a host int inside a device loop; `hl.dot(..., acc=)`; tanh GELU; a
running arg-max over vocabulary tiles.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

import tilecraft as helion
import tilecraft.language as hl

EPS = 1e-6


@helion.kernel(static_shapes=True)
def decode_step(
    token: torch.Tensor,  # [1] int32
    emb: torch.Tensor,  # [vocab, hidden]
    norm_w: torch.Tensor,  # [layers, hidden]
    w_qkv: torch.Tensor,  # [layers, hidden, (heads + 2 * kv_heads) * dim]
    w_o: torch.Tensor,  # [layers, heads * dim, hidden]
    w_gate: torch.Tensor,  # [layers, hidden, inter]
    w_up: torch.Tensor,  # [layers, hidden, inter]
    w_down: torch.Tensor,  # [layers, inter, hidden]
    inv_freq: torch.Tensor,  # [dim / 2] float32
    k_cache: torch.Tensor,  # [layers, kv_heads, ctx, dim], row `pos` written in place
    v_cache: torch.Tensor,
    pos: torch.Tensor,  # [1] int32
    first_layer: int,  # the stacked weights' layers first_layer .. last_layer - 1, in order
    last_layer: int,
    window: int,  # 0: attend to the whole cache
    period: int,  # 0, or every `period`-th layer attends to the whole cache
) -> tuple[torch.Tensor, torch.Tensor]:
    m, hidden = token.size(0), emb.size(1)
    _, kv_heads, ctx, dim = k_cache.shape
    heads = w_o.size(1) // dim
    group, half, inter = heads // kv_heads, dim // 2, w_up.size(2)
    dt = emb.dtype
    res = torch.empty([m, hidden], dtype=dt, device=emb.device)
    x = torch.empty([m, hidden], dtype=dt, device=emb.device)
    qkv = torch.empty([m, w_qkv.size(2)], dtype=dt, device=emb.device)
    attn = torch.empty([m, heads * dim], dtype=dt, device=emb.device)
    act = torch.empty([m, inter], dtype=dt, device=emb.device)
    best_i = torch.empty([m], dtype=torch.int32, device=emb.device)
    for _ in hl.grid(1):
        res[0, :] = emb[token[0], :] * math.sqrt(hidden)
    for layer in range(first_layer, last_layer):
        local = 0 if period and layer % period == period - 1 else window
        for tm in hl.tile(m):
            v = res[tm, :].float()
            v = v * torch.rsqrt(torch.mean(v * v, -1, keepdim=True) + EPS)
            x[tm, :] = (v * (1.0 + norm_w[layer, :][None, :].float())).to(dt)
        for tm, tn in hl.tile([m, w_qkv.size(2)]):
            acc = hl.zeros([tm, tn], dtype=torch.float32)
            for tk in hl.tile(hidden):
                acc = hl.dot(x[tm, tk], w_qkv[layer, tk, tn], acc=acc)
            qkv[tm, tn] = acc.to(dt)
        for _ in hl.grid(1):
            t = pos[0]
            if local == 0:  # noqa: SIM108 (the layer decides: a launch argument)
                first = t - ctx
            else:
                first = t - local
            angle = t.to(torch.float32) * inv_freq[:]
            cos, sin = torch.cos(angle)[None, :], torch.sin(angle)[None, :]
            row = qkv[0, :]
            k = row[heads * dim : (heads + kv_heads) * dim].reshape(kv_heads, dim).float()
            k1, k2 = k[:, :half], k[:, half:]
            rotated = torch.cat([k1 * cos - k2 * sin, k2 * cos + k1 * sin], dim=-1)
            k_cache[layer, :, t, :] = rotated.to(dt)
            v_cache[layer, :, t, :] = row[(heads + kv_heads) * dim :].reshape(kv_heads, dim)
            q = row[: heads * dim].reshape(kv_heads, group, dim).float()
            q1, q2 = q[:, :, :half], q[:, :, half:]
            c, s = cos[None, :, :], sin[None, :, :]
            q = torch.cat([q1 * c - q2 * s, q2 * c + q1 * s], dim=-1).to(dt)
            m_i = hl.full([kv_heads, group], float("-inf"), dtype=torch.float32)
            l_i = hl.zeros([kv_heads, group], dtype=torch.float32)
            acc_o = hl.zeros([kv_heads, group, dim], dtype=torch.float32)
            for tt in hl.tile(ctx):
                keys = k_cache[layer, :, tt, :].transpose(1, 2)
                scores = hl.dot(q, keys, out_dtype=torch.float32) / math.sqrt(dim)
                idx = tt.index[None, None, :]
                scores = torch.where((idx <= t) & (idx > first), scores, -1e30)
                m_new = torch.maximum(m_i, torch.amax(scores, -1))
                alpha = torch.exp(m_i - m_new)
                probs = torch.exp(scores - m_new[:, :, None])
                l_i = l_i * alpha + torch.sum(probs, -1)
                values = v_cache[layer, :, tt, :]
                update = hl.dot(probs.to(dt), values, out_dtype=torch.float32)
                acc_o = acc_o * alpha[:, :, None] + update
                m_i = m_new
            attn[0, :] = (acc_o / l_i[:, :, None]).to(dt).reshape(heads * dim)
        for tm, tn in hl.tile([m, hidden]):
            acc = hl.zeros([tm, tn], dtype=torch.float32)
            for tk in hl.tile(heads * dim):
                acc = hl.dot(attn[tm, tk], w_o[layer, tk, tn], acc=acc)
            res[tm, tn] = res[tm, tn] + acc.to(dt)
        for tm, tn in hl.tile([m, inter]):
            g = hl.zeros([tm, tn], dtype=torch.float32)
            u = hl.zeros([tm, tn], dtype=torch.float32)
            for tk in hl.tile(hidden):
                g = hl.dot(res[tm, tk], w_gate[layer, tk, tn], acc=g)
                u = hl.dot(res[tm, tk], w_up[layer, tk, tn], acc=u)
            act[tm, tn] = F.gelu(g.to(dt), approximate="tanh") * u.to(dt)
        for tm, tn in hl.tile([m, hidden]):
            acc = hl.zeros([tm, tn], dtype=torch.float32)
            for tk in hl.tile(inter):
                acc = hl.dot(act[tm, tk], w_down[layer, tk, tn], acc=acc)
            res[tm, tn] = res[tm, tn] + acc.to(dt)
    for tm in hl.tile(m):
        best = hl.full([tm], float("-inf"), dtype=torch.float32)
        index = hl.zeros([tm], dtype=torch.int32)
        for tv in hl.tile(emb.size(0)):
            logits = hl.dot(res[tm, :], emb[tv, :].T, out_dtype=torch.float32)
            tile_max = torch.amax(logits, -1)
            tile_arg = torch.argmax(logits, -1).to(torch.int32) + tv.begin
            better = tile_max > best
            index = torch.where(better, tile_arg, index)
            best = torch.where(better, tile_max, best)
        best_i[tm] = index
    return res, best_i


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.size(-1) // 2
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)


def _decode_step_reference(
    token, emb, norm_w, w_qkv, w_o, w_gate, w_up, w_down, inv_freq, k_cache, v_cache, pos,
    first_layer, last_layer, window, period,
):  # fmt: skip
    res = (emb[token.long()] * math.sqrt(emb.size(1))).to(emb.dtype)
    weights = (norm_w, w_qkv, w_o, w_gate, w_up, w_down, inv_freq, k_cache, v_cache, pos)
    for layer in range(first_layer, last_layer):
        local = 0 if period and layer % period == period - 1 else window
        res = _layer_reference(res, *weights, layer, local)
    return res, (res.float() @ emb.float().T).argmax(-1).to(torch.int32)


def _layer_reference(
    res, norm_w, w_qkv, w_o, w_gate, w_up, w_down, inv_freq, k_cache, v_cache, pos, layer, window
):  # fmt: skip
    _, kv_heads, ctx, dim = k_cache.shape
    heads, dt, t = w_o.size(1) // dim, res.dtype, int(pos[0])
    v = res.float() * torch.rsqrt((res.float() ** 2).mean(-1, keepdim=True) + EPS)
    qkv = ((v * (1.0 + norm_w[layer].float())).to(dt).float() @ w_qkv[layer].float()).to(dt)[0]
    cos, sin = torch.cos(t * inv_freq), torch.sin(t * inv_freq)
    k = qkv[heads * dim : (heads + kv_heads) * dim].reshape(kv_heads, dim).float()
    k_cache[layer, :, t] = _rotate(k, cos, sin).to(dt)
    v_cache[layer, :, t] = qkv[(heads + kv_heads) * dim :].reshape(kv_heads, dim)
    q = _rotate(qkv[: heads * dim].reshape(kv_heads, heads // kv_heads, dim).float(), cos, sin)
    scores = q.to(dt).float() @ k_cache[layer].float().transpose(1, 2) / math.sqrt(dim)
    idx, first = torch.arange(ctx), t - (window or ctx)
    scores = torch.where((idx <= t) & (idx > first), scores, -1e30)
    o = (scores.softmax(-1).to(dt).float() @ v_cache[layer].float()).to(dt)
    res = res + (o.reshape(1, heads * dim).float() @ w_o[layer].float()).to(dt)
    g, u = res.float() @ w_gate[layer].float(), res.float() @ w_up[layer].float()
    act = F.gelu(g.to(dt), approximate="tanh") * u.to(dt)
    return res + (act.float() @ w_down[layer].float()).to(dt)


def _inputs(window: int, first: int = 1, last: int = 2, period: int = 0) -> tuple:
    layers, hidden, heads, kv_heads, dim, ctx, inter, vocab = 3, 32, 4, 2, 8, 13, 24, 37
    gen = torch.Generator().manual_seed(0)

    def weight(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen) * shape[-2] ** -0.5

    return (
        torch.tensor([5], dtype=torch.int32),
        weight(vocab, hidden),
        torch.randn(layers, hidden, generator=gen) * 0.1,
        weight(layers, hidden, (heads + 2 * kv_heads) * dim),
        weight(layers, heads * dim, hidden),
        weight(layers, hidden, inter),
        weight(layers, hidden, inter),
        weight(layers, inter, hidden),
        1.0 / 10000 ** (torch.arange(0, dim, 2).float() / dim),
        torch.randn(layers, kv_heads, ctx, dim, generator=gen),
        torch.randn(layers, kv_heads, ctx, dim, generator=gen),
        torch.tensor([7], dtype=torch.int32),
        first,
        last,
        window,
        period,
    )


def CASES() -> dict[str, tuple[Any, tuple, Callable[..., Any]]]:
    return {
        "decode_step_global": (decode_step, _inputs(0), _decode_step_reference),
        "decode_step_window": (decode_step, _inputs(4), _decode_step_reference),
        # three layers, the third global (Gemma's period of local layers, then a global one)
        "decode_stack": (decode_step, _inputs(4, 0, 3, period=3), _decode_step_reference),
    }
