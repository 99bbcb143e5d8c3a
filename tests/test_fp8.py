"""Conversions to and from the fp8 formats in both modes against PyTorch: every float16
value and float32's specials narrowed, every fp8 bit pattern widened (Triton's
interpreter rounds halfway cases up, flushes subnormals and misreads NaN and inf:
compiled code computes these from the bits there, see codegen/fp8.py)."""

from __future__ import annotations

import pytest
import torch

import tilecraft as tc
from tilecraft.testing import check_modes

FP8 = [torch.float8_e4m3fn, torch.float8_e5m2]
SPECIALS = [0.0, -0.0, 1e-9, 0.001, 100.0, 447.0, 449.0, 470.0, 480.0, 500.0, 57344.0]
SPECIALS += [61439.0, 61440.0, 1e6, float("inf"), -float("inf"), float("nan"), -3.14159]


@tc.kernel
def round_trip(x: torch.Tensor, fmt: torch.dtype) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in tc.tile(x.size(0)):
        out[tile] = x[tile].to(fmt).to(x.dtype)
    return out


@pytest.mark.parametrize("fmt", FP8, ids=["e4m3fn", "e5m2"])
@pytest.mark.parametrize("source", ["float16", "bfloat16", "float32", "int32"])
def test_narrowing_matches_pytorch(fmt: torch.dtype, source: str) -> None:
    if source in ("float16", "bfloat16"):
        x = torch.arange(1 << 16, dtype=torch.int32).to(torch.int16).view(getattr(torch, source))
    elif source == "float32":
        x = torch.cat([torch.tensor(SPECIALS), torch.randn(999) * 100])
    else:  # (ints within range: NaN has no int, and each machine converts it its own way)
        x = torch.arange(-600, 600, dtype=torch.int32)
        x = x[~x.to(fmt).float().isnan()]
    check_modes(round_trip, (x, fmt), lambda x, f: x.to(f).to(x.dtype))


@tc.kernel
def widen(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty(x.shape, dtype=torch.float32, device=x.device)
    for tile in tc.tile(x.size(0)):
        out[tile] = x[tile].float()
    return out


@pytest.mark.parametrize("fmt", FP8, ids=["e4m3fn", "e5m2"])
def test_every_bit_pattern_widens_as_in_pytorch(fmt: torch.dtype) -> None:
    x = torch.arange(256, dtype=torch.int32).to(torch.uint8).view(fmt)
    check_modes(widen, (x,), lambda x: x.float())


@tc.kernel
def fp8_product(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    out = torch.empty([a.size(0), b.size(1)], dtype=torch.float32, device=a.device)
    for tm, tn in tc.tile(out.size()):
        acc = tc.zeros([tm, tn], dtype=torch.float32)
        for tk in tc.tile(a.size(1)):
            acc = tc.dot(a[tm, tk], b[tk, tn], acc=acc)
        out[tm, tn] = acc
    return out


@pytest.mark.parametrize("fmt", FP8, ids=["e4m3fn", "e5m2"])
def test_products_of_fp8_tiles_read_nan_and_inf(fmt: torch.dtype) -> None:
    a, b = (torch.randn(s).to(fmt) for s in ((19, 32), (32, 21)))
    a[0, 0] = float("nan")
    if fmt == torch.float8_e5m2:
        b[1, 2] = float("inf")
    check_modes(fp8_product, (a, b), lambda a, b: a.float() @ b.float())
