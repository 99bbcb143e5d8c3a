"""The DSL surface: `import tilecraft.language as hl` reads like Helion code."""

from __future__ import annotations

from tilecraft.language.creation import arange, dot, full, ones, zeros
from tilecraft.language.host import barrier, register_reduction_dim
from tilecraft.language.memory import atomic_add, load, store
from tilecraft.language.random import rand, randint
from tilecraft.language.refused import (
    AsyncCopyDescriptor,
    ProcessGroupName,
    StackTensor,
    dot_scaled,
    inline_asm_elementwise,
    inline_triton,
    signal,
    stacktensor_like,
    start_async_remote_copy,
    triton_kernel,
    wait,
    wait_async_remote_copy,
)
from tilecraft.language.scans import associative_scan, cumprod, cumsum, reduce
from tilecraft.language.tiles import (
    Tile,
    grid,
    jagged_tile,
    static_range,
    tile,
    tile_begin,
    tile_block_size,
    tile_end,
    tile_id,
    tile_index,
)
from tilecraft.language.tunables import (
    Choice,
    IntRange,
    PowerOfTwo,
    constexpr,
    register_block_size,
    register_tunable,
    specialize,
)
from tilecraft.language.views import join, split, subscript

__all__ = [
    "AsyncCopyDescriptor",
    "Choice",
    "IntRange",
    "PowerOfTwo",
    "ProcessGroupName",
    "StackTensor",
    "Tile",
    "arange",
    "associative_scan",
    "atomic_add",
    "barrier",
    "constexpr",
    "cumprod",
    "cumsum",
    "dot",
    "dot_scaled",
    "full",
    "grid",
    "inline_asm_elementwise",
    "inline_triton",
    "jagged_tile",
    "join",
    "load",
    "ones",
    "rand",
    "randint",
    "reduce",
    "register_block_size",
    "register_reduction_dim",
    "register_tunable",
    "signal",
    "specialize",
    "split",
    "stacktensor_like",
    "start_async_remote_copy",
    "static_range",
    "store",
    "subscript",
    "tile",
    "tile_begin",
    "tile_block_size",
    "tile_end",
    "tile_id",
    "tile_index",
    "triton_kernel",
    "wait",
    "wait_async_remote_copy",
    "zeros",
]
