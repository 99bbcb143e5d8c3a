"""Compiling a kernel's Triton code for a GPU on a machine without one.

Triton's interpreter runs any code it can parse, so a kernel that passes every CPU test
can still fail to compile for a GPU (Triton's type checks, its layout passes, ptxas). On a
CPU machine `compile_for_gpu` compiles a call's kernels for an NVIDIA target (sm_90 by
default) with Triton's real compiler, all the way to the binary, launching nothing.

The launcher runs here with its Triton kernels replaced by recorders (host code runs,
allocating outputs; no kernel runs), and each recorded launch is compiled in a worker
process started without TRITON_INTERPRET: Triton decides at its import whether its own
library functions (`tl.sum`, ...) are interpreted, so a process that interprets cannot
compile. The worker stays up for the calls that follow (set TRITON_CACHE_DIR to keep
its binaries apart). Its failure is raised here as a `LoweringError` at the user's line.
TILECRAFT_CROSS_PYTHONPATH, if set, goes first on the worker's path: another Triton
there (`pip install --target DIR triton==3.6.0`) compiles as a GPU machine's would.
"""

from __future__ import annotations

import atexit
import os
import pickle
import select
import struct
import subprocess
import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import torch

from tilecraft.exc import LoweringError, SourceLoc
from tilecraft.runtime import guard
from tilecraft.runtime.heuristics import safe_config

TIMEOUT_S = 600.0  # one call's compiles, in the worker
# the shared memory a block may have (bytes), by compute capability: more fails to launch
SHARED_MEMORY = {80: 166912, 86: 101376, 89: 101376, 90: 232448}


@dataclass(frozen=True)
class Pointer:
    """A tensor argument as Triton's compiler sees it: its dtype and 16-byte alignment."""

    dtype: torch.dtype
    misalign: int  # data_ptr % 16

    def stand_in(self) -> torch.Tensor:
        elements = self.misalign // self.dtype.itemsize
        return torch.empty(16 + elements, dtype=self.dtype)[elements:]


@dataclass(frozen=True)
class Launch:
    kernel: str
    grid: tuple
    args: tuple
    kwargs: dict


def launches(launcher: Callable[..., Any], args: tuple) -> list[Launch]:
    """What `launcher(*args)` would launch, in order, with nothing launched."""
    seen: list[Launch] = []

    class Recorder:
        def __init__(self, kernel: Any) -> None:
            self.name = kernel.fn.__name__

        def __getitem__(self, grid: Any) -> Callable[..., None]:
            def record(*call: Any, **kwargs: Any) -> None:
                shape = grid(kwargs) if callable(grid) else grid
                kept = tuple(_describe(a) for a in call)
                seen.append(Launch(self.name, tuple(shape), kept, kwargs))

            return record

    guard.with_kernels(launcher, Recorder)(*args)
    return seen


def _describe(arg: Any) -> Any:
    if isinstance(arg, torch.Tensor):
        return Pointer(arg.dtype, arg.data_ptr() % 16)
    return arg


def compile_for_gpu(bound: Any, config: Any, args: tuple, arch: int = 90) -> None:
    """Compile the Triton kernels that `bound`'s launcher for `config` launches on `args`
    for an NVIDIA GPU of compute capability `arch` (90: Hopper), in the worker. A config
    needing more shared memory than the GPU has passes with a warning where its safe
    config compiles: on the GPU a first call runs that one instead (bound.py)."""
    failure = _failure(bound, config, args, arch)
    if failure is not None and failure[0] == OutOfSharedMemory.__name__:
        safe = safe_config(bound.spec, bound.resolve(config))
        if _failure(bound, safe, args, arch) is None:
            warnings.warn(
                f"tilecraft: `{bound.src.tree.name}` with {bound.resolve(config)!r} "
                f"{failure[1]}; on such a GPU it runs {safe!r} instead",
                guard.SlowCompileWarning,
                stacklevel=3,
            )
            return
    if failure is not None:
        kind, message, loc = failure
        raise LoweringError(
            f"Triton failed to compile `{bound.src.tree.name}` for sm_{arch}: {kind}: {message}",
            loc or bound.src.loc(bound.src.tree),
        )


def _failure(bound: Any, config: Any, args: tuple, arch: int) -> Any:
    """None where every kernel of `config` compiles, else (error type, message, loc)."""
    path, code = bound.code_file(config)
    namespace = dict(bound.src.namespace)
    exec(compile(code, str(path), "exec"), namespace)
    found = launches(namespace[bound.src.tree.name], args)
    return _worker().ask((str(path), code, found, arch))


class _Worker:
    """The compiling process: requests and replies pickled, each after its length."""

    def __init__(self) -> None:
        env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
        first = os.environ.get("TILECRAFT_CROSS_PYTHONPATH")
        if first:
            paths = [first, *env.get("PYTHONPATH", "").split(os.pathsep)]
            env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tilecraft.runtime.crosscompile"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
        )

    def ask(self, request: Any, timeout_s: float = TIMEOUT_S) -> Any:
        assert self.process.stdin is not None and self.process.stdout is not None
        try:
            _send(self.process.stdin, request)
        except BrokenPipeError:  # it died after its last answer
            raise self._died() from None
        if not select.select([self.process.stdout], [], [], timeout_s)[0]:
            self.close()
            raise LoweringError(f"Triton's compiler took over {timeout_s:g} s (stopped)")
        reply = _receive(self.process.stdout)
        if reply is None:
            raise self._died()
        return reply[0]

    def _died(self) -> LoweringError:
        return LoweringError(f"Triton's compiler died (exit status {self.process.wait()})")

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


_current: _Worker | None = None


def _worker() -> _Worker:
    global _current
    if _current is None or _current.process.poll() is not None:
        _current = _Worker()
        atexit.register(_current.close)
    return _current


def _send(stream: IO[bytes], value: Any) -> None:
    data = pickle.dumps(value)
    stream.write(struct.pack("<Q", len(data)) + data)
    stream.flush()


def _receive(stream: IO[bytes]) -> Any:
    head = stream.read(8)
    if len(head) < 8:
        return None
    return pickle.loads(stream.read(struct.unpack("<Q", head)[0]))


# -- the worker ----------------------------------------------------------------------------


class _Target:
    """Triton's driver for compiling only: a GPU's target, no device."""

    def __init__(self, arch: int) -> None:
        from triton.backends.compiler import GPUTarget

        self.target = GPUTarget("cuda", arch, 32)

    def get_current_target(self) -> Any:
        return self.target

    def get_current_device(self) -> int:
        return 0

    def get_current_stream(self, device: int | None = None) -> int:
        return 0


def _compile(path: str, code: str, found: list[Launch], arch: int) -> Any:
    """None when every launch compiled, else (its error's type name, message, the user's
    SourceLoc or None)."""
    from triton.runtime.driver import driver

    from tilecraft.runtime.cache import remember_source
    from tilecraft.runtime.errors import user_location

    remember_source(Path(path), code)  # Triton reads a kernel's source through `inspect`
    namespace: dict[str, Any] = {"__name__": "tilecraft_generated"}  # Triton names helpers by it
    driver.set_active(_Target(arch))
    try:
        exec(compile(code, path, "exec"), namespace)
        for launch in found:
            args = [a.stand_in() if isinstance(a, Pointer) else a for a in launch.args]
            kernel = namespace[launch.kernel]
            binary = kernel.run(*args, grid=launch.grid, warmup=True, **launch.kwargs)
            _check_shared_memory(binary, arch)
    except Exception as e:  # noqa: BLE001 - handed back, named at the user's line
        loc: SourceLoc | None = user_location(e, code, path)
        return type(e).__name__, str(e)[-1500:], loc
    return None


def _check_shared_memory(binary: Any, arch: int) -> None:
    """Raise where `binary` needs more shared memory than a GPU of `arch` has (which
    Triton finds only when it loads the binary, on the GPU)."""
    need, limit = int(binary.metadata.shared), SHARED_MEMORY.get(arch)
    if limit is not None and need > limit:
        raise OutOfSharedMemory(f"needs {need} bytes of shared memory; sm_{arch} has {limit}")


class OutOfSharedMemory(Exception):
    """A config's kernel needs more shared memory than the target GPU has."""


def serve() -> None:
    import triton.language  # noqa: F401 - imported before any request, uninterpreted

    requests, replies = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # what Triton prints stays off the replies' pipe
    while True:
        request = _receive(requests)
        if request is None:
            return
        _send(replies, (_compile(*request),))


if __name__ == "__main__":  # (this module's own classes, not __main__'s, are unpickled)
    from tilecraft.runtime.crosscompile import serve as run

    run()
