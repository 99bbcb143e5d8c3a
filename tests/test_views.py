"""Views and shape ops on tiles: reshape, permute/transpose, squeeze, expand, integer
indexing, stack/cat/split; both modes against PyTorch on ragged shapes."""

from __future__ import annotations

import re

import pytest
import torch

import tilecraft as tc
from tilecraft.exc import InvalidConfig, LoweringError, ShapeMismatch, UnsupportedOperation
from tilecraft.testing import check_modes


@tc.kernel
def permute3(x: torch.Tensor) -> torch.Tensor:
    b, m, n = x.size()
    out = torch.empty([b, n, m], dtype=x.dtype, device=x.device)
    for tile_b, tile_m in tc.tile([b, m]):
        t = x[tile_b, tile_m, :]
        out[tile_b, :, tile_m] = t.permute(0, 2, 1) + t.transpose(1, 2) - t.mT
    return out


def test_permute_transpose() -> None:
    check_modes(permute3, (torch.randn(3, 37, 6),), lambda x: x.transpose(1, 2).contiguous())


@tc.kernel
def reverse_t(x: torch.Tensor) -> torch.Tensor:
    b, m, n = x.size()
    out = torch.empty([n, m, b], dtype=x.dtype, device=x.device)
    for tile_m in tc.tile(m):
        out[:, tile_m, :] = x[:, tile_m, :].T
    return out


@pytest.mark.filterwarnings("ignore:The use of `x.T`")
def test_dot_t_reverses_all_dims() -> None:
    check_modes(reverse_t, (torch.randn(3, 21, 5),), lambda x: x.permute(2, 1, 0).contiguous())


@tc.kernel
def split_dims(x: torch.Tensor) -> torch.Tensor:
    m, n = x.size()
    out = torch.empty([m, n // 8], dtype=x.dtype, device=x.device)
    for tile_m in tc.tile(m):
        out[tile_m, :] = x[tile_m, :].reshape(tile_m, -1, 8).sum(-1)
    return out


@pytest.mark.parametrize("n", [24, 32, 8])
def test_reshape_splits_a_static_dim(n: int) -> None:
    check_modes(split_dims, (torch.randn(19, n),), lambda x: x.reshape(19, -1, 8).sum(-1))


@tc.kernel
def merge_dims(x: torch.Tensor) -> torch.Tensor:
    m, a, c = x.size()
    out = torch.empty([m, a * c], dtype=x.dtype, device=x.device)
    for tile_m in tc.tile(m):
        out[tile_m, :] = x[tile_m, :, :].view(tile_m, a * c) * 2
    return out


MERGED = [(13, 3, 4), (5, 1, 8), (7, 5, 1), (4, 3, 6), (9, 5, 3), (6, 12, 6)]


@pytest.mark.parametrize("shape", MERGED)
def test_reshape_merges_static_dims(shape: tuple) -> None:
    """[3, 6] -> [18] moves elements between lanes (the 6 is padded to 8): a regroup."""
    check_modes(merge_dims, (torch.randn(shape),), lambda x: x.reshape(x.size(0), -1) * 2)


def test_reshape_refuses_a_regroup_of_too_many_lanes() -> None:
    with pytest.raises(UnsupportedOperation, match=r"pairs of lanes is too many"):
        merge_dims(torch.randn(4, 60, 3))


@tc.kernel
def bad_reshape(x: torch.Tensor) -> torch.Tensor:
    m, n = x.size()
    out = torch.empty([n, m], dtype=x.dtype, device=x.device)
    for tile_m in tc.tile(m):
        out[:, tile_m] = x[tile_m, :].reshape(n, tile_m)
    return out


def test_reshape_refuses_moving_a_tile_dim() -> None:
    with pytest.raises(ShapeMismatch, match="must stay whole and in order"):
        bad_reshape(torch.randn(4, 6))


@tc.kernel
def row_max(x: torch.Tensor) -> torch.Tensor:
    m, n = x.size()
    out = torch.empty([m, n], dtype=x.dtype, device=x.device)
    for tile_m in tc.tile(m):
        t = x[tile_m, :]
        top = torch.amax(t, -1, keepdim=True)  # [tile_m, 1]
        flat = top.squeeze(-1).unsqueeze(1).squeeze()
        out[tile_m, :] = t - flat[:, None].expand(tile_m, n) + top.expand_as(t) * 0
    return out


def test_squeeze_unsqueeze_expand() -> None:
    check_modes(row_max, (torch.randn(23, 7),), lambda x: x - x.amax(-1, keepdim=True))


@tc.kernel
def rowwise_products(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    b, m, _ = x.size()
    out = torch.empty([b, m, y.size(2)], dtype=x.dtype, device=x.device)
    for tile_b, tile_m in tc.tile([b, m], block_size=[1, None]):
        a = x[tile_b, tile_m, :].squeeze(0)  # one batch row per program: 2-D tiles
        out[tile_b, tile_m, :] = torch.mm(a, y[tile_b, :, :].squeeze(0))[None, :, :]
    return out


def test_squeeze_drops_a_tile_dim_of_block_size_one() -> None:
    """A tile the kernel fixes at block size 1 holds one position: squeeze drops its dim."""
    check_modes(rowwise_products, (torch.randn(3, 37, 16), torch.randn(3, 16, 20)), torch.bmm)


@tc.kernel
def broadcast_rows(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    m, n = y.size()
    out = torch.empty([m, n], dtype=x.dtype, device=x.device)
    for tile_m in tc.tile(m):
        out[tile_m, :] = torch.broadcast_to(x[tile_m, None], [tile_m, n])
    return out


def test_broadcast_to() -> None:
    check_modes(
        broadcast_rows, (torch.randn(9), torch.zeros(9, 5)), lambda x, y: x[:, None] + 0 * y
    )


@tc.kernel
def pick_columns(x: torch.Tensor) -> torch.Tensor:
    m, n = x.size()
    out = torch.empty([m, 3], dtype=x.dtype, device=x.device)
    for tile_m in tc.tile(m):
        t = x[tile_m, :]
        out[tile_m, 0] = t[:, 1]
        out[tile_m, 1] = t[..., -1]
        out[tile_m, 2] = t[:, None, 0][:, 0]
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int32, torch.bool])
def test_integer_index_of_a_static_dim(dtype: torch.dtype) -> None:
    x = torch.randn(17, 5)
    x[3, 1], x[4, 1], x[5, -1] = float("nan"), -0.0, float("-inf")
    x = x.to(dtype) if dtype != torch.bool else x > 0
    results = check_modes(
        pick_columns, (x,), lambda x: torch.stack([x[:, 1], x[:, -1], x[:, 0]], 1)
    )
    if dtype == torch.float32:  # the sign of a zero survives
        assert all(torch.signbit(r[4, 0]) for r in results.values())


@tc.kernel
def pick_loaded_column(x: torch.Tensor, column: torch.Tensor) -> torch.Tensor:
    m, n = x.size()
    out = torch.empty([m], dtype=x.dtype, device=x.device)
    for tile_m in tc.tile(m):
        out[tile_m] = x[tile_m, :][:, column[0]]
    return out


def test_integer_index_computed_on_the_device() -> None:
    x, column = torch.randn(13, 6), torch.tensor([4])
    check_modes(pick_loaded_column, (x, column), lambda x, c: x[:, 4])


@tc.kernel
def first_of_each_tile(x: torch.Tensor) -> torch.Tensor:
    m, n = x.size()
    out = torch.empty([(m + 3) // 4, n], dtype=x.dtype, device=x.device)
    for tile_m in tc.tile(m, block_size=4):
        out[tile_m.id, :] = x[tile_m, :][0]
    return out


def test_integer_index_of_a_tile_dim() -> None:
    check_modes(first_of_each_tile, (torch.randn(10, 3),), lambda x: x[::4])


def test_integer_index_out_of_range() -> None:
    with pytest.raises(ShapeMismatch, match="index 1 is out of range for a dim of size 1"):
        pick_columns(torch.randn(4, 1))


@tc.kernel
def stack_cat_split(x: torch.Tensor, y: torch.Tensor) -> tuple:
    m, n = x.size()
    k = y.size(1)
    stacked = torch.empty([m, 3], dtype=x.dtype, device=x.device)
    joined = torch.empty([m, n + k], dtype=x.dtype, device=x.device)
    parts = torch.empty([m, n], dtype=x.dtype, device=x.device)
    for tile_m in tc.tile(m):
        a, c = x[tile_m, :], y[tile_m, :]
        stacked[tile_m, :] = torch.stack([a[:, 0], c[:, 1], a[:, 0] * 2], dim=1)
        joined[tile_m, :] = torch.cat([a, c], dim=1)
        left, right = a.split([1, n - 1], dim=1)
        parts[tile_m, :] = torch.cat([right, left], 1)
    return stacked, joined, parts


def _stack_cat_split_ref(x: torch.Tensor, y: torch.Tensor) -> tuple:
    stacked = torch.stack([x[:, 0], y[:, 1], x[:, 0] * 2], 1)
    return stacked, torch.cat([x, y], 1), torch.cat([x[:, 1:], x[:, :1]], 1)


@pytest.mark.parametrize("n,k", [(3, 5), (4, 4), (1, 2)])
def test_stack_cat_split(n: int, k: int) -> None:
    check_modes(stack_cat_split, (torch.randn(11, n), torch.randn(11, k)), _stack_cat_split_ref)


@tc.kernel
def stack_rows(x: torch.Tensor) -> torch.Tensor:
    m = x.size(0)
    out = torch.empty([2, m], dtype=x.dtype, device=x.device)
    for tile_m in tc.tile(m):
        t = x[tile_m]
        out[:, tile_m] = torch.stack([t, -t])
    return out


def test_stack_new_leading_dim() -> None:
    check_modes(stack_rows, (torch.randn(29),), lambda x: torch.stack([x, -x]))


@tc.kernel
def chunk_sum(x: torch.Tensor) -> torch.Tensor:
    m, n = x.size()
    out = torch.empty([m, (n + 1) // 2], dtype=x.dtype, device=x.device)
    for tile_m in tc.tile(m):
        first, second = x[tile_m, :].chunk(2, dim=-1)
        out[tile_m, :] = first * 10
        out[tile_m, : second.size(1)] = first[:, : second.size(1)] * 10 + second
    return out


def test_chunk() -> None:
    def ref(x: torch.Tensor) -> torch.Tensor:
        first, second = x.chunk(2, -1)
        return first * 10 + second

    check_modes(chunk_sum_even, (torch.randn(9, 10),), ref)


@tc.kernel
def chunk_sum_even(x: torch.Tensor) -> torch.Tensor:
    m, n = x.size()
    out = torch.empty([m, n // 2], dtype=x.dtype, device=x.device)
    for tile_m in tc.tile(m):
        first, second = x[tile_m, :].chunk(2, dim=-1)
        out[tile_m, :] = first * 10 + second
    return out


# -- matrix products: out_dtype, transposed operands, int8, fp8 ---------------------------
@tc.kernel
def scores(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    b, m, d = q.size()
    n = k.size(1)
    out = torch.empty([b, m, n], dtype=torch.float32, device=q.device)
    for tile_b, tile_m, tile_n in tc.tile([b, m, n]):
        qt, kt = q[tile_b, tile_m, :], k[tile_b, tile_n, :]
        out[tile_b, tile_m, tile_n] = torch.bmm(qt, kt.transpose(1, 2), torch.float32)
    return out


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_bmm_out_dtype_and_transposed_operand(dtype: torch.dtype) -> None:
    q, k = torch.randn(2, 19, 16, dtype=dtype), torch.randn(2, 21, 16, dtype=dtype)
    ref = lambda q, k: torch.bmm(q.float(), k.float().transpose(1, 2))  # noqa: E731
    check_modes(scores, (q, k), ref, dtype=torch.float16)


@tc.kernel
def mm_t(a: torch.Tensor, b: torch.Tensor, acc_in: torch.Tensor) -> tuple:
    m, k = a.size()
    n = b.size(0)
    plain = torch.empty([m, n], dtype=a.dtype, device=a.device)
    wide = torch.empty(
        [m, n], dtype=torch.int32 if not a.is_floating_point() else torch.float32, device=a.device
    )
    for tile_m, tile_n in tc.tile([m, n]):
        x, y = a[tile_m, :], b[tile_n, :]
        plain[tile_m, tile_n] = x @ y.T
        wide[tile_m, tile_n] = tc.dot(x, y.T, acc=acc_in[tile_m, tile_n])
    return plain, wide


def test_int8_products_accumulate_in_int32() -> None:
    a = torch.randint(-128, 128, (18, 16), dtype=torch.int8)
    b = torch.randint(-128, 128, (20, 16), dtype=torch.int8)
    acc = torch.randint(-1000, 1000, (18, 20), dtype=torch.int32)

    def ref(a: torch.Tensor, b: torch.Tensor, acc: torch.Tensor) -> tuple:
        exact = a.int() @ b.int().T
        return exact.to(torch.int8), acc + exact

    check_modes(mm_t, (a, b, acc), ref)


@tc.kernel
def dot_out_dtype(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    m, k = a.size()
    n = b.size(1)
    out = torch.empty([m, n], dtype=torch.float32, device=a.device)
    for tile_m, tile_n in tc.tile([m, n]):
        acc = tc.zeros([tile_m, tile_n], dtype=torch.float32)
        for tile_k in tc.tile(k, block_size=16):
            acc = tc.dot(a[tile_m, tile_k], b[tile_k, tile_n], acc=acc, out_dtype=torch.float16)
        out[tile_m, tile_n] = acc + tc.dot(
            a[tile_m, 0:16], b[0:16, tile_n], out_dtype=torch.float16
        )
    return out


def test_dot_out_dtype_rounds_each_product() -> None:
    def ref(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        parts = [a[:, i : i + 16].float() @ b[i : i + 16].float() for i in range(0, 40, 16)]
        acc = sum(p.half().float() for p in parts)
        return acc + parts[0].half().float()

    a, b = torch.randn(17, 40) * 30, torch.randn(40, 9) * 30
    check_modes(dot_out_dtype, (a, b), ref)


@tc.kernel
def fp8_mm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    m, k = a.size()
    n = b.size(1)
    out = torch.empty([m, n], dtype=torch.float32, device=a.device)
    for tile_m, tile_n in tc.tile([m, n]):
        acc = tc.zeros([tile_m, tile_n], dtype=torch.float32)
        for tile_k in tc.tile(k):
            acc = tc.dot(a[tile_m, tile_k], b[tile_k, tile_n], acc=acc)
        out[tile_m, tile_n] = acc
    return out


@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, torch.float8_e5m2])
def test_fp8_products(dtype: torch.dtype, monkeypatch: pytest.MonkeyPatch) -> None:
    """Both modes numerically (the interpreter multiplies fp8 in float32, exactly); the
    code a GPU gets keeps fp8 operands for its fp8 units (checked on the H200)."""
    a, b = torch.randn(19, 64).to(dtype), torch.randn(64, 17).to(dtype)
    check_modes(fp8_mm, (a, b), lambda a, b: a.float() @ b.float())
    monkeypatch.setenv("TRITON_INTERPRET", "0")  # the code a GPU gets: fp8 operands as they are
    code = fp8_mm.bind((a, b)).to_triton_code()
    assert re.search(r"tl\.dot\(load(_\d+)?, load_\d+, acc=", code), code


@tc.kernel
def join_split(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    m = x.size(0)
    out = torch.empty([m, 2], dtype=x.dtype, device=x.device)
    for tile_m in tc.tile(m):
        pairs = tc.join(x[tile_m], y[tile_m])
        first, second = tc.split(pairs * 2)
        out[tile_m, :] = tc.join(second, first)
    return out


def test_join_and_split() -> None:
    check_modes(
        join_split, (torch.randn(19), torch.randn(19)), lambda x, y: torch.stack([y, x], 1) * 2
    )


SLICES = {
    "tail": lambda r: r[:, 1:],
    "head": lambda r: r[:, :-2],
    "middle": lambda r: r[:, 2:5],
    "past_the_end": lambda r: r[:, 3:100],
    "empty": lambda r: r[:, 4:2],
    "of_a_3d_row": lambda r: r[:, None, 1:4].squeeze(1),
    "twice": lambda r: r[:, 1:][:, :-1],
    "mixed": lambda r: torch.cat([r[:, :2], r[:, 4:]], -1) * r[:, -1:],
    "stepped": lambda r: r[:, 1::3],
    "stepped_past_the_end": lambda r: r[:, 5:50:4],
}


@tc.kernel(config=tc.Config(block_sizes=[4]))
def row_slices(x: torch.Tensor, name: str) -> torch.Tensor:
    m = x.size(0)
    fn = SLICES[name]
    out = torch.empty([m, *fn(x[:1]).shape[1:]], device=x.device, dtype=x.dtype)
    for tile_m in tc.tile(m):
        out[tile_m, :] = fn(x[tile_m, :])
    return out


@pytest.mark.parametrize("name", list(SLICES))
def test_slices_of_a_tile_along_a_dim_of_constant_size(name: str) -> None:
    """`row[:, 1:]`, `row[:, 2:5]` (Helion users' partial slices) were refused."""
    check_modes(row_slices, (torch.randn(11, 7), name), lambda x, n: SLICES[n](x))


@tc.kernel
def sized_rows(x: torch.Tensor) -> torch.Tensor:
    m, n = x.size()
    out = torch.empty([m, n // 2], dtype=x.dtype, device=x.device)
    for tile_m in tc.tile(m):
        row = x[tile_m, :]
        halves = row.reshape(row.size(0), row.shape[1] // 2, 2)
        out[tile_m, :] = halves.sum(-1) * (row.dim() + row.ndim + row.size()[1] - 10)
    return out


def test_size_and_shape_of_a_tile() -> None:
    """`row.size(0)` (the tile's own dim in a shape), `row.shape[1]` (a constant), `dim()`
    and `ndim` on a tile were refused (`size` is not supported on tiles)."""
    check_modes(sized_rows, (torch.randn(13, 8),), lambda x: x.reshape(13, 4, 2).sum(-1) * 2)


@tc.kernel
def stepped(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty([x.size(0), 4], dtype=x.dtype, device=x.device)
    for tile_m in tc.tile(x.size(0)):
        out[tile_m, :] = x[tile_m, :][:, ::2]
    return out


def test_a_stepped_slice_of_a_tile() -> None:
    check_modes(stepped, (torch.randn(5, 8),), lambda x: x[:, ::2])


REARRANGED = {
    "flip": lambda r: r.flip(-1),
    "flip_list": lambda r: torch.flip(r, dims=[1]),
    "reverse_cumsum": lambda r: r.flip(-1).cumsum(-1).flip(-1),
    "roll": lambda r: torch.roll(r, 1, -1),
    "roll_back": lambda r: torch.roll(r, shifts=-2, dims=1),
    "roll_past_n": lambda r: r.roll(9, 1),
    "roll_two_dims": lambda r: torch.roll(r, (1, 2), (1, 2)),
    "flip_two_dims": lambda r: r.flip(1, 2),
}


@tc.kernel(config=tc.Config(block_sizes=[4]))
def rearranged(x: torch.Tensor, name: str) -> torch.Tensor:
    fn = REARRANGED[name]
    out = torch.empty(x.shape, dtype=fn(x[:1]).dtype, device=x.device)
    for tile_m in tc.tile(x.size(0)):
        out[tile_m, :, :] = fn(x[tile_m, :, :])
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.int32, torch.bool])
@pytest.mark.parametrize("name", list(REARRANGED))
def test_flip_and_roll_along_dims_of_constant_size(name: str, dtype: torch.dtype) -> None:
    """torch.flip and torch.roll of a tile were refused (`flip` is not supported on
    tiles); dims of 7 and 3 lanes sit in 8 and 4, so padding must not move in."""
    x = (torch.randn(9, 7, 3) * 5).to(dtype)
    if name == "reverse_cumsum" and dtype == torch.bool:
        pytest.skip("cumsum of bools is an int64 tile: covered by the other dtypes")
    check_modes(rearranged, (x, name), lambda x, n: REARRANGED[n](x))


def test_roll_of_a_flattened_tile_is_refused_by_name() -> None:
    @tc.kernel
    def flat_roll(x: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        for tile_m in tc.tile(x.size(0)):
            out[tile_m, :] = torch.roll(x[tile_m, :], 1)
        return out

    with pytest.raises(UnsupportedOperation, match="dims="):
        flat_roll(torch.randn(3, 4))


EDGES = {
    "flip": lambda r: r.flip(-1),
    "roll": lambda r: torch.roll(r, 3, -1),
    "slice": lambda r: r[:, 1:],
    "step": lambda r: r[:, ::2],
    "glu": lambda r: torch.nn.functional.glu(torch.cat([r, r], 1), 1),
    "chunk": lambda r: torch.cat(r.chunk(2, 1)[::-1], 1),
}


@tc.kernel
def row_edges(x: torch.Tensor, name: str) -> torch.Tensor:
    fn = EDGES[name]
    out = torch.empty([x.size(0), *fn(x[:1]).shape[1:]], dtype=x.dtype, device=x.device)
    for tile in tc.tile(x.size(0)):
        out[tile, :] = fn(x[tile, :])
    return out


@pytest.mark.parametrize("width", [0, 1, 2])
@pytest.mark.parametrize("name", list(EDGES))
def test_views_of_rows_of_no_element_and_one(name: str, width: int) -> None:
    """A flip of a dim of one element had no Triton (a dim of size 1 is no dim), glu and
    chunk of an empty dim gave one piece where PyTorch gives two."""
    for rows in (0, 1, 3):
        x = torch.randn(rows, width)
        check_modes(row_edges, (x, name), lambda x, n: EDGES[n](x))


DIFFS = {
    "once": lambda r: torch.diff(r),
    "twice": lambda r: r.diff(n=2, dim=1),
    "of_bools": lambda r: torch.diff(r > 0),
    "joined": lambda r: torch.diff(r, dim=-1, prepend=r[:, :1] * 2, append=r[:, -1:] + 1),
}


@tc.kernel
def row_diffs(x: torch.Tensor, name: str) -> torch.Tensor:
    fn = DIFFS[name]
    out = torch.empty([x.size(0), *fn(x[:1]).shape[1:]], dtype=fn(x[:1]).dtype, device=x.device)
    for tile in tc.tile(x.size(0)):
        out[tile, :] = fn(x[tile, :])
    return out


@pytest.mark.parametrize("width", [0, 1, 2, 7])
@pytest.mark.parametrize("name", list(DIFFS))
def test_diff_along_a_row(name: str, width: int) -> None:
    x = torch.randn(5, width)
    check_modes(row_diffs, (x, name), lambda x, n: DIFFS[n](x))


@tc.kernel
def regroup_row(x: torch.Tensor, out: torch.Tensor) -> None:
    for tile_m in tc.tile(x.size(0)):
        row = x[tile_m, :]  # [tile_m, 12]: split into padded dims, reduced over each
        split = row.reshape(tile_m, 2, 6)
        out[tile_m, :] = torch.cat([split.amax(1), row.view(tile_m, 4, 3).sum(-1)], 1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int32])
def test_reshape_splits_a_row_into_padded_dims(dtype: torch.dtype) -> None:
    """[12] -> [2, 6] and [4, 3]: elements change lanes (6 and 3 are padded to 8 and 4)."""
    x = (torch.randn(37, 12) * 8).to(dtype)
    out = torch.empty(37, 10, dtype=dtype)

    def reference(x: torch.Tensor, out: torch.Tensor) -> tuple:
        parts = [x.reshape(37, 2, 6).amax(1), x.reshape(37, 4, 3).sum(-1)]
        return x, torch.cat(parts, 1).to(dtype)

    check_modes(regroup_row, (x, out), reference)


@tc.kernel
def flatten_ops(x: torch.Tensor, out: torch.Tensor) -> None:
    for tile_m in tc.tile(x.size(0)):
        cube = x[tile_m, :, :]  # [tile_m, 3, 5]
        flat = cube.flatten(1).unflatten(1, (5, -1)).transpose(1, 2).flatten(1, 2)
        out[tile_m, :] = flat.narrow(1, -12, 12).repeat(1, 2) + torch.tile(cube[:, 0, 1:], (6,))


def test_flatten_unflatten_narrow_repeat_tile() -> None:
    def reference(x: torch.Tensor, out: torch.Tensor) -> tuple:
        flat = x.flatten(1).unflatten(1, (5, -1)).transpose(1, 2).flatten(1, 2)
        return x, flat.narrow(1, -12, 12).repeat(1, 2) + torch.tile(x[:, 0, 1:], (6,))

    x = torch.randn(21, 3, 5)
    check_modes(flatten_ops, (x, torch.empty(21, 24)), reference)


@tc.kernel
def bool_cube(x: torch.Tensor, out: torch.Tensor) -> None:
    for tile_m in tc.tile(x.size(0)):
        out[tile_m, :, :] = x[tile_m, :, :].flatten(1).view(tile_m, 2, -1)


@pytest.mark.parametrize("shape", [(9, 3, 6), (4, 0, 6)])
def test_reshape_of_bools_between_padded_groups(shape: tuple) -> None:
    """[3, 6] -> [18] -> [2, 9] of bools, and of no elements ([0, 6] -> [0] -> [2, 0])."""
    x = torch.rand(shape) < 0.5
    out = torch.empty(shape[0], 2, shape[1] * shape[2] // 2, dtype=torch.bool)
    check_modes(bool_cube, (x, out), lambda x, out: (x, x.reshape(out.shape)))


@tc.kernel
def chunked_views(x: torch.Tensor, out: torch.Tensor) -> None:
    for tile_m in tc.tile(x.size(1)):
        v = x[:, tile_m, :]  # x.size(0) is looped over in chunks of 2 by the config
        w = v.movedim(1, 0)
        out[:, tile_m, :, :] = torch.stack([w, w, w], 0)


@tc.kernel
def chunked_reshape(x: torch.Tensor, out: torch.Tensor) -> None:
    for tile_m in tc.tile(x.size(0)):
        out[tile_m, :] = x[tile_m, :].reshape(tile_m, 3, 4).sum(1)


def test_views_of_chunked_dims_name_the_config() -> None:
    """A dim the config loops over in chunks cannot be reshaped, and differs from a view's
    new dim of the same size: both refusals say so (they blamed the shapes)."""
    args = (torch.randn(3, 5, 1), torch.empty(3, 5, 3, 1))
    with pytest.raises(ShapeMismatch, match=r"reduction_loops=\[None\]"):
        chunked_views.bind(args).compile(tc.Config(block_sizes=[4], reduction_loops=[2]))
    args = (torch.randn(5, 12), torch.empty(5, 4))
    with pytest.raises(UnsupportedOperation, match=r"reshape on dim 1 .* in chunks"):
        chunked_reshape.bind(args).compile(tc.Config(block_sizes=[4], reduction_loops=[4]))


@tc.kernel
def square_of_chunked(x: torch.Tensor, out: torch.Tensor) -> None:
    for tile_m in tc.tile(x.size(1)):
        v = x[:, tile_m, :]  # [3, tile_m, 3]: both 3s are the one dim the config chunks
        out[:, tile_m, :] = v + v.transpose(0, 2)


def test_a_tile_holding_a_chunked_dim_twice_is_refused_by_name() -> None:
    """(The refusal spoke of sort and topk only, at a plain load's line.)"""
    args = (torch.randn(3, 5, 3), torch.empty(3, 5, 3))
    with pytest.raises(LoweringError, match=r"holds a looped dim twice \(two dims of the same"):
        square_of_chunked.bind(args).compile(tc.Config(block_sizes=[2], reduction_loops=[2]))
    check_modes(square_of_chunked, args, lambda x, out: (x, x + x.transpose(0, 2)))


@tc.kernel
def wide_cat(x: torch.Tensor, out: torch.Tensor) -> None:
    for tile_m in tc.tile(x.size(0)):
        v = x[tile_m, :]  # [tile_m, 144]: the cat's one-hot product holds 512 x 256 a row
        out[tile_m, :] = torch.cat([v, v * 2], 1).repeat(1, 2)


def test_a_wide_cat_shrinks_the_default_blocks_and_refuses_larger_ones() -> None:
    """The one-hot products of views count in the default config's size (it held 2M
    elements, over Triton's largest tensor: a raw interpreter error); a config asking
    for more is refused by name at the user's line, as an InvalidConfig (it was wrapped in
    a LoweringError, an internal failure's class)."""
    x = torch.randn(37, 144)
    args = (x, torch.empty(37, 576))
    check_modes(wide_cat, args, lambda x, out: (x, torch.cat([x, x * 2], 1).repeat(1, 2)))
    with pytest.raises(InvalidConfig, match=r"one-hot product of \d+ elements, over Triton"):
        wide_cat.bind(args).compile(tc.Config(block_sizes=[64]))


@tc.kernel
def unsqueeze_far(x: torch.Tensor, out: torch.Tensor) -> None:
    for tile_m in tc.tile(x.size(0)):
        out[tile_m, :] = x[tile_m, :].unsqueeze(3).sum(-1)


def test_unsqueeze_out_of_range_is_refused() -> None:
    """PyTorch refuses unsqueeze(3) of a 2-D tensor (the dim wrapped around to 0)."""
    with pytest.raises(ShapeMismatch, match=r"unsqueeze\(dim=3\) of a tile of rank 2"):
        unsqueeze_far(torch.randn(5, 3), torch.empty(5, 3))
