"""`KernelSpec`: the facts about a bound kernel that its configs are made of."""

from __future__ import annotations

import types
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from tilecraft.codegen.views import one_hot_spreads
from tilecraft.frontend.blocks import BlockSpec, BlockTable
from tilecraft.ir.nodes import Branch, DeviceKernel, Loop, Node, Value
from tilecraft.ir.ops import OPDEFS, Kind

MIN_DOT_BLOCK = 16  # tl.dot is slower below 16 rows or columns (and needs K >= 16 on a GPU)


def pow2_ceil(n: int) -> int:
    """The smallest power of two >= n (1 for n <= 1)."""
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


# One dim of a value: ("tile", config index), ("reduction", config index) or ("fixed", size).
DimRef = tuple[str, int]


@dataclass(frozen=True)
class TileUse:
    """A value a program holds, as the register and shared-memory budgets see it.

    role: "value" (a temporary), "carried" (a loop-carried variable, or a product
    outside any loop), "product" (a product updating a carried accumulator in place),
    "operand" (a matrix product's input, staged through shared memory), "spread" (a
    view's one-hot product over dims it holds whole) or "exchange" (a scan down a dim
    other than the last, which Triton runs through shared memory). Loops are named
    by their `range_*` knob index."""

    dims: tuple[DimRef, ...]
    itemsize: int
    role: str = "value"
    scope: tuple[int, ...] = ()  # the device loops around it, outermost first
    load: bool = False  # a value loaded from memory (an operand: or a view of one)
    launch: int = 0  # which top-level loop's kernel holds it (each compiles on its own)

    @property
    def loop(self) -> int | None:
        """The innermost device loop around the value (None at the kernel's top level)."""
        return self.scope[-1] if self.scope else None


@dataclass
class KernelSpec:
    """What a kernel's config space is made of, learned from a first analysis."""

    blocks: list[BlockSpec] = field(default_factory=list)
    reductions: list[int] = field(default_factory=list)
    tunables: dict[str, Any] = field(default_factory=dict)
    loop_orders: list[int] = field(default_factory=list)  # dims of each multi-dim tile loop
    grids: list[int] = field(default_factory=list)  # tiled dims of each top-level loop
    device_loops: int = 0
    memory_ops: int = 0
    loads: int = 0  # of memory_ops, the loads (one load_eviction_policies entry each)
    dot_blocks: set[int] = field(default_factory=set)  # block_sizes of tl.dot's matrix dims
    values: list[tuple[DimRef, ...]] = field(default_factory=list)  # shapes of all values
    uses: list[TileUse] = field(default_factory=list)  # what the budgets count (budget.py)
    limits: Any = None  # the device's Limits (budget.py), set by the BoundKernel

    def smallest_block(self, i: int) -> int:
        """The smallest size worth giving block `i`: 16 for a matrix product's dims (tl.dot
        is slower below), unless `register_block_size`'s maximum is smaller (the kernel may
        rely on it: a tile within one quantization group), then that maximum's power of 2;
        and never below `register_block_size`'s minimum."""
        block = self.blocks[i]
        if i not in self.dot_blocks:
            return block.least
        floor = min(MIN_DOT_BLOCK, pow2_ceil(block.extent)) if block.bounded else MIN_DOT_BLOCK
        return max(floor, block.least)

    # the block_sizes index of each dim of each multi-dim tile loop (None: not tuned)
    loop_order_blocks: list[tuple[int | None, ...]] = field(default_factory=list)
    # per top-level loop with loops of device-computed bounds: their trip counts' trends
    # over its programs (frontend/trends.py)
    span_trends: dict[int, list[int | None]] = field(default_factory=dict)

    @property
    def uneven_grids(self) -> set[int]:
        """The top-level loops whose programs' work may differ."""
        return set(self.span_trends)

    @property
    def longest_last(self) -> set[int]:
        """The top-level loops with a loop that later programs run longer and none they
        run shorter (the others' trends unknown: a causal attention's loop over the keys
        before its query tile grows, the diagonal's tile does not): launched in reverse by
        default."""
        found = self.span_trends.items()
        return {i for i, trends in found if 1 in trends and -1 not in trends}

    def value_elements(self, block_sizes: list[int], reduction_sizes: list[int]) -> int:
        """Elements of the largest value a program holds under these sizes."""
        sizes = {"tile": block_sizes, "reduction": reduction_sizes}
        largest = 1
        for dims in self.values:
            n = 1
            for kind, ref in dims:
                n *= ref if kind == "fixed" else sizes[kind][ref]
            largest = max(largest, n)
        return largest


def kernel_spec(kernels: list[DeviceKernel], table: BlockTable, tunables: dict) -> KernelSpec:
    """The KernelSpec of an analysis (its device kernels and their block table)."""
    spec = KernelSpec(
        list(table.tile_specs),
        list(table.reduction_extents),
        dict(tunables),
        list(table.loop_order_dims),
        list(table.grids),
        table.device_loops,
        table.memory_ops,
        loads=table.loads,
        loop_order_blocks=list(table.loop_order_blocks),
        span_trends={k: list(v) for k, v in table.span_trends.items()},
    )
    for launch, kernel in enumerate(kernels):
        for op in kernel.walk():
            if op.out is None:
                continue
            dims = tuple(_dim_ref(table, d) for d in op.out.type.dims if d is not None)
            if dims and dims not in spec.values:
                spec.values.append(dims)
            if op.name == "dot":
                for arg in op.args[:2]:  # the matrix dims; leading (batch) dims are free
                    refs = [_dim_ref(table, d) for d in arg.type.dims[-2:] if d is not None]
                    spec.dot_blocks |= {ref for kind, ref in refs if kind == "tile"}
        spec.uses += tile_uses(kernel, table, launch)
    return spec


def tile_uses(kernel: DeviceKernel, table: BlockTable, launch: int = 0) -> list[TileUse]:
    """The TileUses of a device kernel's values, loops and branches included."""
    ops = kernel.walk()
    loaded = _loaded(ops)
    # each staged operand, and whether it was loaded (pipelined, a copy per stage in flight)
    operands = {
        id(v): id(v) in loaded for op in ops if op.name == "dot" for v in _staged(op, loaded)
    }
    return [replace(u, launch=launch) for u in _uses(kernel.body, table, operands, ()) if u.dims]


def _loaded(ops: list) -> set[int]:
    """The values loaded from memory, and views of them (a transposed key tile)."""
    found: set[int] = set()
    for op in ops:
        opdef = OPDEFS.get(op.name)
        viewed = opdef is not None and opdef.kind is Kind.VIEW
        of_load = viewed and any(id(a) in found for a in op.args)
        if op.out is not None and (op.name == "load" or of_load):
            found.add(id(op.out))
    return found


def _staged(dot: Any, loaded: set[int]) -> list[Value]:
    """The operands of a product that go through shared memory on Hopper: the second
    always, the first where it was loaded; a computed first operand (attention's
    probabilities) is read from registers (wgmma's register operand). The causal attention
    forward, 256 x 64 tiles with 3 stages, ran on an H200 where counting its probabilities
    staged put it at 320 KB, over the 227 KB limit."""
    first, second = dot.args[:2]
    return [second, first] if id(first) in loaded else [second]


def _uses(
    body: list[Node], table: BlockTable, operands: dict[int, bool], scope: tuple[int, ...]
) -> list[TileUse]:
    uses: list[TileUse] = []
    for node in body:
        if isinstance(node, Loop):
            inner = (*scope, node.index)
            uses += [_use(table, c.param, "carried", inner) for c in node.carried]
            uses += _uses(node.body, table, operands, inner)
        elif isinstance(node, Branch):
            uses += _uses(node.then + node.orelse, table, operands, scope)
        elif node.out is not None and id(node.out) in operands:  # `load`: pipelined
            uses.append(_use(table, node.out, "operand", scope, operands[id(node.out)]))
        elif node.out is not None:
            uses.append(_use(table, node.out, _role(node.name, scope), scope, node.name == "load"))
            uses += [_spread(table, dims, node.out, scope) for dims in one_hot_spreads(node)]
            uses += _exchange(table, node, scope)
    return uses


def _exchange(table: BlockTable, node: Any, scope: tuple[int, ...]) -> list[TileUse]:
    """A scan down a dim other than the value's last, in shared memory: Triton 3.6 asked
    sm_90 for up to the tile's elements times its inputs' bytes together (a cummax's
    values and indices: 16 bytes an int64 element; measured for 2-D and 3-D tiles, every
    axis, 4 and 8 warps), none along the last dim. Counted once, for the first output."""
    if node.name != "scan" or node.attrs.get("component"):
        return []
    dims = node.out.type.dims
    if all(d is None for d in dims[node.attrs["axis"] + 1 :]):
        return []
    computes = node.attrs.get("computes") or (node.attrs.get("compute") or node.out.type.dtype,)
    indices = 8 if node.attrs.get("kind") in ("max", "min") else 0  # cummax's int64 indices
    nbytes = sum(d.itemsize for d in computes) + indices
    refs = tuple(_dim_ref(table, d) for d in dims if d is not None)
    return [TileUse(refs, nbytes, "exchange", scope)]


def _spread(table: BlockTable, dims: tuple, value: Value, scope: tuple[int, ...]) -> TileUse:
    """A view's one-hot product (codegen/views.py), a temporary of the value's itemsize or
    more: the default config's blocks shrink to keep it small, and never by looping over
    its rows in chunks (the view needs them whole)."""
    refs = tuple(_dim_ref(table, d) for d in dims if d is not None)
    return TileUse(refs, max(value.type.dtype.itemsize, 4), "spread", scope)


def _role(name: str, scope: tuple[int, ...]) -> str:
    """A product inside a loop updates its accumulator in place (the loop carries it, and
    counts it); elsewhere it is held like an accumulator."""
    if name != "dot":
        return "value"
    return "product" if scope else "carried"


def _use(
    table: BlockTable, value: Value, role: str, scope: tuple[int, ...], load: bool = False
) -> TileUse:
    dims = tuple(_dim_ref(table, d) for d in value.type.dims if d is not None)
    return TileUse(dims, value.type.dtype.itemsize, role, scope, load)


def _dim_ref(table: BlockTable, block_id: int) -> DimRef:
    block = table.blocks[block_id]
    if block.config_index is not None and block.kind in ("tile", "reduction"):
        return (block.kind, block.config_index)
    return ("fixed", block.fixed_size or 1)


def callable_key(fn: types.FunctionType, value_key: Callable[[Any], Any]) -> tuple:
    """What a kernel compiled with `fn` inlined depends on: its code, and the values it
    reads from its closure and module (tensors by `value_key`: their metadata)."""
    code = fn.__code__
    cells = tuple(_closure_key(c.cell_contents, value_key) for c in fn.__closure__ or ())
    names = tuple(
        (name, _closure_key(fn.__globals__[name], value_key))
        for name in code.co_names
        if isinstance(fn.__globals__.get(name), (torch.Tensor, types.FunctionType, float, int))
    )
    defaults = tuple(_closure_key(d, value_key) for d in fn.__defaults__ or ())
    return (code, cells, names, defaults)


def _closure_key(value: Any, value_key: Callable[[Any], Any]) -> Any:
    if isinstance(value, types.FunctionType):
        return callable_key(value, value_key)
    if isinstance(value, (torch.Tensor, float)):
        return value_key(value)
    try:
        hash(value)
    except TypeError:
        return (type(value), repr(value))
    return value


def closure_tensors(args: tuple) -> list[torch.Tensor]:
    """Tensors that functions among `args` capture (they become kernel arguments too)."""
    found = []
    stack = [a for a in args if isinstance(a, types.FunctionType)]
    seen: set[int] = set()
    while stack:
        fn = stack.pop()
        if id(fn) in seen:
            continue
        seen.add(id(fn))
        values = [c.cell_contents for c in fn.__closure__ or ()]
        values += [fn.__globals__.get(n) for n in fn.__code__.co_names]
        found += [v for v in values if isinstance(v, torch.Tensor)]
        stack += [v for v in values if isinstance(v, types.FunctionType)]
    return found
