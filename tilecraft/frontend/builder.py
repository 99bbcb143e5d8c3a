"""Building typed IR: fresh names, operands, broadcasting and dtype promotion."""

from __future__ import annotations

import builtins
import functools
import itertools
import math
from dataclasses import dataclass, field
from typing import Any

import torch

from tilecraft.codegen.common import is_rolled
from tilecraft.exc import DtypeError, ShapeMismatch, SourceLoc, UnsupportedOperation
from tilecraft.ir.nodes import Node, Op, Value
from tilecraft.ir.types import Block, Dim, TileType, broadcast_dims

LOW_PRECISION = (torch.float16, torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2)
Operand = Value | int | float | bool


def category(x: Operand | torch.dtype) -> int:
    """0 for bool, 1 for integers, 2 for floating point."""
    dtype = x.type.dtype if isinstance(x, Value) else x
    if isinstance(dtype, torch.dtype):
        return 0 if dtype == torch.bool else (2 if dtype.is_floating_point else 1)
    return 0 if isinstance(dtype, bool) else (1 if isinstance(dtype, int) else 2)


def promote(*operands: Operand) -> torch.dtype:
    """The result dtype of an elementwise op, by PyTorch's rules: tiles decide; values of
    no dims (0-d tensors in eager mode) and then Python numbers (host floats included:
    weak Values) only where they are of a higher category (bool < integer < float)."""
    values = [o for o in operands if isinstance(o, Value) and not o.weak]
    if not values:  # numbers only: Python's arithmetic, floats in double precision
        return (torch.bool, torch.int64, torch.float64)[max(category(o) for o in operands)]
    shaped = [v.type.dtype for v in values if v.type.dims] or [v.type.dtype for v in values]
    result = functools.reduce(torch.promote_types, shaped)
    higher = [v.type.dtype for v in values if not v.type.dims and category(v) > category(result)]
    if higher:
        top = max(category(d) for d in higher)
        result = functools.reduce(torch.promote_types, [d for d in higher if category(d) == top])
    for o in operands:
        weak = isinstance(o, Value) and o.weak
        if (weak or not isinstance(o, Value)) and category(o) > category(result):
            result = torch.float32 if category(o) == 2 else torch.int64
    return result


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """Low-precision floats are computed in float32, as PyTorch's kernels do."""
    return torch.float32 if dtype in LOW_PRECISION else dtype


INT_DIVISIONS = {"floordiv", "truncdiv", "mod", "fmod"}  # by a zero: refused


# ops of a 16-bit tile and a Python number that PyTorch computes with the number rounded
# to the tile's dtype: remainders, and comparisons (`h != math.pi` is False for the float16
# 3.140625, whose inputs PyTorch promotes to their common dtype first)
ROUNDS_NUMBERS = {"mod", "fmod", "lt", "le", "gt", "ge", "eq", "ne"}
# and those that round a number only as their first operand: `7.3 // h` floors 7.3125 in
# bfloat16 (PyTorch's CPU and CUDA kernels take a dividend in the tensor's dtype), where
# `h // 7.3` divides by 7.3 in float32; `torch.div(7.3, h)` divides 7.3125 (on the CPU)
ROUNDS_FIRST_NUMBER = {"floordiv", "truediv"}


def _rounded(operand: Operand, dtype: torch.dtype) -> Operand:
    """A number rounded to a 16-bit tile's dtype, as PyTorch's remainder, fmod and
    comparisons take it (its CPU and CUDA kernels convert the scalar to the tensor's dtype:
    `28.991 % h` in float16 is `29.0 % h`; its add and multiply keep the scalar in float32)."""
    if type(operand) not in (int, float):
        return operand
    return float(torch.tensor(operand, dtype=dtype).item())


def converted(b: Builder, value: bool | int | float, dtype: torch.dtype) -> bool | int | float:
    """A number as PyTorch converts a fill value or a clamp bound to `dtype`: truncated to an
    integer dtype (2.7 is 2), an overflow refused as PyTorch raises (65520 in float16, 300
    in int8; an int may wrap into an unsigned dtype: -1 is 255 in uint8)."""
    if dtype == torch.bool:
        return bool(value)
    if dtype.is_floating_point:
        if math.isfinite(value) and abs(value) > torch.finfo(dtype).max:
            raise DtypeError(f"{value} does not fit {dtype} (PyTorch: overflow)", b.loc)
        return float(value)
    info = torch.iinfo(dtype)
    low = -info.max if type(value) is int and not dtype.is_signed else info.min
    if math.isnan(value) or not low <= value <= info.max:
        raise DtypeError(f"{value} does not fit {dtype} (PyTorch: overflow)", b.loc)
    return int(value) % (info.max + 1) if not dtype.is_signed else int(value)


@dataclass
class Builder:
    """Appends Ops to the current body; the device compiler pushes a body per loop."""

    loc: SourceLoc
    blocks: dict[int, Block]
    bodies: list[list[Node]] = field(default_factory=lambda: [[]])
    used_names: set[str] = field(default_factory=set)
    table: Any = None  # the kernel's BlockTable: new static dims (tc.zeros([4]), reshape)
    _counter: Any = field(default_factory=itertools.count)
    new_dim: Any = None  # int -> Block: a whole dim of a new length (topk's k), from the table
    jagged: dict[int, Value] = field(default_factory=dict)  # masks of enclosing jagged tiles
    masks: list[Value] = field(default_factory=list)  # conditions of enclosing `if` arms on tiles

    def fresh(self, hint: str = "v") -> str:
        hint = hint if hint.isidentifier() else "v"
        name = hint
        while name in self.used_names or name == "v" or hasattr(builtins, name):
            name = f"{hint}_{next(self._counter)}"
        self.used_names.add(name)
        return name

    def add(self, node: Node) -> None:
        self.bodies[-1].append(node)

    def op(
        self,
        name: str,
        args: tuple,
        dtype: torch.dtype,
        dims: tuple[Dim, ...],
        hint: str = "v",
        **attrs: Any,
    ) -> Value:
        if dtype.is_complex:
            raise DtypeError(f"tiles of {dtype} are not supported (real dtypes only)", self.loc)
        for a in args:  # PyTorch takes integers of 64 bits, signed or not
            if type(a) is int and not -(2**63) <= a < 2**64:
                raise DtypeError(f"{a} does not fit in 64 bits (PyTorch: OverflowError)", self.loc)
        out = Value(TileType(dtype, dims), self.fresh(hint))
        self.add(Op(name, args, out, self.loc, attrs))
        return out

    def effect(self, name: str, args: tuple, **attrs: Any) -> None:
        self.add(Op(name, args, None, self.loc, attrs))

    def broadcast(self, *operands: Operand) -> tuple[Dim, ...]:
        dims: tuple[Dim, ...] = ()
        for o in operands:
            if isinstance(o, Value):
                joined = broadcast_dims(dims, o.type.dims)
                if joined is None:
                    raise ShapeMismatch(
                        f"tiles of shapes {self.describe(dims)} and "
                        f"{self.describe(o.type.dims)} do not broadcast"
                        + self.chunked_hint(dims + o.type.dims),
                        self.loc,
                    )
                dims = joined
        return dims

    def fit_ones(self, operands: tuple[Operand, ...]) -> tuple[Operand, ...]:
        """`operands` where they do not broadcast only because a tile holding one position
        meets another dim: that tile's dim made a plain size-1 dim, as eager mode's tensors
        broadcast it. Such a tile has block size 1 in the kernel (`block_size=1`) or runs
        over one position (`tc.tile(1)`, its block size then picked by the config).
        Unchanged where they broadcast, or clash elsewhere."""
        dims: tuple[Dim, ...] | None = ()
        for o in operands:
            if isinstance(o, Value) and dims is not None:
                dims = broadcast_dims(dims, o.type.dims)
        if dims is not None:
            return operands
        operands = self._padded_wholes(operands)
        return tuple(self._loose_ones(o) if isinstance(o, Value) else o for o in operands)

    def _padded_wholes(self, operands: tuple[Operand, ...]) -> tuple[Operand, ...]:
        """A whole dim of a power of two P meeting a whole dim of n < P that pads to it
        (`tc.zeros([t, next_power_of_2(n)])` and `x[t, :]`, Helion's spelling): the first
        taken as the second, whose lanes past n are masked. Neither may be looped over."""
        dims = {d for o in operands if isinstance(o, Value) for d in o.type.dims}
        wholes = [d for d in dims if d is not None and self.blocks[d].kind == "reduction"]
        wholes = [d for d in wholes if not is_rolled(self.blocks[d])]
        swap: dict[Dim, Dim] = {
            d: e
            for d in wholes
            for e in wholes
            if self.blocks[e].extent < self.blocks[d].extent == self.blocks[e].fixed_size
        }
        if not swap:
            return operands
        return tuple(self.relabelled(o, swap) if isinstance(o, Value) else o for o in operands)

    def relabelled(self, x: Value, swap: dict[Dim, Dim]) -> Value:
        """`x` with dims of the same padded size read as others (the same lanes, other
        masks): `swap` maps each dim to the one it is read as."""
        dims = tuple(swap.get(d, d) for d in x.type.dims)
        if dims == x.type.dims:
            return x
        return self.op("reshape", (x,), x.type.dtype, dims, hint="view")

    def fit_to(self, x: Operand, dims: tuple[Dim, ...]) -> Operand:
        """`x` made to broadcast to `dims` as `fit_ones` makes operands broadcast together
        (a stored value, a mask): unchanged where it does, or clashes elsewhere."""
        if not isinstance(x, Value) or broadcast_dims(dims, x.type.dims) == dims:
            return x
        return self._loose_ones(x)

    def _loose_ones(self, x: Value) -> Value:
        for axis, d in enumerate(x.type.dims):
            if d is None or self.blocks[d].kind != "tile":
                continue
            dims = x.type.dims[:axis] + (None,) + x.type.dims[axis + 1 :]
            if self.blocks[d].holds_one:  # one lane: a reshape
                x = self.op("reshape", (x,), x.type.dtype, dims, hint="view")
            elif self.blocks[d].extent == 1 and not self.blocks[d].dynamic:  # lane 0 of many
                x = self.op("select", (x, 0), x.type.dtype, dims, hint="picked", axis=axis)
        return x

    def chunked_hint(self, dims: tuple[Dim, ...]) -> str:
        """Why dims of the same size may differ: the config loops over one in chunks (a
        view's new dim is held whole); empty where no dim is looped over."""
        if not any(d is not None and is_rolled(self.blocks[d]) for d in dims):
            return ""
        return (
            " (dims of the same size differ where this config loops over one in chunks and "
            "another is held whole: use reduction_loops=[None] for this kernel)"
        )

    def describe(self, dims: tuple[Dim, ...]) -> str:
        return "[" + ", ".join(self._describe_dim(d) for d in dims) + "]"

    def _describe_dim(self, d: Dim) -> str:
        if d is None:
            return "1"
        b = self.blocks[d]
        if b.kind == "reduction":
            return str(b.extent)
        span = f"{b.begin}:{b.end}" if b.begin else str(b.extent)
        if b.dynamic:
            span = "a range read on the device"
        return f"`{b.label}` (a {b.kind} over {span})" if b.label else f"a {b.kind} over {span}"

    def elementwise(
        self,
        name: str,
        *operands: Operand,
        dtype: torch.dtype | None = None,
        hint: str = "v",
        **attrs: Any,
    ) -> Value:
        """An elementwise op; `dtype` overrides the promoted result dtype (comparisons)."""
        if not any(isinstance(o, Value) for o in operands):
            raise DtypeError(f"{name} needs at least one tile operand", self.loc)
        promoted = promote(*operands)
        if promoted in (torch.float16, torch.bfloat16):
            # PyTorch converts its inputs to their common dtype first: an integer tile's
            # values round to it (1001 is 1000 in bfloat16) before the op computes
            operands = tuple(self._to_half(o, promoted, name, k) for k, o in enumerate(operands))
        zero = type(operands[-1]) is int and operands[-1] == 0
        if name in INT_DIVISIONS and zero and not promoted.is_floating_point:
            # PyTorch raises; a GPU's quotient is undefined
            raise UnsupportedOperation(f"integer {name} by zero", self.loc)
        operands = self.fit_ones(operands)
        dims = self.broadcast(*operands)
        attrs.setdefault("compute", compute_dtype(promoted))
        out = self.op(name, operands, dtype or promoted, dims, hint, **attrs)
        values = [o for o in operands if isinstance(o, Value)]
        # of numbers only (host floats, `int(v)`): a number still, as in eager mode
        out.weak = out.type.dtype != torch.bool and all(v.weak for v in values)
        return out

    def _to_half(self, operand: Operand, dtype: torch.dtype, name: str, at: int) -> Operand:
        rounds = name in ROUNDS_NUMBERS or (at == 0 and name in ROUNDS_FIRST_NUMBER)
        if isinstance(operand, Value):  # (a host float: a number, weak)
            integer = not operand.type.dtype.is_floating_point and operand.type.dtype != torch.bool
            return self.cast(operand, dtype) if integer or (operand.weak and rounds) else operand
        return _rounded(operand, dtype) if rounds else operand

    def cast(self, x: Operand, dtype: torch.dtype) -> Operand:
        if not isinstance(x, Value):
            return x
        if x.type.dtype == dtype:
            return x
        return self.op("cast", (x,), dtype, x.type.dims, compute=dtype)
