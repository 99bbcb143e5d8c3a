"""The default config: correct everywhere and reasonably fast on a GPU, before tuning."""

from __future__ import annotations

from tilecraft.frontend.blocks import BlockSpec
from tilecraft.language.tunables import fragment_default
from tilecraft.runtime.config import Config
from tilecraft.runtime.spec import KernelSpec

ROW_LIMIT = 16384  # rows up to this many elements are reduced in one block by default
ROW_CHUNK = 4096
# nested loops of unknown length (each 1024 by default) would hold a value of millions of
# elements: the default halves the largest inner blocks until the largest value fits this
VALUE_LIMIT = 1 << 14


def _pow2(n: int) -> int:
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


def _clamp(value: int, low: int, high: int) -> int:
    return max(low, min(value, high))


def default_config(spec: KernelSpec) -> Config:
    """Heuristic block sizes, reduction strategy and warps for a kernel spec."""
    reduction_loops: list[int | None] = [
        None if _pow2(n) <= ROW_LIMIT else ROW_CHUNK for n in spec.reductions
    ]
    row = max([min(_pow2(n), ROW_LIMIT) for n in spec.reductions], default=1)
    grid = [b for b in spec.blocks if not b.inner]
    inner = [b for b in spec.blocks if b.inner]
    sizes: list[int | None] = []
    for i, b in enumerate(spec.blocks):
        batch = bool(spec.dot_blocks) and i not in spec.dot_blocks and not b.inner
        sizes.append(1 if batch else _block_size(b, len(grid), bool(inner), row))
    _fit(spec, sizes, reduction_loops)
    elements = row
    for s in sizes:
        elements *= s or 1
    # measured on an H200 (benchmarks/sweep_rows.py): 4 warps per 8K-element row is best
    warps = _clamp(_pow2(elements // 2048), 4, 16 if not inner else 8)
    tunables = {k: fragment_default(f) for k, f in spec.tunables.items()}
    return Config(
        block_sizes=sizes,
        reduction_loops=reduction_loops,
        num_warps=warps,
        num_stages=3 if inner else 1,
        **tunables,
    )


def _block_size(b: BlockSpec, n_grid: int, has_inner: bool, row: int) -> int:
    cap = _pow2(b.extent)
    if b.inner:
        return min(cap, 32 if n_grid >= 2 else max(16, 1024 // row))
    if has_inner:
        return min(cap, 64 if n_grid >= 2 else 8)
    if row > 1:
        return min(cap, max(1, 4096 // row))
    return min(cap, 1024 if n_grid == 1 else 64)


def _fit(spec: KernelSpec, sizes: list[int | None], reduction_loops: list[int | None]) -> None:
    """Halve the largest inner block sizes while the largest value exceeds VALUE_LIMIT."""
    rows = [c or _pow2(n) for c, n in zip(reduction_loops, spec.reductions, strict=True)]
    blocks = [s or 1 for s in sizes]
    while spec.value_elements(blocks, rows) > VALUE_LIMIT:
        inner = [i for i, b in enumerate(spec.blocks) if b.inner and blocks[i] > 16]
        if not inner:
            break
        i = max(inner, key=lambda i: blocks[i])
        blocks[i] //= 2
        sizes[i] = blocks[i]
