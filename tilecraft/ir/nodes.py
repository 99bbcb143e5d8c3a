"""The tile IR: values, operations, device loops, memory accesses and kernels."""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field
from typing import Any

import torch

from tilecraft.exc import SourceLoc
from tilecraft.ir.types import Block, Dim, TileType, broadcast_dims

_ids = itertools.count()


@dataclass(eq=False)
class Value:
    """The result of an operation; `name` is its variable in the generated code."""

    type: TileType
    name: str
    # a Python float from the host (or arithmetic on such floats only): it meets tiles as
    # PyTorch's Python scalars do, the tiles' dtype deciding (see frontend/builder.promote)
    weak: bool = False

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
    they broadcast together) and differ only in `offset`. Positions that may leave the
    dim (computed indices, a tile reaching past its end) are masked to the tensor's
    bounds on the device unless `in_range`.
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
        return self.layout()[0]

    def layout(self) -> tuple[tuple[Dim, ...], tuple[int, ...]]:
        """The dims of what the access touches, and where each index's dims start in them.

        Index tiles ("gather") follow PyTorch's advanced indexing: they broadcast together
        into one group of dims (two loaded over the same tile pair up element by element),
        which stands where the first of them is if they are adjacent (scalars do not
        count: they just drop their dim), and first otherwise. Each index tile is
        right-aligned in the group. Other indices keep their dims in place.
        """
        group = gather_dims(self.indices) or ()
        kept = [k for k, i in enumerate(self.indices) if i.kind != "scalar"]
        gathers = [n for n, k in enumerate(kept) if self.indices[k].kind == "gather"]
        adjacent = not gathers or gathers[-1] - gathers[0] == len(gathers) - 1
        dims: list[Dim] = [] if adjacent else list(group)
        starts = [0] * len(self.indices)
        for k in kept:
            index = self.indices[k]
            if index.kind == "gather":
                if k == kept[gathers[0]] and adjacent:
                    dims += group
                start = len(dims) - len(group) if adjacent else 0
                starts[k] = start + len(group) - len(index.dims())
            else:
                starts[k] = len(dims)
                dims += index.dims()
        return tuple(dims), tuple(starts)


def gather_dims(indices: tuple[Index, ...]) -> tuple[Dim, ...] | None:
    """The dims the index tiles of a subscript broadcast to (None if they clash)."""
    group: tuple[Dim, ...] | None = ()
    for index in indices:
        if index.kind == "gather" and group is not None:
            group = broadcast_dims(group, index.dims())
    return group


@dataclass(eq=False)
class Op:
    """One operation: `out = name(*args, **attrs)`; stores have no `out`, nor atomics
    whose result (the values before the update) nothing reads."""

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
    """A variable updated inside a device loop: `init` before, `final` after each trip;
    `item`: its position in the variable when that is a tuple of tiles (each carried alone)."""

    name: str
    init: Value
    param: Value
    final: Value | None = None
    out: Value | None = None
    item: int | None = None


@dataclass(eq=False)
class Loop:
    """A device loop over one or more tile blocks, run sequentially inside a program."""

    blocks: list[int]  # in iteration order: the first is the outermost loop
    body: list[Node]
    carried: list[Carried]
    loc: SourceLoc
    index: int = 0  # position among the kernel's device loops, for the range_* knobs
    # a `while` loop (no blocks): the carried flag it runs while (frontend/whiles.py)
    cond: Value | None = None


@dataclass(eq=False)
class Merged:
    """A variable assigned in a branch: its value at the end of each arm, and after."""

    name: str
    then: Value
    orelse: Value
    out: Value


@dataclass(eq=False)
class Branch:
    """`if cond: then else: orelse` on a scalar computed on the device (a real branch).

    Conditions on tiles never become a Branch: the frontend computes both arms and
    merges them with selects. `merged` lists the variables live after the branch.
    """

    cond: Value
    then: list[Node]
    orelse: list[Node]
    merged: list[Merged]
    loc: SourceLoc


Node = Op | Loop | Branch


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
    # host expressions read as constants that the specialization does not pin down (derived
    # from a float or an object argument): the launcher checks they keep these values
    guards: dict[str, Any] = field(default_factory=dict)

    def walk(self) -> list[Op]:
        """Every Op in program order, loops and branches flattened."""
        return list(walk_ops(self.body))


def walk_ops(body: list[Node]) -> Any:
    """Every Op in `body`, in program order, loops and branches flattened."""
    for node in body:
        if isinstance(node, Loop):
            yield from walk_ops(node.body)
        elif isinstance(node, Branch):
            yield from walk_ops(node.then)
            yield from walk_ops(node.orelse)
        else:
            yield node


def read_names(body: list[Node], blocks: dict[int, Block]) -> set[str]:
    """The names of the values that something in `body` reads: an op, a loop's carried
    variables, a branch, or a loop's bounds computed on the device."""
    names: set[str] = set()
    for node in body:
        if isinstance(node, Loop):
            names |= read_names(node.body, blocks)
            names |= {v.name for c in node.carried for v in (c.init, c.final) if v is not None}
        elif isinstance(node, Branch):
            names |= read_names(node.then + node.orelse, blocks) | {node.cond.name}
            names |= {v.name for m in node.merged for v in (m.then, m.orelse)}
        else:
            names |= {v.name for v in node.inputs()}
    for block in blocks.values():
        for bound in (block.begin_value, block.end_value):
            names |= set(re.findall(r"\w+", bound or ""))
    return names


def drop_unused_results(kernel: DeviceKernel) -> DeviceKernel:
    """`kernel` with the results of the atomics nothing reads dropped, so that an atomic
    used as a plain update is written as one (no value to hold, no select of its masked
    lanes, a tensor descriptor's bulk add still possible), and the loads nothing reads
    removed (a whole read whose tiles were read from its tensor: `MemoryLowering.reread`)."""
    names = read_names(kernel.body, kernel.blocks)
    for op in kernel.walk():
        if op.name.startswith("atomic_") and op.out is not None and op.out.name not in names:
            op.out = None
    _drop_loads(kernel.body, names)
    return kernel


def _drop_loads(body: list[Node], names: set[str]) -> None:
    """Remove from `body` (in place, nested bodies too) the loads whose results are unread."""
    body[:] = [n for n in body if not (isinstance(n, Op) and n.name == "load" and n.out is not None
                                       and n.out.name not in names)]  # fmt: skip
    for node in body:
        if isinstance(node, Loop):
            _drop_loads(node.body, names)
        elif isinstance(node, Branch):
            _drop_loads(node.then, names)
            _drop_loads(node.orelse, names)
