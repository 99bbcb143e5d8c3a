"""Checking kernels against PyTorch references, with tolerances per dtype."""

from __future__ import annotations

from typing import Any

import torch

TOLERANCES = {
    torch.float32: (1e-4, 1e-4),
    torch.float16: (1e-2, 1e-3),
    torch.bfloat16: (2e-2, 2e-2),
    torch.float64: (1e-7, 1e-9),
}


def assert_close(actual: Any, expected: Any, dtype: torch.dtype | None = None) -> None:
    """Compare a kernel's outputs with a reference (tensors or tuples of them)."""
    if isinstance(expected, (tuple, list)):
        assert isinstance(actual, (tuple, list)) and len(actual) == len(expected)
        for a, e in zip(actual, expected, strict=True):
            assert_close(a, e, dtype)
        return
    rtol, atol = TOLERANCES.get(dtype or expected.dtype, (0.0, 0.0))
    torch.testing.assert_close(actual, expected.to(actual.dtype), rtol=rtol, atol=atol)


REL_ERROR_LIMITS = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1e-2}


def relative_error(actual: torch.Tensor, expected: torch.Tensor) -> float:
    """`||actual - expected|| / ||expected||`, computed in float64."""
    diff = (actual.double() - expected.double()).norm()
    return (diff / expected.double().norm().clamp_min(1e-30)).item()


def matrices(shape: tuple, dtype: torch.dtype, device: str | torch.device | None = None) -> tuple:
    """Random `[m, k]` and `[k, n]` matrices for `shape` = (m, k, n) or (m, k) (n = m)."""
    dev = device or default_device()
    m, k, n = shape if len(shape) == 3 else (*shape, shape[0])
    return (torch.randn(m, k, dtype=dtype, device=dev), torch.randn(k, n, dtype=dtype, device=dev))


def default_device() -> torch.device:
    """The GPU when there is one, else the CPU."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")
