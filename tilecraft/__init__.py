"""tilecraft: a Python-embedded DSL for ML kernels, compiled to Triton and autotuned."""

from __future__ import annotations

from typing import Any

from tilecraft import autotuner, exc, language, runtime
from tilecraft.language import (
    Tile,
    arange,
    associative_scan,
    atomic_add,
    atomic_and,
    atomic_cas,
    atomic_max,
    atomic_min,
    atomic_or,
    atomic_xchg,
    atomic_xor,
    cumprod,
    cumsum,
    dot,
    full,
    grid,
    jagged_tile,
    join,
    load,
    ones,
    rand,
    randint,
    reduce,
    register_block_size,
    register_tunable,
    specialize,
    split,
    static_range,
    store,
    subscript,
    tile,
    tile_begin,
    tile_block_size,
    tile_end,
    tile_id,
    tile_index,
    vtile,
    zeros,
)
from tilecraft.language.host import cdiv, next_power_of_2
from tilecraft.runtime.config import Config
from tilecraft.runtime.kernel import BoundKernel, Kernel, kernel
from tilecraft.runtime.options import RefMode
from tilecraft.runtime.settings import Settings
from tilecraft.torch import as_torch_op

jit = kernel  # Helion's other name for the decorator


def record() -> Any:
    """Record every tilecraft kernel called inside a `with` block into a manifest (what
    `tilecraft tune` tunes ahead of time); see `tilecraft.autotune.manifest.record`.

    Example::

        with tilecraft.record() as manifest:
            model(x)
        manifest.save("manifest.json")
    """
    from tilecraft.autotune.manifest import record as start

    return start()


__all__ = [
    "BoundKernel",
    "Config",
    "Kernel",
    "RefMode",
    "Settings",
    "Tile",
    "arange",
    "as_torch_op",
    "autotuner",
    "cdiv",
    "associative_scan",
    "atomic_add",
    "atomic_and",
    "atomic_cas",
    "atomic_max",
    "atomic_min",
    "atomic_or",
    "atomic_xchg",
    "atomic_xor",
    "cumprod",
    "cumsum",
    "dot",
    "exc",
    "full",
    "grid",
    "jagged_tile",
    "vtile",
    "jit",
    "join",
    "kernel",
    "language",
    "load",
    "next_power_of_2",
    "ones",
    "rand",
    "randint",
    "record",
    "reduce",
    "register_block_size",
    "register_tunable",
    "runtime",
    "specialize",
    "split",
    "static_range",
    "store",
    "subscript",
    "tile",
    "tile_begin",
    "tile_block_size",
    "tile_end",
    "tile_id",
    "tile_index",
    "zeros",
]
