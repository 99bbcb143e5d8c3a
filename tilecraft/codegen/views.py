"""Triton for views, shape ops and constant tiles (reshape, permute, select, stack, ...).

Each function takes the KernelWriter and one Op and assigns the op's result. Ops that move
elements between lanes of a static dim (cat, piece) gather with `tl.gather`; selects and
stacks compare lane positions with `tl.where`, so padding lanes never reach real ones.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from tilecraft.codegen.common import expand
from tilecraft.codegen.rules import literal, tl_dtype
from tilecraft.ir.nodes import Op, Value

if TYPE_CHECKING:
    from tilecraft.codegen.kernel import KernelWriter


def _lanes(w: KernelWriter, op: Op, axis: int) -> str:
    """Positions along `axis` of the result, shaped to broadcast against it."""
    assert op.out is not None
    dims = op.out.type.dims
    d = dims[axis]
    size = "1" if d is None else w.size(d)
    return expand(f"tl.arange(0, {size})", len(dims), axis)


def reshape(w: KernelWriter, op: Op) -> None:
    assert op.out is not None
    (x,) = op.args
    if not op.out.type.dims:  # one element: a reduction gives Triton's scalar
        total = f"tl.sum(tl.reshape({_exact(x)}, [1]), 0)"
        w.assign(
            op,
            f"{total}.to({tl_dtype(x.type.dtype)})"
            if x.type.dtype != torch.bool
            else f"{total} != 0",
        )
        return
    w.assign(op, f"tl.reshape({x.name}, {w.shape(op.out.type.dims)})")


def _exact(x: Value) -> str:
    """`x` in a dtype whose sums are exact for one nonzero element per lane (bf16 and fp16
    go through float32, which Triton's interpreter also computes correctly)."""
    dtype = x.type.dtype
    if dtype == torch.bool:
        return f"{x.name}.to(tl.int8)"
    if dtype.is_floating_point and dtype != torch.float64:
        return f"{x.name}.to(tl.float32)"
    return x.name


def permute(w: KernelWriter, op: Op) -> None:
    (x,) = op.args
    perm = op.attrs["perm"]
    if len(perm) == 2:
        w.assign(op, f"tl.trans({x.name})")
    else:
        w.assign(op, f"tl.permute({x.name}, {tuple(perm)!r})")


def broadcast(w: KernelWriter, op: Op) -> None:
    assert op.out is not None
    (x,) = op.args
    dims = op.out.type.dims
    w.assign(op, f"tl.broadcast_to({w.operand(x, dims, None)}, {w.shape(dims)})")


def select(w: KernelWriter, op: Op) -> None:
    """`x[..., i, ...]`: a gather of one position along the axis (exact: NaN and -0.0 come
    out as they are; a masked sum would turn -0.0 into 0.0)."""
    assert op.out is not None
    x, position = op.args
    where = position.name if isinstance(position, Value) else literal(position)
    index = f"tl.zeros({w.shape(op.out.type.dims)}, tl.int32) + {where}"
    w.assign(op, f"tl.gather({x.name}, {index}, {op.attrs['axis']})")


def stack(w: KernelWriter, op: Op) -> None:
    """Operand k where the new dim's position is k (the last one fills padding lanes)."""
    assert op.out is not None
    axis, dims = op.attrs["axis"], op.out.type.dims
    lanes = _lanes(w, op, axis)
    parts = [w.operand(a, dims, None) for a in op.args]
    expr = parts[-1]
    for k in range(len(parts) - 2, -1, -1):
        expr = f"tl.where({lanes} == {k}, {parts[k]}, {expr})"
    w.assign(op, f"tl.broadcast_to({expr}, {w.shape(dims)})")


def cat(w: KernelWriter, op: Op) -> None:
    """Each operand gathered at the result's positions in its range along the axis."""
    assert op.out is not None
    axis, offsets, dims = op.attrs["axis"], op.attrs["offsets"], op.out.type.dims
    lanes = _lanes(w, op, axis)
    expr = ""
    for part, offset in reversed(list(zip(op.args, offsets, strict=True))):
        extent = _extent(w, part, axis)
        value = _gather(w, part, axis, f"{lanes} - {offset}", extent, dims)
        expr = value if not expr else f"tl.where({lanes} < {offset + extent}, {value}, {expr})"
    w.assign(op, expr)


def piece(w: KernelWriter, op: Op) -> None:
    """`x[..., offset:offset + n, ...]` of a static dim."""
    assert op.out is not None
    (x,) = op.args
    axis, dims = op.attrs["axis"], op.out.type.dims
    lanes = _lanes(w, op, axis)
    offset = op.attrs["offset"]
    w.assign(op, _gather(w, x, axis, f"{lanes} + {offset}", _extent(w, x, axis), dims))


def _extent(w: KernelWriter, x: Value, axis: int) -> int:
    d = x.type.dims[axis]
    return 1 if d is None else w.kernel.blocks[d].extent


def _gather(w: KernelWriter, x: Value, axis: int, at: str, extent: int, dims: tuple) -> str:
    """`x` read along `axis` at positions `at` (clamped into `x`'s extent) for result dims."""
    if x.type.dims[axis] is None:
        return f"tl.broadcast_to({x.name}, {w.shape(dims)})"
    index = f"tl.minimum(tl.maximum({at}, 0), {max(extent - 1, 0)})"
    shape = w.shape(dims)
    return f"tl.gather({x.name}, tl.broadcast_to({index}, {shape}), {axis})"


def literal_values(w: KernelWriter, op: Op) -> None:
    """`torch.tensor([a, b, c])`: value k where the position is k."""
    assert op.out is not None
    values = op.attrs["values"]
    dtype, dims = tl_dtype(op.out.type.dtype), op.out.type.dims
    lanes = _lanes(w, op, 0)
    expr = f"tl.full({w.shape(dims)}, {literal(values[-1])}, {dtype})"
    for k in range(len(values) - 2, -1, -1):
        expr = f"tl.where({lanes} == {k}, {literal(values[k])}, {expr})"
    w.assign(op, f"({expr}).to({dtype})")
