"""Helpers that generated launchers call."""

from __future__ import annotations

import functools

import torch
import triton


def _allocate(size: int, alignment: int, stream: object) -> torch.Tensor:
    device = "cuda" if torch.cuda.is_available() else "cpu"
    return torch.empty(size, dtype=torch.int8, device=device)


@functools.cache
def use_torch_allocator() -> None:
    """Give Triton a PyTorch allocator for device-side scratch (tensor descriptors)."""
    if hasattr(triton, "set_allocator"):
        triton.set_allocator(_allocate)
