"""A first call's Triton compile under a deadline, so that no config hangs a call.

On a GPU the first launch of a config compiles it, and some configs keep Triton's
compiler busy for minutes. The first call therefore compiles without launching
(`compile_only`), in a background thread, and waits at most `compile_timeout_s`
(TILECRAFT_COMPILE_TIMEOUT); past that it warns and runs a small config instead
(`heuristics.safe_config`). The compile left behind goes on in its daemon thread and its
result is dropped. A compile that finishes in time fills Triton's cache, so the launch
that follows does not compile again.
"""

from __future__ import annotations

import threading
import types
from collections.abc import Callable
from typing import Any

import torch

from tilecraft.runtime.cpu import tensors_in
from tilecraft.runtime.fast_launch import unwrap


class SlowCompileWarning(UserWarning):
    """A config's compile outlived TILECRAFT_COMPILE_TIMEOUT; a smaller config ran."""


def needed(args: tuple) -> bool:
    """Whether a first call compiles for a device here (CPU kernels are interpreted)."""
    return any(t.is_cuda for t in tensors_in(args))


def compile_only(launcher: Callable[..., Any]) -> Callable[..., Any]:
    """A copy of a generated launcher whose Triton launches compile without running: its
    host code runs (allocating outputs), each `kernel[grid](...)` only compiles."""
    return with_kernels(launcher, _Warmup)


def with_kernels(
    launcher: Callable[..., Any], stand_in: Callable[[Any], Any]
) -> Callable[..., Any]:
    """A copy of a generated launcher whose Triton kernels are `stand_in(kernel)`."""
    from triton.runtime.jit import KernelInterface

    names = {k: unwrap(v) for k, v in launcher.__globals__.items()}  # Triton's own kernels
    swapped = {k: stand_in(v) if isinstance(v, KernelInterface) else v for k, v in names.items()}
    return types.FunctionType(
        launcher.__code__, swapped, launcher.__name__, launcher.__defaults__, launcher.__closure__
    )


class _Warmup:
    """Stands in for a Triton kernel: `kernel[grid](*args)` compiles it and returns."""

    def __init__(self, kernel: Any) -> None:
        self.kernel = kernel

    def __getitem__(self, grid: Any) -> Callable[..., Any]:
        return lambda *args, **kwargs: self.kernel.run(*args, grid=grid, warmup=True, **kwargs)


def precompile(launcher: Callable[..., Any], args: tuple) -> None:
    """Compile every Triton kernel `launcher` launches for `args`, running none, for the
    arguments' GPU (a new thread starts on GPU 0, and Triton compiles for the current one)."""
    device = next((t.device for t in tensors_in(args) if t.is_cuda), None)
    if device is None:
        compile_only(launcher)(*args)
        return
    with torch.cuda.device(device):
        compile_only(launcher)(*args)


def finishes_within(work: Callable[[], Any], timeout_s: float) -> bool:
    """Run `work` in a daemon thread: True when it finished within `timeout_s` (what it
    raised is raised here), False when it is still running (left to finish alone)."""
    failure: list[BaseException] = []

    def run() -> None:
        try:
            work()
        except BaseException as e:  # noqa: BLE001 - handed to the waiting thread
            failure.append(e)

    thread = threading.Thread(target=run, name="tilecraft-compile", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        return False
    if failure:
        raise failure[0]
    return True
