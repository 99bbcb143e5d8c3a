"""Triton for views, shape ops and constant tiles (reshape, permute, select, stack, ...).

Each function takes the KernelWriter and one Op and assigns the op's result. Ops that move
elements between lanes of a static dim (select, cat, piece) are one-hot sums of the bit
patterns (exact, and only selects and sums, where `tl.gather` fails to compile on GPUs
for some layouts); stacks and literals compare lane positions with `tl.where`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import torch

from tilecraft.codegen.common import expand
from tilecraft.codegen.flat import squeezes_flat
from tilecraft.codegen.rules import literal, tl_dtype
from tilecraft.exc import InvalidConfig
from tilecraft.ir.nodes import Op, Value
from tilecraft.ir.types import Dim

if TYPE_CHECKING:
    from tilecraft.codegen.kernel import KernelWriter


TRITON_NUMEL = 1 << 20  # the most elements a Triton tensor may hold


def one_hot_spreads(op: Op) -> list[tuple[Dim, ...]]:
    """The dims of the one-hot products written for `op` (cat, piece, flip, roll: the
    result's dims with the source's dim beside the moved one; regroup: the source's dims
    with the result's group before its own; select: the source's), none for other ops.
    They are the largest values such a kernel holds, over dims it holds whole: the default
    config counts them (runtime/spec.py)."""
    if op.out is None or op.name not in ("cat", "piece", "flip", "roll", "regroup", "select"):
        return []
    dims, axis = op.out.type.dims, op.attrs["axis"]
    if op.name == "select":  # a sum over the source's positions
        return [op.args[0].type.dims]
    if op.name != "regroup":
        return [dims[: axis + 1] + (x.type.dims[axis],) + dims[axis + 1 :] for x in op.args]
    x_dims, count = op.args[0].type.dims, op.attrs["count"]
    group = dims[axis : axis + len(dims) - len(x_dims) + count]
    return [x_dims[:axis] + group + x_dims[axis:]]


def check_spreads(w: KernelWriter, op: Op) -> None:
    """Refuse a one-hot product larger than Triton's largest tensor, by the user's line."""
    for dims in one_hot_spreads(op):
        numel = _numel(w, dims)
        if numel > TRITON_NUMEL:
            raise InvalidConfig(
                f"this {op.name} moves elements between lanes through a one-hot product of "
                f"{numel} elements, over Triton's {TRITON_NUMEL} per tensor: use smaller "
                "block sizes (the default config and the autotuner's fit it)",
                op.loc,
            )


def check_numel(w: KernelWriter, op: Op) -> None:
    """Refuse a value larger than Triton's largest tensor (the pairs a sort or a gather
    within a tile compares, under large blocks), by the user's line: Triton's own error
    names no line of the user's."""
    numel = 0 if op.out is None else _numel(w, op.out.type.dims)
    if numel > TRITON_NUMEL:
        raise InvalidConfig(
            f"this line holds a tile of {numel} elements ({op.name}), over Triton's "
            f"{TRITON_NUMEL} per tensor: use smaller block sizes (the default config fits it)",
            op.loc,
        )


def _numel(w: KernelWriter, dims: tuple[Dim, ...]) -> int:
    numel = 1
    for d in dims:
        numel *= 1 if d is None else w.kernel.blocks[d].fixed_size or 1
    return numel


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
    if squeezes_flat(w, op):  # the flat tile is the squeezed one
        w.assign(op, x.name)
        return
    if not op.out.type.dims:  # one element: a reduction gives Triton's scalar
        total = f"tl.sum(tl.reshape({_exact(x)}, [1]), 0)"
        w.assign(
            op,
            f"{total}.to({tl_dtype(x.type.dtype)})"
            if x.type.dtype != torch.bool
            else f"{total} != 0",
        )
        return
    w.assign(op, f"tl.reshape({x.name}, {w.shape(w.text_dims(op.out))})")


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
    if len(perm) == 2 or op.out in w.flat:  # a flat tile's last two dims (codegen/flat.py)
        w.assign(op, f"tl.trans({x.name})")
    else:
        w.assign(op, f"tl.permute({x.name}, {tuple(perm)!r})")


def broadcast(w: KernelWriter, op: Op) -> None:
    assert op.out is not None
    (x,) = op.args
    dims = w.text_dims(op.out)
    w.assign(op, f"tl.broadcast_to({w.operand(x, dims, None)}, {w.shape(dims)})")


BITS = {
    torch.float64: "tl.int64",
    torch.float32: "tl.int32",
    torch.float16: "tl.int16",
    torch.bfloat16: "tl.int16",
    torch.float8_e4m3fn: "tl.int8",
    torch.float8_e5m2: "tl.int8",
}


def _pick(x: str, dtype: torch.dtype, cond: str, axis: int, keep: bool) -> tuple[str, str]:
    """(the sum along `axis` of `x` where `cond`, zero elsewhere, taken on integers: the
    bit patterns of floats, so one picked element comes out exact, -0.0 and NaN too;
    the function turning such a sum back into `dtype`)."""
    keep_dims = ", keep_dims=True" if keep else ""
    if dtype.is_floating_point:
        x = f"{x}.to({BITS[dtype]}, bitcast=True)"
    elif dtype == torch.bool:
        x = f"{x}.to(tl.int8)"
    total = f"tl.sum(tl.where({cond}, {x}, 0), {axis}{keep_dims})"
    return total, _unpick(dtype)


def _unpick(dtype: torch.dtype) -> str:
    if dtype == torch.bool:
        return "({}) != 0"
    if dtype.is_floating_point:
        return f"({{}}).to({BITS[dtype]}).to({tl_dtype(dtype)}, bitcast=True)"
    return f"({{}}).to({tl_dtype(dtype)})"


def select(w: KernelWriter, op: Op) -> None:
    """`x[..., i, ...]`: the elements where the position along the axis is i; 0 where i is
    a lane past the end of a tile cut short (as a load there reads, and eager mode)."""
    assert op.out is not None
    x, position = op.args
    axis, dim = op.attrs["axis"], x.type.dims[op.attrs["axis"]]
    lanes = expand(f"tl.arange(0, {w.size(dim)})", x.type.rank, axis)
    where = position.name if isinstance(position, Value) else literal(position)
    picked = f"{lanes} == {where}"
    if dim is not None and w.has_mask(dim):
        picked = f"({picked}) & {expand(f'mask_{dim}', x.type.rank, axis)}"
    total, back = _pick(x.name, x.type.dtype, picked, axis, keep=True)
    w.assign(op, back.format(total))


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
    """Each result position takes the element of the operand whose range holds it."""
    assert op.out is not None
    axis, offsets = op.attrs["axis"], op.attrs["offsets"]
    totals = [
        _moved(w, op, part, axis, -offset) for part, offset in zip(op.args, offsets, strict=True)
    ]
    w.assign(op, _unpick(op.out.type.dtype).format(" + ".join(totals)))


def piece(w: KernelWriter, op: Op) -> None:
    """`x[..., offset:offset + n * step:step, ...]` of a static dim."""
    assert op.out is not None
    (x,) = op.args
    offset, step = op.attrs["offset"], op.attrs.get("step", 1)
    total = _gathered(w, op, x, op.attrs["axis"], lambda i: f"{offset} + {i} * {step}")
    w.assign(op, _unpick(op.out.type.dtype).format(total))


def rearranged(w: KernelWriter, op: Op) -> None:
    """`flip` and `roll` of a static dim: result position i takes `x` at n - 1 - i, or at
    (i - shift) mod n."""
    assert op.out is not None
    (x,) = op.args
    axis = op.attrs["axis"]
    n = w.kernel.blocks[x.type.dims[axis]].extent
    if op.name == "flip":
        total = _gathered(w, op, x, axis, lambda i: f"{n - 1} - {i}")
    else:
        total = _gathered(w, op, x, axis, lambda i: f"({i} + {n - op.attrs['shift']}) % {n}")
    w.assign(op, _unpick(op.out.type.dtype).format(total))


def _moved(w: KernelWriter, op: Op, x: Value, axis: int, shift: int) -> str:
    """Result position i along `axis` takes `x` at position i + shift (zero where `x` has
    none)."""
    return _gathered(w, op, x, axis, lambda i: f"{i} + {shift}")


def _gathered(w: KernelWriter, op: Op, x: Value, axis: int, source: Callable[[str], str]) -> str:
    """Result position i along `axis` takes `x` at position `source(i)` (zero where `x`
    has none), as an integer sum over a new axis of `x`'s positions (a one-hot product:
    plain selects and sums, which every Triton backend compiles)."""
    assert op.out is not None
    rank = op.out.type.rank
    d, out = x.type.dims[axis], op.out.type.dims[axis]
    extent = 1 if d is None else w.kernel.blocks[d].extent
    inner = expand(f"tl.arange(0, {'1' if d is None else w.size(d)})", rank + 1, axis + 1)
    outer = expand(f"tl.arange(0, {'1' if out is None else w.size(out)})", rank + 1, axis)
    cond = f"({inner} == {source(outer)}) & ({inner} < {extent})"
    items = [":"] * rank
    items.insert(axis, "None")
    spread = f"{x.name}[{', '.join(items)}]"
    total, _ = _pick(spread, x.type.dtype, cond, axis + 1, keep=False)
    return total


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


def regroup(w: KernelWriter, op: Op) -> None:
    """Static dims `axis:axis + count` of `x` reshaped to the result's dims there, where
    elements change lanes: result lane (i, j) takes the source lane of the same row-major
    position, a one-hot sum over the source dims (spread after the result's)."""
    assert op.out is not None
    (x,) = op.args
    axis, count = op.attrs["axis"], op.attrs["count"]
    sources = x.type.dims[axis : axis + count]
    targets = op.out.type.dims[axis : axis + op.out.type.rank - x.type.rank + count]
    rank = x.type.rank + len(targets)
    out_at, out_ok = _row_major(w, targets, rank, axis)
    src_at, src_ok = _row_major(w, sources, rank, axis + len(targets))
    cond = " & ".join([f"({out_at} == {src_at})", *out_ok, *src_ok])
    items = [":"] * x.type.rank
    items[axis:axis] = ["None"] * len(targets)
    last = axis + len(targets) + count - 1
    total, back = _pick(f"{x.name}[{', '.join(items)}]", x.type.dtype, cond, last, keep=False)
    for at in range(last - 1, axis + len(targets) - 1, -1):
        total = f"tl.sum({total}, {at})"
    w.assign(op, back.format(total))


def _row_major(w: KernelWriter, dims: tuple, rank: int, first: int) -> tuple[str, list[str]]:
    """(the row-major position of the lanes of `dims`, placed at axes `first` on of a tile
    of `rank` dims; the conditions that each lane is within its dim's extent)."""
    terms, checks, stride = [], [], 1
    for k in range(len(dims) - 1, -1, -1):
        block = w.kernel.blocks[dims[k]]
        lane = expand(f"tl.arange(0, {w.size(dims[k])})", rank, first + k)
        terms.append(lane if stride == 1 else f"{lane} * {stride}")
        if (block.fixed_size or 1) != block.extent:
            checks.append(f"({lane} < {block.extent})")
        stride *= block.extent
    return " + ".join(reversed(terms)), checks
