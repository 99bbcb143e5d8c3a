"""Helpers that generated launchers call."""

from __future__ import annotations

from typing import Any

import torch
import triton


def _allocate(size: int, alignment: int, stream: object) -> torch.Tensor:
    device = "cuda" if torch.cuda.is_available() else "cpu"
    return torch.empty(size, dtype=torch.int8, device=device)


_SET_ALLOCATOR = getattr(triton, "set_allocator", None)  # Triton 3.3 and later


def with_scratch(kernel: Any) -> Any:
    """`kernel`, after giving Triton a PyTorch allocator for device-side scratch (tensor
    descriptors) in this thread's context. Triton keeps the allocator in a context
    variable: set once, by whichever thread first loaded a module (a tuning worker), it
    was missing where the kernel ran. Setting it costs a context-variable write."""
    if _SET_ALLOCATOR is not None:
        _SET_ALLOCATOR(_allocate)
    return kernel
