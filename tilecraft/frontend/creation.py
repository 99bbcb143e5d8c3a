"""New tiles inside device loops, written as PyTorch writes them: `zeros_like`,
`full_like`, `x.new_zeros(...)`, `torch.zeros([tile_m, 4])`, `torch.tensor(...)`,
`torch.arange(n)`."""

from __future__ import annotations

from typing import Any

import torch

from tilecraft.exc import DtypeError, UnsupportedOperation
from tilecraft.frontend.builder import Builder, converted
from tilecraft.frontend.ops import OPS, op
from tilecraft.frontend.views import broadcast_to, shape_dims, shape_items, show, static_block
from tilecraft.ir.nodes import Value
from tilecraft.ir.types import Dim

Number = bool | int | float


def full(b: Builder, dims: tuple[Dim, ...], value: Any, dtype: torch.dtype) -> Value:
    """A tile of `dims` filled with `value`: a number, or a scalar (a host float, a tile
    of no dims) converted to `dtype` as PyTorch converts a fill value."""
    if isinstance(value, Value) and not value.type.dims:
        return broadcast_to(b, b.cast(value, dtype), dims)  # type: ignore[arg-type]
    if not isinstance(value, (bool, int, float)):
        raise UnsupportedOperation(
            f"a fill value must be a number or a scalar, not {_kind(b, value)}: use "
            "torch.where or multiply a tile of ones",
            b.loc,
        )
    value = converted(b, value, dtype)
    return b.op("full", (), dtype, dims, hint="filled", value=value)


def _kind(b: Builder, value: Any) -> str:
    return f"a tile of shape {show(b, value)}" if isinstance(value, Value) else type(value).__name__


def _scalar_dtype(value: Any) -> torch.dtype:
    """The dtype torch.full/torch.tensor give a Python number."""
    if isinstance(value, bool):
        return torch.bool
    return torch.int64 if isinstance(value, int) else torch.get_default_dtype()


def _dtype(b: Builder, dtype: Any, default: torch.dtype) -> torch.dtype:
    if dtype is None:
        return default
    if not isinstance(dtype, torch.dtype):
        raise DtypeError(f"dtype= must be a torch dtype, not {dtype!r}", b.loc)
    return dtype


# -- *_like and new_* ---------------------------------------------------------------------
def _like(fill: Number | None) -> Any:
    def handler(b: Builder, x: Value, *args: Any, dtype: Any = None, **_: Any) -> Value:
        value = fill if fill is not None else args[0] if args else _.get("fill_value")
        return full(b, x.type.dims, value, _dtype(b, dtype, x.type.dtype))

    return handler


OPS["zeros_like"] = OPS["empty_like"] = _like(0)
OPS["ones_like"] = _like(1)
OPS["full_like"] = _like(None)


def _new(fill: Number | None) -> Any:
    def handler(b: Builder, x: Value, *args: Any, dtype: Any = None, **kw: Any) -> Value:
        size, rest = (args[0], args[1:]) if args else (kw.pop("size"), ())
        value = fill if fill is not None else rest[0] if rest else kw.get("fill_value")
        dims = shape_dims(b, shape_items((size,)))
        return full(b, dims, value, _dtype(b, dtype, x.type.dtype))

    return handler


OPS["new_zeros"] = OPS["new_empty"] = _new(0)
OPS["new_ones"] = _new(1)
OPS["new_full"] = _new(None)


# -- torch.zeros / ones / full / empty ----------------------------------------------------
def _factory(fill: Number) -> Any:
    def handler(b: Builder, *size: Any, dtype: Any = None, **_: Any) -> Value:
        dims = shape_dims(b, shape_items(size))
        return full(b, dims, fill, _dtype(b, dtype, torch.get_default_dtype()))

    return handler


OPS["zeros"] = OPS["empty"] = _factory(0)
OPS["ones"] = _factory(1)


@op("full")
def _full(b: Builder, size: Any, fill_value: Any, dtype: Any = None, **_: Any) -> Value:
    dims = shape_dims(b, shape_items((size,)))
    return full(b, dims, fill_value, _dtype(b, dtype, _scalar_dtype(fill_value)))


# -- constants -----------------------------------------------------------------------------
@op("tensor", "as_tensor")
def tensor(b: Builder, data: Any, dtype: Any = None, **_: Any) -> Value:
    """`torch.tensor(2.0)` (a scalar) or `torch.tensor([1, 2, 3])` (a small constant tile)."""
    if isinstance(data, (bool, int, float)):
        return full(b, (), data, _dtype(b, dtype, _scalar_dtype(data)))
    if not isinstance(data, (list, tuple)) or not data:
        raise UnsupportedOperation(
            "torch.tensor in a device loop takes a number or a flat list of numbers; build "
            "larger constants in host code and pass them as arguments",
            b.loc,
        )
    if not all(isinstance(v, (bool, int, float)) for v in data):
        raise UnsupportedOperation("torch.tensor([...]) needs constant numbers", b.loc)
    kinds = [_scalar_dtype(v) for v in data]
    default = max(kinds, key=lambda d: (d.is_floating_point, d != torch.bool))
    dtype = _dtype(b, dtype, default)
    if len(data) == 1:
        return full(b, (None,), data[0], dtype)
    dims = (static_block(b, len(data)),)
    cast = bool if dtype == torch.bool else float if dtype.is_floating_point else int
    items = tuple(cast(v) for v in data)
    return b.op("literal", (), dtype, dims, hint="const", values=items)


@op("arange")
def arange(
    b: Builder, start: Any, end: Any = None, step: Any = 1, dtype: Any = None, **_: Any
) -> Value:
    """`torch.arange(n)` with constant bounds: int64 (float when a bound is a float)."""
    lo, hi = (0, start) if end is None else (start, end)
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (lo, hi, step)):
        raise UnsupportedOperation(
            "torch.arange in a device loop needs constant bounds: use tile.index for a "
            "tile's indices",
            b.loc,
        )
    default = torch.int64
    if any(isinstance(v, float) for v in (lo, hi, step)):
        default = torch.get_default_dtype()
    dtype = _dtype(b, dtype, default)
    count = max(-(-(hi - lo) // step), 0) if step else 0
    if not step or int(count) != count:
        raise UnsupportedOperation("torch.arange needs a nonzero step", b.loc)
    count = int(count)
    if count <= 1:
        return full(b, (None,), lo if count else 0, dtype)
    block = b.table.reduction(count) if b.table is not None else None
    if block is None:
        raise UnsupportedOperation("torch.arange outside a device loop", b.loc)
    positions = b.op("arange", (), torch.int64, (block.id,), hint="arange", begin=0)
    if step == 1 and lo == int(lo):
        out = b.elementwise("add", positions, int(lo)) if lo else positions
    else:
        out = b.elementwise("add", b.elementwise("mul", b.cast(positions, dtype), step), lo)
    return b.cast(out, dtype)  # type: ignore[return-value]
