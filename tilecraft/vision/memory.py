"""Buffers for a steady stream of frames: a pool, so a frame in steady state allocates nothing.

Every buffer the vision functions allocate (outputs, scratch) comes from `empty`. Outside a
pool that is `torch.empty`. Inside `with pool.frame():` it is a tensor from the pool's free
list, handed back when the frame's work is enqueued, except what the caller `keep`s:

    pool = BufferPool(device)
    with pool.frame():
        result = pipeline(frames)
        lease = pool.keep(result)  # the result's buffer stays out of the pool...
    ...
    pool.give(lease)  # ...until the caller is done with it

On a GPU the pool belongs to one CUDA stream: a buffer handed back is only reused by work
queued later on that stream, which runs after the work that used it, so no event is needed.
`allocations` counts the tensors the pool ever created: after the first frame of a given
size it stays put. `constant` keeps small per-device tensors (a filter's taps, a
normalization's mean) so that they are not built and copied to the device on every call.
"""

from __future__ import annotations

import contextlib
import functools
from collections import defaultdict
from collections.abc import Iterator, Sequence
from contextvars import ContextVar

import torch

Key = tuple[tuple[int, ...], torch.dtype]

_active: ContextVar[BufferPool | None] = ContextVar("tilecraft_vision_pool", default=None)


def _canonical(device: torch.device | str) -> torch.device:
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        return torch.device("cuda", torch.cuda.current_device())
    return device


class BufferPool:
    """Reusable tensors by shape and dtype, on one device (pinned host memory with
    `pin_memory=True`); see the module's docstring."""

    def __init__(self, device: torch.device | str = "cpu", pin_memory: bool = False) -> None:
        self.device = _canonical(device)
        self.pin_memory = pin_memory
        self.allocations = 0
        self.bytes = 0
        self._free: dict[Key, list[torch.Tensor]] = defaultdict(list)
        self._lent: list[torch.Tensor] = []

    def take(self, shape: Sequence[int], dtype: torch.dtype) -> torch.Tensor:
        """A contiguous tensor of `shape` and `dtype` (uninitialized): a free one, else new."""
        key = (tuple(int(s) for s in shape), dtype)
        if self._free[key]:
            return self._free[key].pop()
        self.allocations += 1
        pinned = self.pin_memory and torch.cuda.is_available()
        tensor = torch.empty(key[0], dtype=dtype, device=self.device, pin_memory=pinned)
        self.bytes += tensor.numel() * tensor.element_size()
        return tensor

    def give(self, tensor: torch.Tensor) -> None:
        """Hand back a tensor `take` (or `keep`) gave."""
        self._free[(tuple(tensor.shape), tensor.dtype)].append(tensor)

    @contextlib.contextmanager
    def frame(self) -> Iterator[BufferPool]:
        """Within it, `empty` on this pool's device takes from the pool; at its end every
        buffer taken is given back, except those `keep` took out."""
        token = _active.set(self)
        try:
            yield self
        finally:
            _active.reset(token)
            lent, self._lent = self._lent, []
            for tensor in lent:
                self.give(tensor)

    def keep(self, result: torch.Tensor) -> torch.Tensor | None:
        """Take the buffer under `result` (a view of one this frame took) out of the frame's
        buffers; returns it, to `give` back later (None when no pooled buffer holds it)."""
        where = result.untyped_storage().data_ptr()
        for i, tensor in enumerate(self._lent):
            if tensor.untyped_storage().data_ptr() == where:
                return self._lent.pop(i)
        return None

    def lend(self, shape: Sequence[int], dtype: torch.dtype) -> torch.Tensor:
        """`take`, recorded as this frame's: given back when the frame ends."""
        tensor = self.take(shape, dtype)
        self._lent.append(tensor)
        return tensor


def empty(shape: Sequence[int], dtype: torch.dtype, device: torch.device | str) -> torch.Tensor:
    """`torch.empty(shape, dtype, device)`, from the active pool when there is one there."""
    pool = _active.get()
    if pool is not None and _canonical(device) == pool.device:
        return pool.lend(shape, dtype)
    return torch.empty(list(shape), dtype=dtype, device=device)


def constant(values: Sequence[float], device: torch.device | str) -> torch.Tensor:
    """`values` as a float32 tensor on `device`, built once per values and device."""
    return _constant(tuple(float(v) for v in values), _canonical(device))


@functools.lru_cache(maxsize=256)
def _constant(values: tuple[float, ...], device: torch.device) -> torch.Tensor:
    tensor = torch.tensor(values, dtype=torch.float32).to(device)
    if device.type == "cuda":
        # kernels on other streams read it next: let the copy finish first
        torch.cuda.current_stream(device).synchronize()
    return tensor
