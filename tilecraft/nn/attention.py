# Kernel bodies index tensors with tiles, which the DSL's stubs do not type for mypy
# (`tc.tile` over a list yields tuples, block sizes may be None, tiles index tensors).
# mypy: disable-error-code="index,list-item,misc,arg-type,operator"
"""Flash attention: forward with an online softmax, backward in two passes, one operator.

Shapes follow `torch.nn.functional.scaled_dot_product_attention`: `q` is
`(batch, heads, queries, head_dim)`, `k` and `v` are `(batch, kv_heads, keys, head_dim)`
with `heads` a multiple of `kv_heads` (grouped-query attention; one kv head is multi-query):
query head `h` reads kv head `h // (heads // kv_heads)`. `causal=True` masks key `j` from
query `i` when `j > i` (top-left aligned, as SDPA's `is_causal`); a sliding `window` (with
`causal`) also masks the keys `j <= i - window`, so each query sees itself and the
`window - 1` keys before it.

The forward walks over key/value tiles keeping the running row maximum and denominator
(base-2 exponentials with the softmax scale and log2(e) folded into one factor), and saves
each row's maximum and the log of its denominator (base 2, apart) for the backward. Causal
programs stop at their last query: the key loop's end comes from the query tile, so tiles
above the diagonal are never read;
and only the tiles on the diagonal pay for the causal mask (a first loop, unmasked, covers
the keys before the query tile; the backward passes split their loops the same way). That
first loop's bounds (0 and the query tile's start) are multiples of the key tile when it
divides the query tile (and there are no more queries than keys), which the compiler proves
(frontend/facts.py): its tiles then have no bounds mask either, and may read through tensor
descriptors. With a sliding window the keys before the query tile (forward and dQ) split
once more: the window's lower edge (masked) and the keys every query of the tile sees
(unmasked); dK and dV's queries past the key tile likewise.
The backward computes dQ (one program per query tile, looping over key tiles), each program
also storing its rows' `delta = rowsum(dO * O)`, then dK and dV (one program per key tile,
looping over the query heads of its kv head and their query tiles), with no atomics.

q, k, v (and the backward's dO and O) are read in place in any layout: a head of a `(batch,
seq, heads, head_dim)` buffer, as a model's fused projection leaves it, needs no copy (its
rows go through pointers; contiguous heads are read as blocks). The output is laid out as
`(batch, seq, heads, head_dim)` and returned as its `(batch, heads, seq, head_dim)` view, as
SDPA's flash backend does, so that a model's transpose back to its sequence is a view.

What the tuner may choose (each kernel's ConfigSpace): the query and key tile sizes, warps,
stages (per kernel and per key loop), tensor-descriptor (TMA) reads through `indexing`
(taken where a read is a plain block of the tensor: not for grouped heads' gathered kv rows
nor the keys of a loop whose bounds are not proven multiples of its tile), and persistent
programs through `pid_type`. Variable-length batches are in `tilecraft.nn.varlen`.
On an sm_90 GPU, `attention()` runs the forward and backward of the calls it covers as the
warp-specialized Gluon kernels of `attention_gluon.py` and `attention_gluon_bwd.py` (see
`attention_sm90.py`).
"""

from __future__ import annotations

import math
from typing import Any

import torch

import tilecraft as tc
from tilecraft.nn import attention_sm90
from tilecraft.nn.attention_tiles import (
    LOG2E,
    _add_key_grads,
    _add_query_grad,
    _attend,
    _heads_rows,
    _kv_of,
    _own,
    _q_rows,
    _read,
    _row_stats,
    _row_totals,
)


def _forward_tiles(device: str, queries: int, head_dim: int, loops: int) -> tc.Config | None:
    """The forward's measured default on an H200 (benchmarks/RESULTS.md): at head dim 128
    and 1024 queries or more, 256-query tiles with 8 warps, the fastest of the sweeps (or
    within 0.1%) causal or not, 1.12-1.19x the heuristic config (third session of
    2026-12-03); at head dim 64 the heuristic tiles. Without a mask (and at head dim 64
    with one) the programs of one head run in groups of 4 query tiles (`l2_groupings`),
    which share its keys and values in L2: 1.03-1.14x, where in launch order the heads
    side by side evicted each other's (sixth session). `loops`: the kernel's key loops (a
    causal one splits, each with its own key tile)."""
    if device != "cuda" or queries < 1024 or head_dim not in (64, 128):
        return None
    grouped = tc.Config(l2_groupings=[4])
    if head_dim == 64:
        return grouped
    tiles = tc.Config(block_sizes=[256] + [64] * loops, num_warps=8, num_stages=3)
    return tiles.merged(grouped) if loops == 1 else tiles


def _key_loops(causal: bool, window: int) -> int:
    """How many loops a program's keys (or dK/dV's queries) take: one, or causal, split at
    the diagonal (and at a sliding window's edge), each with its own block size."""
    return 2 + (window > 0) if causal else 1


def _forward_default(args: tuple) -> tc.Config | None:
    q, causal, window = args[0], args[4], args[6]
    return _forward_tiles(q.device.type, q.size(2), q.size(3), _key_loops(causal, window))


def _backward_default(args: tuple) -> tc.Config | None:
    """The backward's measured default on a GPU (an H200, benchmarks/RESULTS.md, fourth
    session of 2026-12-03), 4 warps and tensor-descriptor reads: at head dim 128 every tile
    64 long and 2 stages (the fastest config of every sweep); at head dim 64 dK/dV's key
    tiles 128 long over query tiles of 32, dQ's 64, and 3 stages (1.05-1.2x the all-64
    config there). Longer tiles (128 x 64 or more) ran 1.3-5x slower. Both launches run a
    head's programs in groups of 4 (`l2_groupings`, as the forward's): 1.05-1.14x at head
    dim 64 and 4096 keys, level at 16384 (sixth session). Elsewhere (short sequences, head
    dims over 128) the heuristic config."""
    q, k, causal, window = args[1], args[2], args[7], args[9]
    if q.device.type != "cuda" or q.size(2) < 1024 or q.size(3) > 128:  # as measured
        return None
    loops = _key_loops(causal, window)
    group = q.size(1) // max(k.size(1), 1)  # dK/dV loop over the queries of each head
    narrow = q.size(3) <= 64
    key_tiles = [128] + [32] * (loops * group) if narrow else [64] * (1 + loops * group)
    return tc.Config(
        block_sizes=[64] * (1 + loops) + key_tiles,
        num_warps=4,
        num_stages=3 if narrow else 2,
        indexing="tensor_descriptor",
        l2_groupings=[4, 4],  # the dQ and the dK/dV launches
    )


# Each program holds one (batch * heads) row: its tiles are read as [1, rows, cols] through
# the row's tile (a plain block index, so the `indexing` knob may turn the reads into tensor
# descriptors, TMA on Hopper) and squeezed to 2-D, since Triton lowers only 2-D `tl.dot`s to
# Hopper's wgmma (a 3-D one, even with a batch of 1, falls back to the older mma). Grouped
# heads read their kv row through a computed index (a gather, always pointers).
# Without FMA contraction (`fp_fusion=False`): fused, `exp2(scores * scale - max)` left the
# product's rounding error at the row's maximum, so huge scores (a row masked by a -1e9 bias,
# a key of 1e30) gave NaN or wrongly weighted rows on the GPU. The multiply is needed for the
# maximum anyway, so the count of instructions stays the same. The backward (and the varlen
# kernels) are compiled so too: their scores must round as the forward's did, or a row's
# recomputed maximum misses the stored one by an ulp, which at such magnitudes is huge.
@tc.kernel(fp_fusion=False, default_config=_forward_default)
def attention_forward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    bias: torch.Tensor,
    causal: bool,
    scale: float,
    window: int,
    has_bias: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention's output and each row's softmax statistics `(2, batch, heads, queries)`:
    the maximum of its scaled base-2 scores, and the base-2 log of its denominator.

    `bias` `(batch, heads, queries, keys)` is added to the scaled scores when `has_bias`
    (else it is not read and may be empty).
    """
    batch, heads, m, _ = q.size()
    kv_heads, n = k.size(1), k.size(2)
    head_dim = tc.specialize(q.size(3))
    q_rows, q_parts = _heads_rows(q)
    k_rows, k_parts = _heads_rows(k)
    v_rows, v_parts = _heads_rows(v)
    bias_rows = bias.reshape([batch * heads, m, n]) if has_bias else bias
    # the output's heads side by side (SDPA's flash output is laid out so too): a model's
    # `out.transpose(1, 2).reshape(batch, m, heads * head_dim)` is then a view
    out = torch.empty([batch, m, heads, head_dim], dtype=q.dtype, device=q.device)
    out_heads = out.transpose(1, 2)
    stats = torch.empty([2, batch * heads, m], dtype=torch.float32, device=q.device)
    row_max, row_log_sum = stats.select(0, 0), stats.select(0, 1)
    masking = (causal, window)  # what `_mask` needs beyond the tiles
    qk_scale = scale * LOG2E  # exp2(x * log2(e)) == exp(x): one multiply per score
    for tile_bh, tile_m in tc.tile([batch * heads, m], block_size=[1, None]):
        m_i = tc.full([tile_m], float("-inf"), dtype=torch.float32)
        l_i = tc.zeros([tile_m], dtype=torch.float32)
        acc = tc.zeros([tile_m, head_dim], dtype=torch.float32)
        q_pair, k_pair, v_pair = (q_rows, q_parts), (k_rows, k_parts), (v_rows, v_parts)
        query = _read(q_pair, _own(q_pair, tile_bh), tile_m)
        kv = _kv_of((k_pair, v_pair), tile_bh, heads, kv_heads)
        state = (m_i, l_i, acc)
        reads = (query, k_pair, v_pair, bias_rows if has_bias else None, kv, tile_bh, tile_m)
        end = min(tile_m.end, n) if causal else n
        start = 0
        if causal:
            diagonal = min(tile_m.begin, n)  # the keys before the tile's first query
            full = 0  # from here on, every query of the tile sees the keys up to `diagonal`
            if window > 0:  # a window's keys: seen by all from `window - 1` before its last
                full = min(max(tile_m.begin + tile_m.block_size - window, 0), diagonal)
                # the window's lower edge, past the keys every query has left behind: masked
                for tile_n in tc.tile(max(tile_m.begin - window + 1, 0), full):
                    state = _attend(state, reads, tile_n, qk_scale, *masking)
            for tile_n in tc.tile(full, diagonal):  # no mask
                state = _attend(state, reads, tile_n, qk_scale, False, 0)
            start = diagonal  # the masked loop covers the diagonal only
        for tile_n in tc.tile(start, end):
            state = _attend(state, reads, tile_n, qk_scale, *masking)
        m_i, l_i = _row_totals(state[0], state[1])
        acc = state[2]
        # stored as 2-D tiles at the row's scalar indices: Triton's warp specialization on
        # Hopper (`range_warp_specializes`) splits a 128-row tile between two consumer
        # warpgroups along its first dim, and failed on a [1, rows, head_dim] one
        row = tile_bh.begin
        out_heads[row // heads, row % heads, tile_m, :] = (acc / l_i[:, None]).to(out.dtype)
        row_max[row, tile_m] = m_i
        row_log_sum[row, tile_m] = torch.log2(l_i)
    return out_heads, stats.view([2, batch, heads, m])


def _key_program(
    tile_kv: Any,
    tile_n: Any,
    ins: tuple,
    outs: tuple,
    sizes: tuple[int, int, int, int],
    qk_scale: float,
    scale: float,
    *flags: Any,
) -> None:
    """One program of the dK, dV pass: key tile `tile_n` of the (batch * kv_heads) row
    `tile_kv`, summed over the queries of every head that reads it, stored into `outs`
    (dK, dV). `ins` holds the key, value, query, output-gradient, bias (None without one),
    row statistics (a pair) and delta rows, `sizes` (heads, kv_heads, queries, head_dim),
    `flags` what `_mask` takes."""
    k_rows, v_rows, q_rows, do_rows, bias_rows, stats, delta = ins
    heads, kv_heads, m, head_dim = sizes
    causal, window = flags
    key = _read(k_rows, _own(k_rows, tile_kv), tile_n)
    value = _read(v_rows, _own(v_rows, tile_kv), tile_n)
    dk_acc = tc.zeros([tile_n, head_dim], dtype=torch.float32)
    dv_acc = tc.zeros([tile_n, head_dim], dtype=torch.float32)
    start = tile_n.begin if causal else 0  # causal: queries before the tile see none of it
    # a sliding window: queries `window - 1` past the tile's last key see none of it
    stop = min(tile_n.end + window - 1, m) if window > 0 else m
    # causal: a query tile past the key tile sees all of it (up to the window's edge, before
    # the queries `window` past the tile's first key), so only the query tiles on the
    # diagonal (and on the window's edge) loop with the mask
    diagonal_end = min(tile_n.end, m) if causal else stop
    full_end = min(max(tile_n.begin + window, diagonal_end), m) if window > 0 else m
    reads = (q_rows, do_rows, bias_rows, stats, delta)
    for g in range(heads // kv_heads):
        if heads == kv_heads:
            rows = (_own(q_rows, tile_kv), _own(do_rows, tile_kv))
        else:  # query head g of the kv head's group, gathered
            q_row = _q_rows(tile_kv.index, heads, kv_heads, g)
            rows = (q_row, q_row)
        for tile_m in tc.tile(start, diagonal_end):
            dk_acc, dv_acc = _add_key_grads(
                dk_acc, dv_acc, key, value, reads, rows, tile_m, tile_n, qk_scale, *flags
            )
        if causal:  # the queries past the key tile (within the window), unmasked
            for tile_m in tc.tile(diagonal_end, full_end):
                dk_acc, dv_acc = _add_key_grads(
                    dk_acc, dv_acc, key, value, reads, rows, tile_m, tile_n, qk_scale, False, 0
                )
            if window > 0:  # the window's edge: masked
                for tile_m in tc.tile(full_end, stop):
                    dk_acc, dv_acc = _add_key_grads(
                        dk_acc, dv_acc, key, value, reads, rows, tile_m, tile_n, qk_scale, *flags
                    )
    dk, dv = outs
    dk[tile_kv, tile_n, :] = (dk_acc * scale).to(dk.dtype)[None, :, :]
    dv[tile_kv, tile_n, :] = dv_acc.to(dv.dtype)[None, :, :]


def _query_program(
    tile_bh: Any,
    tile_m: Any,
    ins: tuple,
    outs: tuple,
    sizes: tuple[int, int, int, int],
    qk_scale: float,
    scale: float,
    *flags: Any,
) -> None:
    """One program of the dQ pass: query tile `tile_m` of the (batch * heads) row `tile_bh`,
    over the key tiles it attends to, stored into `outs` (delta, dBias, None without a bias,
    and dQ). `ins` holds the query, output-gradient, output, row statistics, key, bias (None
    without one) and value rows, `sizes` as `_key_program` takes them (with the keys for the
    queries), `flags` what `_mask` takes. The tile's `delta = rowsum(dO * O)`, the softmax
    backward's per-row term, is computed here and stored for the dK, dV pass."""
    q_rows, do_rows, o_rows, stats, k_rows, bias_rows, v_rows = ins
    delta, grad_bias, dq = outs
    heads, kv_heads, n, head_dim = sizes
    causal, window = flags
    kv = _kv_of((k_rows, v_rows), tile_bh, heads, kv_heads)
    query = _read(q_rows, _own(q_rows, tile_bh), tile_m)
    d_o = _read(do_rows, _own(do_rows, tile_bh), tile_m)
    o = _read(o_rows, _own(o_rows, tile_bh), tile_m)
    row_delta = torch.sum(d_o.to(torch.float32) * o.to(torch.float32), -1)
    delta[tile_bh, tile_m] = row_delta[None, :]
    row_max, row_log_sum = _row_stats(stats, tile_bh, tile_m)
    terms = (row_max, row_log_sum, row_delta)
    reads = (k_rows, bias_rows, v_rows, grad_bias)
    dq_acc = tc.zeros([tile_m, head_dim], dtype=torch.float32)
    end = min(tile_m.end, n) if causal else n
    start = 0
    if causal:  # the forward's split: the window's edge, the keys all queries see, then
        diagonal = min(tile_m.begin, n)  # the diagonal
        full = 0
        if window > 0:
            full = min(max(tile_m.begin + tile_m.block_size - window, 0), diagonal)
            for tile_n in tc.tile(max(tile_m.begin - window + 1, 0), full):
                dq_acc = _add_query_grad(
                    dq_acc, query, d_o, terms, reads, tile_bh, kv, tile_m, tile_n, qk_scale, *flags
                )
        for tile_n in tc.tile(full, diagonal):  # no mask
            dq_acc = _add_query_grad(
                dq_acc, query, d_o, terms, reads, tile_bh, kv, tile_m, tile_n, qk_scale, False, 0
            )
        start = diagonal  # the masked loop covers the diagonal only
    for tile_n in tc.tile(start, end):
        dq_acc = _add_query_grad(
            dq_acc, query, d_o, terms, reads, tile_bh, kv, tile_m, tile_n, qk_scale, *flags
        )
    dq[tile_bh, tile_m, :] = (dq_acc * scale).to(dq.dtype)[None, :, :]


@tc.kernel(fp_fusion=False, default_config=_backward_default)
def attention_backward(
    grad_out: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    bias: torch.Tensor,
    out: torch.Tensor,
    stats: torch.Tensor,
    causal: bool,
    scale: float,
    window: int,
    has_bias: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """dQ, dK, dV and dBias of attention from the output gradient, the forward's output
    and its row statistics (`attention_forward`'s second result); dBias (the scores'
    gradient, float32) is empty without a bias."""
    batch, heads, m, _ = q.size()
    kv_heads, n = k.size(1), k.size(2)
    head_dim = tc.specialize(q.size(3))
    q_rows, q_parts = _heads_rows(q)
    k_rows, k_parts = _heads_rows(k)
    v_rows, v_parts = _heads_rows(v)
    do_rows, do_parts = _heads_rows(grad_out)
    o_rows, o_parts = _heads_rows(out)
    stat_rows = stats.reshape([2, batch * heads, m])
    max_rows, log_sum_rows = stat_rows.select(0, 0), stat_rows.select(0, 1)
    bias_rows = bias.reshape([batch * heads, m, n]) if has_bias else None
    if has_bias:  # the dQ pass stores the tiles it visits: the causal mask's others are 0
        grad_bias = torch.zeros([batch * heads, m, n], dtype=torch.float32, device=q.device)
    else:
        grad_bias = torch.empty([0], dtype=torch.float32, device=q.device)
    delta = torch.empty([batch * heads, m], dtype=torch.float32, device=q.device)
    dq = torch.empty([batch * heads, m, head_dim], dtype=q.dtype, device=q.device)
    dk = torch.empty([batch * kv_heads, n, head_dim], dtype=k.dtype, device=k.device)
    dv = torch.empty([batch * kv_heads, n, head_dim], dtype=v.dtype, device=v.device)
    qk_scale = scale * LOG2E
    # dQ (and each row's delta): a program per query tile, over the key tiles it attends to
    for tile_bh, tile_m in tc.tile([batch * heads, m], block_size=[1, None]):
        q_pair, do_pair, o_pair = (q_rows, q_parts), (do_rows, do_parts), (o_rows, o_parts)
        k_pair, v_pair = (k_rows, k_parts), (v_rows, v_parts)
        query_ins = (q_pair, do_pair, o_pair, (max_rows, log_sum_rows), k_pair, bias_rows, v_pair)
        outs = (delta, grad_bias if has_bias else None, dq)
        sizes = (heads, kv_heads, n, head_dim)
        _query_program(tile_bh, tile_m, query_ins, outs, sizes, qk_scale, scale, causal, window)
    # dK, dV: a program per key tile sums over the queries of every head that reads it
    for tile_kv, tile_n in tc.tile([batch * kv_heads, n], block_size=[1, None]):
        k_pair, v_pair = (k_rows, k_parts), (v_rows, v_parts)
        q_pair, do_pair = (q_rows, q_parts), (do_rows, do_parts)
        key_ins = (k_pair, v_pair, q_pair, do_pair, bias_rows, (max_rows, log_sum_rows), delta)
        sizes = (heads, kv_heads, m, head_dim)
        _key_program(tile_kv, tile_n, key_ins, (dk, dv), sizes, qk_scale, scale, causal, window)
    grad_bias = grad_bias.view(bias.size()) if has_bias else grad_bias
    return dq.view(q.size()), dk.view(k.size()), dv.view(v.size()), grad_bias


def _setup_context(ctx: object, inputs: tuple, output: tuple) -> None:
    q, k, v, bias, causal, scale, window, has_bias = inputs
    out, stats = output
    ctx.save_for_backward(q, k, v, bias, out, stats)  # type: ignore[attr-defined]
    ctx.flags = (causal, scale, window, has_bias)  # type: ignore[attr-defined]
    ctx.mark_non_differentiable(stats)  # type: ignore[attr-defined]


def _backward(ctx: object, grad_out: torch.Tensor, grad_stats: torch.Tensor | None) -> tuple:
    q, k, v, bias, out, stats = ctx.saved_tensors  # type: ignore[attr-defined]
    grad_out = torch.zeros_like(out) if grad_out is None else grad_out
    flags = ctx.flags  # type: ignore[attr-defined]
    sm90 = attention_sm90.BACKWARD and attention_sm90.wanted(q, k, *flags[1:])
    op = attention_backward_sm90_op if sm90 else attention_backward_op
    dq, dk, dv, d_bias = op(grad_out, q, k, v, bias, out, stats, *flags)
    d_bias = d_bias.to(bias.dtype) if flags[3] else None
    return dq, dk, dv, d_bias, None, None, None, None


# both kernels as PyTorch operators, so torch.compile traces the forward and backward
attention_backward_op = attention_backward.as_torch_op("tilecraft_nn::attention_backward")
attention_op = attention_forward.as_torch_op(
    "tilecraft_nn::attention", backward=_backward, setup_context=_setup_context
)
attention_sm90_op = attention_sm90.define_op(attention_forward, _backward, _setup_context)
attention_backward_sm90_op = attention_sm90.define_backward_op(attention_backward_op)


def attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    causal: bool = False,
    scale: float | None = None,
    window: int | None = None,
    bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """Scaled dot-product attention, differentiable: `F.scaled_dot_product_attention(q, k,
    v, is_causal=causal, scale=scale, enable_gqa=True)` computed by tilecraft kernels.

    `q` is `(batch, heads, queries, head_dim)`, `k` and `v` `(batch, kv_heads, keys,
    head_dim)` with `heads` a multiple of `kv_heads`; `scale` defaults to
    `1 / sqrt(head_dim)`. Float16, bfloat16 or float32; the scores, softmax and
    accumulators are float32. `window` (with `causal=True`) is a sliding window: query `i`
    attends to keys `i - window + 1 .. i` (Mistral's local attention); key tiles outside
    every query's window are skipped. `bias` (float, broadcastable to `(batch, heads,
    queries, keys)`, SDPA's float `attn_mask`) is added to the scaled scores and gets a
    gradient; it is expanded to its full size in memory.
    """
    _check(q, k, v)
    if window is not None and (not causal or window < 1):
        raise ValueError(f"a sliding window needs causal=True and window >= 1, got {window}")
    if scale is None:
        scale = 1.0 / math.sqrt(q.size(-1))
    has_bias = bias is not None
    if bias is None:
        bias = q.new_empty(0)
    elif not bias.is_floating_point():
        raise ValueError(f"bias must be a float tensor added to the scores, not {bias.dtype}")
    else:  # expanded through autograd, so the bias's gradient is summed back to its shape
        bias = bias.expand(q.size(0), q.size(1), q.size(2), k.size(2)).contiguous()
    # q, k, v are read in place, in any layout (a head of a fused projection's output, say)
    args = (q, k, v, bias, causal, float(scale), window or 0, has_bias)
    sm90 = attention_sm90.wanted(q, k, args[5], args[6], has_bias)
    out, _ = (attention_sm90_op if sm90 else attention_op)(*args)
    return out


def _check(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError("attention takes 4-D q, k, v: (batch, heads, sequence, head_dim)")
    if k.shape != v.shape:
        raise ValueError(
            f"k and v must have the same shape, got {tuple(k.shape)} and {tuple(v.shape)}"
        )
    if q.size(0) != k.size(0) or q.size(3) != k.size(3):
        raise ValueError(f"q {tuple(q.shape)} and k {tuple(k.shape)} differ in batch or head_dim")
    if k.size(1) == 0 or q.size(1) % k.size(1) != 0:
        raise ValueError(f"q's {q.size(1)} heads are not a multiple of k's {k.size(1)} heads")
    if not (q.dtype == k.dtype == v.dtype):
        raise ValueError(f"q, k, v must share a dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
