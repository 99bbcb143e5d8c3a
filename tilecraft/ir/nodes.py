"""The tile IR: values, operations, device loops, memory accesses and kernels."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

import torch

from tilecraft.exc import SourceLoc
from tilecraft.ir.types import Block, Dim, TileType

_ids = itertools.count()


@dataclass(eq=False)
class Value:
    """The result of an operation; `name` is its variable in the generated code."""

    type: TileType
    name: str

    def __repr__(self) -> str:
        return f"%{self.name}: {self.type}"


@dataclass(eq=False)
class Param:
    """A kernel argument: a tensor (pointer + strides) or a runtime scalar."""

    name: str
    host_expr: str
    dtype: torch.dtype
    shape: tuple[int, ...] | None = None  # None for scalars
    strides: tuple[int, ...] | None = None
    offset_bytes: int = 0  # where the tensor starts in its storage

    @property
    def is_tensor(self) -> bool:
        return self.shape is not None


@dataclass(frozen=True)
class Index:
    """One subscript of a memory access: a block, a scalar, a gather, or a new axis.

    kind: "block" (a tile, `:` or a partial slice; `block` is its id), "scalar" (`value`
    is a Value or an int), "gather" (`value` is an index tile, loaded or computed),
    "newaxis" (`None`), "unit" (a slice of length 1, which stays a broadcastable dim of
    size 1; `value` is its position).

    A partial slice `a:b:s` is a whole-dimension block of extent `len(range(a, b, s))`
    reading positions `offset + step * i`: slices of equal length share their block (so
    they broadcast together) and differ only in `offset`. Computed indices (gathers and
    scalar Values) are masked to the tensor's bounds on the device unless `in_range`.
    """

    kind: str
    block: int | None = None
    value: Value | int | None = None
    offset: int = 0
    step: int = 1
    in_range: bool = False

    def dims(self) -> tuple[Dim, ...]:
        if self.kind == "block":
            return (self.block,)
        if self.kind == "gather":
            assert isinstance(self.value, Value)
            return self.value.type.dims
        return (None,) if self.kind in ("newaxis", "unit") else ()


@dataclass(eq=False)
class Access:
    """A tensor subscripted on the device; `dims` is the shape of what it touches."""

    param: Param
    indices: tuple[Index, ...]

    @property
    def dims(self) -> tuple[Dim, ...]:
        return tuple(d for i in self.indices for d in i.dims())


@dataclass(eq=False)
class Op:
    """One operation: `out = name(*args, **attrs)`; stores have no `out`."""

    name: str
    args: tuple[Any, ...]
    out: Value | None
    loc: SourceLoc
    attrs: dict[str, Any] = field(default_factory=dict)

    def inputs(self) -> list[Value]:
        found: list[Value] = []
        for a in (*self.args, *self.attrs.values()):
            if isinstance(a, Value):
                found.append(a)
            elif isinstance(a, Access):
                found += [i.value for i in a.indices if isinstance(i.value, Value)]
        return found


@dataclass(eq=False)
class Carried:
    """A variable updated inside a device loop: `init` before, `final` after each trip."""

    name: str
    init: Value
    param: Value
    final: Value | None = None
    out: Value | None = None


@dataclass(eq=False)
class Loop:
    """A device loop over one or more tile blocks, run sequentially inside a program."""

    blocks: list[int]  # in iteration order: the first is the outermost loop
    body: list[Node]
    carried: list[Carried]
    loc: SourceLoc
    index: int = 0  # position among the kernel's device loops, for the range_* knobs


Node = Op | Loop


@dataclass(eq=False)
class DeviceKernel:
    """One Triton kernel: the body of a top-level `tc.tile`/`tc.grid` loop."""

    name: str
    grid_blocks: list[int]  # in launch order: the first varies fastest
    body: list[Node]
    params: list[Param]
    blocks: dict[int, Block]
    loc: SourceLoc
    grid_index: int = 0  # position among the kernel's top-level loops

    def walk(self) -> list[Op]:
        """Every Op in program order, loops flattened."""
        return list(walk_ops(self.body))


def walk_ops(body: list[Node]) -> Any:
    """Every Op in `body`, in program order, loops flattened."""
    for node in body:
        if isinstance(node, Loop):
            yield from walk_ops(node.body)
        else:
            yield node
