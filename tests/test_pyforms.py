"""Python forms in device loops: local functions (`def`, `lambda`), comprehensions over
host values, dicts, and `sum` of tiles; both modes against PyTorch."""

from __future__ import annotations

import pytest
import torch

import tilecraft as tc
from tilecraft.exc import UnsupportedSyntax
from tilecraft.testing import check_modes


def apply_twice(fn, t):  # a helper inlined on the device, given a local function
    return fn(fn(t))


@tc.kernel
def local_functions(x: torch.Tensor, scale: float) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in tc.tile(x.size(0)):
        row = x[tile]
        shift = 1.0

        def affine(t, k=2.0, *, bias=0.5):
            return t * k * scale + bias + shift  # noqa: B023 (late binding, on purpose)

        shift = 3.0  # read when `affine` is called, as a Python closure reads it
        double = lambda t: t * 2  # noqa: E731
        out[tile] = affine(row) + affine(row, 3.0, bias=0.0) + apply_twice(double, row)
    return out


def _local_functions(x: torch.Tensor, scale: float) -> torch.Tensor:
    return (x * 2.0 * scale + 0.5 + 3.0) + (x * 3.0 * scale + 3.0) + x * 4


@pytest.mark.parametrize("n", [0, 1, 37])
def test_local_functions_are_inlined_where_called(n: int) -> None:
    check_modes(local_functions, (torch.randn(n), 0.75), _local_functions)


@tc.kernel
def comprehensions(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in tc.tile(x.size(0)):
        row = x[tile, :]
        powers = [row**k for k in range(1, 4) if k != 2]  # row, row ** 3
        pairs = [row * i + j for i in (1, 2) for j in range(i)]  # row, 2 row, 2 row + 1
        weights = {name: w for name, w in (("a", 0.5), ("b", -1.0))}
        parts = {"sum": sum(powers), "pairs": torch.stack(pairs, dim=-1).sum(-1)}
        flags = sum(t > 0 for t in (row, -row, row - 1))  # bools add up to an int64 tile
        out[tile, :] = parts["sum"] * weights["a"] + parts["pairs"] * weights["b"] + flags
    return out


def _comprehensions(x: torch.Tensor) -> torch.Tensor:
    flags = (x > 0).long() + (-x > 0).long() + (x - 1 > 0).long()
    return (x + x**3) * 0.5 - (5 * x + 1) + flags


def test_comprehensions_dicts_and_sums() -> None:
    check_modes(comprehensions, (torch.randn(9, 5),), _comprehensions)


@tc.kernel
def filters_on_a_tile(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in tc.tile(x.size(0)):
        out[tile] = sum(x[tile] * k for k in range(3) if x[tile] > 0)
    return out


@tc.kernel
def star_args(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in tc.tile(x.size(0)):

        def total(*ts):
            return ts[0]

        out[tile] = total(x[tile])
    return out


@pytest.mark.parametrize(
    ("kernel", "match", "line"),
    [
        (filters_on_a_tile, "comprehension's `if`", "sum(x[tile] * k for k"),
        (star_args, "named arguments only", "def total(*ts):"),
    ],
    ids=["filter_on_a_tile", "star_args"],
)
def test_refused_at_the_line(kernel, match: str, line: str) -> None:
    with pytest.raises(UnsupportedSyntax, match=match) as info:
        kernel(torch.randn(5))
    assert line in str(info.value)
