# Kernel bodies index tensors with tiles, which the DSL's stubs do not type for mypy.
# mypy: disable-error-code="index,list-item,misc,arg-type,operator"
"""Attention over packed sequences of different lengths (FlashAttention's varlen layout).

`q` is `(total_q, heads, head_dim)`, `k` and `v` `(total_k, kv_heads, head_dim)`; sequence
`b` holds rows `cu_q[b]:cu_q[b + 1]` of `q` and `cu_k[b]:cu_k[b + 1]` of `k` and `v`. Each
program reads its sequence's bounds on the device, so one launch serves any lengths: the
grid covers `max_q` (or `max_k`) positions of every sequence, tiles past a sequence's end
do nothing, and rows past it get an index past the tensor (read as 0, never written).

The backward follows `tilecraft.nn.attention`'s: `delta = rowsum(dO * O)`, then dK and dV
(a program per key tile of a sequence and kv head, over the query heads of its group and
their query tiles), then dQ (a program per query tile, over its key tiles); no atomics.
"""

from __future__ import annotations

import math
from typing import Any

import torch

import tilecraft as tc
from tilecraft.nn.attention_tiles import LOG2E, _key_grads, _row_totals, _score_grads


def _positions(cu: torch.Tensor, b: int, tile: Any, width: int, head: Any, past: int) -> Any:
    """The flattened (row * width + head) rows of a tile of sequence `b`'s positions, those
    past its end pointing at `past` (outside the tensor), and which of them are inside."""
    start = cu[b]
    inside = tile.index < cu[b + 1] - start
    return torch.where(inside, (start + tile.index) * width + head, past), inside


def _head_rows(head_dim: int, *tensors: torch.Tensor) -> list[torch.Tensor]:
    """Each `(rows, heads, head_dim)` tensor as `(rows * heads, head_dim)` (a view)."""
    return [t.reshape([t.size(0) * t.size(1), head_dim]) for t in tensors]


def _scores(
    query: Any,
    key: Any,
    qk_scale: float,
    valid: Any,
    keep_n: Any,
    tile_m: Any,
    tile_n: Any,
    causal: bool,
) -> Any:
    """Base-2 scores of a query tile against a key tile, -inf for the queries not `valid`
    and the keys not `keep_n` (those past their sequence) and (causal) for keys after their
    query."""
    keep = valid[:, None] & keep_n[None, :]
    scores = torch.mm(query, key.T, torch.float32) * qk_scale
    if causal:
        keep = keep & (tile_n.index[None, :] <= tile_m.index[:, None])
    return torch.where(keep, scores, float("-inf"))


@tc.kernel(fp_fusion=False)  # as tilecraft.nn.attention's, which says why
def attention_varlen_forward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_q: torch.Tensor,
    cu_k: torch.Tensor,
    max_q: int,
    max_k: int,
    causal: bool,
    scale: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention over packed sequences, and each row's softmax statistics `(2, total_q,
    heads)`: the maximum of its scaled base-2 scores, and the base-2 log of its denominator.

    `max_q` bounds every sequence's query count (`max_k`, its key count, is the backward's).
    """
    total_q, heads, _ = q.size()
    total_k, kv_heads = k.size(0), k.size(1)
    head_dim = tc.specialize(q.size(2))
    batch = cu_q.size(0) - 1
    group = heads // kv_heads
    q_rows, k_rows, v_rows = _head_rows(head_dim, q, k, v)
    out = torch.empty_like(q)
    out_rows = out.view(total_q * heads, head_dim)
    stats = torch.empty([2, total_q * heads], dtype=torch.float32, device=q.device)
    row_max, row_log_sum = stats.select(0, 0), stats.select(0, 1)
    qk_scale = scale * LOG2E
    for tile_b, tile_h, tile_m in tc.tile([batch, heads, max_q], block_size=[1, 1, None]):
        b, kv_head = tile_b.begin, tile_h.begin // group
        rows, valid = _positions(cu_q, b, tile_m, heads, tile_h.begin, total_q * heads)
        query = q_rows[rows, :]
        k_len = cu_k[b + 1] - cu_k[b]
        m_i = tc.full([tile_m], float("-inf"), dtype=torch.float32)
        l_i = tc.zeros([tile_m], dtype=torch.float32)
        acc = tc.zeros([tile_m, head_dim], dtype=torch.float32)
        end = min(tile_m.end, k_len) if causal else k_len
        for tile_n in tc.tile(0, end):
            cols, keep_n = _positions(cu_k, b, tile_n, kv_heads, kv_head, total_k * kv_heads)
            key = k_rows[cols, :]
            scores = _scores(query, key, qk_scale, valid, keep_n, tile_m, tile_n, causal)
            m_ij = torch.maximum(m_i, torch.amax(scores, -1))
            p = torch.exp2(scores - m_ij[:, None])
            alpha = torch.exp2(m_i - m_ij)
            l_i = l_i * alpha + torch.sum(p, -1)
            value = v_rows[cols, :]
            acc = torch.addmm(acc * alpha[:, None], p.to(value.dtype), value)
            m_i = m_ij
        m_i, l_i = _row_totals(m_i, l_i)  # a sequence without keys: 0, as SDPA's
        out_rows[rows, :] = (acc / l_i[:, None]).to(out.dtype)
        row_max[rows] = m_i
        row_log_sum[rows] = torch.log2(l_i)
    return out, stats.view(2, total_q, heads)


def _key_program(
    tile_b: Any,
    tile_h: Any,
    tile_n: Any,
    ins: tuple,
    outs: tuple,
    sizes: tuple[int, ...],
    qk_scale: float,
    scale: float,
    causal: bool,
) -> None:
    """One program of the dK, dV pass: key tile `tile_n` of sequence `tile_b` and kv head
    `tile_h`, summed over the queries of every head of its group, stored into `outs` (dK
    and its rows, dV and its rows). `ins` holds the key offsets, key and value rows, query
    offsets, query, output-gradient, row statistics (a pair) and delta rows; `sizes`
    (heads, kv_heads, group, head_dim, past_q, past_k)."""
    cu_k, k_rows, v_rows, cu_q, q_rows, do_rows, stats, delta = ins
    row_max, row_log_sum = stats
    heads, kv_heads, group, head_dim, past_q, past_k = sizes
    b = tile_b.begin
    cols, keep_n = _positions(cu_k, b, tile_n, kv_heads, tile_h.begin, past_k)
    key = k_rows[cols, :]
    value = v_rows[cols, :]
    dk_acc = tc.zeros([tile_n, head_dim], dtype=torch.float32)
    dv_acc = tc.zeros([tile_n, head_dim], dtype=torch.float32)
    q_len = cu_q[b + 1] - cu_q[b]
    start = tile_n.begin if causal else 0  # causal: queries before the tile see none of it
    for g in range(group):
        for tile_m in tc.tile(start, q_len):
            head = tile_h.begin * group + g
            rows, valid = _positions(cu_q, b, tile_m, heads, head, past_q)
            query = q_rows[rows, :]
            d_o = do_rows[rows, :]
            scores = _scores(query, key, qk_scale, valid, keep_n, tile_m, tile_n, causal)
            terms = (row_max[rows], row_log_sum[rows], delta[rows])
            dk_acc, dv_acc = _key_grads(dk_acc, dv_acc, query, d_o, value, scores.T, *terms)
    dk, dk_rows, dv, dv_rows = outs
    dk_rows[cols, :] = (dk_acc * scale).to(dk.dtype)
    dv_rows[cols, :] = dv_acc.to(dv.dtype)


def _query_program(
    tile_b: Any,
    tile_h: Any,
    tile_m: Any,
    ins: tuple,
    outs: tuple,
    sizes: tuple[int, ...],
    qk_scale: float,
    scale: float,
    causal: bool,
) -> None:
    """One program of the dQ pass: query tile `tile_m` of sequence `tile_b` and head
    `tile_h`, over the key tiles it attends to, stored into `outs` (dQ and its rows). `ins`
    holds the query offsets, query, output-gradient, row statistics (a pair) and delta rows, key
    offsets, key and value rows; `sizes` (heads, kv_heads, group, head_dim, past_q,
    past_k)."""
    cu_q, q_rows, do_rows, stats, delta, cu_k, k_rows, v_rows = ins
    row_max, row_log_sum = stats
    heads, kv_heads, group, head_dim, past_q, past_k = sizes
    b, kv_head = tile_b.begin, tile_h.begin // group
    rows, valid = _positions(cu_q, b, tile_m, heads, tile_h.begin, past_q)
    query = q_rows[rows, :]
    d_o = do_rows[rows, :]
    terms = (row_max[rows], row_log_sum[rows], delta[rows])
    dq_acc = tc.zeros([tile_m, head_dim], dtype=torch.float32)
    k_len = cu_k[b + 1] - cu_k[b]
    end = min(tile_m.end, k_len) if causal else k_len
    for tile_n in tc.tile(0, end):
        cols, keep_n = _positions(cu_k, b, tile_n, kv_heads, kv_head, past_k)
        key = k_rows[cols, :]
        scores = _scores(query, key, qk_scale, valid, keep_n, tile_m, tile_n, causal)
        ds = _score_grads(d_o, v_rows[cols, :], scores, *terms)
        dq_acc = torch.addmm(dq_acc, ds.to(key.dtype), key)
    dq, dq_rows = outs
    dq_rows[rows, :] = (dq_acc * scale).to(dq.dtype)


@tc.kernel(fp_fusion=False)  # as tilecraft.nn.attention's, which says why
def attention_varlen_backward(
    grad_out: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_q: torch.Tensor,
    cu_k: torch.Tensor,
    out: torch.Tensor,
    stats: torch.Tensor,
    max_q: int,
    max_k: int,
    causal: bool,
    scale: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """dQ, dK and dV of packed-sequence attention from the output gradient, the forward's
    output and its row statistics; rows outside every sequence get zero gradients."""
    total_q, heads, _ = q.size()
    total_k, kv_heads = k.size(0), k.size(1)
    head_dim = tc.specialize(q.size(2))
    batch = cu_q.size(0) - 1
    group = heads // kv_heads
    q_rows, k_rows, v_rows, do_rows, o_rows = _head_rows(head_dim, q, k, v, grad_out, out)
    stat_rows = stats.reshape([2, total_q * heads])
    max_rows, log_sum_rows = stat_rows.select(0, 0), stat_rows.select(0, 1)
    delta = torch.empty([total_q * heads], dtype=torch.float32, device=q.device)
    dq, dk, dv = (torch.zeros_like(t) for t in (q, k, v))
    dq_rows, dk_rows, dv_rows = _head_rows(head_dim, dq, dk, dv)
    qk_scale = scale * LOG2E
    past_q, past_k = total_q * heads, total_k * kv_heads
    # delta = rowsum(dO * O): the softmax backward's per-row term, read by both passes
    for tile_r in tc.tile(total_q * heads):
        d_o = do_rows[tile_r, :].to(torch.float32)
        delta[tile_r] = torch.sum(d_o * o_rows[tile_r, :].to(torch.float32), -1)
    sizes = (heads, kv_heads, group, head_dim, past_q, past_k)
    # dK, dV: a program per key tile sums over the queries of every head that reads it
    for tile_b, tile_h, tile_n in tc.tile([batch, kv_heads, max_k], block_size=[1, 1, None]):
        key_ins = (cu_k, k_rows, v_rows, cu_q, q_rows, do_rows, (max_rows, log_sum_rows), delta)
        key_outs = (dk, dk_rows, dv, dv_rows)
        _key_program(tile_b, tile_h, tile_n, key_ins, key_outs, sizes, qk_scale, scale, causal)
    # dQ: a program per query tile, over the key tiles it attends to
    for tile_b, tile_h, tile_m in tc.tile([batch, heads, max_q], block_size=[1, 1, None]):
        query_ins = (cu_q, q_rows, do_rows, (max_rows, log_sum_rows), delta, cu_k, k_rows, v_rows)
        query_outs = (dq, dq_rows)
        _query_program(
            tile_b, tile_h, tile_m, query_ins, query_outs, sizes, qk_scale, scale, causal
        )
    return dq, dk, dv


def _setup_context(ctx: Any, inputs: tuple, output: tuple) -> None:
    q, k, v, cu_q, cu_k, *flags = inputs
    ctx.save_for_backward(q, k, v, cu_q, cu_k, *output)
    ctx.flags = flags
    ctx.mark_non_differentiable(output[1])


def _backward(ctx: Any, grad_out: torch.Tensor | None, grad_stats: torch.Tensor | None) -> tuple:
    q, k, v, cu_q, cu_k, out, stats = ctx.saved_tensors
    grad_out = torch.zeros_like(out) if grad_out is None else grad_out.contiguous()
    dq, dk, dv = attention_varlen_backward_op(grad_out, q, k, v, cu_q, cu_k, out, stats, *ctx.flags)
    return dq, dk, dv, None, None, None, None, None, None


# both kernels as PyTorch operators, so torch.compile traces the forward and backward
attention_varlen_backward_op = attention_varlen_backward.as_torch_op(
    "tilecraft_nn::attention_varlen_backward"
)
attention_varlen_op = attention_varlen_forward.as_torch_op(
    "tilecraft_nn::attention_varlen", backward=_backward, setup_context=_setup_context
)


def attention_varlen(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    cu_seqlens_k: torch.Tensor,
    max_seqlen_q: int,
    causal: bool = False,
    scale: float | None = None,
    max_seqlen_k: int | None = None,
) -> torch.Tensor:
    """Attention over a batch of packed sequences of different lengths, differentiable.

    FlashAttention's varlen layout: `q` `(total_q, heads, head_dim)`, `k` and `v`
    `(total_k, kv_heads, head_dim)`, sequence `b` at rows `cu_seqlens_q[b]:cu_seqlens_q[b +
    1]` of `q` and `cu_seqlens_k[b]:cu_seqlens_k[b + 1]` of `k` and `v` (int offsets
    starting at 0). `max_seqlen_q` (and `max_seqlen_k`, for the backward) is at least the
    longest query (key) count; both are rounded up to a power of two here, so nearby lengths
    share a compiled kernel. Without `max_seqlen_k` the backward bounds the key count by
    `total_k` (correct; more programs, which end at once). Each sequence's result, and its
    gradients, are those of `F.scaled_dot_product_attention` on its own queries and keys
    (`is_causal=causal`, `enable_gqa=True`); rows outside every sequence get no gradient.
    """
    _check(q, k, v, cu_seqlens_q, cu_seqlens_k)
    if scale is None:
        scale = 1.0 / math.sqrt(q.size(-1))
    max_k = k.size(0) if max_seqlen_k is None else max_seqlen_k
    bounds = (_pow2_ceil(max_seqlen_q), _pow2_ceil(max_k))
    tensors = (q.contiguous(), k.contiguous(), v.contiguous(), cu_seqlens_q, cu_seqlens_k)
    out, _ = attention_varlen_op(*tensors, *bounds, causal, float(scale))
    return out


def _pow2_ceil(n: int) -> int:
    return 1 << max(int(n) - 1, 0).bit_length()


def _check(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_q: torch.Tensor, cu_k: torch.Tensor
) -> None:
    if q.dim() != 3 or k.dim() != 3 or k.shape != v.shape or q.size(2) != k.size(2):
        raise ValueError(
            "attention_varlen takes q (total_q, heads, d) and k, v (total_k, kv_heads, d)"
        )
    if k.size(1) == 0 or q.size(1) % k.size(1) != 0:
        raise ValueError(f"q's {q.size(1)} heads are not a multiple of k's {k.size(1)} heads")
    if cu_q.shape != cu_k.shape or cu_q.dim() != 1:
        raise ValueError("cu_seqlens_q and cu_seqlens_k must be 1-D offsets of the same length")
    if not (q.dtype == k.dtype == v.dtype):
        raise ValueError(f"q, k, v must share a dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
