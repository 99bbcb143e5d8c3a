"""Attention's tile-level pieces, shared by its kernels (`attention.py`, `varlen.py`).

The rows of heads and their grouped key and value heads, reads of a head's rows in place
in either layout, masks, base-2 scores, the online softmax step, and the backward's
recomputed probabilities and gradients. Each is called from a kernel body: tiles in,
tiles out.
"""

# Kernel bodies index tensors with tiles, which the DSL's stubs do not type for mypy.
# mypy: disable-error-code="index,list-item,misc,arg-type,operator"

from __future__ import annotations

from typing import Any

import torch

LOG2E = 1.4426950408889634
FLOAT32_MAX = torch.finfo(torch.float32).max


def _kv_rows(rows: Any, heads: int, kv_heads: int) -> Any:
    """The (batch * kv_heads) rows of (batch * heads) rows: head h reads kv head h // group."""
    group = heads // kv_heads
    return rows // heads * kv_heads + rows % heads // group


def _q_rows(kv_rows: Any, heads: int, kv_heads: int, g: int) -> Any:
    """The (batch * heads) rows of query head `g` of (batch * kv_heads) rows' groups."""
    group = heads // kv_heads
    return kv_rows // kv_heads * heads + kv_rows % kv_heads * group + g


def _heads_rows(t: torch.Tensor) -> tuple[torch.Tensor, int]:
    """A `(batch, heads, rows, head_dim)` tensor as `_read` takes it: `(batch * heads, rows,
    head_dim)` rows and 0 where that is a view (a contiguous tensor), else the tensor and its
    head count (a head of a `(batch, rows, heads, head_dim)` buffer, as a model's fused q, k,
    v projection makes it: read in place, no copy)."""
    batch, heads, rows, head_dim = t.size()
    if batch == 1 or heads == 1 or t.stride(0) == heads * t.stride(1):
        return t.reshape([batch * heads, rows, head_dim]), 0
    return t, heads


def _read(rows: tuple, row: Any, tile: Any) -> Any:
    """The rows `tile` of (batch * heads) row `row` of `rows` (`_heads_rows`'s pair), as a
    [tile, head_dim] tile: `row` is a one-row tile (a plain block, which the `indexing` knob
    may read through a tensor descriptor) or, always where the pair holds a 4-D tensor, the
    row's index (read through pointers)."""
    t, parts = rows
    if parts == 0:
        x = t[row, tile, :].squeeze(0)
    else:
        x = t[row // parts, row % parts, tile, :].squeeze(0)
    return x


def _own(rows: tuple, tile: Any) -> Any:
    """How `_read` takes the one-row `tile` of `rows`: the tile itself where they are flat,
    else its index."""
    _, parts = rows
    return tile if parts == 0 else tile.index


def _kv_of(pairs: tuple, tile: Any, heads: int, kv_heads: int) -> tuple:
    """How `_read` takes the key and value rows (`pairs`) that query row `tile` reads: its
    own rows, or with grouped heads the computed index of its group's (a gather)."""
    k_pair, v_pair = pairs
    if heads == kv_heads:
        rows = (_own(k_pair, tile), _own(v_pair, tile))
    else:
        kv = _kv_rows(tile.index, heads, kv_heads)
        rows = (kv, kv)
    return rows


def _mask(
    scores: torch.Tensor, queries: torch.Tensor, keys: torch.Tensor, causal: bool, window: int
) -> torch.Tensor:
    """Scores with (causal) keys after their query, or (window) `window` or more before
    it, set to -inf; `queries` and `keys` are the positions, shaped to broadcast against the
    scores' ([queries, keys] or, in the dK, dV pass, [keys, queries]). Keys past the last
    one need no mask: a tile holds no positions past its loop's end (reductions and products
    leave those lanes out), and rows past the queries are never stored."""
    if causal or window > 0:
        keep = keys <= queries if causal else keys >= 0
        if window > 0:
            keep = keep & (keys > queries - window)
        scores = torch.where(keep, scores, float("-inf"))
    return scores


def _scores(
    query: Any, key: Any, bias: Any, qk_scale: float, tile_m: Any, tile_n: Any, *flags: Any
) -> torch.Tensor:
    """Base-2 scores of a query tile against a key tile, the bias (if any) added in base 2
    like them, and masked (`flags`: causal, window as `_mask` takes them)."""
    scores = torch.mm(query, key.T, torch.float32) * qk_scale
    if bias is not None:
        scores = scores + _base2(bias.to(torch.float32))
    return _mask(scores, tile_m.index[:, None], tile_n.index[None, :], *flags)


def _key_scores(
    query: Any, key: Any, bias: Any, qk_scale: float, tile_m: Any, tile_n: Any, *flags: Any
) -> torch.Tensor:
    """`_scores` transposed, [keys, queries], for the dK, dV pass: its products then take
    the probabilities and the scores' gradient as they are; transposed (`p.T @ dO`), a
    computed tile goes through shared memory on the GPU (the whole backward was 1.2x slower
    at its best tiles on an H200, 1.5-2.6x with long key tiles). Each score is the same sum
    of the same products as the forward's (the huge-score tests hold on the GPU)."""
    scores = torch.mm(key, query.T, torch.float32) * qk_scale
    if bias is not None:
        scores = scores + _base2(bias.T.to(torch.float32))
    return _mask(scores, tile_m.index[None, :], tile_n.index[:, None], *flags)


def _base2(bias: torch.Tensor) -> torch.Tensor:
    """A (float32) bias in base 2 like the scores, finite where it is: the usual padding
    mask, `finfo.min`, times log2(e) would overflow to -inf, and a row it masks whole would
    be NaN where SDPA attends uniformly (its scores all round to `finfo.min`)."""
    scaled = torch.clamp(bias * LOG2E, -FLOAT32_MAX, FLOAT32_MAX)
    return torch.where(torch.isinf(bias), bias, scaled)


def _softmax_step(
    m_i: torch.Tensor, l_i: torch.Tensor, acc: torch.Tensor, scores: torch.Tensor, value: Any
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One key tile of the online softmax: the running row maximum, denominator and
    unnormalized output after `scores` (base 2) and their `value` rows."""
    m_ij = torch.maximum(m_i, torch.amax(scores, -1))
    # a row that has seen no key yet (a window's rows past the first key tile) has a
    # maximum of -inf, and exp2(-inf - -inf) would be NaN: shift it by 0 instead
    shift = torch.where(m_ij == float("-inf"), 0.0, m_ij)
    p = torch.exp2(scores - shift[:, None])
    alpha = torch.exp2(m_i - shift)
    acc = torch.addmm(acc * alpha[:, None], p.to(value.dtype), value)
    return m_ij, l_i * alpha + torch.sum(p, -1), acc


def _row_totals(m_i: torch.Tensor, l_i: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The rows' maxima and softmax denominators to save and divide by. A row that saw no
    key (none at all, a window past the last, a bias of -inf over every key) gets 0 and 1:
    its output, and the probabilities its backward recomputes, are then 0, as SDPA's safe
    softmax gives them (0 / 0 was NaN). A NaN row (l_i NaN) stays NaN."""
    unseen = l_i == 0.0
    return torch.where(unseen, 0.0, m_i), torch.where(unseen, 1.0, l_i)


def _attend(state: tuple, reads: tuple, tile_n: Any, qk_scale: float, *flags: Any) -> tuple:
    """The forward's online softmax `state` (row maximum, denominator, output) after one
    more key tile; `reads`: the query tile, the key, value and bias (or None) rows, the key
    and value rows' (`_kv_of`),
    row, the query row and tile; `flags` as `_mask` takes them."""
    query, k_rows, v_rows, bias_rows, kv, tile_bh, tile_m = reads
    key = _read(k_rows, kv[0], tile_n)
    bias_tile = None if bias_rows is None else bias_rows[tile_bh, tile_m, tile_n].squeeze(0)
    scores = _scores(query, key, bias_tile, qk_scale, tile_m, tile_n, *flags)
    m_i, l_i, acc = state
    return _softmax_step(m_i, l_i, acc, scores, _read(v_rows, kv[1], tile_n))


def _probabilities(
    scores: torch.Tensor, row_max: torch.Tensor, row_log_sum: torch.Tensor
) -> torch.Tensor:
    """The softmax recomputed from the forward's row statistics (`_row_stats`): scores less
    their row's maximum first (exact near it), then the log of the denominator. With one
    log-sum-exp, `exp2(scores - lse)`, huge scores (a -1e9 bias) lost the log of the sum to
    rounding: every probability of a row masked whole came out 1. The statistics are shaped
    to broadcast against the scores (a column, or a row where the scores are transposed)."""
    return torch.exp2((scores - row_max) - row_log_sum)


def _row_stats(stats: tuple, rows: Any, tile_m: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """A query tile's row maxima and base-2 logs of their softmax denominators, read from
    the forward's two `(batch * heads, queries)` statistics through the tile's row."""
    row_max, row_log_sum = stats
    return row_max[rows, tile_m].squeeze(0), row_log_sum[rows, tile_m].squeeze(0)


def _score_grads(
    d_o: Any,
    value: Any,
    scores: torch.Tensor,
    row_max: torch.Tensor,
    row_log_sum: torch.Tensor,
    row_delta: torch.Tensor,
) -> torch.Tensor:
    """The gradient of the (scaled) scores of a query tile against a key tile, from the
    probabilities recomputed with the rows' statistics and `delta = rowsum(dO * O)`."""
    p = _probabilities(scores, row_max[:, None], row_log_sum[:, None])
    dp = torch.mm(d_o, value.T, torch.float32)
    return p * (dp - row_delta[:, None])


def _key_grads(
    dk_acc: torch.Tensor,
    dv_acc: torch.Tensor,
    query: Any,
    d_o: Any,
    value: Any,
    scores: torch.Tensor,
    row_max: torch.Tensor,
    row_log_sum: torch.Tensor,
    row_delta: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """A key tile's dK and dV sums after one more query tile (dK not yet scaled), from
    the scores transposed ([keys, queries], `_key_scores`)."""
    p = _probabilities(scores, row_max[None, :], row_log_sum[None, :])
    dv_acc = torch.addmm(dv_acc, p.to(d_o.dtype), d_o)
    ds = p * (torch.mm(value, d_o.T, torch.float32) - row_delta[None, :])
    return torch.addmm(dk_acc, ds.to(query.dtype), query), dv_acc


def _add_key_grads(
    dk_acc: torch.Tensor,
    dv_acc: torch.Tensor,
    key: Any,
    value: Any,
    reads: tuple,
    rows: Any,
    tile_m: Any,
    tile_n: Any,
    qk_scale: float,
    *flags: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """A key tile's dK and dV sums after the query tile `tile_m` of one (batch * heads)
    row, which `rows` gives as `_read` takes it for the query and the output-gradient (the
    first also indexes the flat bias, row statistics and delta); `reads` holds the query,
    output-gradient, bias (None without one), row statistics (a pair) and delta rows,
    `flags` what `_mask` takes."""
    q_rows, do_rows, bias_rows, stats, delta = reads
    row = rows[0]
    query, d_o = _read(q_rows, row, tile_m), _read(do_rows, rows[1], tile_m)
    bias_tile = None if bias_rows is None else bias_rows[row, tile_m, tile_n].squeeze(0)
    scores = _key_scores(query, key, bias_tile, qk_scale, tile_m, tile_n, *flags)
    row_max, row_log_sum = _row_stats(stats, row, tile_m)
    terms = (row_max, row_log_sum, delta[row, tile_m].squeeze(0))
    return _key_grads(dk_acc, dv_acc, query, d_o, value, scores, *terms)


def _add_query_grad(
    dq_acc: torch.Tensor,
    query: Any,
    d_o: Any,
    terms: tuple,
    reads: tuple,
    q_row: Any,
    kv: Any,
    tile_m: Any,
    tile_n: Any,
    qk_scale: float,
    *flags: Any,
) -> torch.Tensor:
    """A query tile's dQ sum after the key tile `tile_n`, storing the scores' gradient as
    the bias's (this program owns its rows); `terms` are the rows' statistics and delta,
    `reads` the key, bias (None without one), value and bias-gradient rows, `q_row` the
    query's (batch * heads) row, `kv` the key's and value's as `_kv_of` gives them, `flags`
    what `_mask` takes."""
    k_rows, bias_rows, v_rows, grad_bias = reads
    key = _read(k_rows, kv[0], tile_n)
    bias_tile = None if bias_rows is None else bias_rows[q_row, tile_m, tile_n].squeeze(0)
    scores = _scores(query, key, bias_tile, qk_scale, tile_m, tile_n, *flags)
    ds = _score_grads(d_o, _read(v_rows, kv[1], tile_n), scores, *terms)
    if bias_rows is not None:
        grad_bias[q_row, tile_m, tile_n] = ds[None, :, :]
    return torch.addmm(dq_acc, ds.to(key.dtype), key)
