"""tilecraft: a Python-embedded DSL for ML kernels, compiled to Triton and autotuned."""

from __future__ import annotations

from tilecraft import autotuner, exc
from tilecraft.language import (
    Tile,
    arange,
    associative_scan,
    atomic_add,
    cumprod,
    cumsum,
    dot,
    full,
    grid,
    jagged_tile,
    load,
    rand,
    randint,
    reduce,
    register_block_size,
    register_tunable,
    specialize,
    static_range,
    store,
    tile,
    zeros,
)
from tilecraft.runtime.config import Config
from tilecraft.runtime.kernel import BoundKernel, Kernel, kernel
from tilecraft.torch import as_torch_op

__all__ = [
    "BoundKernel",
    "Config",
    "Kernel",
    "Tile",
    "arange",
    "as_torch_op",
    "autotuner",
    "associative_scan",
    "atomic_add",
    "cumprod",
    "cumsum",
    "dot",
    "exc",
    "full",
    "grid",
    "jagged_tile",
    "kernel",
    "load",
    "rand",
    "randint",
    "reduce",
    "register_block_size",
    "register_tunable",
    "specialize",
    "static_range",
    "store",
    "tile",
    "zeros",
]
