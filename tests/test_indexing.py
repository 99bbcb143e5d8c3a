"""Indexing host tensors on the device: partial slices, offsets of tile indices (stencils)
with automatic bounds masks, gathers, and `tc.load`/`tc.store` with masks, in both modes."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from conftest import DEVICE

import tilecraft as tc
from tilecraft.exc import DtypeError, ShapeMismatch, UnsupportedOperation, UnsupportedSyntax
from tilecraft.language.indexing import read, write
from tilecraft.testing import assert_close, check_modes

SHAPES = [(37, 19), (1, 1), (5, 2), (16, 32)]  # ragged, single element, tiny, divisible


def shape_id(shape: tuple[int, ...]) -> str:
    return "x".join(map(str, shape))


def randn(*shape: int) -> torch.Tensor:
    return torch.randn(shape, device=DEVICE)


# -- partial slices ---------------------------------------------------------------------


@tc.kernel
def halves(x: torch.Tensor) -> torch.Tensor:
    m, n = x.size()
    d = (n + 1) // 2
    out = torch.zeros([m, 2 * n + 1], dtype=x.dtype, device=x.device)
    for tile in tc.tile(m):  # each column written once: stores of one program may race
        out[tile, :d] = x[tile, :d] * 2 + x[tile, n - d : n]
        out[tile, d:n] = x[tile, d:] - 1
        out[tile, n : 2 * n : 2] = x[tile, ::2]
        out[tile, 2 * n] = x[tile, 2:].sum(-1) if n > 2 else x[tile, 0]
    return out


def halves_reference(x: torch.Tensor) -> torch.Tensor:
    m, n = x.shape
    d = (n + 1) // 2
    out = torch.zeros(m, 2 * n + 1, device=x.device)
    out[:, :d] = x[:, :d] * 2 + x[:, n - d : n]
    out[:, d:n] = x[:, d:] - 1
    out[:, n : 2 * n : 2] = x[:, ::2]
    out[:, 2 * n] = x[:, 2:].sum(-1) if n > 2 else x[:, 0]
    return out


@pytest.mark.parametrize("shape", SHAPES, ids=shape_id)
def test_partial_slices(shape, mode) -> None:
    x = randn(*shape)
    assert_close(mode(halves)(x), halves_reference(x))


@tc.kernel
def slice_both_ways(x: torch.Tensor, start: int | None, stop: int | None, step: int | None):
    m, n = x.size()
    width = len(range(*slice(start, stop, step).indices(n)))
    read = torch.empty([m, width], dtype=x.dtype, device=x.device)
    written = torch.zeros_like(x)
    for tile in tc.tile(m):
        read[tile, :] = x[tile, start:stop:step]
        written[tile, start:stop:step] = x[tile, :width] + 1
    return read, written


def _random_slices(count: int, n: int) -> list[tuple[int | None, ...]]:
    """Seeded random non-empty slices of a dim of `n`: negative, clipped and `None` bounds."""
    rng = torch.Generator().manual_seed(7)

    def pick(low: int, high: int) -> int | None:
        value = int(torch.randint(low, high, (1,), generator=rng))
        return None if value == high - 1 else value

    found: list[tuple[int | None, ...]] = []
    while len(found) < count:
        bounds = (pick(-n - 3, n + 4), pick(-n - 3, n + 4), pick(1, 5))
        found += [bounds] if len(range(*slice(*bounds).indices(n))) else []
    return found


@pytest.mark.parametrize("bounds", _random_slices(6, 19), ids=str)
def test_random_slices_match_pytorch(bounds, mode) -> None:
    x = randn(37, 19)
    start, stop, step = bounds
    width = len(range(*slice(start, stop, step).indices(19)))
    written = torch.zeros_like(x)
    written[:, start:stop:step] = x[:, :width] + 1
    assert_close(mode(slice_both_ways)(x, start, stop, step), (x[:, start:stop:step], written))


@pytest.mark.parametrize(
    "config",
    [{"reduction_loops": [4, 4, 4]}, {"indexing": "tensor_descriptor"}],
    ids=["looped", "descriptor"],
)
def test_partial_slices_with_knobs(config) -> None:
    x = randn(37, 19)
    kernel = tc.kernel(halves.fn, config=tc.Config(block_sizes=[16], **config))
    assert_close(kernel(x), halves_reference(x))


@tc.kernel
def tail(x: torch.Tensor, k: int) -> torch.Tensor:
    out = torch.empty([x.size(0), x.size(1) - k], dtype=x.dtype, device=x.device)
    for tile in tc.tile(x.size(0)):
        out[tile, :] = x[tile, k:]
    return out


@pytest.mark.parametrize(("k", "style"), [(8, "x_desc"), (3, "tl.load(x + (")])
def test_tensor_descriptors_start_at_aligned_slices(k, style) -> None:
    x = randn(37, 24)
    kernel = tc.kernel(tail.fn, config=tc.Config(block_sizes=[16], indexing="tensor_descriptor"))
    assert style in kernel.bind((x, k)).to_triton_code(kernel.config)
    assert torch.equal(kernel(x, k), x[:, k:])


@tc.kernel
def from_column(x: torch.Tensor, begin: int) -> torch.Tensor:
    out = torch.zeros_like(x)
    for tile_m in tc.tile(x.size(0)):
        for tile_n in tc.tile(begin, x.size(1)):
            out[tile_m, tile_n] = x[tile_m, tile_n] * 2
    return out


@pytest.mark.parametrize(("begin", "style"), [(8, "x_desc"), (3, "tl.load(x + (")])
def test_tensor_descriptors_start_at_aligned_tile_loops(begin, style) -> None:
    """A tile loop from column 3 read float32 through a descriptor at offset 3 (12 bytes):
    Triton's interpreter refused it ("block offset start must be 16-byte aligned", memory
    fuzzer seed 513, kernel 236); it now reads through pointers there."""
    x = randn(9, 40)
    config = tc.Config(block_sizes=[8, 16], indexing="tensor_descriptor")
    kernel = tc.kernel(from_column.fn, config=config)
    assert style in kernel.bind((x, begin)).to_triton_code(config)
    expected = torch.zeros_like(x)
    expected[:, begin:] = x[:, begin:] * 2
    assert torch.equal(kernel(x, begin), expected)


def test_slices_of_equal_length_share_a_block() -> None:
    x = randn(8, 12)
    code = halves.bind((x,)).to_triton_code(tc.Config(block_sizes=[8]))
    assert "(6 + indices_1)" in code and "(2 * indices_" in code
    assert "_RBLOCK_1" in code and "_RBLOCK_3" not in code


# -- offsets of tile indices: stencils ------------------------------------------------------


@tc.kernel
def neighbours(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in tc.tile(x.size(0)):
        out[tile] = x[tile.index - 1] + 2 * x[tile] + x[tile.index + 1]
    return out


@pytest.mark.parametrize("n", [1, 2, 37, 64])
def test_offsets_read_zero_outside(n, mode) -> None:
    x = randn(n)
    padded = F.pad(x, (1, 1))
    assert_close(mode(neighbours)(x), padded[:-2] + 2 * x + padded[2:])


@tc.kernel
def cross(x: torch.Tensor, dy: int, dx: int) -> torch.Tensor:
    h, w = x.size()
    out = torch.empty_like(x)
    for tile_h, tile_w in tc.tile([h, w]):
        up = x[tile_h.index + dy, tile_w]
        left = x[tile_h, tile_w.index + dx]
        corner = x[(tile_h.index + dy)[:, None], (tile_w.index + dx)[None, :]]
        out[tile_h, tile_w] = up + left + corner
    return out


def shifted(x: torch.Tensor, dy: int, dx: int) -> torch.Tensor:
    """`x[i + dy, j + dx]`, zero outside."""
    h, w = x.shape
    rows = torch.arange(h, device=x.device)[:, None] + dy
    cols = torch.arange(w, device=x.device)[None, :] + dx
    inside = (rows >= 0) & (rows < h) & (cols >= 0) & (cols < w)
    return torch.where(inside, x[rows.clamp(0, h - 1), cols.clamp(0, w - 1)], 0.0)


@pytest.mark.parametrize("shape", SHAPES, ids=shape_id)
@pytest.mark.parametrize(("dy", "dx"), [(1, -1), (-2, 3)])
def test_two_dim_stencil(shape, dy, dx, mode) -> None:
    x = randn(*shape)
    expected = shifted(x, dy, 0) + shifted(x, 0, dx) + shifted(x, dy, dx)
    assert_close(mode(cross)(x, dy, dx), expected)


@tc.kernel
def previous_planes(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in tc.tile(x.size(0)):
        out[tile, ...] = x[tile.index - 1, ...] + x[tile, ..., 1:2]
    return out


@pytest.mark.parametrize("n", [1, 37])
def test_ellipsis_with_offsets(n, mode) -> None:
    x = randn(n, 3, 5)
    expected = F.pad(x, (0, 0, 0, 0, 1, 0))[:-1] + x[..., 1:2]
    assert_close(mode(previous_planes)(x), expected)


@tc.kernel
def shift_store(x: torch.Tensor, k: int) -> torch.Tensor:
    out = torch.zeros_like(x)
    for tile in tc.tile(x.size(0)):
        out[tile.index + k] = x[tile]
    return out


@pytest.mark.parametrize("k", [2, -3])
@pytest.mark.parametrize("n", [1, 37])
def test_offsets_do_not_write_outside(k, n, mode) -> None:
    x = randn(n)
    expected = torch.zeros_like(x)
    if k > 0:
        expected[k:] = x[: max(n - k, 0)]
    else:
        expected[: max(n + k, 0)] = x[-k:]
    assert torch.equal(mode(shift_store)(x, k), expected)


@tc.kernel
def previous_row(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for i in tc.grid(x.size(0)):
        out[i, :] = x[i - 1, :]
    return out


@pytest.mark.parametrize("shape", [(5, 19), (1, 3)], ids=shape_id)
def test_negative_scalar_counts_from_the_end(shape, mode) -> None:
    x = randn(*shape)
    assert torch.equal(mode(previous_row)(x), torch.roll(x, 1, 0))


# -- gathers of loaded indices ------------------------------------------------------------


@tc.kernel
def lookup(ids: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    out = torch.empty([ids.size(0), weight.size(1)], dtype=weight.dtype, device=weight.device)
    for tile_b, tile_e in tc.tile(out.size()):
        out[tile_b, tile_e] = weight[ids[tile_b], tile_e]
    return out


def test_out_of_range_gathers_read_zero(mode) -> None:
    ids = torch.tensor([3, -1, 10, 0, 9, -11, 10**6], device=DEVICE)
    weight = randn(10, 5)
    expected = torch.where(((ids >= 0) & (ids < 10))[:, None], weight[ids.clamp(0, 9)], 0.0)
    assert torch.equal(mode(lookup)(ids, weight), expected)


@tc.kernel
def scatter_add(ids: torch.Tensor, x: torch.Tensor, size: int) -> torch.Tensor:
    out = torch.zeros([size], dtype=x.dtype, device=x.device)
    for tile in tc.tile(x.size(0)):
        values = x[tile]
        tc.atomic_add(out, [ids[tile]], values, sem="relaxed", extra_mask=values > -1)
    return out


def test_atomic_add_through_repeated_ids(mode) -> None:
    ids = torch.tensor([0, 2, 2, 5, 2, 0, 7, -1], device=DEVICE)
    x = randn(8)
    keep = (ids >= 0) & (ids < 6) & (x > -1)
    expected = torch.zeros(6, device=DEVICE).index_add_(0, ids[keep], x[keep])
    assert_close(mode(scatter_add)(ids, x, 6), expected)
    code = scatter_add.bind((ids, x, 6)).to_triton_code(tc.Config(block_sizes=[8]))
    assert "sem='relaxed'" in code


@tc.kernel
def rows_by_id(ids: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    out = torch.empty([ids.size(0), x.size(1)], dtype=x.dtype, device=x.device)
    for i in tc.grid(ids.size(0)):
        out[i, :] = x[ids[i], :]
    return out


def test_loaded_scalar_ids_count_from_the_end(mode) -> None:
    ids = torch.tensor([2, -1, 0, -5, 4], device=DEVICE)
    x = randn(5, 19)
    assert torch.equal(mode(rows_by_id)(ids, x), x[ids])


# -- tc.load / tc.store with index vectors, masks, other, eviction policy ----------------------


@tc.kernel
def evens(x: torch.Tensor, fill: float) -> tuple[torch.Tensor, torch.Tensor]:
    n = x.size(0)
    out = torch.empty([(n + 1) // 2], dtype=x.dtype, device=x.device)
    later = torch.zeros([(n + 1) // 2], dtype=x.dtype, device=x.device)
    for tile in tc.tile(out.size(0)):
        keep = tile.index % 3 != 0
        values = tc.load(x, [tile.index * 2], extra_mask=keep, other=-7.0, eviction_policy="last")
        tc.store(out, [tile], values + fill)
        tc.store(later, [tile.index + 1], values, extra_mask=values < 0)
    return out, later


def evens_reference(x: torch.Tensor, fill: float) -> tuple[torch.Tensor, torch.Tensor]:
    values = x[::2].clone()
    values[::3] = -7.0
    later = torch.zeros_like(values)
    later[1:] = torch.where(values[:-1] < 0, values[:-1], 0.0)
    return values + fill, later


@pytest.mark.parametrize("n", [1, 2, 37])
def test_load_with_index_vector_mask_and_other(n, mode) -> None:
    x = randn(n)
    assert_close(mode(evens)(x, 0.5), evens_reference(x, 0.5))


@tc.kernel
def causal_depthwise_conv1d(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """Helion's style: explicit loads at shifted positions, masked by hand."""
    batch, channels, length = x.size()
    taps = weight.size(1)
    out = torch.empty_like(x)
    for tile_b, tile_c, tile_t in tc.tile([batch, channels, length], block_size=[1, None, None]):
        positions = tile_t.index
        acc = tc.zeros([tile_c, tile_t], dtype=torch.float32)
        for tap in range(taps):
            shift = taps - 1 - tap
            keep = (positions >= shift)[None, :]
            seen = tc.load(x, [tile_b.begin, tile_c, positions - shift], extra_mask=keep)
            acc = acc + seen.to(torch.float32) * weight[tile_c, tap][:, None]
        out[tile_b, tile_c, tile_t] = acc[None, :, :].to(out.dtype)
    return out


@pytest.mark.parametrize("shape", [(2, 5, 37), (1, 1, 1)], ids=shape_id)
def test_helion_style_shifted_loads(shape, mode) -> None:
    x, weight = randn(*shape), randn(shape[1], 4)
    expected = F.conv1d(F.pad(x, (3, 0)), weight[:, None], groups=shape[1])
    assert_close(mode(causal_depthwise_conv1d)(x, weight), expected)


def test_eviction_policy_reaches_triton() -> None:
    code = evens.bind((randn(37), 0.5)).to_triton_code(tc.Config(block_sizes=[16]))
    assert "eviction_policy='evict_last'" in code and "other=-7.0" in code


@tc.kernel
def bad_policy(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in tc.tile(x.size(0)):
        out[tile] = tc.load(x, [tile], eviction_policy="evict_sometimes")
    return out


@tc.kernel
def device_bound_slice(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in tc.tile(x.size(0)):
        out[tile, :] = x[tile, tile.begin :]
    return out


@tc.kernel
def index_out_of_bounds(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in tc.tile(x.size(0)):
        out[tile, 0] = x[tile, 5]
    return out


@tc.kernel
def boolean_index(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in tc.tile(x.size(0)):
        out[tile, :] = x[tile.index > 1, :]
    return out


@pytest.mark.parametrize(
    ("kernel", "error", "message"),
    [
        (bad_policy, UnsupportedOperation, "evict_sometimes"),
        (boolean_index, DtypeError, "extra_mask=mask"),
        (device_bound_slice, UnsupportedSyntax, "slice bounds must be ints"),
        (index_out_of_bounds, ShapeMismatch, "index 5 is out of bounds"),
    ],
)
def test_indexing_errors_name_the_line(kernel, error, message) -> None:
    x = randn(4, 3)
    with pytest.raises(error, match=message) as info:
        kernel.bind((x if kernel is not bad_policy else x[:, 0],)).to_triton_code()
    assert "test_indexing.py" in str(info.value)


# -- eager semantics ------------------------------------------------------------------------


def test_eager_reads_mask_index_tensors_where_pytorch_would_fail() -> None:
    x = torch.arange(24.0).view(2, 3, 4)
    rows, cols = torch.tensor([[-1], [1], [3]]), torch.tensor([[0, 4, 2]])
    got = read(x, (1, rows, cols))
    ok = (rows >= 0) & (rows < 3) & (cols >= 0) & (cols < 4)
    assert torch.equal(got, torch.where(ok, x[1, rows.clamp(0, 2), cols.clamp(0, 3)], 0.0))
    got = read(x, (..., torch.tensor([5, 1])), other=-1.0)  # trailing dim through `...`
    assert torch.equal(got, torch.stack([torch.full((2, 3), -1.0), x[..., 1]], -1))
    assert torch.equal(read(x, (torch.tensor(-1),)), x[-1])  # 0-d: an int, as in PyTorch
    assert read(torch.empty(0, 2), (torch.tensor([0, 1]), slice(None))).eq(0).all()


def test_eager_writes_skip_out_of_range_positions() -> None:
    x = torch.zeros(3, 4)
    write(x, (torch.tensor([-1, 0, 3]), slice(1, 3)), torch.tensor([[1.0, 2.0]]))
    expected = torch.zeros(3, 4)
    expected[0, 1:3] = torch.tensor([1.0, 2.0])
    assert torch.equal(x, expected)


# -- tiles reaching past a tensor's end (Helion lets them, with manual masks) ------------------


@tc.kernel
def concat_columns(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    m, n = x.size()
    out = torch.empty([m, n + y.size(1)], dtype=x.dtype, device=x.device)
    for tile_m, tile_n in tc.tile(out.size()):
        columns = tile_n.index
        left = tc.load(x, [tile_m, tile_n], extra_mask=(columns < n)[None, :])
        right = tc.load(y, [tile_m, columns - n], extra_mask=(columns >= n)[None, :])
        out[tile_m, tile_n] = torch.where((columns < n)[None, :], left, right)
    return out


@pytest.mark.parametrize("shape", [(37, 19), (1, 1)], ids=shape_id)
def test_tiles_reaching_past_the_end_read_zero(shape, mode) -> None:
    x, y = randn(*shape), randn(shape[0], 7)
    assert_close(mode(concat_columns)(x, y), torch.cat([x, y], dim=1))


@tc.kernel
def overruns(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in tc.tile(x.size(0) + 5):
        out[tile] = x[tile] + 1
    return out


def test_a_tile_range_past_the_tensor_stays_inside(mode) -> None:
    x = randn(37)
    assert_close(mode(overruns)(x), x + 1)


@tc.kernel
def _gather_scalar(x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    out = torch.zeros(idx.shape, dtype=x.dtype, device=x.device)
    for b in tc.grid(idx.size(0)):
        j = idx[b]
        out[b] = x[j]
        x[j] = x[j] * 0 - 1.0  # a write through the same scalar index
    return out


def test_device_scalar_indices_agree_in_every_mode() -> None:
    """An index the kernel computed counts from the end when negative (as in PyTorch) and
    reads 0 / writes nothing outside [-size, size) (where PyTorch raises), in both modes."""
    x = torch.arange(5.0) + 1
    idx = torch.tensor([0, 3, 7, -1, -6, 2])  # no two read or write one element: no races

    def reference(x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        out = torch.zeros(idx.shape, dtype=x.dtype)
        for b, j in enumerate(idx.tolist()):
            if -x.numel() <= j < x.numel():
                out[b] = x[j]
                x[j] = -1.0
        return out

    check_modes(_gather_scalar, (x, idx), reference)
    check_modes(_gather_scalar, (torch.empty(0), idx), reference)  # every index out of range
    check_modes(_gather_scalar, (x, idx[:0]), reference)  # no index at all


@tc.kernel
def halves_by_id(x: torch.Tensor, ids: torch.Tensor, out: torch.Tensor) -> None:
    for tile_m in tc.tile(1, 10):
        for tile_n in tc.tile(9):
            out[ids[tile_m], tile_n] = x[tile_m.index // 2, tile_n]


def test_tiles_past_the_end_beside_index_tiles(mode) -> None:
    """`tile_n` reaches past `x`'s one column and `out`'s seven beside an index tile: eager
    mode clipped its slice, so `x[...]` gave one column, broadcast to every column of
    `out` (seed 2 of tests/test_fuzz_memory.py); positions past the end read 0."""
    x = torch.arange(1.0, 5.0, device=DEVICE)[:, None]
    ids = torch.tensor([31, 16, -1, 33, 2, 5, 0, 34, 15, 3], device=DEVICE)
    out = torch.full((7, 7), 99.0, device=DEVICE)
    mode(halves_by_id)(x, ids, out)
    expected = torch.full((7, 7), 99.0, device=DEVICE)
    for m in range(1, 10):
        if 0 <= ids[m] < 7:
            expected[ids[m]] = 0.0
            expected[ids[m], 0] = x[m // 2, 0] if m // 2 < 4 else 0.0
    assert torch.equal(out, expected)
