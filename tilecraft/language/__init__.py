"""The DSL surface: `import tilecraft.language as hl` reads like Helion code."""

from __future__ import annotations

from tilecraft.language.creation import arange, dot, full, zeros
from tilecraft.language.host import barrier, register_reduction_dim
from tilecraft.language.memory import atomic_add, load, store
from tilecraft.language.random import rand, randint
from tilecraft.language.scans import associative_scan, cumprod, cumsum, reduce
from tilecraft.language.tiles import Tile, grid, jagged_tile, static_range, tile
from tilecraft.language.tunables import (
    Choice,
    IntRange,
    PowerOfTwo,
    register_block_size,
    register_tunable,
    specialize,
)
from tilecraft.language.views import join, split

__all__ = [
    "Choice",
    "IntRange",
    "PowerOfTwo",
    "Tile",
    "arange",
    "associative_scan",
    "atomic_add",
    "barrier",
    "cumprod",
    "cumsum",
    "dot",
    "full",
    "grid",
    "jagged_tile",
    "join",
    "load",
    "rand",
    "randint",
    "reduce",
    "register_block_size",
    "register_reduction_dim",
    "register_tunable",
    "specialize",
    "split",
    "static_range",
    "store",
    "tile",
    "zeros",
]
