"""Compound functions users call on tiles, expanded into other handlers as PyTorch writes
them: isposinf/isneginf, heaviside, deg2rad/rad2deg, sinc, addcmul/addcdiv, rsub,
positive, softmin, masked_fill, triu/tril, and torch.nn.functional's normalize and glu."""

from __future__ import annotations

import math
from typing import Any

import torch

from tilecraft.exc import DtypeError, ShapeMismatch, UnsupportedOperation
from tilecraft.frontend.activations import _narrow, _wide
from tilecraft.frontend.builder import Builder, Operand, compute_dtype, converted, promote
from tilecraft.frontend.joins import _piece
from tilecraft.frontend.ops import OPS, op, view
from tilecraft.frontend.views import axis_of, whole_extent
from tilecraft.ir.nodes import Value
from tilecraft.runtime.cpu import interpreter_set as interpreted


def _infinity_test(sign: float) -> Any:
    def handler(b: Builder, x: Value) -> Value:
        if not x.type.dtype.is_floating_point:  # integers are never infinite
            return b.elementwise("ne", x, x, dtype=torch.bool)
        return b.elementwise("eq", x, sign * math.inf, dtype=torch.bool)

    return handler


OPS["isposinf"], OPS["isneginf"] = _infinity_test(1.0), _infinity_test(-1.0)


@op("heaviside")
def _heaviside(b: Builder, x: Value, values: Operand) -> Value:
    """`values` where x is 0, else x > 0 (NaN gives 0, as PyTorch's kernel)."""
    step = b.cast(b.elementwise("gt", x, 0, dtype=torch.bool), x.type.dtype)
    return b.elementwise("where", b.elementwise("eq", x, 0, dtype=torch.bool), values, step)


def _scaled(factor: float) -> Any:
    """x times a constant, in x's float dtype (integers give float32), as deg2rad."""

    def handler(b: Builder, x: Value) -> Value:
        if x.type.dtype.is_floating_point:
            return b.elementwise("mul", x, factor)
        return b.elementwise("mul", b.cast(x, torch.float32), factor)

    return handler


OPS["deg2rad"], OPS["rad2deg"] = _scaled(math.pi / 180), _scaled(180 / math.pi)


@op("sinc")
def _sinc(b: Builder, x: Value) -> Value:
    """sin(pi x) / (pi x), 1 at 0."""
    xf = _wide(b, x)
    product = b.elementwise("mul", xf, math.pi)
    ratio = b.elementwise("truediv", OPS["sin"](b, product), product)
    one = b.elementwise("eq", xf, 0.0, dtype=torch.bool)
    return _narrow(b, b.elementwise("where", one, 1.0, ratio), x)


def _fused(b: Builder, name: str, x: Value, t1: Operand, t2: Operand, value: float) -> Value:
    """x + value * (t1 `name` t2) as PyTorch's addcmul/addcdiv kernels: 16-bit floats in
    float32, rounded once; an int `value` for integer tiles (PyTorch casts it)."""
    dtype = promote(x, t1, t2)
    if not dtype.is_floating_point:
        if name == "true_divide":
            raise DtypeError("addcdiv of integer tiles (PyTorch refuses it too)", b.loc)
        value = int(value)
    wide = [b.cast(v, compute_dtype(dtype)) for v in (x, t1, t2)]
    if not interpreted() and dtype.is_floating_point:
        return b.cast(_on_a_gpu(b, name, wide, value), dtype)  # type: ignore[return-value]
    scaled = b.elementwise("mul", wide[1], value)
    if name == "mul":  # PyTorch's CPU vector code: (value * t1) * t2 + x, fused
        return b.cast(b.elementwise("fma", scaled, wide[2], wide[0]), dtype)  # type: ignore[return-value]
    combined = OPS[name](b, scaled, wide[2])
    return b.cast(b.elementwise("add", wide[0], combined), dtype)  # type: ignore[return-value]


def _on_a_gpu(b: Builder, name: str, wide: list, value: float) -> Operand:
    """PyTorch's CUDA kernels: x + t1 * t2 fused and x + t1 / t2 unfused where value is 1
    (in the compute dtype), else value * (t1 `name` t2) + x fused."""
    x, t1, t2 = wide
    if float(torch.tensor(value, dtype=x.type.dtype)) == 1.0:
        if name == "mul":
            return b.elementwise("fma", t1, t2, x)
        return b.elementwise("add", x, OPS[name](b, t1, t2))
    return b.elementwise("fma", value, OPS[name](b, t1, t2), x)


@op("addcmul")
def _addcmul(b: Builder, x: Value, t1: Operand, t2: Operand, *, value: float = 1) -> Value:
    return _fused(b, "mul", x, t1, t2, value)


@op("addcdiv")
def _addcdiv(b: Builder, x: Value, t1: Operand, t2: Operand, *, value: float = 1) -> Value:
    return _fused(b, "true_divide", x, t1, t2, value)


@op("rsub")
def _rsub(b: Builder, x: Value, y: Operand, alpha: float = 1) -> Value:
    """y - alpha * x."""
    return b.elementwise("sub", y, x if alpha == 1 else b.elementwise("mul", x, alpha))


@op("positive")
def _positive(b: Builder, x: Value) -> Value:
    return x


@op("softmin")
def _softmin(
    b: Builder, x: Value, dim: Any = None, _stacklevel: int = 3, dtype: Any = None
) -> Value:
    if dim is None:
        raise UnsupportedOperation("softmin of a tile needs dim=", b.loc)
    negated = OPS["neg"](b, x if dtype is None else b.cast(x, dtype))
    return OPS["softmax"](b, negated, dim)  # type: ignore[no-any-return]


@op("normalize")
def _normalize(
    b: Builder, x: Value, p: float = 2.0, dim: int = 1, eps: float = 1e-12, out: Any = None
) -> Value:
    """F.normalize: x over its p-norm along `dim`, the norm at least `eps`."""
    norm = OPS["norm"](b, x, p, dim, True)
    return OPS["true_divide"](b, x, OPS["clamp_min"](b, norm, eps))  # type: ignore[no-any-return]


@op("glu")
def _glu(b: Builder, x: Value, dim: int = -1) -> Value:
    """F.glu: the first half of `dim` times the sigmoid of the second."""
    axis = axis_of(b, x.type.rank, dim)
    extent = whole_extent(b, x, axis, "glu")
    if extent % 2:
        raise ShapeMismatch(f"glu halves a dim of even size, not {extent}", b.loc)
    first, second = (_piece(b, x, axis, offset, extent // 2) for offset in (0, extent // 2))
    return b.elementwise("mul", first, OPS["sigmoid"](b, second))


@op("masked_fill")
def _masked_fill(b: Builder, x: Value, mask: Value, value: Operand) -> Value:
    """`x.masked_fill(mask, value)`: `value` where `mask` is True, `x` elsewhere, in `x`'s
    dtype and shape (`mask` broadcasts to it). `value` is a number, converted as PyTorch
    converts one (2.7 is 2 in an int tile; an overflow refused), or a one-element tile."""
    if not isinstance(mask, Value) or mask.type.dtype != torch.bool:
        raise DtypeError("masked_fill needs a boolean tile as its mask", b.loc)
    if isinstance(value, Value) and any(d is not None for d in value.type.dims):
        raise ShapeMismatch("masked_fill's value is a number or a tile of one element", b.loc)
    mask = b.fit_to(mask, x.type.dims)  # type: ignore[assignment]
    if b.broadcast(x, mask) != x.type.dims:
        raise ShapeMismatch(
            f"masked_fill's mask of shape {b.describe(mask.type.dims)} does not broadcast to "
            f"the tile's {b.describe(x.type.dims)}",
            b.loc,
        )
    dtype = x.type.dtype
    fill = b.cast(value, dtype) if isinstance(value, Value) else converted(b, value, dtype)
    return b.op("where", (mask, fill, x), dtype, x.type.dims, compute=compute_dtype(dtype))


def _triangle(upper: bool) -> Any:
    def handler(b: Builder, x: Value, diagonal: int = 0) -> Value:
        """x where column - row >= diagonal (triu) or <= diagonal (tril), else 0, over
        the last two dims, by positions within the tile (as eager mode's slice has them)."""
        rank = x.type.rank
        if rank < 2 or not isinstance(diagonal, int):
            raise ShapeMismatch("triu/tril take a tile of 2 dims or more, an int diagonal", b.loc)
        rows, cols = (_lanes(b, x, axis, "triu" if upper else "tril") for axis in (-2, -1))
        offset = OPS["sub"](b, cols, rows)
        keep = b.elementwise("ge" if upper else "le", offset, diagonal, dtype=torch.bool)
        zero = False if x.type.dtype == torch.bool else 0
        return b.elementwise("where", keep, x, zero, dtype=x.type.dtype)

    return handler


def _lanes(b: Builder, x: Value, axis: int, what: str) -> Operand:
    """Positions 0, 1, ... along dim `axis` of x (a tile's from its first lane), placed
    at that axis."""
    rank = x.type.rank
    d = x.type.dims[axis]
    if d is None:
        return 0
    block = b.blocks[d]
    index = b.op("tile_index", (d,), torch.int32, (d,), hint="position")
    if block.kind == "tile":
        start: Operand = b.op("tile_begin", (d,), torch.int32, (), hint="start")
    else:
        whole_extent(b, x, axis % rank, what)
        start = block.begin
    local = b.elementwise("sub", index, start) if isinstance(start, Value) or start else index
    return view(b, local, tuple(":" if k == axis % rank else "None" for k in range(rank)))


OPS["triu"], OPS["tril"] = _triangle(True), _triangle(False)
