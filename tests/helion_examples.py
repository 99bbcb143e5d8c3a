"""Helion's example kernels (examples/ in its repository), each written anew on the same
surface and ported by the imports alone: `import tilecraft as helion` and
`import tilecraft.language as hl`. Cases of tests/helion_dialect.py, run in both CPU modes
by tests/test_helion_dialect.py; what a port needed is in each docstring.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

import tilecraft as helion
import tilecraft.language as hl


@helion.kernel()
def welford_layer_norm(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float = 1e-5
) -> torch.Tensor:
    """Layer norm whose row statistics merge chunk by chunk (Welford/Chan), a chunk's
    count taken from its in-range lanes (Helion's welford shape)."""
    m, n = x.size()
    out = torch.empty_like(x)
    for tile_m in hl.tile(m):
        count = torch.zeros_like(x[tile_m, 0], dtype=torch.float32)
        mean = torch.zeros_like(count)
        m2 = torch.zeros_like(count)
        for tile_n in hl.tile(n):
            block = x[tile_m, tile_n].to(torch.float32)
            valid = (tile_n.index < n).to(torch.int32).sum()
            block_sum = torch.sum(block, dim=-1)
            block_mean = block_sum / valid
            block_m2 = torch.sum(block * block, dim=-1) - block_sum * block_mean
            delta = block_mean - mean
            total = count + valid
            count, mean, m2 = (
                total,
                mean + delta * (valid / total),
                m2 + block_m2 + delta * delta * (count * valid / total),
            )
        rstd = torch.rsqrt(m2 / count + eps)
        for tile_n in hl.tile(n):
            centered = x[tile_m, tile_n].to(torch.float32) - mean[:, None]
            scaled = centered * rstd[:, None] * weight[tile_n][None, :] + bias[tile_n][None, :]
            out[tile_m, tile_n] = scaled.to(x.dtype)
    return out


@helion.kernel()
def gather_gemv(w: torch.Tensor, idx: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """`w[idx] @ x` with negative indices wrapped on the host, the matrices gathered by a
    tile of indices on the device."""
    batch, rows, cols = w.size()
    picks = idx.size(0)
    out = torch.empty([picks, rows], dtype=x.dtype, device=w.device)
    wrapped = torch.where(idx < 0, idx + batch, idx)
    for tile_i, tile_r in hl.tile([picks, rows]):
        acc = hl.zeros([tile_i, tile_r], dtype=torch.float32)
        for tile_c in hl.tile(cols):
            block = w[wrapped[tile_i], tile_r, tile_c].to(torch.float32)
            acc = acc + (block * x[tile_c].to(torch.float32)).sum(dim=-1)
        out[tile_i, tile_r] = acc.to(x.dtype)
    return out


def _same_segment_sum(
    left: torch.Tensor, left_seg: torch.Tensor, right: torch.Tensor, right_seg: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.where(left_seg == right_seg, left + right, right), right_seg


@helion.kernel()
def segment_sum(indices: torch.Tensor, values: torch.Tensor, segments: int) -> torch.Tensor:
    """Rows summed per (sorted) segment id: a segmented scan per tile, each segment's last
    row in the tile added atomically (Helion's segment_reduction shape)."""
    count, features = values.shape
    out = torch.zeros([segments, features], dtype=values.dtype, device=values.device)
    for tile_e, tile_f in hl.tile([count, features]):
        vals = values[tile_e, tile_f]
        seg = indices[tile_e]
        seg_next = hl.load(indices, [tile_e.index + 1], extra_mask=tile_e.index < count - 1)
        running, _ = hl.associative_scan(
            _same_segment_sum, (vals, seg.unsqueeze(1).expand_as(vals)), dim=0
        )
        last = (
            (seg != seg_next)
            | (tile_e.index % tile_e.block_size == tile_e.block_size - 1)
            | (tile_e.index == count - 1)
        )
        hl.atomic_add(out, [seg, tile_f], torch.where(last.unsqueeze(1), running, 0.0))
    return out


@helion.kernel()
def split_k_matmul_relu(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """`relu(a @ b + bias)` with k split over programs that add their partial products
    atomically; each output element counts the chunks added into it, and the program whose
    `hl.atomic_add` on the count returns the last ticket writes the epilogue there (Helion's
    split-K shape, with a counter instead of a second kernel)."""
    m, k = a.size()
    _, n = b.size()
    out = torch.zeros([m, n], dtype=torch.float32, device=a.device)
    arrived = torch.zeros([m, n], dtype=torch.int32, device=a.device)
    chunks = (k + 15) // 16
    for tile_m, tile_n, outer_k in hl.tile([m, n, k], block_size=[None, None, 16]):
        acc = hl.zeros([tile_m, tile_n], dtype=torch.float32)
        for inner_k in hl.tile(outer_k.begin, outer_k.end):
            acc = torch.addmm(acc, a[tile_m, inner_k], b[inner_k, tile_n])
        hl.atomic_add(out, [tile_m, tile_n], acc)
        last = hl.atomic_add(arrived, [tile_m, tile_n], 1) == chunks - 1
        total = hl.load(out, [tile_m, tile_n])
        hl.store(out, [tile_m, tile_n], torch.relu(total + bias[tile_n]), extra_mask=last)
    return out


@helion.kernel(static_shapes=False)
def grouped_gemm(a_packed: torch.Tensor, b: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    """Groups of rows (bounds read on the device) each times `b`, one program per group,
    empty groups skipped."""
    total, k = a_packed.shape
    _, n = b.shape
    dtype = torch.promote_types(a_packed.dtype, b.dtype)
    out = torch.empty(total, n, dtype=dtype, device=a_packed.device)
    for g in hl.grid(offsets.size(0) - 1):
        start = offsets[g]
        rows = offsets[g + 1] - start
        if rows != 0:
            for tile_m, tile_n in hl.tile([rows, n]):
                acc = hl.zeros([tile_m, tile_n], dtype=torch.float32)
                for tile_k in hl.tile(k):
                    acc = torch.addmm(
                        acc, a_packed[start + tile_m.index, tile_k], b[tile_k, tile_n]
                    )
                out[start + tile_m.index, tile_n] = acc.to(out.dtype)
    return out


@helion.kernel(static_shapes=False)
def int4_matmul(a: torch.Tensor, b_packed: torch.Tensor) -> torch.Tensor:
    """`a @ b` with `b` two signed 4-bit values a byte: a slice of `a` twice the packed
    tile's length from a position computed on the device, the nibbles unpacked and
    interleaved by a reshape through `tile.block_size` (Helion's int4_gemm shape)."""
    m, k = a.shape
    _, n = b_packed.shape
    out = torch.zeros(m, n, dtype=a.dtype, device=a.device)
    block_kp = hl.register_block_size(k // 2)
    for tile_m, tile_n in hl.tile([m, n]):
        acc = hl.zeros([tile_m, tile_n], dtype=torch.float32)
        for tile_kp in hl.tile(k // 2, block_size=block_kp):
            first = tile_kp.begin * 2
            a_block = a[tile_m, first : first + block_kp * 2]
            packed = b_packed[tile_kp, tile_n]
            low = (packed & 0xF).to(torch.int32)
            low = torch.where(low >= 8, low - 16, low)
            high = (packed >> 4).to(torch.int32)
            pairs = torch.stack([low.to(a.dtype), high.to(a.dtype)], dim=1)
            unpacked = pairs.reshape(tile_kp.block_size * 2, tile_n.block_size)
            acc = hl.dot(a_block, unpacked, acc=acc)
        out[tile_m, tile_n] = acc.to(a.dtype)
    return out


@helion.kernel()
def geglu(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """GELU (tanh approximation, written out) of `gate` times `up`."""
    out = torch.empty_like(gate)
    for tile in hl.tile(gate.shape):
        g = gate[tile].to(torch.float32)
        inner = math.sqrt(2.0 / math.pi) * (g + 0.044715 * g * g * g)
        out[tile] = (0.5 * g * (1.0 + torch.tanh(inner))).to(gate.dtype) * up[tile]
    return out


@helion.kernel()
def jsd(
    log_q: torch.Tensor,
    log_p: torch.Tensor,
    labels: torch.Tensor | None = None,
    beta: float = 0.5,
    ignore_index: int = -100,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalized Jensen-Shannon divergence and its gradient in `log_q`, row by row:
    ignored rows skipped with `continue`, host branches on `beta` (Helion's jsd shape;
    every row counts in the mean here: Helion's count of kept rows is a host `.item()`)."""
    rows, vocab = log_q.shape
    loss = torch.zeros(log_q.shape, dtype=torch.float32, device=log_q.device)
    grad = torch.empty_like(log_q)
    for tile_r in hl.tile(rows, block_size=helion.cdiv(rows, rows)):
        if labels is not None:  # noqa: SIM102 (a host test, then one on the device)
            if labels[tile_r] == ignore_index:
                for tile_v in hl.tile(vocab):
                    grad[tile_r, tile_v] = 0.0
                continue
        for tile_v in hl.tile(vocab):
            xq = log_q[tile_r, tile_v]
            yp = log_p[tile_r, tile_v]
            if beta == 0.0:
                p = torch.exp(yp)
                loss[tile_r, tile_v] = p * (yp - xq)
                grad[tile_r, tile_v] = -p
            else:
                top = torch.maximum(torch.amax(xq, dim=0), torch.amax(yp, dim=0))
                q = torch.exp(xq - top) * torch.exp(top)
                p = torch.exp(yp - top) * torch.exp(top)
                mix = beta * p + (1 - beta) * q
                log_mix = torch.log(mix)
                loss[tile_r, tile_v] = beta * p * yp + (1 - beta) * q * xq - mix * log_mix
                grad[tile_r, tile_v] = (1 - beta) * q * (xq - log_mix)
            loss[tile_r, tile_v] = loss[tile_r, tile_v] / rows
            grad[tile_r, tile_v] = grad[tile_r, tile_v] / rows
    return torch.sum(loss), grad


def _jsd_reference(
    log_q: torch.Tensor,
    log_p: torch.Tensor,
    labels: torch.Tensor | None = None,
    beta: float = 0.5,
    ignore_index: int = -100,
) -> tuple[torch.Tensor, torch.Tensor]:
    q, p = log_q.exp(), log_p.exp()
    if beta == 0.0:
        per_element, grad = p * (log_p - log_q), -p
    else:
        log_mix = (beta * p + (1 - beta) * q).log()
        per_element = beta * p * (log_p - log_mix) + (1 - beta) * q * (log_q - log_mix)
        grad = (1 - beta) * q * (log_q - log_mix)
    if labels is not None:
        kept = (labels != ignore_index)[:, None]
        per_element, grad = per_element * kept, grad * kept
    return per_element.sum() / log_q.size(0), grad / log_q.size(0)


@helion.kernel(static_shapes=True)
def squeeze_excite(
    x: torch.Tensor, a: torch.Tensor, b: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`x * sigmoid(relu(x @ a) @ b)` and its two intermediates, per block of rows."""
    m, n = x.size()
    k = a.size(1)
    out = torch.empty([m, n], dtype=x.dtype, device=x.device)
    hidden = torch.empty([m, k], dtype=x.dtype, device=x.device)
    gate = torch.empty([m, n], dtype=x.dtype, device=x.device)
    for tile_m in hl.tile(m):
        for tile_k in hl.tile(k):
            hidden[tile_m, tile_k] = torch.relu(x[tile_m, :] @ a[:, tile_k])
        for tile_n in hl.tile(n):
            acc = hl.zeros([tile_m, tile_n], dtype=torch.float32)
            for tile_k in hl.tile(k):
                acc = torch.addmm(acc, hidden[tile_m, tile_k], b[tile_k, tile_n])
            gate[tile_m, tile_n] = torch.sigmoid(acc.to(x.dtype))
            out[tile_m, tile_n] = x[tile_m, tile_n] * gate[tile_m, tile_n]
    return out, hidden, gate


def _squeeze_excite_reference(
    x: torch.Tensor, a: torch.Tensor, b: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    hidden = torch.relu(x @ a)
    gate = torch.sigmoid(hidden @ b)
    return x * gate, hidden, gate


@helion.kernel(static_shapes=True)
def squeeze_excite_grad_x(
    grad_out: torch.Tensor,
    x: torch.Tensor,
    a: torch.Tensor,
    b: torch.Tensor,
    hidden: torch.Tensor,
    gate: torch.Tensor,
) -> torch.Tensor:
    """The gradient of `squeeze_excite` in `x`: three loops, each reading what the one
    before stored, `hl.barrier()` between them."""
    m, n = x.size()
    k = a.size(1)
    grad_gate = torch.empty([m, n], dtype=x.dtype, device=x.device)
    grad_hidden = torch.empty([m, k], dtype=x.dtype, device=x.device)
    grad_x = torch.empty([m, n], dtype=x.dtype, device=x.device)
    for tile_m, tile_n in hl.tile((m, n)):
        g = gate[tile_m, tile_n]
        grad_gate[tile_m, tile_n] = grad_out[tile_m, tile_n] * x[tile_m, tile_n] * g * (1.0 - g)
    hl.barrier()
    for tile_m, tile_k in hl.tile((m, k)):
        acc = hl.zeros([tile_m, tile_k], dtype=torch.float32)
        for tile_n in hl.tile(n):
            acc = torch.addmm(acc, grad_gate[tile_m, tile_n], b[tile_k, tile_n].T)
        grad_hidden[tile_m, tile_k] = acc.to(x.dtype) * (hidden[tile_m, tile_k] > 0)
    hl.barrier()
    for tile_m, tile_n in hl.tile((m, n)):
        acc = hl.zeros([tile_m, tile_n], dtype=torch.float32)
        for tile_k in hl.tile(k):
            acc = torch.addmm(acc, grad_hidden[tile_m, tile_k], a[tile_n, tile_k].T)
        grad_x[tile_m, tile_n] = grad_out[tile_m, tile_n] * gate[tile_m, tile_n] + acc.to(x.dtype)
    return grad_x


def _squeeze_excite_grad_x_reference(
    grad_out: torch.Tensor, x: torch.Tensor, a: torch.Tensor, b: torch.Tensor, *_: torch.Tensor
) -> torch.Tensor:
    x = x.clone().requires_grad_()
    (x * torch.sigmoid(torch.relu(x @ a) @ b)).backward(grad_out)
    assert x.grad is not None
    return x.grad


@helion.kernel(static_shapes=True)
def matmul_layer_norm(
    x: torch.Tensor, y: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor
) -> torch.Tensor:
    """`layer_norm(x @ y)`: whole output rows accumulated over a dim registered with
    `hl.register_reduction_dim`, then normalized in place."""
    m, k = x.size()
    n = hl.register_reduction_dim(y.size(1))
    out = torch.empty([m, n], dtype=torch.promote_types(x.dtype, y.dtype), device=x.device)
    for tile_m in hl.tile(m):
        acc = hl.zeros([tile_m, n], dtype=torch.float32)
        for tile_k in hl.tile(k):
            acc = acc + torch.matmul(x[tile_m, tile_k], y[tile_k, :])
        var, mean = torch.var_mean(acc, dim=-1, keepdim=True, correction=0)
        acc = (acc - mean) * torch.rsqrt(var + 1e-5)
        out[tile_m, :] = acc * weight[:].to(torch.float32) + bias[:].to(torch.float32)
    return out


@helion.kernel()
def rms_norm_backward(
    grad_out: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, inv_rms: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """RMS norm's gradients: rows in blocks, a nested loop over each block's own rows
    (`hl.tile(t.begin, t.end)`), the weight's gradient summed per block into a row of
    partial sums indexed by `t.id` and added up on the host."""
    m_block = hl.register_block_size(x.size(0))
    grad_x = torch.empty_like(x)
    partial = x.new_empty([helion.cdiv(x.size(0), m_block), *weight.shape], dtype=torch.float32)
    n = hl.specialize(weight.size(0))
    for outer in hl.tile(x.size(0), block_size=m_block):
        grad_w = weight.new_zeros(n, dtype=torch.float32)
        for rows in hl.tile(outer.begin, outer.end):
            xr = x[rows, :].to(torch.float32)
            g = grad_out[rows, :].to(torch.float32)
            r = inv_rms[rows, :].to(torch.float32)
            grad_w += (xr * g * r).sum(0)
            wr = weight[None, :].to(torch.float32)
            projection = (wr * g * xr).mean(-1)[:, None]
            grad_x[rows, :] = (wr * g * r - xr * r**3 * projection).to(x.dtype)
        partial[outer.id, :] = grad_w
    return grad_x, partial.sum(0).to(weight.dtype)


def _rms_norm_backward_reference(
    grad_out: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, _: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    x, weight = x.clone().requires_grad_(), weight.clone().requires_grad_()
    (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * weight).backward(grad_out)
    assert x.grad is not None and weight.grad is not None
    return x.grad, weight.grad


@helion.kernel(static_shapes=True)
def broadcast_matmul(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """`[b, m, k] @ [k, n]` as one matmul over the flattened `b * m` rows."""
    b, m, k = x.size()
    _, n = w.size()
    flat = x.reshape([b * m, k])
    out = torch.empty([b * m, n], device=x.device, dtype=torch.promote_types(x.dtype, w.dtype))
    for tile_r, tile_n in hl.tile([b * m, n]):
        acc = hl.zeros([tile_r, tile_n], dtype=torch.float32)
        for tile_k in hl.tile(k):
            acc = torch.addmm(acc, flat[tile_r, tile_k], w[tile_k, tile_n])
        out[tile_r, tile_n] = acc
    return out.view(b, m, n)


@helion.kernel()
def jagged_dense_add(x_data: torch.Tensor, offsets: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """`y` plus jagged rows (each a prefix of its row) read up to the longest row of the
    tile, the columns past it copied from `y`: loops bounded by a reduction on the device."""
    out = torch.zeros_like(y)
    for tile_r in hl.tile(y.size(0)):
        starts = offsets[tile_r]
        lengths = offsets[tile_r.index + 1] - starts
        longest = lengths.amax()
        for tile_c in hl.tile(0, longest):
            vals = hl.load(
                x_data,
                [starts[:, None] + tile_c.index[None, :]],
                extra_mask=tile_c.index[None, :] < lengths[:, None],
            )
            out[tile_r, tile_c] = y[tile_r, tile_c] + vals
        for tile_c in hl.tile(longest, out.size(1)):
            out[tile_r, tile_c] = y[tile_r, tile_c]
    return out


@helion.kernel()
def jagged_softmax(x_data: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    """Softmax down each jagged row's positions, per feature: an online max and sum, then
    the normalized values stored through flat indices (Helion's jagged_softmax shape)."""
    total = offsets[-1].item()
    rows, m = offsets.size(0) - 1, x_data.size(1)
    out = torch.zeros([total * m], dtype=x_data.dtype, device=x_data.device)
    flat = x_data.view(-1)
    for tile_b in hl.tile(rows):
        starts = offsets[tile_b]
        lengths = offsets[tile_b.index + 1] - starts
        longest = lengths.amax()
        for tile_m in hl.tile(m):
            top = hl.full([tile_b, tile_m], -1e30, dtype=torch.float32)
            denom = hl.zeros([tile_b, tile_m], dtype=torch.float32)
            for tile_k in hl.tile(longest):
                rows_at = starts[:, None] + tile_k.index[None, :]
                at = rows_at[:, :, None] * m + tile_m.index[None, None, :]
                inside = (tile_k.index[None, :] < lengths[:, None])[:, :, None]
                vals = hl.load(flat, [at], extra_mask=inside)
                new_top = torch.maximum(top, torch.where(inside, vals, float("-inf")).amax(dim=1))
                kept = torch.where(inside, torch.exp(vals - new_top[:, None, :]), 0.0)
                denom = denom * torch.exp(top - new_top) + kept.sum(dim=1)
                top = new_top
            for tile_k in hl.tile(longest):
                rows_at = starts[:, None] + tile_k.index[None, :]
                at = rows_at[:, :, None] * m + tile_m.index[None, None, :]
                inside = (tile_k.index[None, :] < lengths[:, None])[:, :, None]
                vals = hl.load(flat, [at], extra_mask=inside)
                normalized = torch.exp(vals - top[:, None, :]) / denom[:, None, :]
                hl.store(out, [at], normalized, extra_mask=inside)
    return out.reshape([total, m])


@helion.kernel()
def chunk_scan(
    cb: torch.Tensor,
    x: torch.Tensor,
    dt: torch.Tensor,
    da_cumsum: torch.Tensor,
    c: torch.Tensor,
    prev_states: torch.Tensor,
    d: torch.Tensor,
) -> torch.Tensor:
    """Mamba2's chunked scan output: a five-dim tile loop with blocks of 1, scalar
    positions from `tile.begin`, a causal inner loop whose end comes from `tile.id`
    (Helion's mamba2_chunk_scan shape)."""
    _, nchunks, ngroups, chunk, _ = cb.shape
    batch, _, nheads, headdim = x.shape
    hl.specialize(c.shape[3])
    block_m = hl.register_block_size(chunk)
    block_n = hl.register_block_size(headdim)
    block_k = hl.register_block_size(16, 16)
    out = torch.empty_like(x)
    log2e = 1.44269504
    for tile_h, tile_m, tile_n, tile_b, tile_c in hl.tile(
        [nheads, chunk, headdim, batch, nchunks], block_size=[1, block_m, block_n, 1, 1]
    ):
        b, h, ch = tile_b.begin, tile_h.begin, tile_c.begin
        acc = hl.zeros([tile_m, tile_n], dtype=torch.float32)
        decay_m = da_cumsum[b, h, ch, tile_m].to(torch.float32)
        group = h // (nheads // ngroups)
        c_rows = c[b, tile_m.index + ch * chunk, group, :]
        acc = hl.dot(c_rows, prev_states[b, ch, h, tile_n, :].T, acc=acc)
        acc *= torch.exp2(decay_m * log2e)[:, None]
        for tile_k in hl.tile((tile_m.id + 1) * block_m, block_size=block_k):
            scores = cb[b, ch, group, tile_m, tile_k]
            decay_k = da_cumsum[b, h, ch, tile_k].to(torch.float32)
            scores *= torch.exp2(decay_m[:, None] * log2e - decay_k[None, :] * log2e)
            scores = (scores * dt[b, h, ch, tile_k].to(torch.float32)[None, :]).to(cb.dtype)
            causal = tile_m.index[:, None] >= tile_k.index[None, :]
            scores = torch.where(causal, scores, torch.zeros_like(scores))
            acc = hl.dot(scores, x[b, ch * chunk + tile_k.index, h, tile_n], acc=acc)
        residual = x[b, ch * chunk + tile_m.index, h, tile_n].to(torch.float32)
        acc += residual * d[h].to(torch.float32)
        out[b, ch * chunk + tile_m.index, h, tile_n] = acc.to(out.dtype)
    return out


@helion.kernel()
def layer_norm_backward(
    grad_out: torch.Tensor,
    x: torch.Tensor,
    weight: torch.Tensor,
    mean: torch.Tensor,
    rstd: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Layer norm's gradients from the saved row statistics: the weight's and the bias's
    summed per block of rows into partial sums (indexed by `tile.id`) added on the host."""
    m, n = x.shape
    n = hl.specialize(n)
    block_m = hl.register_block_size(m)
    grad_x = torch.empty_like(x)
    parts = helion.cdiv(m, block_m)
    grad_w_parts = torch.empty([parts, n], dtype=torch.float32, device=x.device)
    grad_b_parts = torch.empty([parts, n], dtype=torch.float32, device=x.device)
    for tile_m in hl.tile(m, block_size=block_m):
        g = grad_out[tile_m, :].to(torch.float32)
        x_hat = (x[tile_m, :].to(torch.float32) - mean[tile_m, None]) * rstd[tile_m, None]
        grad_w_parts[tile_m.id, :] = (g * x_hat).sum(0)
        grad_b_parts[tile_m.id, :] = g.sum(0)
        wg = g * weight[:].to(torch.float32)
        along = (x_hat * wg).sum(-1, keepdim=True) / n
        shift = wg.sum(-1, keepdim=True) / n
        grad_x[tile_m, :] = ((wg - (x_hat * along + shift)) * rstd[tile_m, None]).to(x.dtype)
    return grad_x, grad_w_parts.sum(0).to(weight.dtype), grad_b_parts.sum(0).to(weight.dtype)


def _pack_int4(values: torch.Tensor) -> torch.Tensor:
    """[k, n] values in [-8, 8) as [k // 2, n] bytes: row 2i in the low nibble."""
    pairs = values.reshape(values.size(0) // 2, 2, values.size(1))
    return ((pairs[:, 0] & 0xF) | (pairs[:, 1] << 4)).to(torch.int8)


def _segment_sum_reference(indices: torch.Tensor, values: torch.Tensor, n: int) -> torch.Tensor:
    return torch.zeros(n, values.size(1)).index_add_(0, indices, values)


def _jagged_dense_add_reference(
    x_data: torch.Tensor, offsets: torch.Tensor, y: torch.Tensor
) -> torch.Tensor:
    out, bounds = y.clone(), offsets.tolist()
    for i, (a, e) in enumerate(zip(bounds, bounds[1:], strict=False)):
        out[i, : e - a] += x_data[a:e]
    return out


def _jagged_softmax_reference(x_data: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    bounds = offsets.tolist()
    return torch.cat([x_data[a:e].softmax(0) for a, e in zip(bounds, bounds[1:], strict=False)])


def _chunk_scan_reference(
    cb: torch.Tensor,
    x: torch.Tensor,
    dt: torch.Tensor,
    da: torch.Tensor,
    c: torch.Tensor,
    prev: torch.Tensor,
    d: torch.Tensor,
) -> torch.Tensor:
    batch, nchunks, ngroups, chunk, _ = cb.shape
    _, seqlen, nheads, headdim = x.shape
    c = c.repeat_interleave(nheads // ngroups, dim=2).reshape(batch, nchunks, chunk, nheads, -1)
    cb = cb.repeat_interleave(nheads // ngroups, dim=2)
    decay = torch.exp(da[..., :, None] - da[..., None, :]).permute(0, 2, 1, 3, 4)
    scores = (cb * decay).tril()
    chunks = x.reshape(batch, nchunks, chunk, nheads, headdim)
    inner = torch.einsum("bchls,bhcs,bcshp->bclhp", scores, dt, chunks)
    carried = torch.einsum("bclhn,bchpn->bclhp", c, prev) * da.permute(0, 2, 3, 1)[..., None].exp()
    return (inner + carried).reshape(batch, seqlen, nheads, headdim) + x * d[:, None]


def _layer_norm_backward_reference(
    grad_out: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, *_: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    x, weight = x.clone().requires_grad_(), weight.clone().requires_grad_()
    bias = torch.zeros_like(weight).requires_grad_()
    torch.nn.functional.layer_norm(x, [x.size(1)], weight, bias).backward(grad_out)
    assert x.grad is not None and weight.grad is not None and bias.grad is not None
    return x.grad, weight.grad, bias.grad


def CASES() -> dict[str, tuple[Any, tuple, Callable[..., Any]]]:
    """(kernel, inputs, reference) by name: ragged shapes, rows of 0 and 1 elements."""
    rows = torch.randn(19, 53)
    w, b = torch.randn(53), torch.randn(53)
    mat_a, mat_b, bias = torch.randn(33, 40), torch.randn(40, 27), torch.randn(27)
    batch_a, batch_b = torch.randn(3, 17, 24), torch.randn(3, 24, 19)
    # jagged rows of 0 to 40 elements (0 and 1 included), 6 features
    lengths = torch.tensor([3, 0, 1, 40, 7, 1, 0, 12, 5])
    offsets = torch.cat([torch.zeros(1, dtype=torch.int64), lengths.cumsum(0)])
    packed = torch.randn(int(offsets[-1]), 6)
    gathered = torch.randn(5, 23, 37)
    picks = torch.tensor([0, -1, 3, 2, -5, 4, 1])
    segment_ids = torch.randint(0, 9, (75,)).sort()[0]
    nibbles = torch.randint(-8, 8, (46, 21), dtype=torch.int8)
    log_q, log_p = torch.randn(7, 45).log_softmax(-1), torch.randn(7, 45).log_softmax(-1)
    ignored = torch.tensor([3, -100, 5, 0, -100, 1, 2])
    se_x, se_a, se_b = torch.randn(19, 23), torch.randn(23, 11), torch.randn(11, 23)
    _, hidden, gate = _squeeze_excite_reference(se_x, se_a, se_b)
    inv_rms = torch.rsqrt(batch_a[0].pow(2).mean(-1, keepdim=True) + 1e-5)
    # Mamba2 chunk scan: batch 2, 3 chunks of 12, 1 group, 4 heads of 6, state 8
    scan = (
        torch.randn(2, 3, 1, 12, 12),
        torch.randn(2, 36, 4, 6),
        torch.rand(2, 4, 3, 12),
        -torch.rand(2, 4, 3, 12).cumsum(-1) * 0.1,
        torch.randn(2, 36, 1, 8),
        torch.randn(2, 3, 4, 6, 8),
        torch.randn(4),
    )
    row_stats = (rows.mean(-1), torch.rsqrt(rows.var(-1, correction=0) + 1e-5))
    return {
        "welford_layer_norm": (
            welford_layer_norm,
            (rows, w, b),
            lambda a, c, d: torch.nn.functional.layer_norm(a, [53], c, d),
        ),
        "gather_gemv": (gather_gemv, (gathered, picks, gathered[0, 0]), lambda m, i, v: m[i] @ v),
        "segment_sum": (
            segment_sum,
            (segment_ids, torch.randn(75, 6), 10),
            _segment_sum_reference,
        ),
        "split_k_matmul_relu": (
            split_k_matmul_relu,
            (mat_a, mat_b, bias),
            lambda a, c, d: torch.relu(a @ c + d),
        ),
        "grouped_gemm": (
            grouped_gemm,
            (packed.repeat(1, 5)[:, :29], mat_b[:29, :13], offsets.to(torch.int32)),
            lambda a, c, _: a @ c,
        ),
        "int4_matmul": (
            int4_matmul,
            (torch.randn(11, 46), _pack_int4(nibbles)),
            lambda a, _: a @ nibbles.float(),
        ),
        "geglu": (
            geglu,
            (rows, rows.flip(0)),
            lambda a, c: torch.nn.functional.gelu(a, approximate="tanh") * c,
        ),
        "jsd": (jsd, (log_q, log_p), _jsd_reference),
        "jsd_ignored_rows": (jsd, (log_q, log_p, ignored), _jsd_reference),
        "jsd_forward_kl": (jsd, (log_q, log_p, None, 0.0), _jsd_reference),
        "squeeze_excite": (squeeze_excite, (se_x, se_a, se_b), _squeeze_excite_reference),
        "squeeze_excite_grad_x": (
            squeeze_excite_grad_x,
            (torch.randn(19, 23), se_x, se_a, se_b, hidden, gate),
            _squeeze_excite_grad_x_reference,
        ),
        "matmul_layer_norm": (
            matmul_layer_norm,
            (mat_a, mat_b, bias, bias.flip(0)),
            lambda a, c, d, e: torch.nn.functional.layer_norm(a @ c, [27], d, e),
        ),
        "rms_norm_backward": (
            rms_norm_backward,
            (batch_a[1], batch_a[0], batch_b[0, :, 0], inv_rms),
            _rms_norm_backward_reference,
        ),
        "broadcast_matmul": (broadcast_matmul, (batch_a, mat_a[:24, :13]), torch.matmul),
        "jagged_dense_add": (
            jagged_dense_add,
            (packed[:, 0].contiguous(), offsets, torch.randn(9, 43)),
            _jagged_dense_add_reference,
        ),
        "jagged_softmax": (jagged_softmax, (packed, offsets), _jagged_softmax_reference),
        "chunk_scan": (chunk_scan, scan, _chunk_scan_reference),
        "layer_norm_backward": (
            layer_norm_backward,
            (rows.flip(1), rows, w, *row_stats),
            _layer_norm_backward_reference,
        ),
    }
