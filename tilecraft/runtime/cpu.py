"""Kernels called with CPU tensors: they run with no setting needed, through Triton's
interpreter where it can run them, else eagerly in PyTorch, and say once that it is slow."""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import sys
import warnings
from typing import Any

import torch

ENV = "TRITON_INTERPRET"


class SlowOnCPU(UserWarning):
    """A kernel runs on CPU tensors through an interpreter: right answers, slowly."""


def tensors_in(args: Any) -> list[torch.Tensor]:
    """A call's tensors, those its list, tuple, dict and dataclass arguments hold too."""
    if isinstance(args, torch.Tensor):
        return [args]
    return [t for _, a in container_items(args) or [] for t in tensors_in(a)]


def container_items(arg: Any) -> list[tuple[Any, Any]] | None:
    """What a list, tuple (a namedtuple too), dict or dataclass argument holds, by position,
    key or field; None for anything else. The tensors and ints in it are specialized on as
    the arguments' own are (generated code has their shapes in it)."""
    if isinstance(arg, (list, tuple)):
        return list(enumerate(arg))
    if isinstance(arg, dict):
        return list(arg.items())
    if dataclasses.is_dataclass(arg) and not isinstance(arg, type):
        return [(f.name, getattr(arg, f.name)) for f in dataclasses.fields(arg)]
    return None


def runs_on_cpu(args: tuple) -> bool:
    """Whether a call's tensors are all on the CPU (where Triton can only interpret)."""
    devices = {a.device.type for a in tensors_in(args)}
    if not devices:
        devices = {torch.get_default_device().type}
    return devices == {"cpu"}


def interpreter_set() -> bool:
    """Whether TRITON_INTERPRET is on (set by the user, or by `cpu_mode`)."""
    return os.environ.get(ENV, "0") not in ("", "0")


def cpu_mode() -> str:
    """How kernels on CPU tensors run in this process: "triton" (Triton's interpreter) or
    "eager" (the kernel body in PyTorch, as with TILECRAFT_INTERPRET=1).

    Triton decides at its import whether its own library functions (`tl.sum`, ...) are
    interpreted, so its interpreter works only if TRITON_INTERPRET=1 was set before that.
    Without a GPU, Triton can only interpret, so it is set here for the whole process while
    Triton is not yet imported; with a GPU, or with Triton already imported for compiling,
    CPU kernels run eagerly instead.
    """
    if importlib.util.find_spec("triton") is None:
        return "eager"  # Triton's wheels are for Linux only
    if interpreter_set():
        return "triton"
    if "triton" in sys.modules or torch.cuda.is_available():
        return "eager"
    global _set_here
    os.environ[ENV] = "1"
    _set_here = True
    return "triton"


_set_here = False  # whether `cpu_mode` set TRITON_INTERPRET (else the user did, knowingly)
_warned: set[str] = set()


def warn_slow(kernel: str, mode: str) -> None:
    """Say, once per process, that kernels on CPU tensors are slow (unless the user asked
    for Triton's interpreter themselves)."""
    if mode in _warned or (mode == "triton" and not _set_here):
        return
    _warned.add(mode)
    how = "through Triton's interpreter" if mode == "triton" else "eagerly in PyTorch"
    warnings.warn(
        f"tilecraft: `{kernel}` got CPU tensors, so it runs {how}: right answers, slowly"
        " (meant for writing and testing kernels; on GPU tensors kernels are compiled)",
        SlowOnCPU,
        stacklevel=4,
    )
