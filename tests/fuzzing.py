"""Loading generated kernels for the fuzz tests: the frontend reads a kernel's source, so
the generated code is written to a file and imported from there."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode


def load_kernels(tmp_path_factory: pytest.TempPathFactory, name: str, source: str) -> ModuleType:
    """`source` (after tilecraft's and torch's imports) as module `name`."""
    path: Path = tmp_path_factory.mktemp("fuzz") / f"{name}.py"
    path.write_text("import torch\nimport tilecraft as tc\n" + source)
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


_WIDENED = {torch.add, torch.sub, torch.pow, torch.Tensor.add, torch.Tensor.sub, torch.Tensor.pow}
_WIDENED |= {getattr(torch.Tensor, f"__{p}{n}__") for n in ("add", "sub", "pow") for p in "ri"}
_WIDENED |= {torch.Tensor.__add__, torch.Tensor.__sub__, torch.Tensor.__pow__}
_IN_PLACE = {torch.Tensor.__iadd__, torch.Tensor.__isub__, torch.Tensor.__ipow__}
_IN_PLACE |= {torch.Tensor.add_, torch.Tensor.sub_, torch.Tensor.pow_}
_WIDENED |= _IN_PLACE


class Float32Numbers(TorchFunctionMode):
    """A reference's `h + c`, `h - c` and `h ** c` of a 16-bit float tensor and a Python
    number computed in float32 and rounded once, as tilecraft computes them in both modes
    (and PyTorch's CUDA kernels add): PyTorch's CPU add and sub round c to 16 bits first
    (`h + math.pi` in float16, and `h + -999` in bfloat16, where -999 is -1000) while its
    mul and div do not, and its bfloat16 `h ** 3` rounds h * h first (float16's does not).
    A number past the 16-bit range too (the CPU's `-inf + 1e10` is NaN in float16: -inf)."""

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: Any = None):
        kwargs = kwargs or {}
        half = len(args) == 2 and isinstance(args[0], torch.Tensor)
        half = half and args[0].dtype in (torch.float16, torch.bfloat16)
        number = half and isinstance(args[1], (int, float)) and not isinstance(args[1], bool)
        if func not in _WIDENED or kwargs or not number:
            return func(*args, **kwargs)
        wide = func(args[0].float(), args[1])
        return args[0].copy_(wide) if func in _IN_PLACE else wide.to(args[0].dtype)


_FLOOR_DIVISIONS = {torch.floor_divide, torch.Tensor.__floordiv__, torch.Tensor.__rfloordiv__}
_DIVISIONS = {torch.div, torch.Tensor.div, torch.divide}


class OneElementAtATime(TorchFunctionMode):
    """A reference's ops taken one element at a time where PyTorch's CPU kernels give
    another answer on a longer tensor (their vectorized path), and tilecraft gives the
    one-element answer, as PyTorch's CUDA kernels do: a floor division at 16 bits (the
    vector path takes 16-bit steps: bfloat16 1000 // 3 is 334 there, for 333 rounded once,
    332) and `gelu(inf)` (NaN there, inf on one element)."""

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: Any = None):
        kwargs = kwargs or {}
        floor = func in _FLOOR_DIVISIONS and not kwargs
        floor = floor or (func in _DIVISIONS and kwargs == {"rounding_mode": "floor"})
        half = floor and torch.result_type(*args[:2]) in (torch.float16, torch.bfloat16)
        gelu = func is F.gelu and kwargs.get("approximate", "none") == "none"
        args = _on_one_device(args)
        if half or gelu:
            return _one_at_a_time(func, args, kwargs)
        return func(*args, **kwargs)


def _on_one_device(args: tuple) -> tuple:
    """A 0-d CPU tensor (the result of host numbers, `torch.div(-2, n)`) moved to the GPU
    of another operand: most ops take it as a number, `torch.logical_and` refuses it."""
    devices = [a.device for a in args if _tensor(a) and a.device.type != "cpu"]
    if not devices:
        return args
    return tuple(a.to(devices[0]) if _tensor(a) and not a.dim() else a for a in args)


def _one_at_a_time(func: Any, args: tuple, kwargs: dict) -> torch.Tensor:
    shape = torch.broadcast_shapes(*(a.shape for a in args if isinstance(a, torch.Tensor)))

    def at(k: slice) -> list:
        return [a.broadcast_to(shape).reshape(-1)[k] if _tensor(a) else a for a in args]

    alone = [func(*at(slice(k, k + 1)), **kwargs) for k in range(shape.numel())]
    return torch.cat([func(*at(slice(0, 0)), **kwargs), *alone]).reshape(shape)


def _tensor(a: Any) -> bool:
    return isinstance(a, torch.Tensor)
