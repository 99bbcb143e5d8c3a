"""Kernels written the way Helion's documentation and examples write them, ported by the
imports alone: `import tilecraft as helion` and `import tilecraft.language as hl`.

Each `CASES` entry is (kernel, inputs, reference); tests/test_helion_dialect.py runs them
in both CPU modes. These were written against Helion's public surface, not against
tilecraft's examples, to catch what a port would hit.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import helion_examples
import helion_examples_decode
import helion_examples_more
import torch

import tilecraft as helion
import tilecraft.language as hl


@helion.kernel()
def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    x, y = torch.broadcast_tensors(x, y)
    out = torch.empty(x.shape, dtype=torch.promote_types(x.dtype, y.dtype), device=x.device)
    for tile in hl.tile(out.size()):
        out[tile] = x[tile] + y[tile]
    return out


@helion.kernel()
def long_sum(x: torch.Tensor) -> torch.Tensor:
    m, n = x.size()
    out = torch.empty([m], dtype=x.dtype, device=x.device)
    block_size_n = hl.register_block_size(n)
    for tile_m in hl.tile(m):
        acc = hl.zeros([tile_m, block_size_n], dtype=x.dtype)
        for tile_n in hl.tile(n, block_size=block_size_n):
            acc += x[tile_m, tile_n]
        out[tile_m] = acc.sum(-1)
    return out


@helion.kernel()
def softmax_two_pass(x: torch.Tensor) -> torch.Tensor:
    m, n = x.size()
    out = torch.empty_like(x)
    block_size_m = hl.register_block_size(m)
    block_size_n = hl.register_block_size(n)
    for tile_m in hl.tile(m, block_size=block_size_m):
        mi = hl.full([tile_m], float("-inf"), dtype=torch.float32)
        di = hl.zeros([tile_m], dtype=torch.float32)
        for tile_n in hl.tile(n, block_size=block_size_n):
            values = x[tile_m, tile_n]
            local_amax = torch.amax(values, dim=1)
            mi_next = torch.maximum(mi, local_amax)
            di = di * torch.exp(mi - mi_next) + torch.exp(values - mi_next[:, None]).sum(dim=1)
            mi = mi_next
        for tile_n in hl.tile(n, block_size=block_size_n):
            values = x[tile_m, tile_n]
            out[tile_m, tile_n] = torch.exp(values - mi[:, None]) / di[:, None]
    return out


@helion.kernel()
def matmul(
    x: torch.Tensor,
    y: torch.Tensor,
    epilogue: Callable[[torch.Tensor, tuple[torch.Tensor, ...]], torch.Tensor] = lambda acc, tile: (
        acc
    ),
) -> torch.Tensor:
    m, k = x.size()
    k2, n = y.size()
    assert k == k2, f"size mismatch {k} != {k2}"
    out = torch.empty([m, n], dtype=torch.promote_types(x.dtype, y.dtype), device=x.device)
    for tile_m, tile_n in hl.tile([m, n]):
        acc = hl.zeros([tile_m, tile_n], dtype=torch.float32)
        for tile_k in hl.tile(k):
            acc = torch.addmm(acc, x[tile_m, tile_k], y[tile_k, tile_n])
        out[tile_m, tile_n] = epilogue(acc, (tile_m, tile_n))
    return out


@helion.kernel()
def embedding(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    x_flat = x.reshape(-1)
    _, embedding_dim = weight.size()
    out = torch.empty([x_flat.size(0), embedding_dim], dtype=weight.dtype, device=weight.device)
    for tile_b, tile_e in hl.tile([x_flat.size(0), embedding_dim]):
        out[tile_b, tile_e] = weight[x_flat[tile_b], tile_e]
    return out.view(*x.size(), embedding_dim)


@helion.kernel()
def layer_norm(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float = 1e-5
) -> torch.Tensor:
    m, n = x.size()
    out = torch.empty([m, n], dtype=x.dtype, device=x.device)
    for tile_m in hl.tile(m):
        acc = x[tile_m, :].to(torch.float32)
        var, mean = torch.var_mean(acc, dim=-1, keepdim=True, correction=0)
        normalized = (acc - mean) * torch.rsqrt(var + eps)
        acc = normalized * (weight[:].to(torch.float32)) + (bias[:].to(torch.float32))
        out[tile_m, :] = acc.to(x.dtype)
    return out


@helion.kernel()
def cross_entropy(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    n, v = logits.shape
    losses = torch.zeros([n], dtype=logits.dtype, device=logits.device)
    logits_flat = logits.view(-1)
    for tile_n in hl.tile(n):
        labels_tile = labels[tile_n]
        base_indices_tile = tile_n.index * v
        flat_indices = base_indices_tile + labels_tile
        logits_at_target = hl.load(logits_flat, [flat_indices])
        logits_rows = logits[tile_n, :]
        max_logits = torch.amax(logits_rows, dim=-1, keepdim=True)
        shifted = logits_rows - max_logits
        exp_shifted = torch.exp(shifted)
        sum_exp = torch.sum(exp_shifted, dim=-1, keepdim=True)
        log_sum_exp = max_logits.squeeze(-1) + torch.log(sum_exp.squeeze(-1))
        losses[tile_n] = log_sum_exp - logits_at_target
    return losses.mean()


@helion.kernel()
def bmm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    batch, m, k = a.size()
    batch, k, n = b.size()
    out = torch.empty([batch, m, n], device=a.device, dtype=torch.promote_types(a.dtype, b.dtype))
    for tile_b, tile_m, tile_n in hl.tile([batch, m, n]):
        acc = hl.zeros([tile_b, tile_m, tile_n], dtype=torch.float32)
        for tile_k in hl.tile(k):
            acc = torch.baddbmm(acc, a[tile_b, tile_m, tile_k], b[tile_b, tile_k, tile_n])
        out[tile_b, tile_m, tile_n] = acc
    return out


@helion.kernel()
def swiglu(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(a)
    for tile in hl.tile(a.size()):
        gate = a[tile].to(torch.float32)
        out[tile] = (gate * torch.sigmoid(gate)).to(a.dtype) * b[tile]
    return out


@helion.kernel()
def rows_by_grid(x: torch.Tensor) -> torch.Tensor:
    n, d = x.size()
    out = torch.empty_like(x)
    for i in hl.grid(n):
        row = x[i, :]
        out[i, :] = row - torch.amax(row, dim=-1, keepdim=True)
    return out


@helion.kernel()
def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    m, n = x.size()
    n = hl.specialize(n)
    out = torch.empty_like(x)
    for tile_m in hl.tile(m):
        x_tile = x[tile_m, :].to(torch.float32)
        x_squared = x_tile * x_tile
        mean_x_squared = torch.mean(x_squared, dim=-1)
        inv_rms_tile = torch.rsqrt(mean_x_squared + eps)
        normalized = x_tile * inv_rms_tile[:, None]
        out[tile_m, :] = (normalized * weight[:].to(torch.float32)).to(out.dtype)
    return out


@helion.kernel()
def concat_rows(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    m, n = x.size()
    m2, _ = y.size()
    out = x.new_empty([m + m2, n])
    for tile_m, tile_n in hl.tile([m + m2, n]):
        from_x = tile_m.index < m
        x_part = hl.load(x, [tile_m, tile_n], extra_mask=from_x[:, None])
        y_part = hl.load(y, [tile_m.index - m, tile_n], extra_mask=~from_x[:, None])
        out[tile_m, tile_n] = torch.where(from_x[:, None], x_part, y_part)
    return out


@helion.kernel()
def row_cumsum(x: torch.Tensor) -> torch.Tensor:
    m, n = x.size()
    out = torch.empty_like(x)
    for tile_m in hl.tile(m):
        out[tile_m, :] = torch.cumsum(x[tile_m, :], dim=1)
    return out


@helion.kernel()
def scaled_by_flag(x: torch.Tensor, flags: torch.Tensor) -> torch.Tensor:
    m, n = x.size()
    out = torch.empty_like(x)
    for i in hl.grid(m):
        row = x[i, :]
        if flags[i] > 0:
            out[i, :] = row * 2
        else:
            out[i, :] = -row
    return out


@helion.kernel()
def kl_div_rows(log_q: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """Per-row KL(p || q) from log q, both tile sizes registered (Helion's kl_div shape)."""
    rows, vocab = log_q.shape
    loss = torch.zeros([rows], dtype=torch.float32, device=log_q.device)
    block_v = hl.register_block_size(vocab)
    block_r = hl.register_block_size(rows)
    for tile_r in hl.tile(rows, block_size=block_r):
        acc = hl.zeros([tile_r, block_v], dtype=torch.float32)
        for tile_v in hl.tile(vocab, block_size=block_v):
            target = p[tile_r, tile_v]
            log_p = torch.log(torch.clamp(target, min=1e-10))
            acc += target * (log_p - log_q[tile_r, tile_v])
        loss[tile_r] = acc.sum(dim=-1)
    return loss


def _kl_div_rows(log_q: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.kl_div(log_q, p, reduction="none").sum(-1)


@helion.kernel()
def jagged_sum(x_data: torch.Tensor, x_offsets: torch.Tensor) -> torch.Tensor:
    m = x_data.shape[1]
    num_rows = x_offsets.size(0) - 1
    out = torch.zeros([num_rows, m], dtype=x_data.dtype, device=x_data.device)
    for tile_b in hl.tile(num_rows):
        starts = x_offsets[tile_b]
        ends = x_offsets[tile_b.index + 1]
        nnz = ends - starts
        for tile_m in hl.tile(m):
            row_sums = hl.zeros([tile_b, tile_m], dtype=x_data.dtype)
            for tile_k in hl.jagged_tile(nnz):
                idx = starts[:, None] + tile_k.index[None, :]
                row_sums = row_sums + x_data[idx, tile_m].sum(dim=1)
            out[tile_b, tile_m] = row_sums
    return out


@helion.kernel()
def jagged_mean(
    x_data: torch.Tensor, x_offsets: torch.Tensor, x_feature_counts: torch.Tensor, max_m: int
) -> torch.Tensor:
    num_rows = x_offsets.size(0) - 1
    out = torch.zeros([num_rows, max_m], dtype=x_data.dtype, device=x_data.device)
    x_flat = x_data.view(-1)
    for tile_b in hl.tile(num_rows):
        starts = x_offsets[tile_b]
        ends = x_offsets[tile_b.index + 1]
        nnz = ends - starts
        feature_counts = x_feature_counts[tile_b]
        for tile_m in hl.jagged_tile(feature_counts):
            row_sums = hl.zeros([tile_b, tile_m], dtype=x_data.dtype)
            for tile_k in hl.jagged_tile(nnz):
                flat_indices = (starts[:, None] + tile_k.index[None, :])[:, :, None] * max_m
                flat_indices = flat_indices + tile_m.index[None, None, :]
                x_slice = hl.load(x_flat, [flat_indices])
                row_sums = row_sums + x_slice.sum(dim=1)
            nnz_expanded = nnz.to(x_data.dtype)[:, None]
            result = torch.where(nnz_expanded > 0, row_sums / nnz_expanded, 0.0)
            out[tile_b, tile_m] = result
    return out


@helion.kernel(autotune_effort="none")
def jagged_layer_norm(
    x_values: torch.Tensor, x_offsets: torch.Tensor, eps: float = 1e-6
) -> torch.Tensor:
    total_l, m = x_values.shape
    b = x_offsets.size(0) - 1
    out = torch.empty_like(x_values)
    x_flat = x_values.view(-1)
    out_flat = out.view(-1)
    for tile_b in hl.tile(b):
        starts = x_offsets[tile_b]
        ends = x_offsets[tile_b.index + 1]
        seq_lengths = ends - starts
        mean_acc = hl.zeros([tile_b], dtype=x_values.dtype)
        var_acc = hl.zeros([tile_b], dtype=x_values.dtype)
        for tile_m in hl.tile(m):
            row_sums = hl.zeros([tile_b, tile_m], dtype=x_values.dtype)
            for tile_k in hl.jagged_tile(seq_lengths):
                flat_indices = (starts[:, None] + tile_k.index[None, :])[:, :, None] * m
                flat_indices = flat_indices + tile_m.index[None, None, :]
                x_slice = hl.load(x_flat, [flat_indices])
                row_sums = row_sums + x_slice.sum(dim=1)
            mean_acc = mean_acc + row_sums.sum(dim=1)
        seq_lengths_float = seq_lengths.to(x_values.dtype)
        mean_acc = mean_acc / (seq_lengths_float * m)
        for tile_m in hl.tile(m):
            var_sums = hl.zeros([tile_b, tile_m], dtype=x_values.dtype)
            for tile_k in hl.jagged_tile(seq_lengths):
                flat_indices = (starts[:, None] + tile_k.index[None, :])[:, :, None] * m
                flat_indices = flat_indices + tile_m.index[None, None, :]
                x_slice = hl.load(x_flat, [flat_indices])
                centered = x_slice.to(torch.float32) - mean_acc[:, None, None]
                var_sums = var_sums + (centered * centered).sum(dim=1)
            var_acc = var_acc + var_sums.sum(dim=1)
        variance = var_acc / (seq_lengths_float * m)
        rstd = torch.rsqrt(variance + eps)
        for tile_m in hl.tile(m):
            for tile_k in hl.jagged_tile(seq_lengths):
                flat_indices = (starts[:, None] + tile_k.index[None, :])[:, :, None] * m
                flat_indices = flat_indices + tile_m.index[None, None, :]
                x_slice = hl.load(x_flat, [flat_indices])
                normalized = (x_slice.to(torch.float32) - mean_acc[:, None, None]) * rstd[
                    :, None, None
                ]
                hl.store(out_flat, [flat_indices], normalized.to(x_values.dtype))
    return out.reshape(total_l, m)


def _jagged_layer_norm_reference(
    x_values: torch.Tensor, x_offsets: torch.Tensor, eps: float = 1e-6
) -> torch.Tensor:
    bounds = x_offsets.tolist()
    rows = [x_values[a:e] for a, e in zip(bounds, bounds[1:], strict=False)]
    return torch.cat([torch.nn.functional.layer_norm(r, list(r.shape), eps=eps) for r in rows])


def _jagged_sum_reference(x_data: torch.Tensor, x_offsets: torch.Tensor) -> torch.Tensor:
    bounds = x_offsets.tolist()
    return torch.stack([x_data[a:e].sum(0) for a, e in zip(bounds, bounds[1:], strict=False)])


def _jagged_mean_reference(
    x_data: torch.Tensor, x_offsets: torch.Tensor, counts: torch.Tensor, max_m: int
) -> torch.Tensor:
    out = torch.zeros(x_offsets.numel() - 1, max_m)
    bounds = x_offsets.tolist()
    for i, (a, e, f) in enumerate(zip(bounds, bounds[1:], counts.tolist(), strict=False)):
        if e > a:
            out[i, :f] = x_data[a:e, :f].mean(0)
    return out


def _inputs() -> dict[str, tuple[Any, tuple, Callable[..., Any]]]:
    x, y = torch.randn(37, 21), torch.randn(21)
    w, b = torch.randn(53), torch.randn(53)
    rows = torch.randn(19, 53)
    mat_a, mat_b, bias = torch.randn(33, 40), torch.randn(40, 27), torch.randn(27)
    ids = torch.randint(0, 50, (3, 7))
    table = torch.randn(50, 24)
    logits, labels = torch.randn(13, 70), torch.randint(0, 70, (13,))
    batch_a, batch_b = torch.randn(3, 17, 24), torch.randn(3, 24, 19)
    flags = torch.tensor([1, 0, 3, -1, 0, 2, 1, 0, 0, 5, 1, 1, 0, 0, 1, 0, 1, 1, 0])
    # jagged rows of 0 to 40 elements (0 and 1 included), 6 features of which 0 to 6 count
    lengths = torch.tensor([3, 0, 1, 40, 7, 1, 0, 12, 5])
    offsets = torch.cat([torch.zeros(1, dtype=torch.int64), lengths.cumsum(0)])
    packed = torch.randn(int(offsets[-1]), 6)
    counts = torch.tensor([2, 6, 0, 1, 6, 3, 4, 5, 1], dtype=torch.int32)

    def relu_bias(acc: torch.Tensor, tile: tuple) -> torch.Tensor:
        return torch.relu(acc + bias[tile[1]])

    return {
        "add": (add, (x, y), lambda a, c: a + c),
        "long_sum": (long_sum, (rows,), lambda a: a.sum(-1)),
        "softmax_two_pass": (softmax_two_pass, (rows,), lambda a: torch.softmax(a, -1)),
        "matmul": (matmul, (mat_a, mat_b), lambda a, c: a @ c),
        "matmul_epilogue": (
            matmul,
            (mat_a, mat_b, relu_bias),
            lambda a, c, _: torch.relu(a @ c + bias),
        ),
        "embedding": (embedding, (ids, table), lambda i, t: t[i]),
        "layer_norm": (
            layer_norm,
            (rows, w, b),
            lambda a, c, d: torch.nn.functional.layer_norm(a, [53], c, d),
        ),
        "cross_entropy": (
            cross_entropy,
            (logits, labels),
            lambda a, c: torch.nn.functional.cross_entropy(a, c),
        ),
        "bmm": (bmm, (batch_a, batch_b), torch.bmm),
        "kl_div_rows": (
            kl_div_rows,
            (rows.log_softmax(-1), rows.flip(0).softmax(-1)),
            _kl_div_rows,
        ),
        "swiglu": (swiglu, (rows, rows.flip(0)), lambda a, c: torch.nn.functional.silu(a) * c),
        "rows_by_grid": (rows_by_grid, (rows,), lambda a: a - a.amax(-1, keepdim=True)),
        "rms_norm": (
            rms_norm,
            (rows, w),
            lambda a, c: a * torch.rsqrt(a.pow(2).mean(-1, keepdim=True) + 1e-5) * c,
        ),
        "concat_rows": (concat_rows, (rows, rows[:5] * 3), lambda a, c: torch.cat([a, c])),
        "row_cumsum": (row_cumsum, (rows,), lambda a: torch.cumsum(a, 1)),
        "jagged_sum": (jagged_sum, (packed, offsets), _jagged_sum_reference),
        "jagged_mean": (jagged_mean, (packed, offsets, counts, 6), _jagged_mean_reference),
        "jagged_layer_norm": (jagged_layer_norm, (packed, offsets), _jagged_layer_norm_reference),
        "scaled_by_flag": (
            scaled_by_flag,
            (rows, flags),
            lambda a, f: torch.where(f[:, None] > 0, a * 2, -a),
        ),
    }


def CASES() -> dict[str, tuple[Any, tuple, Callable[..., Any]]]:
    """Every case: the kernels above and Helion's examples (tests/helion_examples.py)."""
    return {
        **_inputs(),
        **helion_examples.CASES(),
        **helion_examples_more.CASES(),
        **helion_examples_decode.CASES(),
    }
