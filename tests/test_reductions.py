"""Reductions in both CPU modes against PyTorch: prod, any/all, logsumexp, mean/var/std,
norm, several dims at once, in one block and looped over chunks (reduction_loops)."""

from __future__ import annotations

import math

import pytest
import torch
from conftest import DEVICE

import tilecraft as tc
from tilecraft.exc import TilecraftError
from tilecraft.testing import check_modes

ROW = {
    "prod": lambda r: torch.prod(r, 1),
    "any": lambda r: torch.any(r, 1),
    "all": lambda r: r.all(dim=1),
    "logsumexp": lambda r: torch.logsumexp(r, 1),
    "std": lambda r: torch.std(r, 1),
    "var0": lambda r: torch.var(r, 1, correction=0),
    "std_keep": lambda r: torch.std(r, 1, keepdim=True)[:, 0],
    "std_mean": lambda r: torch.std_mean(r, 1)[0],
    "mean": lambda r: r.mean(1),
    "norm": lambda r: torch.norm(r, dim=1),
    "norm1": lambda r: torch.norm(r, p=1, dim=1),
    "norminf": lambda r: torch.linalg.vector_norm(r, ord=math.inf, dim=1),
    "norm3": lambda r: r.norm(3, dim=1),
    "amax01": lambda r: r[:, :, None].amax(dim=(1, 2)),
    "amax": lambda r: r.amax(1),
    "amin": lambda r: torch.amin(r, 1),
    "argmax": lambda r: r.argmax(1),
}


@tc.kernel
def row_reduce(x: torch.Tensor, name: str) -> torch.Tensor:
    fn = ROW[name]
    m, n = x.shape
    out = torch.empty([m], dtype=fn(x[:1]).dtype, device=x.device)
    for tile in tc.tile(m):
        out[tile] = fn(x[tile, :])
    return out


def rows(shape: tuple[int, int], dtype: torch.dtype = torch.float32) -> torch.Tensor:
    x = torch.randn(shape, device=DEVICE)
    if shape[0] > 3 and shape[1] > 2:
        x[1, 1] = float("nan")
        x[2, :] = -float("inf")
        x[3, 0] = float("inf")
        x[0, 2] = 0.0
    return x.to(dtype)


NAMES = list(ROW)
ROLLED = tc.Config(block_sizes=[4], reduction_loops=[8])


@pytest.mark.parametrize("name", NAMES)
def test_row_reductions_match_pytorch_with_nan_and_inf(name: str) -> None:
    x = rows((6, 37))
    check_modes(row_reduce, (x, name), lambda x, n: ROW[n](x), config=tc.Config(block_sizes=[4]))


@pytest.mark.parametrize("name", ["prod", "any", "logsumexp", "std", "norm", "mean"])
def test_row_reductions_looped_over_chunks(name: str) -> None:
    x = rows((6, 37))
    check_modes(row_reduce, (x, name), lambda x, n: ROW[n](x), config=ROLLED, modes=["triton"])


@pytest.mark.parametrize("name", ["amax", "amin", "argmax", "logsumexp", "prod", "std"])
def test_rows_looped_over_chunks_that_tile_them_exactly(name: str) -> None:
    """Chunks that divide the row need no mask (none is written); NaN and infinities still
    come out as PyTorch's, max and min keeping NaN through their fold."""
    x = rows((6, 32))
    check_modes(row_reduce, (x, name), lambda x, n: ROW[n](x), config=ROLLED, modes=["triton"])
    code = row_reduce.bind((x, name)).to_triton_code(ROLLED)
    assert "mask_1" not in code and "tl.range(0, 32, _RBLOCK_1)" in code
    if name in ("amax", "amin"):
        assert "propagate_nan=tl.PropagateNan.ALL" in code and "_nan = tl.max(" not in code


@pytest.mark.parametrize("shape", [(5, 1), (3, 0)])
@pytest.mark.parametrize(
    "name", ["prod", "any", "all", "logsumexp", "norm", "mean", "std", "var0", "std_mean"]
)
def test_reductions_over_length_one_and_zero(shape: tuple[int, int], name: str) -> None:
    x = torch.randn(shape, device=DEVICE)
    check_modes(row_reduce, (x, name), lambda x, n: ROW[n](x))


def test_integer_and_bool_reductions() -> None:
    x = torch.randint(-3, 4, (5, 9), device=DEVICE, dtype=torch.int32)
    check_modes(row_reduce, (x, "prod"), lambda x, n: ROW[n](x))
    check_modes(row_reduce, (x, "any"), lambda x, n: ROW[n](x))
    check_modes(row_reduce, (x.bool(), "all"), lambda x, n: ROW[n](x))


def test_half_precision_reductions() -> None:
    x = torch.randn(5, 19, device=DEVICE).half()
    check_modes(row_reduce, (x, "logsumexp"), lambda x, n: ROW[n](x), dtype=torch.float16)
    check_modes(row_reduce, (x, "norm"), lambda x, n: ROW[n](x), dtype=torch.float16)


@tc.kernel
def tile_stats(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    m, n = x.shape
    mean = torch.empty([m], device=x.device)
    var = torch.empty([m], device=x.device)
    for tile_m in tc.tile(m):
        for tile_n in tc.tile(n):  # tile_n covers the whole row: block_sizes[1] >= n
            row = x[tile_m, tile_n]
            mean[tile_m] = row.mean(1)
            var[tile_m] = row.var(1)
    return mean, var


def test_mean_and_var_over_a_tiles_dim_divide_by_its_valid_length() -> None:
    x = torch.randn(7, 13, device=DEVICE)
    config = tc.Config(block_sizes=[4, 16])
    check_modes(tile_stats, (x,), lambda x: (x.mean(1), x.var(1)), config=config)


@tc.kernel
def whole_tile_amax(x: torch.Tensor) -> torch.Tensor:
    m, n = x.shape
    out = torch.empty([m], device=x.device)
    for tile_m in tc.tile(m, block_size=1):
        out[tile_m] = x[tile_m, :].amax()  # dim=None: all dims of the tile
    return out


def test_reduction_over_all_dims_of_a_tile() -> None:
    x = torch.randn(5, 11, device=DEVICE)
    x[2, 3] = float("nan")
    check_modes(whole_tile_amax, (x,), lambda x: x.amax(1))


@tc.kernel
def bad_argmax(x: torch.Tensor) -> torch.Tensor:
    m, n = x.shape
    out = torch.empty([m], dtype=torch.int64, device=x.device)
    for tile in tc.tile(m):
        out[tile] = x[tile, :].argmax(dim=(0, 1))
    return out


def test_argmax_over_several_dims_is_refused() -> None:
    with pytest.raises(TilecraftError, match="several dims"):
        tc.testing.run_mode(bad_argmax, (torch.randn(3, 4, device=DEVICE),), "triton")


def test_reductions_on_odd_shapes_with_specials() -> None:
    """Shapes of 1, primes and powers of two, holding NaN and infinities, in both modes."""
    for shape in [(1, 1), (2, 13), (7, 31), (3, 64)]:
        generator = torch.Generator().manual_seed(shape[1])
        x = torch.randn(shape, generator=generator).to(DEVICE)
        x.view(-1)[:: max(1, x.numel() // 3)] = torch.tensor(float("nan"))
        x[-1, 0] = float("inf")
        for name in ["prod", "logsumexp", "norm", "var0", "any", "amax01"]:
            check_modes(row_reduce, (x, name), lambda x, n: ROW[n](x))


@tc.kernel
def row_sums(x: torch.Tensor, out: torch.Tensor) -> None:
    for t in tc.tile(x.size(0)):
        out[t] = x[t, :].sum(-1)


@pytest.mark.parametrize("width", [1, 2, 5])
def test_a_row_of_negative_zeros_sums_to_positive_zero(width: int) -> None:
    """PyTorch's sums start from +0.0; on an H200 a one-element row of -0.0 summed to -0.0
    (Triton adds it to nothing), as does Triton's tree of adds over -0.0s."""
    x = torch.full((3, width), -0.0, device=DEVICE)
    results = check_modes(row_sums, (x, torch.empty(3, device=DEVICE)), lambda x, o: (x, x.sum(-1)))
    assert not results["triton"][-1].signbit().any()
    code = row_sums.bind((x, torch.empty(3, device=DEVICE))).to_triton_code(tc.Config())
    assert " + 0.0)" in code


on_cpu = pytest.mark.skipif(DEVICE != "cpu", reason="PyTorch's CUDA std squares in float32")
SPREADS = [(s, n) for s in (1e20, 1e-30, 2.0**-140) for n in ("std", "std_keep", "std_mean")]


@on_cpu
@pytest.mark.parametrize("config", [tc.Config(block_sizes=[4]), ROLLED])
@pytest.mark.parametrize("scale, name", [*SPREADS, (1e19, "var0")])
def test_spread_of_huge_and_tiny_values_as_in_float64(scale: float, name: str, config) -> None:
    """PyTorch's CPU kernels square float32 deviations in float64. Squared in float32,
    deviations past 1.8e19 overflowed (`std` of values near 1e20 was inf, and `var` near
    1e19, whose squares' sum passes float32's range where their mean does not) and those
    below 1e-19 vanished (`std` near 1e-30 was 0). Compared relatively: an absolute
    tolerance would pass a 0 for 1e-30. PyTorch's CUDA kernels square in float32, and so
    does compiled code on a GPU (inf there too)."""
    x = rows((6, 37)) * scale
    x[4] = 2.0 ** round(math.log2(scale))  # a constant row (its mean exact): 0
    x[5, 1:] = float("nan")  # one number and NaNs
    expected = ROW[name](x.double()).float()
    assert expected[0].isfinite() and expected[0] != 0  # the case is one float32 lost
    for mode in ("eager", "triton"):
        found = tc.testing.run_mode(row_reduce, (x, name), mode, config)
        torch.testing.assert_close(found, expected, rtol=1e-5, atol=0.0, equal_nan=True)


@on_cpu
def test_spread_of_huge_bfloat16_values() -> None:
    """bfloat16 tiles compute in float32 and scale the same way (PyTorch's CPU: finite)."""
    x = (torch.randn(5, 19, device=DEVICE) * 1e20).bfloat16()
    expected = torch.std(x.double(), 1).bfloat16()
    for mode in ("eager", "triton"):
        found = tc.testing.run_mode(row_reduce, (x, "std"), mode)
        torch.testing.assert_close(found, expected, rtol=1e-2, atol=0.0)
