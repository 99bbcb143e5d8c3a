"""Eager mode, the compiled kernel and PyTorch agree: NaN in reductions, gathers, masks."""

from __future__ import annotations

import pytest
import torch
from conftest import DEVICE

import tilecraft as tc
from tilecraft.exc import HostCodeError, ShapeMismatch, UnsupportedOperation
from tilecraft.testing import check_modes, run_mode

NAN, INF = float("nan"), float("inf")

# -- NaN in reductions ---------------------------------------------------------------------


@tc.kernel
def row_reduce(x: torch.Tensor, op: str) -> torch.Tensor:
    m, n = x.size()
    dtype = torch.int64 if op.startswith("arg") or op.endswith("indices") else x.dtype
    out = torch.empty(m, dtype=dtype, device=x.device)
    for tile_m in tc.tile(m):
        row = x[tile_m, :]
        if op == "amax":
            r = torch.amax(row, dim=1)
        elif op == "amin":
            r = row.amin(dim=-1)
        elif op == "max_values":
            r = torch.max(row, dim=1).values
        elif op == "min_indices":
            r = torch.min(row, 1)[1]
        elif op == "argmax":
            r = torch.argmax(row, dim=1)
        elif op == "argmin":
            r = row.argmin(dim=-1)
        out[tile_m] = r
    return out


ROW_REDUCTIONS = {
    "amax": lambda r: r.amax(1),
    "amin": lambda r: r.amin(1),
    "max_values": lambda r: r.max(1).values,
    "min_indices": lambda r: r.min(1).indices,
    "argmax": lambda r: r.argmax(1),
    "argmin": lambda r: r.argmin(1),
}


def with_nan(m: int, n: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Rows with no NaN, one NaN (first, middle, last), several NaN, all NaN, and +-inf."""
    x = torch.randn(m, n, device=DEVICE)
    x[1, n // 2] = NAN
    x[2, 0] = NAN
    x[3, n - 1] = NAN
    x[4, 1::3] = NAN
    x[5, :] = NAN
    x[6, :] = -INF
    x[7, n // 3] = INF
    x[7, n - 1] = NAN
    x[8, :] = x[8, 0]  # all tied
    return x.to(dtype)


@pytest.mark.parametrize("chunk", [None, 8], ids=["one_block", "looped"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["f32", "f16"])
@pytest.mark.parametrize("op", ROW_REDUCTIONS)
def test_reductions_propagate_nan(op, dtype, chunk) -> None:
    x = with_nan(10, 37, dtype)
    kernel = tc.kernel(row_reduce.fn, config=tc.Config(reduction_loops=[chunk]))
    check_modes(kernel, (x, op), lambda t, _: ROW_REDUCTIONS[op](t), dtype)


@pytest.mark.parametrize("chunk", [None, 8], ids=["one_block", "looped"])
def test_integer_reductions(chunk) -> None:
    x = torch.randint(-5, 5, (10, 37), dtype=torch.int32, device=DEVICE)
    kernel = tc.kernel(row_reduce.fn, config=tc.Config(reduction_loops=[chunk]))
    for op in ("amax", "argmin", "min_indices"):
        check_modes(kernel, (x, op), lambda t, _, op=op: ROW_REDUCTIONS[op](t))


@tc.kernel
def column_argmax(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty(x.size(1), dtype=torch.int64, device=x.device)
    for tile_n in tc.tile(x.size(1)):
        out[tile_n] = torch.argmax(x[:, tile_n], dim=0)
    return out


def test_argmax_over_a_leading_dim_with_nan() -> None:
    x = with_nan(10, 37).T.contiguous()
    check_modes(column_argmax, (x,), lambda t: t.argmax(0))


# -- gathers follow PyTorch's advanced indexing ----------------------------------------------


@tc.kernel
def gather_pairs(image: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
    out = torch.empty(rows.size(0), dtype=image.dtype, device=image.device)
    for tile in tc.tile(rows.size(0)):
        out[tile] = image[rows[tile], cols[tile]]
    return out


@tc.kernel
def gather_outer(image: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
    out = torch.empty(rows.size(0), cols.size(0), dtype=image.dtype, device=image.device)
    for tile_r, tile_c in tc.tile([rows.size(0), cols.size(0)]):
        out[tile_r, tile_c] = image[rows[tile_r][:, None], cols[tile_c][None, :]]
    return out


@tc.kernel
def gather_split(x: torch.Tensor, first: torch.Tensor, last: torch.Tensor) -> torch.Tensor:
    out = torch.empty(first.size(0), x.size(1), dtype=x.dtype, device=x.device)
    for tile in tc.tile(first.size(0)):
        out[tile, :] = x[first[tile], :, last[tile]]
    return out


@tc.kernel
def gather_rows_of_tiles(x: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    out = torch.empty(rows.size(0), x.size(1), dtype=x.dtype, device=x.device)
    for tile_r, tile_c in tc.tile([rows.size(0), x.size(1)]):
        out[tile_r, tile_c] = x[rows[tile_r], tile_c]
    return out


def test_two_index_tiles_pair_up() -> None:
    image = torch.randn(9, 9, device=DEVICE)  # square: an outer product would fit silently
    rows = torch.randint(0, 9, (9,), device=DEVICE)
    cols = torch.randint(0, 9, (9,), device=DEVICE)
    check_modes(gather_pairs, (image, rows, cols), lambda im, r, c: im[r, c])


def test_index_tiles_broadcast_to_an_outer_product() -> None:
    image = torch.randn(11, 7, device=DEVICE)
    rows = torch.randint(0, 11, (5,), device=DEVICE)
    cols = torch.randint(0, 7, (13,), device=DEVICE)
    check_modes(gather_outer, (image, rows, cols), lambda im, r, c: im[r[:, None], c[None, :]])


def test_separated_index_tiles_go_first() -> None:
    x = torch.randn(5, 6, 7, device=DEVICE)
    first = torch.randint(0, 5, (11,), device=DEVICE)
    last = torch.randint(0, 7, (11,), device=DEVICE)
    check_modes(gather_split, (x, first, last), lambda t, f, e: t[f, :, e])


def test_an_index_tile_and_a_tile_stay_outer() -> None:
    x = torch.randn(8, 19, device=DEVICE)
    rows = torch.randint(0, 8, (13,), device=DEVICE)
    check_modes(gather_rows_of_tiles, (x, rows), lambda t, r: t[r])


@tc.kernel
def gather_two_tiles(image: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
    out = torch.empty(rows.size(0), cols.size(0), dtype=image.dtype, device=image.device)
    for tile_r, tile_c in tc.tile([rows.size(0), cols.size(0)]):
        out[tile_r, tile_c] = image[rows[tile_r], cols[tile_c]]
    return out


def test_index_tiles_over_different_tiles_do_not_broadcast() -> None:
    image = torch.randn(9, 9, device=DEVICE)
    rows = torch.randint(0, 9, (9,), device=DEVICE)
    with pytest.raises(ShapeMismatch, match="do not broadcast"):
        gather_two_tiles(image, rows, rows)


# -- extra_mask: masked-off elements are neither read nor written -----------------------------


@tc.kernel
def masked_gather(x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    n = x.size(0)
    out = torch.full_like(x, -1.0)
    for tile in tc.tile(n):
        i = idx[tile]
        keep = (i >= 0) & (i < n)
        v = tc.load(x, [i], extra_mask=keep, other=0.5)
        tc.store(out, [i], v + 1, extra_mask=keep & (v > 0))
    return out


def masked_gather_reference(x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    keep = (idx >= 0) & (idx < x.size(0))
    v = torch.where(keep, x[idx.clamp(0, x.size(0) - 1)], 0.5)
    out = torch.full_like(x, -1.0)
    write = keep & (v > 0)
    out[idx[write]] = v[write] + 1
    return out


def test_masked_gather_with_out_of_range_indices() -> None:
    n = 37
    x = torch.randn(n, device=DEVICE)
    idx = torch.randperm(2 * n, device=DEVICE)[:n] - 5  # distinct, some < 0 and some >= n
    check_modes(masked_gather, (x, idx), masked_gather_reference)


@tc.kernel
def masked_rows(x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    m, n = x.size()
    out = torch.zeros_like(x)
    for tile_m, tile_n in tc.tile([m, n]):
        keep = tile_n.index[None, :] < lengths[tile_m][:, None]
        row = tc.load(x, [tile_m, tile_n], extra_mask=keep)
        tc.store(out, [tile_m, tile_n], row * 2, extra_mask=keep)
    return out


def test_mask_per_row_length() -> None:
    x = torch.randn(13, 21, device=DEVICE)
    lengths = torch.randint(0, 22, (13,), device=DEVICE)
    keep = torch.arange(21, device=DEVICE)[None, :] < lengths[:, None]
    check_modes(masked_rows, (x, lengths), lambda t, _: torch.where(keep, t * 2, 0))


@tc.kernel
def histogram(values: torch.Tensor, bins: int) -> torch.Tensor:
    counts = torch.zeros(bins, device=values.device)
    for tile in tc.tile(values.size(0)):
        v = values[tile]
        tc.atomic_add(counts, [v], 1.0, extra_mask=v < bins)
    return counts


def test_atomic_add_counts_repeated_indices() -> None:
    values = torch.randint(0, 9, (50,), device=DEVICE)  # some beyond the 6 bins
    reference = lambda v, b: torch.bincount(v[v < b], minlength=b).float()  # noqa: E731
    check_modes(histogram, (values, 6), reference)


@tc.kernel
def mask_of_wrong_shape(x: torch.Tensor) -> torch.Tensor:
    out = torch.zeros_like(x)
    for tile_m, tile_n in tc.tile(x.size()):
        out[tile_m, tile_n] = tc.load(x, [tile_m, tile_n], extra_mask=tile_m.index > 3)
    return out


def test_mask_that_does_not_broadcast_is_refused() -> None:
    with pytest.raises(ShapeMismatch, match="extra_mask"):
        mask_of_wrong_shape(torch.randn(9, 9, device=DEVICE))


# -- host values in device code ------------------------------------------------------------


@tc.kernel
def scaled(x: torch.Tensor, alpha: torch.Tensor, shift: float, k: int) -> torch.Tensor:
    out = torch.empty_like(x)
    half = shift / 2
    twice = k * 2
    for tile in tc.tile(x.size(0)):
        v = x[tile] * alpha + half
        v = torch.where(v > alpha, v, -alpha) + twice
        out[tile] = torch.minimum(v, alpha * 10)
    return out


def scaled_reference(x, alpha, shift, k):
    v = x * alpha + shift / 2
    v = torch.where(v > alpha, v, -alpha) + k * 2
    return torch.minimum(v, alpha * 10).to(x.dtype)


@pytest.mark.parametrize(
    ("dtype", "alpha"),
    [(torch.float32, 1.5), (torch.float32, 3), (torch.float16, -0.75)],
    ids=["f32", "int-alpha", "f16"],
)
def test_0d_tensors_and_numbers_from_the_host(dtype, alpha) -> None:
    x = (torch.randn(37, device=DEVICE) * 4).to(dtype)
    args = (x, torch.tensor(alpha, device=DEVICE), 0.25, 3)
    check_modes(scaled, args, scaled_reference, dtype)


@tc.kernel
def uses_host_list(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    weights = [1.0, 2.0]
    for tile in tc.tile(x.size(0)):
        out[tile] = x[tile] * weights
    return out


@tc.kernel
def uses_host_vector(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    weights = torch.ones(2)
    for tile in tc.tile(x.size(0)):
        out[tile] = x[tile] + weights
    return out


class Settings:
    scale = 2.0


@tc.kernel
def uses_an_object(x: torch.Tensor, settings: Settings) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in tc.tile(x.size(0)):
        out[tile] = x[tile] * settings
    return out


@pytest.mark.parametrize(
    ("kernel", "args", "name", "what"),
    [
        (uses_host_list, (), "`weights`", "list"),
        (uses_host_vector, (), "`weights`", "shape [2]"),
        (uses_an_object, (Settings(),), "`settings`", "Settings"),
    ],
    ids=["list", "vector", "object"],
)
def test_host_values_that_cannot_be_used_name_the_variable(kernel, args, name, what) -> None:
    with pytest.raises(UnsupportedOperation) as info:
        kernel(torch.randn(5, device=DEVICE), *args)
    assert name in info.value.message and what in info.value.message
    assert "out[tile] = x[tile]" in info.value.loc.text


# -- dtype promotion: scalars on the device are weak, as 0-d tensors are in PyTorch ----------


@tc.kernel
def weak_scalars(
    x: torch.Tensor, k: torch.Tensor, y: torch.Tensor, w: torch.Tensor
) -> torch.Tensor:
    out = torch.empty(x.shape, dtype=torch.float32, device=x.device)
    for tile in tc.tile(x.size(0)):
        product = x[tile] * k  # int8 * 0-d int64: int8, wrapping as PyTorch's does
        scaled = y[tile] * w  # float16 * 0-d float32: float16
        out[tile] = (product // 3).to(torch.float32) + (scaled * 1000).to(torch.float32)
    return out


def weak_scalars_reference(x, k, y, w) -> torch.Tensor:
    return ((x * k) // 3).float() + (y * w * 1000).float()


def test_0d_values_promote_weakly() -> None:
    x = torch.randint(-120, 120, (37,), dtype=torch.int8, device=DEVICE)
    y = torch.randn(37, device=DEVICE).half()
    args = (x, torch.tensor(3, device=DEVICE), y, torch.tensor(1.37, device=DEVICE))
    check_modes(weak_scalars, args, weak_scalars_reference, torch.float16)


@tc.kernel
def pick_row(x: torch.Tensor, row: torch.Tensor) -> torch.Tensor:
    out = torch.empty(x.size(1), dtype=x.dtype, device=x.device)
    for tile in tc.tile(x.size(1)):
        out[tile] = x[row, tile] * 2
    return out


def test_a_0d_tensor_indexes_with_its_value() -> None:
    x = torch.randn(5, 19, device=DEVICE)
    check_modes(pick_row, (x, torch.tensor(3, device=DEVICE)), lambda t, r: t[r] * 2)


@tc.kernel
def tile_argmax(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty(x.size(0), x.size(1) // 8, dtype=torch.int64, device=x.device)
    for tile_m, tile_n in tc.tile(x.size(), block_size=[4, 8]):
        out[tile_m, tile_n.id] = torch.argmax(x[tile_m, tile_n], dim=1)
    return out


def test_argmax_over_a_tile_dim_is_local_and_finds_nan() -> None:
    x = with_nan(10, 32)
    check_modes(tile_argmax, (x,), lambda t: t.view(10, 4, 8).argmax(-1))


# -- host constants that the specialization does not pin down ---------------------------------


@tc.kernel
def offset_by_scale(x: torch.Tensor, scale: float) -> torch.Tensor:
    out = torch.empty_like(x)
    k = int(scale * 10)
    for tile in tc.tile(x.size(0)):
        out[tile] = x[tile] + k
    return out


class Options:
    def __init__(self, k: int) -> None:
        self.k = k


@tc.kernel
def offset_by_option(x: torch.Tensor, options: Options, table: dict) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in tc.tile(x.size(0)):
        out[tile] = x[tile] + options.k * table["factor"]
    return out


def test_a_changed_host_constant_is_an_error_not_a_stale_answer() -> None:
    x = torch.zeros(5, device=DEVICE)
    assert torch.equal(offset_by_scale(x, 0.5), x + 5)
    assert torch.equal(offset_by_scale(x, 0.55), x + 5)  # the same constant: fine
    with pytest.raises(HostCodeError, match="`k` was 5 and is -3"):
        offset_by_scale(x, -0.3)
    assert torch.equal(offset_by_option(x, Options(2), {"factor": 3}), x + 6)
    with pytest.raises(HostCodeError, match="`options.k` was 2 and is 4"):
        offset_by_option(x, Options(4), {"factor": 3})
    # a dict argument is specialized on what it holds: another value compiles anew
    assert torch.equal(offset_by_option(x, Options(2), {"factor": 1}), x + 2)


@tc.kernel
def affine_from_containers(x: torch.Tensor, scale: float, options: Options) -> torch.Tensor:
    out = torch.empty_like(x)
    params = (scale, -scale)
    for tile in tc.tile(x.size(0)):
        out[tile] = x[tile] * params[0] + params[1] * options.k
    return out


def test_floats_read_from_host_containers_are_arguments_not_constants() -> None:
    """A float in a host tuple or object is passed at each launch, as a float variable is:
    a new value neither raises nor recompiles, in both modes (ints stay guarded constants)."""
    x = torch.randn(19, device=DEVICE)
    for scale, k in ((0.5, 2.0), (0.7, 3.5), (float("inf"), 1.0)):
        check_modes(
            affine_from_containers,
            (x, scale, Options(k)),  # type: ignore[arg-type]  # a float k
            lambda x, s, o: x * s + (-s) * o.k,
        )
    assert len(affine_from_containers._bound) == 1  # one specialization for every value


# -- several stores in one statement ---------------------------------------------------------


@tc.kernel
def stores_in_one_statement(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    a, b, c = torch.empty_like(x), torch.empty_like(x), torch.empty_like(x)
    for t in tc.tile(x.size(0)):
        a[t], (b[t], scaled) = x[t] + 1, (x[t] * 2, x[t] * 3)  # a tuple, a nested one
        c[t] = a[t] = scaled - a[t]  # a chain: the value once, stored to each
    return a, b, c


def test_stores_to_several_subscripts_in_one_statement() -> None:
    def reference(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        a = 3 * x - (x + 1)
        return a, 2 * x, a

    check_modes(stores_in_one_statement, (torch.randn(37, device=DEVICE),), reference)


# -- indices computed as plain ints in a device loop --------------------------------------------


@tc.kernel
def shifted_reads_and_stores(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    out = torch.zeros([x.size(0), 2], dtype=x.dtype, device=x.device)
    last = torch.zeros(x.size(0) + 2, dtype=x.dtype, device=x.device)
    for t in tc.tile(x.size(0), block_size=4):
        out[t, 0] = x[t] * 0 + x[t.begin + 6]  # past the end: reads 0
        out[t, 1] = x[t] * 0 + x[t.begin - 1]  # -1 at the first tile: the last element
        last[t.begin + 8] = x[t.begin]  # past the end of `last` for the later tiles: no store
    return out, last


def test_indices_computed_as_ints_read_zero_and_store_nothing_out_of_range() -> None:
    def reference(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        n = x.size(0)
        begins = torch.arange(n, device=x.device) // 4 * 4
        ahead = torch.where(begins + 6 < n, x[(begins + 6).clamp(max=n - 1)], 0.0)
        last = torch.zeros(n + 2, dtype=x.dtype, device=x.device)
        last[8] = x[0]  # only the first tile's store lands
        return torch.stack([ahead, x[begins - 1]], dim=1), last

    check_modes(shifted_reads_and_stores, (torch.arange(1.0, 11.0, device=DEVICE),), reference)


@tc.kernel
def constant_column(x: torch.Tensor, which: str) -> torch.Tensor:
    out = torch.zeros([x.size(0)], dtype=x.dtype, device=x.device)
    width = x.size(1)
    for t in tc.tile(x.size(0)):
        if which == "last":
            out[t] = x[t, -1]
        elif which == "past":
            out[t] = x[t, 9]  # the line the error names
        elif which == "before":
            out[t] = x[t, -8]
        elif which == "width":
            out[t] = x[t, width + 2]
        else:
            x[t, 7] = out[t]
    return out


@pytest.mark.parametrize("mode", ["eager", "triton"])
@pytest.mark.parametrize("which", ["past", "before", "width", "store"])
def test_constant_indices_out_of_range_are_refused_in_both_modes(mode: str, which: str) -> None:
    # an index known before the loop runs: compiled code refuses it when it compiles, and
    # eager mode (where `t.begin + 9` and 9 are both ints) must not read it as a masked 0
    x = torch.arange(35.0, device=DEVICE).reshape(5, 7)
    with pytest.raises(ShapeMismatch, match="out of bounds for dim 1") as error:
        run_mode(constant_column, (x, which), mode)
    lines = {"past": "x[t, 9]", "before": "x[t, -8]", "width": "x[t, width + 2]"}
    line = lines.get(which, "x[t, 7] = out[t]")
    assert line in str(error.value)


def test_constant_indices_in_range_count_from_the_end_in_both_modes() -> None:
    x = torch.arange(35.0, device=DEVICE).reshape(5, 7)
    check_modes(constant_column, (x, "last"), lambda x, _: x[:, -1].clone())


@tc.kernel
def constant_lane(x: torch.Tensor, lane: int) -> torch.Tensor:
    out = torch.zeros([x.size(0)], dtype=x.dtype, device=x.device)
    for t in tc.tile(x.size(0), block_size=4):
        a = x[t, :] + 1
        out[t] = a[:, lane] if lane == 9 else a[lane, 0]
    return out


@pytest.mark.parametrize("mode", ["eager", "triton"])
def test_constant_index_past_a_tile_values_dim_is_refused(mode: str) -> None:
    x = torch.arange(56.0, device=DEVICE).reshape(8, 7)
    with pytest.raises(ShapeMismatch, match="index 9 is out of") as error:
        run_mode(constant_lane, (x, 9), mode)
    assert "a[:, lane]" in str(error.value)


def test_a_constant_lane_past_a_tile_cut_short_reads_zero_in_both_modes() -> None:
    # rows 4-5 are a tile of 2 in a block of 4: its lane 3 lies past the end (compiled code
    # summed that masked lane's computed value, 0 + 1, where eager mode read 0)
    x = torch.arange(42.0, device=DEVICE).reshape(6, 7)
    expected = torch.tensor([22.0] * 4 + [0.0] * 2, device=DEVICE)
    check_modes(constant_lane, (x, 3), lambda x, _: expected.clone())
