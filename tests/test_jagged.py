"""`tc.jagged_tile`: loops over per-lane lengths, in both modes against PyTorch, with rows
of length 0 and 1, parent tiles cut short at the end and several jagged tiles per row."""

from __future__ import annotations

import pytest
import torch
from conftest import DEVICE

import tilecraft as tc
from tilecraft import exc
from tilecraft.testing import assert_close

LENGTHS = [0, 1, 9, 3, 1, 0, 5]  # 7 rows: a parent block of 4 is cut short
SMALL = tc.Config(block_sizes=[4, 4])  # several jagged tiles per row of 9 (compiled)


def lengths() -> torch.Tensor:
    return torch.tensor(LENGTHS, device=DEVICE)


def valid(n: int) -> torch.Tensor:
    """Where position k of each row is inside its length."""
    return torch.arange(n, device=DEVICE)[None, :] < lengths()[:, None]


@tc.kernel(config=SMALL)
def row_stats(x: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, ...]:
    rows = x.size(0)
    out = torch.full_like(x, -7.0)
    sums = torch.zeros([rows], dtype=x.dtype, device=x.device)
    tops = torch.zeros([rows], dtype=x.dtype, device=x.device)
    for tile_b in tc.tile(rows):
        total = tc.zeros([tile_b], dtype=x.dtype)
        top = tc.full([tile_b], float("-inf"), dtype=x.dtype)
        for tile_k in tc.jagged_tile(lengths[tile_b]):
            v = x[tile_b, tile_k] + 1  # past a length, the load's 0 would count as 1
            out[tile_b, tile_k] = v
            total = total + v.sum(dim=1)
            top = torch.maximum(top, (v - 5).amax(dim=1))
        sums[tile_b] = total
        tops[tile_b] = top
    return out, sums, tops


def test_loads_stores_and_reductions_stop_at_each_length(mode) -> None:
    x = torch.randn(7, 9, device=DEVICE)
    keep = valid(9)
    out, sums, tops = mode(row_stats)(x, lengths())
    assert_close(out, torch.where(keep, x + 1, -7.0))
    assert_close(sums, torch.where(keep, x + 1, 0.0).sum(1))
    assert_close(tops, torch.where(keep, x - 4, float("-inf")).amax(1))


@tc.kernel(config=SMALL)
def packed_sum(values: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    rows = offsets.size(0) - 1
    out = torch.zeros([rows], dtype=values.dtype, device=values.device)
    for tile_b in tc.tile(rows):
        starts = offsets[tile_b]
        lengths = offsets[tile_b.index + 1] - starts
        acc = tc.zeros([tile_b], dtype=values.dtype)
        for tile_k in tc.jagged_tile(lengths):
            # past a length, the index points into the next row: it must not be read
            acc = acc + torch.exp(values[starts[:, None] + tile_k.index[None, :]]).sum(1)
        out[tile_b] = acc
    return out


def test_packed_rows_read_through_offsets(mode) -> None:
    offsets = torch.cat([torch.zeros(1, dtype=torch.int64), torch.tensor(LENGTHS).cumsum(0)])
    values = torch.randn(int(offsets[-1]), device=DEVICE)
    bounds = offsets.tolist()
    rows = zip(bounds[:-1], bounds[1:], strict=True)
    expected = torch.stack([values[a:e].exp().sum() for a, e in rows])
    assert_close(mode(packed_sum)(values, offsets.to(DEVICE)), expected)


@tc.kernel(config=SMALL)
def jagged_softmax(x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    out = torch.zeros_like(x)
    for tile_b in tc.tile(x.size(0)):
        n = lengths[tile_b]
        top = tc.full([tile_b], float("-inf"), dtype=torch.float32)
        total = tc.zeros([tile_b], dtype=torch.float32)
        for tile_k in tc.jagged_tile(n):
            v = x[tile_b, tile_k]
            new_top = torch.maximum(top, v.amax(1))
            total = total * torch.exp(top - new_top) + torch.exp(v - new_top[:, None]).sum(1)
            top = new_top
        for tile_k in tc.jagged_tile(n):
            out[tile_b, tile_k] = torch.exp(x[tile_b, tile_k] - top[:, None]) / total[:, None]
    return out


def test_softmax_of_each_row_over_its_length(mode) -> None:
    x = torch.randn(7, 9, device=DEVICE) * 3
    keep = valid(9)
    expected = torch.softmax(torch.where(keep, x, float("-inf")), 1).nan_to_num(0.0)
    assert_close(mode(jagged_softmax)(x, lengths()), expected)


@tc.kernel(config=tc.Config(block_sizes=[2, 4, 4]))
def nested_mean(x: torch.Tensor, lengths: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
    b = x.size(0)
    out = torch.zeros([b, x.size(2)], dtype=x.dtype, device=x.device)
    for tile_b in tc.tile(b):
        row_lengths = lengths[tile_b]
        for tile_m in tc.jagged_tile(counts[tile_b]):
            acc = tc.zeros([tile_b, tile_m], dtype=x.dtype)
            for tile_k in tc.jagged_tile(row_lengths):
                acc += x[tile_b, tile_k, tile_m].sum(dim=1)
            out[tile_b, tile_m] = acc / row_lengths.to(x.dtype)[:, None]
    return out


def test_nested_jagged_tiles(mode) -> None:
    x = torch.randn(7, 9, 5, device=DEVICE)
    counts = torch.tensor([2, 5, 0, 1, 3, 4, 5], device=DEVICE, dtype=torch.int32)
    expected = torch.zeros(7, 5, device=DEVICE)
    for i, (k, f) in enumerate(zip(LENGTHS, counts.tolist(), strict=True)):
        expected[i, :f] = x[i, :k, :f].sum(0) / k
    # rows of no elements divide 0 by 0: NaN where their features count, as PyTorch
    assert_close(mode(nested_mean)(x, lengths(), counts), expected, equal_nan=True)


@tc.kernel(config=tc.Config(block_sizes=[2, 4, 4]))
def per_token_features(x: torch.Tensor, lengths: torch.Tensor, counts: torch.Tensor):
    b = x.size(0)
    out = torch.zeros([b], dtype=x.dtype, device=x.device)
    for tile_b in tc.tile(b):
        acc = tc.zeros([tile_b], dtype=x.dtype)
        for tile_k in tc.jagged_tile(lengths[tile_b]):
            token_acc = tc.zeros([tile_b, tile_k], dtype=x.dtype)
            # lengths of the inner loop over (row, token) lanes of the outer jagged loop
            for tile_m in tc.jagged_tile(counts[tile_b, tile_k]):
                token_acc += x[tile_b, tile_k, tile_m].sum(dim=2)
            acc += token_acc.sum(dim=1)
        out[tile_b] = acc
    return out


def test_lengths_over_a_jagged_tile(mode) -> None:
    x = torch.randn(7, 9, 6, device=DEVICE)
    counts = torch.randint(0, 7, (7, 9), device=DEVICE)
    keep = valid(9)[:, :, None] & (torch.arange(6, device=DEVICE) < counts[:, :, None])
    expected = torch.where(keep, x, 0.0).sum((1, 2))
    assert_close(mode(per_token_features)(x, lengths(), counts), expected)


@tc.kernel(config=tc.Config(block_sizes=[2, 2, 4]))
def grid_of_lengths(x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    b1, b2 = lengths.size()
    out = torch.zeros([b1, b2], dtype=x.dtype, device=x.device)
    for tile_i, tile_j in tc.tile([b1, b2]):
        acc = tc.zeros([tile_i, tile_j], dtype=x.dtype)
        for tile_k in tc.jagged_tile(lengths[tile_i, tile_j]):
            acc += x[tile_i, tile_j, tile_k].sum(dim=2)
        out[tile_i, tile_j] = acc
    return out


def test_lengths_over_two_parent_tiles(mode) -> None:
    grid = torch.tensor([[3, 1, 0], [2, 5, 1], [0, 0, 4]], device=DEVICE)
    x = torch.randn(3, 3, 5, device=DEVICE)
    keep = torch.arange(5, device=DEVICE) < grid[..., None]
    assert_close(mode(grid_of_lengths)(x, grid), torch.where(keep, x, 0.0).sum(2))


@tc.kernel(config=SMALL)
def batched_products(a: torch.Tensor, c: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    b, m, _ = a.size()
    n = c.size(2)
    out = torch.zeros([b, m, n], dtype=a.dtype, device=a.device)
    for tile_b in tc.tile(b):
        acc = tc.zeros([tile_b, m, n], dtype=torch.float32)
        for tile_k in tc.jagged_tile(lengths[tile_b]):
            # exp(0) past a length is 1: the product must leave those positions out
            left = torch.exp(a[tile_b, :, tile_k])
            right = torch.exp(c[tile_b, tile_k, :])
            acc = torch.baddbmm(acc, left, right)
        out[tile_b, :, :] = acc
    return out


def test_matrix_products_over_a_jagged_dim(mode) -> None:
    a, c = torch.randn(7, 3, 9, device=DEVICE) / 3, torch.randn(7, 9, 5, device=DEVICE) / 3
    keep = valid(9)
    expected = torch.bmm(a.exp() * keep[:, None, :], c.exp() * keep[:, :, None])
    torch.testing.assert_close(mode(batched_products)(a, c, lengths()), expected)


@tc.kernel(config=tc.Config(block_sizes=[4, 16]))  # a whole row per tile, as eager mode
def row_cumsum(x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    out = torch.zeros_like(x)
    for tile_b in tc.tile(x.size(0)):
        for tile_k in tc.jagged_tile(lengths[tile_b]):
            out[tile_b, tile_k] = torch.cumsum(x[tile_b, tile_k], dim=1)
    return out


def test_forward_scans_within_a_tile(mode) -> None:
    x = torch.randn(7, 9, device=DEVICE)
    keep = valid(9)
    expected = torch.cumsum(torch.where(keep, x, 0.0), 1) * keep
    assert_close(mode(row_cumsum)(x, lengths()), expected)


# -- what compiled code refuses, with what to do instead --------------------------------


@tc.kernel
def without_parent(x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    out = torch.zeros_like(x)
    for tile_b in tc.tile(x.size(0)):
        for tile_k in tc.jagged_tile(lengths[tile_b]):
            out[tile_k, 0] = x[tile_k, 0]
    return out


@tc.kernel
def mean_over_lengths(x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    out = torch.zeros([x.size(0)], dtype=x.dtype, device=x.device)
    for tile_b in tc.tile(x.size(0)):
        acc = tc.zeros([tile_b])
        for tile_k in tc.jagged_tile(lengths[tile_b]):
            acc += x[tile_b, tile_k].mean(1)
        out[tile_b] = acc
    return out


@tc.kernel
def reverse_scan(x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    out = torch.zeros_like(x)
    for tile_b in tc.tile(x.size(0)):
        for tile_k in tc.jagged_tile(lengths[tile_b]):
            out[tile_b, tile_k] = tc.associative_scan(
                torch.add, x[tile_b, tile_k], dim=1, reverse=True
            )
    return out


@tc.kernel
def host_bound(x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    out = torch.zeros_like(x)
    for tile_b in tc.tile(x.size(0)):
        for tile_k in tc.jagged_tile(x.size(1)):
            out[tile_b, tile_k] = x[tile_b, tile_k]
    return out


@tc.kernel
def whole_dim_lengths(x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    out = torch.zeros_like(x)
    for tile_b in tc.tile(x.size(0)):
        for tile_k in tc.jagged_tile(x[tile_b, :].long()):
            out[tile_b, tile_k] = x[tile_b, tile_k]
    return out


@tc.kernel
def outermost(x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    out = torch.zeros_like(x)
    for tile_k in tc.jagged_tile(lengths):
        out[tile_k] = x[tile_k]
    return out


@pytest.mark.parametrize(
    ("kernel", "error", "message", "line"),
    [
        (without_parent, exc.UnsupportedSyntax, "must also span its parent", "x[tile_k, 0]"),
        (mean_over_lengths, exc.UnsupportedOperation, "divide by the lengths", ".mean(1)"),
        (reverse_scan, exc.UnsupportedOperation, "reverse scan", "tc.associative_scan("),
        (host_bound, exc.UnsupportedSyntax, "use tc.tile", "tc.jagged_tile(x.size(1))"),
        (whole_dim_lengths, exc.UnsupportedSyntax, "enclosing tile loop", "x[tile_b, :]"),
        (outermost, exc.NotInKernel, "jagged_tile", "tc.jagged_tile(lengths)"),
    ],
)
def test_refused_with_what_to_do_instead(
    mode, kernel, error: type, message: str, line: str
) -> None:
    """Refused in both modes (eager mode could run some of them, lane by lane, but must
    not accept what compiled code refuses)."""
    with pytest.raises(error, match=message) as info:
        mode(kernel)(torch.randn(7, 9, device=DEVICE), lengths())
    assert line in str(info.value)
