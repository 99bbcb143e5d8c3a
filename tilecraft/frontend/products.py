"""Matrix products on tiles: `tc.dot`, `@`, `torch.matmul/mm/bmm/addmm/baddbmm`, with
float32 accumulation (int32 for int8), `out_dtype` and transposed operands."""

from __future__ import annotations

from typing import Any

import torch

from tilecraft.exc import DtypeError, ShapeMismatch
from tilecraft.frontend import jagged
from tilecraft.frontend.builder import Builder, promote
from tilecraft.frontend.creation import full
from tilecraft.frontend.ops import OPS, op, view
from tilecraft.frontend.views import broadcast_to, squeeze
from tilecraft.ir.nodes import Value
from tilecraft.ir.types import broadcast_dims

FLOAT8 = (torch.float8_e4m3fn, torch.float8_e5m2)
DOT_INTEGERS = (torch.int8, torch.uint8)


def dot(b: Builder, a: Value, c: Value, acc: Value | None = None, out_dtype: Any = None) -> Value:
    """A matrix product of 2-D (or batched 3-D) tiles, accumulated in float32 (int32 for
    int8). Without `acc` the result has `out_dtype` (default: the accumulator's dtype);
    with `acc` the product is cast to `out_dtype` (if given) and added to `acc`."""
    if not isinstance(a, Value) or not isinstance(c, Value) or a.type.rank != c.type.rank:
        raise ShapeMismatch("a matrix product needs two tiles of the same rank (2 or 3)", b.loc)
    a, c = _inner_dims_matched(b, a, c)
    if a.type.rank not in (2, 3) or a.type.dims[-1] != c.type.dims[-2]:
        raise ShapeMismatch(
            f"matrix product of {b.describe(a.type.dims)} and {b.describe(c.type.dims)}: "
            "inner dims differ",
            b.loc,
        )
    batch = broadcast_dims(a.type.dims[:-2], c.type.dims[:-2])
    if batch is None:
        raise ShapeMismatch(
            f"matrix product of {b.describe(a.type.dims)} and {b.describe(c.type.dims)}: "
            "batch dims differ",
            b.loc,
        )
    dims = (*batch, a.type.dims[-2], c.type.dims[-1])
    if acc is not None and broadcast_dims(dims, acc.type.dims) != acc.type.dims:
        raise ShapeMismatch("the accumulator's shape does not match the product", b.loc)
    if out_dtype is not None and not isinstance(out_dtype, torch.dtype):
        raise DtypeError(f"out_dtype must be a torch dtype, got {out_dtype!r}", b.loc)
    a, c = _dot_operands(b, a, c)
    # positions past a lane's length may hold anything (exp of a masked 0 is 1)
    a = jagged.masked(b, a, a.type.rank - 1, 0, "a matrix product")
    c = jagged.masked(b, c, c.type.rank - 2, 0, "a matrix product")
    compute = torch.float32 if a.type.dtype.is_floating_point else torch.int32
    if a.type.dtype == torch.float64:  # double products stay double, accumulator or not
        compute = torch.float64
    dtype = acc.type.dtype if acc is not None else (out_dtype or compute)
    product = out_dtype if acc is not None else None
    return b.op("dot", (a, c, acc), dtype, dims, hint="mm", compute=compute, product=product)


def _inner_dims_matched(b: Builder, a: Value, c: Value) -> tuple[Value, Value]:
    """Operands whose inner dims are a tile of a block size the kernel fixes and a whole
    dim of that size (chunked algorithms: a chunk's `[C, C]` matrix times the rows of a
    `block_size=C` tile) with the tile's dim read as the whole dim: lane for lane the same
    positions (a tile cut short reads 0 past its end, adding nothing)."""
    if a.type.rank not in (2, 3) or a.type.dims[-1] == c.type.dims[-2]:
        return a, c
    left, right = a.type.dims[-1], c.type.dims[-2]
    if _fixed_tile_of(b, right, left):
        return a, b.relabelled(c, {right: left})
    if _fixed_tile_of(b, left, right):
        return b.relabelled(a, {left: right}), c
    return a, c


def _fixed_tile_of(b: Builder, tile: Any, whole: Any) -> bool:
    """Whether dim `tile` is a tile loop's whose block size the kernel fixes to exactly
    the size of dim `whole`, a dim read whole (no padded lanes)."""
    if tile is None or whole is None:
        return False
    t, w = b.blocks[tile], b.blocks[whole]
    fixed = t.kind == "tile" and t.config_index is None and not t.dynamic
    whole_dim = w.kind == "reduction" and not w.dynamic and w.fixed_size == w.extent
    return fixed and whole_dim and t.fixed_size == w.extent


def _dot_operands(b: Builder, a: Value, c: Value) -> tuple[Value, Value]:
    """Operands of one dtype that tl.dot takes: floats (fp8 included) or int8."""
    if a.type.dtype != c.type.dtype:
        common = promote(a, c)
        if common in FLOAT8:  # two different fp8 formats: compute in float16
            common = torch.float16
        a, c = b.cast(a, common), b.cast(c, common)  # type: ignore[assignment]
    dtype = a.type.dtype
    if dtype == torch.bool or (not dtype.is_floating_point and dtype not in DOT_INTEGERS):
        raise DtypeError(
            f"matrix products take float or int8 tiles, not {dtype}: cast with .float()", b.loc
        )
    return a, c


OPS["dot"] = dot


@op("mm", "bmm")
def _mm(b: Builder, a: Value, c: Value, out_dtype: Any = None) -> Value:
    """`torch.mm(a, b)`, `torch.bmm(a, b, out_dtype)`: PyTorch's result dtype (the
    operands' promoted dtype) unless `out_dtype` is given."""
    return dot(b, a, c, None, out_dtype or promote(a, c))


@op("matmul")
def _matmul(b: Builder, a: Value, c: Value) -> Value:
    """`a @ b`, `torch.matmul(a, b)`: as `mm`, and as PyTorch's matmul a vector operand is
    a matrix of one row (first) or one column (second) whose dim the result drops, and a
    matrix meets a batch of them as the batch's every matrix (`[1, m, k] @ [k, n]`)."""
    if not isinstance(a, Value) or not isinstance(c, Value):
        return dot(b, a, c)  # (its error)
    if a.type.rank == 1 or c.type.rank == 1:
        row, column = a.type.rank == 1, c.type.rank == 1
        a = view(b, a, ("None", ":")) if row else a
        c = view(b, c, (":", "None")) if column else c
        out = _matmul(b, a, c)
        if column:
            out = squeeze(b, out, -1)
        return squeeze(b, out, -1 if column else -2) if row else out
    if {a.type.rank, c.type.rank} == {2, 3}:
        batch = (a if a.type.rank == 3 else c).type.dims[:1]
        if a.type.rank == 2:
            a = broadcast_to(b, view(b, a, ("None", ":", ":")), batch + a.type.dims)
        else:
            c = broadcast_to(b, view(b, c, ("None", ":", ":")), batch + c.type.dims)
    return _mm(b, a, c)


def _truncated(b: Builder, scale: Any) -> Any:
    """A float scale of an integer product as an integer, truncated (a host float's too)."""
    if isinstance(scale, float):
        return int(scale)
    if isinstance(scale, Value) and scale.type.dtype.is_floating_point:
        return b.cast(scale, torch.int64)
    return scale


@op("addmm", "baddbmm")
def _addmm(
    b: Builder,
    acc: Value,
    a: Value,
    c: Value,
    *,
    beta: Any = 1,
    alpha: Any = 1,
    out_dtype: Any = None,
) -> Value:
    """`torch.addmm(acc, a, b)`: `beta * acc + alpha * (a @ b)`, accumulated in float32.
    Integer products take the scales truncated to integers, as PyTorch does (`beta=0.5`
    is 0 there)."""
    if out_dtype is not None and out_dtype != acc.type.dtype:
        acc = b.cast(acc, out_dtype)  # type: ignore[assignment]
    if not acc.type.dtype.is_floating_point:
        beta, alpha = _truncated(b, beta), _truncated(b, alpha)
    if isinstance(beta, (int, float)) and beta == 0:  # acc ignored, its NaN too (PyTorch's)
        acc = full(b, acc.type.dims, 0, acc.type.dtype)
    elif beta != 1:
        acc = b.cast(b.elementwise("mul", acc, beta), acc.type.dtype)  # type: ignore[assignment]
    if alpha == 1:
        return dot(b, a, c, acc)
    product = b.elementwise("mul", dot(b, a, c), alpha)
    return b.cast(b.elementwise("add", acc, product), acc.type.dtype)  # type: ignore[return-value]
