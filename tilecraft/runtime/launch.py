"""Helpers that generated launchers call."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch
import triton


@functools.cache
def _allocator_on(device: torch.device) -> Callable[[int, int, object], torch.Tensor]:
    """Triton's allocator signature, giving scratch bytes on `device` (the interpreter on
    a GPU machine needs them in host memory, beside the tensors it runs on)."""

    def allocate(size: int, alignment: int, stream: object) -> torch.Tensor:
        return torch.empty(size, dtype=torch.int8, device=device)

    return allocate


_SET_ALLOCATOR = getattr(triton, "set_allocator", None)  # Triton 3.3 and later


def with_scratch(kernel: Any, like: torch.Tensor) -> Any:
    """`kernel`, after giving Triton a PyTorch allocator for device-side scratch (tensor
    descriptors) on `like`'s device, in this thread's context. Triton keeps the allocator
    in a context variable: set once, by whichever thread first loaded a module (a tuning
    worker), it was missing where the kernel ran. Setting it costs a context-variable
    write."""
    if _SET_ALLOCATOR is not None:
        _SET_ALLOCATOR(_allocator_on(like.device))
    return kernel
