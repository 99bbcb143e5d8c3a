"""Shifts of every amount and narrow ints beside constants, as PyTorch computes them.

A shift by the bit width or more (or by a negative amount) is defined in PyTorch (0, or a
signed `>>`'s sign fill) and undefined in Triton, as in C: Triton's interpreter happened to
agree, but on an H200 the flow fuzzer's `(a + 2) >> 33` of int16 tiles came out as anything.
Triton 3.6 also made `tl.maximum(int16, 8)` an int32, and a loop carrying it failed to
compile on the GPU; the tests of generated code pin both where no GPU runs."""

from __future__ import annotations

import pytest
import torch
from conftest import DEVICE

import tilecraft as tc
from tilecraft.testing import check_modes

INTS = [torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64]


@tc.kernel
def shifts(x: torch.Tensor, k: torch.Tensor, out: torch.Tensor) -> None:
    for t in tc.tile(x.size(0)):
        out[0, t] = x[t] << k[t]
        out[1, t] = x[t] >> k[t]
        out[2, t] = x[t] << 33
        out[3, t] = x[t] >> 33
        out[4, t] = (x[t] + 2) >> 7
        out[5, t] = (x[t] + 2) << -1
        out[6, t] = x[t] >> 64


def shifted(x: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    rows = [x << k, x >> k, x << 33, x >> 33, (x + 2) >> 7, (x + 2) << -1, x >> 64]
    return torch.stack(rows)


@pytest.mark.parametrize("dtype", INTS, ids=str)
def test_shifts_by_any_amount_agree_with_pytorch(dtype: torch.dtype) -> None:
    x = torch.tensor([-20, -3, -1, 0, 1, 5, 20, 100, 127], dtype=torch.int64)
    k = torch.tensor([0, 1, 7, 8, 15, 16, 31, 32, 63], dtype=torch.int64)
    if dtype != torch.uint8:
        k[0] = -1  # (a negative amount of a uint8 wraps to 255)
    x, k = x.to(dtype).to(DEVICE), k.to(dtype).to(DEVICE)
    out = torch.zeros(7, x.numel(), dtype=dtype, device=DEVICE)
    check_modes(shifts, (x, k, out), lambda x, k, out: (x, k, shifted(x, k)))


@tc.kernel
def carried_maximum(x: torch.Tensor, n: int, out: torch.Tensor) -> None:
    for t in tc.tile(x.size(0)):
        acc = x[t]
        for _ in range(n):
            acc = torch.clamp_min(acc, 8) + 1
        out[t] = acc


def test_a_narrow_int_beside_a_constant_keeps_its_dtype() -> None:
    x = torch.tensor([-3, 5, 9, 30000], dtype=torch.int16, device=DEVICE)
    expected = torch.clamp_min(torch.clamp_min(x, 8) + 1, 8) + 1
    args = (x, 2, torch.zeros_like(x))
    check_modes(carried_maximum, args, lambda x, n, out: (x, expected))
    code = carried_maximum.bind(args).to_triton_code(tc.Config(block_sizes=[4]))
    assert ".to(tl.int16)" in code


def test_a_shift_by_a_computed_amount_is_guarded_in_the_generated_code() -> None:
    x = torch.ones(5, dtype=torch.int32, device=DEVICE)
    code = shifts.bind((x, x, torch.zeros(7, 5, dtype=torch.int32, device=DEVICE)))
    text = code.to_triton_code(tc.Config(block_sizes=[8]))
    assert "< 32)" in text and "< 31)" in text  # << keeps 0..31, a signed >> 0..30
