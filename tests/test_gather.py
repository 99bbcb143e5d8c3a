"""Gathers and sorts within a tile: torch.gather / Tensor.gather, take_along_dim,
index_select, `row[:, ids]` with an index tile, and sort/argsort/msort/topk/kthvalue/
median/nanmedian along a dim other than the last; both modes against PyTorch on rows of
widths 0, 1 and not powers of two (padded lanes must never be picked), NaN and -0.0
values, int32 and int64 indices, and refusals by name at the user's line (abs and
negation of bool tiles among them).

An index out of range cannot raise in a kernel: compiled code reads 0 there (checked
below under Triton's interpreter), eager mode raises as PyTorch does. Ties in sorts'
indices are left out where PyTorch's CPU kernels do not promise an order (kthvalue,
unstable sorts): those rows hold distinct values.
"""

from __future__ import annotations

import pytest
import torch
from conftest import DEVICE
from fuzzing import load_kernels

import tilecraft as tc
from tilecraft.exc import (
    DtypeError,
    InvalidConfig,
    ShapeMismatch,
    TilecraftError,
    UnsupportedOperation,
)
from tilecraft.testing import check_modes, run_mode

WIDTHS = [0, 1, 2, 3, 5, 17]


def values(shape: tuple[int, ...], dtype: torch.dtype, seed: int = 0) -> torch.Tensor:
    """Small values with ties, and NaN, -0.0 and infinities among floats."""
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return (torch.rand(shape, generator=g) < 0.5).to(DEVICE)
    x = torch.randint(-9, 10, shape, generator=g).to(torch.float32)
    if dtype.is_floating_point:
        special = torch.tensor([float("nan"), -0.0, float("inf"), -float("inf")])
        pick = torch.randint(0, 4, shape, generator=g)
        x = torch.where(torch.rand(shape, generator=g) < 0.25, special[pick], x)
    return x.to(dtype).to(DEVICE)


def indices(shape: tuple[int, ...], n: int, dtype: torch.dtype, seed: int = 1) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, max(n, 1), shape, generator=g).to(dtype).to(DEVICE)


@tc.kernel
def gather_rows(x: torch.Tensor, ids: torch.Tensor, out: torch.Tensor) -> None:
    for t in tc.tile(x.size(0)):
        out[t, :] = torch.gather(x[t, :], 1, ids[t, :])


@pytest.mark.parametrize("n", WIDTHS[1:])
@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.float16, torch.int32, torch.int64, torch.bool]
)
def test_gather_along_a_row(n: int, dtype: torch.dtype) -> None:
    x, ids = values((11, n), dtype), indices((11, 4), n, torch.int64)
    args = (x, ids, torch.empty(11, 4, dtype=dtype, device=DEVICE))
    check_modes(gather_rows, args, lambda x, i, out: (x, i, torch.gather(x, 1, i)))


@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64])
def test_gather_of_index_dtypes_and_an_empty_index(index_dtype: torch.dtype) -> None:
    x = values((7, 5), torch.float32)
    for m in (0, 1, 6):
        ids = indices((7, m), 5, index_dtype)
        args = (x, ids, torch.empty(7, m, device=DEVICE))
        check_modes(gather_rows, args, lambda x, i, out: (x, i, torch.gather(x, 1, i)))


@tc.kernel
def gather_columns(x: torch.Tensor, ids: torch.Tensor, out: torch.Tensor) -> None:
    for t in tc.tile(x.size(1)):
        out[:, t] = x[:, t].gather(0, ids[:, t])


@pytest.mark.parametrize("n", [1, 3, 9])
def test_gather_along_a_dim_other_than_the_last(n: int) -> None:
    x, ids = values((n, 13), torch.float32), indices((4, 13), n, torch.int64)
    args = (x, ids, torch.empty(4, 13, device=DEVICE))
    check_modes(gather_columns, args, lambda x, i, out: (x, i, torch.gather(x, 0, i)))


@tc.kernel
def take_rows(x: torch.Tensor, ids: torch.Tensor, out: torch.Tensor) -> None:
    for t in tc.tile(x.size(0)):
        out[t, :] = torch.take_along_dim(x[t, :], ids[None, :], 1)


@tc.kernel
def select_rows(x: torch.Tensor, ids: torch.Tensor, out: torch.Tensor) -> None:
    for t in tc.tile(x.size(0)):
        out[t, :] = torch.index_select(x[t, :], 1, ids[:]) * 2


@tc.kernel
def subscript_rows(x: torch.Tensor, ids: torch.Tensor, out: torch.Tensor) -> None:
    for t in tc.tile(x.size(0)):
        row = x[t, :]
        out[t, :] = row[:, ids[:]]


@pytest.mark.parametrize("n", WIDTHS)
def test_take_along_dim_index_select_and_subscripts(n: int) -> None:
    x = values((9, n), torch.float32)
    ids = indices((0 if n == 0 else 6,), n, torch.int64)
    out = torch.empty(9, ids.numel(), device=DEVICE)
    if n:
        check_modes(take_rows, (x, ids, out), lambda x, i, o: (x, i, x.take_along_dim(i[None], 1)))
    ref = lambda x, i, o: (x, i, torch.index_select(x, 1, i) * 2)  # noqa: E731
    check_modes(select_rows, (x, ids.int(), out), ref)
    check_modes(subscript_rows, (x, ids, out), lambda x, i, o: (x, i, x[:, i]))


def test_out_of_range_indices_read_zero_compiled_and_raise_eagerly() -> None:
    """Negative and too-large indices (and those that would land on padded lanes: a row of
    5 held in 8 lanes) match nothing."""
    x = values((6, 5), torch.float32) + 100
    ids = torch.tensor([[0, 5, 7, -1, -5, 4]] * 6, device=DEVICE)
    expected = torch.gather(x, 1, ids.clamp(0, 4)).masked_fill((ids < 0) | (ids > 4), 0)
    out = run_mode(gather_rows, (x, ids, torch.empty(6, 6, device=DEVICE)), "triton")
    torch.testing.assert_close(out[2], expected, equal_nan=True)
    if DEVICE == "cpu":  # (PyTorch's CUDA gather asserts on the device, which ends the process)
        with pytest.raises(RuntimeError, match="out of bounds"):
            run_mode(gather_rows, (x, ids, torch.empty(6, 6, device=DEVICE)), "eager")
    check_modes(
        subscript_rows,
        (x, ids[0], torch.empty(6, 6, device=DEVICE)),
        lambda x, i, o: (x, i, expected),
    )


@tc.kernel
def gather_where_kept(x: torch.Tensor, ids: torch.Tensor, out: torch.Tensor) -> None:
    for t in tc.tile(x.size(0)):
        i = ids[t, :]
        if i >= 0:  # lanes of negative ids never gather
            out[t, :] = torch.gather(x[t, :], 1, i)


@pytest.mark.parametrize("eager", [False, True])
def test_the_check_mode_raises_on_an_index_out_of_range(monkeypatch, eager: bool) -> None:
    """TILECRAFT_CHECK=1 makes compiled gathers raise where PyTorch raises (at the user's
    line), lanes of an `if` arm not taken and padded lanes (a row of 5 in 8) unchecked."""
    fresh = {k: tc.kernel(k.fn) for k in (gather_rows, subscript_rows, gather_where_kept)}
    for k in fresh.values():
        monkeypatch.setattr(k.settings, "check", True)
        monkeypatch.setattr(k.settings, "interpret", eager)
    x = values((6, 5), torch.float32)
    good = indices((6, 3), 5, torch.int64)
    out = torch.empty(6, 3, device=DEVICE)
    fresh[gather_rows](x, good, out)
    torch.testing.assert_close(out, torch.gather(x, 1, good), equal_nan=True)
    bad = good.clone()
    bad[4, 1] = 5
    error = (RuntimeError, TilecraftError) if eager else TilecraftError
    with pytest.raises(error, match="out of bounds" if eager else "gather"):
        fresh[gather_rows](x, bad, out)
    with pytest.raises(TilecraftError):
        fresh[subscript_rows](x, bad[4], out)
    masked = torch.where(good == 2, -1, good)  # -1: out of range where the arm is not taken
    out.zero_()
    fresh[gather_where_kept](x, masked, out)
    expected = torch.gather(x, 1, masked.clamp(min=0)).masked_fill(masked < 0, 0)
    torch.testing.assert_close(out, expected, equal_nan=True)


def test_a_gather_in_an_arm_not_taken_reads_nothing_in_both_modes() -> None:
    """Eager mode gathered on every lane of an `if` on a tile, and PyTorch raised for an
    index the `if` kept out; compiled code gathers there too and keeps only the arm's."""
    x = values((6, 5), torch.float32)
    ids = torch.where(indices((6, 3), 5, torch.int64) == 2, -7, 3)
    expected = torch.gather(x, 1, ids.clamp(min=0)).masked_fill(ids < 0, 0)
    args = (x, ids, torch.zeros(6, 3, device=DEVICE))
    check_modes(gather_where_kept, args, lambda x, i, o: (x, i, expected))


@tc.kernel
def sorts_down(x: torch.Tensor, values: torch.Tensor, index: torch.Tensor) -> None:
    for t in tc.tile(x.size(1)):
        column = x[:, t]
        v, i = torch.sort(column, dim=0, descending=True, stable=True)
        values[0, :, t] = v
        values[1, :, t] = torch.msort(column)
        index[0, :, t] = i
        index[1, :, t] = column.argsort(0)


@tc.kernel
def kth_down(x: torch.Tensor, values: torch.Tensor, index: torch.Tensor, k: int) -> None:
    for t in tc.tile(x.size(1)):
        v, i = torch.kthvalue(x[:, t], k, 0, keepdim=True)
        values[:, t] = v
        index[:, t] = i


@tc.kernel
def top_down(x: torch.Tensor, values: torch.Tensor, index: torch.Tensor) -> None:
    for t in tc.tile(x.size(2)):
        v, i = x[:, :, t].topk(2, dim=1, largest=False)
        values[:, :, t] = v
        index[:, :, t] = i


def distinct(n: int, m: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Columns of distinct values (a NaN and an inf in the first)."""
    x = torch.argsort(torch.rand(m, n, generator=torch.Generator().manual_seed(n)), 1).T
    x = x.to(dtype).contiguous()
    if dtype.is_floating_point and n > 2:
        x[0, 0], x[1, 0] = float("nan"), float("inf")
    return x.to(DEVICE)


def _sorted_down(x: torch.Tensor, v: torch.Tensor, i: torch.Tensor) -> tuple:
    down = torch.sort(x, dim=0, descending=True, stable=True)
    v, i = torch.stack([down.values, torch.msort(x)]), torch.stack([down.indices, x.argsort(0)])
    return x, v, i


@pytest.mark.parametrize("n", [1, 3, 6, 17])
@pytest.mark.parametrize("dtype", [torch.float32, torch.int32])
def test_sorts_along_the_first_dim(n: int, dtype: torch.dtype) -> None:
    x = distinct(n, 10, dtype)
    e = {"device": DEVICE}
    args = (
        x,
        torch.empty(2, n, 10, dtype=dtype, **e),
        torch.empty(2, n, 10, dtype=torch.int64, **e),
    )
    check_modes(sorts_down, args, _sorted_down)
    for k in {1, (n + 1) // 2, n}:
        args = (
            x,
            torch.empty(1, 10, dtype=dtype, **e),
            torch.empty(1, 10, dtype=torch.int64, **e),
            k,
        )
        ref = lambda x, v, i, k: (x, *torch.kthvalue(x, k, 0, keepdim=True))  # noqa: E731
        check_modes(kth_down, args, ref)


def test_topk_along_a_middle_dim() -> None:
    x = torch.stack([distinct(5, 9), distinct(5, 9) * 2])
    args = (
        x,
        torch.empty(2, 2, 9, device=DEVICE),
        torch.empty(2, 2, 9, dtype=torch.int64, device=DEVICE),
    )
    check_modes(top_down, args, lambda x, v, i: (x, *torch.topk(x, 2, 1, largest=False)))


@pytest.fixture(scope="module")
def refusals(tmp_path_factory: pytest.TempPathFactory):
    """Kernel k{n} applies REFUSALS[n]'s expression to a loaded row `r` and ids `i`."""
    source = "".join(
        f"""
@tc.kernel
def k{n}(x: torch.Tensor, ids: torch.Tensor, out: torch.Tensor) -> None:
    for t in tc.tile(x.size(0)):
        r, i = x[t, :], ids[t, :]
        out[t, :] = {expr}
"""
        for n, (expr, *_) in enumerate(REFUSALS)
    )
    return load_kernels(tmp_path_factory, "gather_refusals", source)


def _args(n: int, m: int, dtype: torch.dtype = torch.float32, ids=torch.int64) -> tuple:
    x = torch.zeros(4, n, dtype=dtype)
    return (x, torch.zeros(4, m, dtype=ids), torch.empty(4, m, dtype=dtype))


REFUSALS = [
    ("torch.gather(r, 1, i.float())", _args(5, 3), DtypeError, "int64 or int32 index"),
    ("torch.gather(r, 1, i)", _args(0, 3), ShapeMismatch, "dim of size 0"),
    ("torch.gather(r, 1, i[:, None])", _args(5, 3), ShapeMismatch, "as many dims"),
    ("torch.gather(r, 0, i)", _args(5, 3), ShapeMismatch, "on every dim but dim 0"),
    ("torch.gather(r, 0, i)", _args(5, 5), UnsupportedOperation, "a tile"),
    ("torch.gather(r, 1, i)", _args(300, 3), UnsupportedOperation, "more than 256"),
    ("torch.take_along_dim(r, i, 1)", _args(5, 3, ids=torch.int32), DtypeError, "int64"),
    ("torch.take_along_dim(r, i)", _args(5, 3), UnsupportedOperation, "dim="),
    ("torch.index_select(r, 1, i)", _args(5, 3), UnsupportedOperation, "1-D index"),
    ("r[i, :]", _args(5, 3), UnsupportedOperation, "a tile"),
    ("r[:, i[0], None]", _args(5, 3), UnsupportedOperation, "takes `:` for its other"),
    ("torch.kthvalue(r, 6, 1).values", _args(5, 1), ShapeMismatch, "k=6"),
    ("torch.kthvalue(r, 1, 1).values", _args(3, 1, torch.bool), DtypeError, "bool"),
    ("torch.abs(r)", _args(3, 3, torch.bool), DtypeError, "abs of a bool"),
    ("-(r)", _args(3, 3, torch.bool), DtypeError, "negation"),
]


@pytest.mark.parametrize("n", range(len(REFUSALS)), ids=[r[0] for r in REFUSALS])
def test_refusals_name_the_line(refusals, n: int) -> None:
    expr, args, error, match = REFUSALS[n]
    with pytest.raises(error, match=match) as caught:
        getattr(refusals, f"k{n}").bind(args).compile(tc.Config(block_sizes=[4]))
    assert issubclass(error, TilecraftError)
    assert f"out[t, :] = {expr}" in str(caught.value), str(caught.value)


def test_compares_over_tritons_largest_tensor_are_refused_by_config() -> None:
    """A gather compares every index with every position: [128, 64, 256] under 128-row
    blocks, over Triton's 1M elements (a raw interpreter error, found by fuzzing sorts);
    refused at the user's line."""
    x, ids = values((70, 200), torch.float32), indices((70, 40), 200, torch.int64)
    args = (x, ids, torch.empty(70, 40, device=DEVICE))
    with pytest.raises(InvalidConfig, match=r"tile of \d+ elements .* over Triton's") as caught:
        gather_rows.bind(args).compile(tc.Config(block_sizes=[128]))
    assert "torch.gather(x[t, :], 1, ids[t, :])" in str(caught.value)


@tc.kernel
def middles(x: torch.Tensor, name: str, keep: bool) -> tuple[torch.Tensor, torch.Tensor]:
    fn = getattr(torch, name)
    shape = [x.size(0), 1] if keep else [x.size(0)]
    values = torch.empty(shape, dtype=x.dtype, device=x.device)
    index = torch.empty(shape, dtype=torch.int64, device=x.device)
    for t in tc.tile(x.size(0)):
        v, i = fn(x[t, :], dim=1, keepdim=keep)
        values[t, ...] = v
        index[t, ...] = i
    return values, index


@pytest.mark.parametrize("name", ["median", "nanmedian"])
@pytest.mark.parametrize("width", [1, 2, 5, 17])
@pytest.mark.parametrize("keep", [False, True])
def test_median_and_nanmedian_match_pytorch(name: str, width: int, keep: bool) -> None:
    """The lower middle value and its position; `median` of a row holding NaN is NaN at
    the first NaN, `nanmedian` leaves NaN out. Rows hold distinct numbers (PyTorch does
    not promise which of tied positions). An all-NaN row's nanmedian index is the first
    NaN here, where PyTorch's CPU kernel gives one depending on the row's length."""
    x = distinct(width, 6).T.contiguous().float()
    if width > 2:
        x[1, 1], x[2, 0], x[2, -1] = float("nan"), float("nan"), float("nan")
        x[3] = float("nan")
    expected = getattr(torch, name)(x, 1, keepdim=keep)
    for mode in ("eager", "triton"):
        values, index = run_mode(middles, (x, name, keep), mode, tc.Config(block_sizes=[4]))
        torch.testing.assert_close(values, expected.values, equal_nan=True)
        rows = [r for r in range(6) if not (name == "nanmedian" and x[r].isnan().all())]
        if x.is_cuda and name == "median":  # PyTorch's CUDA kernel picks a NaN its own way
            nans = [r for r in rows if x[r].isnan().any()]
            assert all(x[r].flatten()[index[r].item()].isnan() for r in nans), mode
            rows = [r for r in rows if r not in nans]
        assert torch.equal(index[rows], expected.indices[rows]), mode


@tc.kernel
def whole_median(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty([x.size(0)], dtype=x.dtype, device=x.device)
    for t in tc.tile(x.size(0), block_size=1):
        out[t.begin] = x[t.begin, :, :].median()  # all elements of a [4, 5] tile
    return out


def test_median_of_all_elements() -> None:
    x = torch.randn(3, 4, 5, device=DEVICE)
    x[1, 2, 3] = float("nan")
    expected = torch.stack([row.median() for row in x])
    check_modes(whole_median, (x,), lambda x: expected)


@pytest.mark.parametrize("name", ["median", "nanmedian"])
def test_median_of_a_dim_of_length_zero_is_refused(name: str) -> None:
    """PyTorch raises for a median of no elements; compiled code refuses it at the line
    (it had no value to give)."""
    x = torch.randn(3, 0, device=DEVICE)
    with pytest.raises(ShapeMismatch, match="length 0"):
        run_mode(middles, (x, name, False), "triton")
    with pytest.raises((IndexError, RuntimeError)):
        run_mode(middles, (x, name, False), "eager")
