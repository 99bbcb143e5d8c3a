"""Triton expressions for IR ops: one rule per op name (the lowering table)."""

from __future__ import annotations

import math
import os
from collections.abc import Callable

import torch

TL_DTYPES = {
    torch.float32: "tl.float32",
    torch.float16: "tl.float16",
    torch.bfloat16: "tl.bfloat16",
    torch.float64: "tl.float64",
    torch.int8: "tl.int8",
    torch.int16: "tl.int16",
    torch.int32: "tl.int32",
    torch.int64: "tl.int64",
    torch.uint8: "tl.uint8",
    torch.bool: "tl.int1",
}


def tl_dtype(dtype: torch.dtype) -> str:
    """The Triton name of a torch dtype."""
    return TL_DTYPES[dtype]


def literal(value: object) -> str:
    """A Python scalar as Triton source."""
    if isinstance(value, float):
        if math.isinf(value):
            return 'float("inf")' if value > 0 else '-float("inf")'
        if math.isnan(value):
            return 'float("nan")'
    return repr(value)


def triton_interpret() -> bool:
    """Whether Triton's CPU interpreter will run the generated code (TRITON_INTERPRET=1)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


Rule = Callable[..., str]

ELEMENTWISE: dict[str, Rule] = {
    "add": lambda a, b: f"{a} + {b}",
    "sub": lambda a, b: f"{a} - {b}",
    "mul": lambda a, b: f"{a} * {b}",
    "truediv": lambda a, b: f"{a} / {b}",
    "and": lambda a, b: f"{a} & {b}",
    "or": lambda a, b: f"{a} | {b}",
    "xor": lambda a, b: f"{a} ^ {b}",
    "lt": lambda a, b: f"{a} < {b}",
    "le": lambda a, b: f"{a} <= {b}",
    "gt": lambda a, b: f"{a} > {b}",
    "ge": lambda a, b: f"{a} >= {b}",
    "eq": lambda a, b: f"{a} == {b}",
    "ne": lambda a, b: f"{a} != {b}",
    "maximum": lambda a, b: f"tl.maximum({a}, {b})",
    "minimum": lambda a, b: f"tl.minimum({a}, {b})",
    "pow": lambda a, b: f"tl.exp2(tl.log2({a}) * {b})",
    "neg": lambda a: f"-{a}",
    "not": lambda a: f"{a} == 0",
    "abs": lambda a: f"tl.abs({a})",
    "exp": lambda a: f"tl.exp({a})",
    "exp2": lambda a: f"tl.exp2({a})",
    "log": lambda a: f"tl.log({a})",
    "log2": lambda a: f"tl.log2({a})",
    "sqrt": lambda a: f"tl.sqrt({a})",
    "rsqrt": lambda a: f"tl.rsqrt({a})",
    "sigmoid": lambda a: f"tl.sigmoid({a})",
    # tanh via sigmoid: libdevice's tanh is not available under Triton's interpreter
    "tanh": lambda a: f"2 * tl.sigmoid(2 * {a}) - 1",
    "erf": lambda a: f"tl.erf({a})",
    "sin": lambda a: f"tl.sin({a})",
    "cos": lambda a: f"tl.cos({a})",
    "floor": lambda a: f"tl.floor({a})",
    "ceil": lambda a: f"tl.ceil({a})",
    "where": lambda c, a, b: f"tl.where({c}, {a}, {b})",
}


def floordiv(a: str, b: str, is_float: bool) -> str:
    """PyTorch's flooring division (Triton's `//` truncates toward zero)."""
    if is_float:
        return f"tl.floor({a} / {b})"
    return f"{a} // {b} - (({a} % {b} != 0) & (({a} < 0) != ({b} < 0))).to({a}.dtype)"


def remainder(a: str, b: str, is_float: bool) -> str:
    """PyTorch's remainder, which takes the sign of the divisor."""
    if is_float:
        return f"{a} - tl.floor({a} / {b}) * {b}"
    r = f"({a} % {b})"
    return f"tl.where(({r} != 0) & (({r} < 0) != ({b} < 0)), {r} + {b}, {r})"


TL_REDUCE = {
    "sum": "tl.sum",
    "max": "tl.max",
    "min": "tl.min",
    "argmax": "tl.argmax",
    "argmin": "tl.argmin",
}


def identity(kind: str, dtype: torch.dtype) -> str:
    """The neutral element of a reduction, used for masked-off lanes."""
    if kind == "sum":
        return "0"
    high = kind in ("min", "argmin")
    if dtype.is_floating_point:
        return literal(math.inf if high else -math.inf)
    if dtype == torch.bool:
        return "1" if high else "0"
    info = torch.iinfo(dtype)
    return str(info.max if high else info.min)
