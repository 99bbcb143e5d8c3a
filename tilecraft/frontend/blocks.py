"""Allocating the symbolic block dimensions of a kernel and their config sizes."""

from __future__ import annotations

import ast
import copy
import dataclasses
from dataclasses import dataclass, field
from typing import Any

from tilecraft.exc import InvalidConfig
from tilecraft.frontend.facts import UNKNOWN
from tilecraft.ir.types import Block
from tilecraft.language.state import Sites

DYNAMIC_EXTENT_HINT = 4096  # assumed trip range of a loop with device-computed bounds


class BlockSizeInt(int):
    """An int from `tc.register_block_size`, remembering which config entry it is."""

    index: int

    def __new__(cls, value: int, index: int) -> BlockSizeInt:
        obj = super().__new__(cls, value)
        obj.index = index
        return obj


@dataclass(frozen=True)
class BlockSpec:
    """What the config space needs to know about one tuned block size."""

    extent: int
    inner: bool
    bounded: bool = False  # a `register_block_size` maximum: sizes stay within pow2_ceil(extent)
    least: int = 1  # a `register_block_size` minimum's power of two: sizes stay at or above it


@dataclass
class BlockTable:
    """Blocks in order of appearance; sizes come from the config being compiled.

    `block_sizes` in a Config lists, in order, the `register_block_size` calls and then
    the `tc.tile` dimensions; `reduction_loops` lists the whole-dimension (`:`) sizes.
    """

    choices: dict[str, Any]  # the config being compiled, as a dict
    blocks: dict[int, Block] = field(default_factory=dict)
    tile_specs: list[BlockSpec] = field(default_factory=list)
    reduction_extents: list[int] = field(default_factory=list)
    registered: list[BlockSizeInt] = field(default_factory=list)
    registered_extents: dict[int, int] = field(default_factory=dict)
    loop_order_dims: list[int] = field(default_factory=list)  # dims of each multi-dim tile
    # the block_sizes index of each dim of each multi-dim tile loop (None: not tuned)
    loop_order_blocks: list[tuple[int | None, ...]] = field(default_factory=list)
    device_loops: int = 0  # nested tile loops so far (for the range_* knobs)
    memory_ops: int = 0  # loads and stores so far (for the indexing knob)
    loads: int = 0  # loads so far (for the load_eviction_policies knob)
    grids: list[int] = field(default_factory=list)  # tiled dims of each top-level loop
    launch_blocks: set[int] = field(default_factory=set)  # the top-level loops' blocks
    # per top-level loop holding loops with device-computed bounds (their programs' work may
    # differ: a causal key loop, jagged rows), how their trip counts change from one program
    # to the next (frontend/trends.py)
    span_trends: dict[int, list[int | None]] = field(default_factory=dict)
    # each line of a `tc.tile(...)` call: its dims' block sizes (eager mode tiles the same)
    sites: Sites = field(default_factory=dict)
    # each `tc.grid` dim with a step: its first index and step (a grid over the count)
    grid_steps: dict[int, tuple[int, int]] = field(default_factory=dict)

    def snapshot(self) -> BlockTable:
        """A copy to go back to where a device loop is compiled again another way (frontend/
        trips.py): what the failed compile added is dropped; registered sizes stay the
        objects host code holds."""
        saved = copy.deepcopy(dataclasses.replace(self, choices={}, registered=[]))
        saved.choices, saved.registered = self.choices, list(self.registered)
        return saved

    def restore(self, saved: BlockTable) -> None:
        for f in dataclasses.fields(self):
            setattr(self, f.name, getattr(saved, f.name))

    def note_site(self, filename: str, call: ast.expr, blocks: list[int]) -> None:
        """The block sizes of the tile loop whose call is `call` (the first trace wins)."""
        sizes = tuple(int(self.blocks[b].fixed_size or 0) for b in blocks)
        if 0 in sizes:
            return
        for line in range(call.lineno, (call.end_lineno or call.lineno) + 1):
            self.sites.setdefault((filename, line), sizes)

    def note_span(self, trend: int | None) -> None:
        """A loop with device-computed bounds in the current top-level loop, whose trip
        count has this trend over its programs."""
        self.span_trends.setdefault(len(self.grids) - 1, []).append(trend)

    def choice(self, key: str, index: int, default: Any = None) -> Any:
        """Entry `index` of the list knob `key` in the config, or `default`."""
        values = self.choices.get(key) or []
        value = values[index] if index < len(values) else None
        return default if value is None else value

    def loop_order(self, blocks: list[int]) -> list[int]:
        """The permutation the config picks for the next multi-dim tile loop, over these
        blocks (ids, in the user's order)."""
        index, ndim = len(self.loop_order_dims), len(blocks)
        self.loop_order_dims.append(ndim)
        self.loop_order_blocks.append(tuple(self.blocks[b].config_index for b in blocks))
        order = list(self.choice("loop_orders", index, range(ndim)))
        if sorted(order) != list(range(ndim)):
            raise InvalidConfig(f"loop_orders[{index}] must be a permutation of 0..{ndim - 1}")
        return order

    def next_device_loop(self) -> int:
        self.device_loops += 1
        return self.device_loops - 1

    def next_memory_op(self) -> int:
        self.memory_ops += 1
        return self.memory_ops - 1

    def next_load(self) -> int:
        self.loads += 1
        return self.loads - 1

    def register(self, low: Any = None, high: Any = None) -> BlockSizeInt:
        index = len(self.tile_specs)
        most = high if high is not None else low
        extent = int(most) if most is not None else 1024  # (a maximum of 0: a dim of 0)
        bounded = high is not None or low is not None
        least = _next_power_of_2(int(low)) if high is not None and low else 1
        self.tile_specs.append(BlockSpec(extent, inner=True, bounded=bounded, least=least))
        self.registered_extents[index] = extent
        # within the maximum, at least the minimum
        chosen = self._chosen(index, max(least, min(32, _next_power_of_2(extent))))
        self.registered.append(BlockSizeInt(chosen, index))
        return self.registered[-1]

    def _chosen(self, index: int, default: int) -> int:
        return int(self.choice("block_sizes", index, default))

    def _new(self, **kw: Any) -> Block:
        block = Block(id=len(self.blocks), **kw)
        self.blocks[block.id] = block
        return block

    def tile(
        self, begin: Any, end: Any, inner: bool, block_size: Any, facts: tuple = (UNKNOWN,) * 2
    ) -> Block:
        """The block of a tile loop; `facts` are its bounds' (frontend/facts) when they are
        computed on the device."""
        if not isinstance(begin, int) or not isinstance(end, int):
            return self._dynamic_tile(begin, end, block_size, facts)
        extent = max(end - begin, 0)
        if isinstance(block_size, BlockSizeInt):
            if not inner:  # a registered size that tiles the grid: rows, not a loop's chunk
                spec = self.tile_specs[block_size.index]
                self.tile_specs[block_size.index] = dataclasses.replace(spec, inner=False)
            return self.registered_block(block_size, begin, extent)
        if block_size is not None:
            _check_power_of_two(block_size, "tc.tile(..., block_size=)")
            return self._new(kind="tile", extent=extent, begin=begin, fixed_size=int(block_size))
        index = len(self.tile_specs)
        self.tile_specs.append(BlockSpec(extent, inner))
        size = self._chosen(index, 16)
        _check_power_of_two(size, f"block_sizes[{index}]")
        return self._new(
            kind="tile", extent=extent, begin=begin, fixed_size=size, config_index=index
        )

    def _dynamic_tile(self, begin: Any, end: Any, block_size: Any, facts: tuple) -> Block:
        """A tile loop whose bounds are scalar values computed on the device: aligned when
        both are multiples of its block size (`facts`: what is proven about them)."""
        names = [v if isinstance(v, int) else v.name for v in (begin, end)]
        hint = DYNAMIC_EXTENT_HINT
        config_index: int | None
        if block_size is None:
            index = len(self.tile_specs)
            self.tile_specs.append(BlockSpec(hint, inner=True))
            size, config_index = self._chosen(index, 16), index
        else:
            _check_power_of_two(block_size, "tc.tile(..., block_size=)")
            size, config_index = int(block_size), getattr(block_size, "index", None)
        return self._new(
            kind="tile",
            extent=hint,
            fixed_size=size,
            config_index=config_index,
            begin_value=str(names[0]),
            end_value=str(names[1]),
            aligned=all(f.multiple % size == 0 for f in facts),
            bounds=(facts[0].low, facts[1].high),
        )

    def registered_block(
        self, size: BlockSizeInt, begin: int = 0, extent: int | None = None
    ) -> Block:
        """The block of a `register_block_size` value (one per value and range)."""
        extent = self.registered_extents[size.index] if extent is None else extent
        for block in self.blocks.values():
            if (
                block.config_index == size.index
                and block.kind == "tile"
                and (block.begin, block.extent) == (begin, extent)
            ):
                return block
        return self._new(
            kind="tile", extent=extent, begin=begin, fixed_size=int(size), config_index=size.index
        )

    def label(self, block: int, name: str) -> None:
        """Give a block the user's name for it (the first name wins)."""
        if not self.blocks[block].label:
            self.blocks[block] = dataclasses.replace(self.blocks[block], label=name)

    def grid(self, begin: Any, end: Any) -> Block:
        if not isinstance(begin, int) or not isinstance(end, int):
            # a nested loop bounded by values computed on the device
            names = [v if isinstance(v, int) else v.name for v in (begin, end)]
            return self._new(
                kind="grid",
                extent=DYNAMIC_EXTENT_HINT,
                fixed_size=1,
                begin_value=str(names[0]),
                end_value=str(names[1]),
            )
        return self._new(kind="grid", extent=max(end - begin, 0), begin=begin, fixed_size=1)

    def reduction(self, extent: int) -> Block:
        for block in self.blocks.values():
            if block.kind == "reduction" and block.extent == extent:
                return block
        index = len(self.reduction_extents)
        self.reduction_extents.append(extent)
        chunk = self.choice("reduction_loops", index)
        padded = _next_power_of_2(extent)
        if chunk is not None:
            _check_power_of_two(chunk, f"reduction_loops[{index}]")
        size = padded if chunk is None or chunk >= padded else chunk
        return self._new(kind="reduction", extent=extent, fixed_size=size, config_index=index)


def _next_power_of_2(n: int) -> int:
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


def _check_power_of_two(size: int, what: str) -> None:
    if not isinstance(size, int) or size < 1 or size & (size - 1):
        raise InvalidConfig(f"{what} must be a power of two, got {size!r}")
