"""The default config: correct everywhere and reasonably fast on a GPU, before tuning.

Block sizes come from the kind of kernel (rows, tile loops, matrix products), then
shrink until the largest value a program holds is at most `DEFAULT_ELEMENTS` and the
config fits the device's register and shared-memory budgets (`budget.py`): a default
never asks Triton for a 1024x1024 tile.
"""

from __future__ import annotations

from typing import Any

from tilecraft.frontend.blocks import BlockSpec
from tilecraft.language.tunables import fragment_default
from tilecraft.runtime.budget import HOPPER, elements, footprint, pow2_ceil
from tilecraft.runtime.config import Config
from tilecraft.runtime.spec import KernelSpec

ROW_LIMIT = 16384  # rows up to this many elements are reduced in one block by default
ROW_CHUNK = 4096
DEFAULT_ELEMENTS = 16384  # the most elements of one value a default program holds
# Matrix products, measured on an H200 (benchmarks/landscapes/h200, bf16): 128x128x64
# tiles, 4 warps, 4 stages ran within 7-11% of the best config at 1024^3, 2048^3 and
# 8192x1024x8192, where 64x64x32 with 8 warps was 1.5-2x slower.
DOT_TILE = (128, 128, 64)
DOT_WARPS, DOT_STAGES = 4, 4
# Batched products (3-D tl.dot) split their warps over the batch dim: a batch block of 1
# with 8 warps ran 4-5x slower than with 1 warp; 8x64x32x32 with 4 warps was the best
# config at 8x1024^3. That was before a batch tile of one became a 2-D product
# (codegen/flat.py), which Hopper runs on wgmma: products whose matrices are at least
# FLAT_MIN on both sides now take a batch tile of one and the tiles of a 2-D product.
BATCH_TILE = (8, 64, 32, 32)  # batch, m, n, k
FLAT_MIN = 64


def _clamp(value: int, low: int, high: int) -> int:
    return max(low, min(value, high))


def default_config(spec: KernelSpec) -> Config:
    """Heuristic block sizes, reduction strategy, warps and stages for a kernel spec,
    within the spec's device limits."""
    reduction_loops: list[int | None] = [
        None if pow2_ceil(n) <= ROW_LIMIT else ROW_CHUNK for n in spec.reductions
    ]
    orders = None
    if spec.dot_blocks:
        sizes, warps, stages = _dot_defaults(spec)
        orders = _batch_last(spec, sizes)
    else:
        sizes, warps, stages = _tile_defaults(spec), None, 3 if _has_inner(spec) else 1
    values: dict[str, Any] = {
        "block_sizes": [max(s, spec.smallest_block(i)) for i, s in enumerate(sizes)],
        "reduction_loops": reduction_loops,
        "num_warps": warps,
        "num_stages": stages,
    }
    if orders:
        values["loop_orders"] = orders
    if spec.longest_last:  # on an H200: causal attention forwards 4-10% faster
        values["reversed_launches"] = [i in spec.longest_last for i in range(len(spec.grids))]
    _shrink_values(spec, values)
    if values["num_warps"] is None:
        values["num_warps"] = _row_warps(spec, values)
    _fit(spec, values)
    tunables = {k: fragment_default(f) for k, f in spec.tunables.items()}
    return Config(**values, **tunables)


SAFE_ELEMENTS = 1024  # the most elements of one value in the fallback of a slow compile


def safe_config(spec: KernelSpec, config: Config) -> Config:
    """A small config to run when `config` (complete) compiles too slowly: its blocks
    halved until no value holds more than SAFE_ELEMENTS, one stage, at most 4 warps."""
    values = config.to_dict()
    values["block_sizes"] = list(values.get("block_sizes") or [])
    values["reduction_loops"] = list(values.get("reduction_loops") or [])
    while _largest(spec, values) > SAFE_ELEMENTS and _halve(spec, values):
        pass
    values["num_stages"] = 1
    values["num_warps"] = min(int(values.get("num_warps") or 4), _most_warps(spec, values), 4)
    values.pop("range_num_stages", None)
    return Config(**values)


def _has_inner(spec: KernelSpec) -> bool:
    return any(b.inner for b in spec.blocks)


def _tile_defaults(spec: KernelSpec) -> list[int]:
    row = max([min(pow2_ceil(n), ROW_LIMIT) for n in spec.reductions], default=1)
    n_grid = sum(not b.inner for b in spec.blocks)
    return [_block_size(b, n_grid, _has_inner(spec), row) for b in spec.blocks]


def _block_size(b: BlockSpec, n_grid: int, has_inner: bool, row: int) -> int:
    cap = pow2_ceil(b.extent)
    if b.inner:
        return min(cap, 32 if n_grid >= 2 else max(16, 1024 // row))
    if has_inner:
        return min(cap, 64 if n_grid >= 2 else 8)
    if row > 1:
        return min(cap, max(1, 4096 // row))
    return min(cap, 1024 if n_grid == 1 else 64)


def _dot_defaults(spec: KernelSpec) -> tuple[list[int], int, int]:
    """Matrix-product tiles: (m, n, k) for the dot dims (the first grid dim is m, the
    next n, an inner loop's k), the batch tile for the leading dims of 3-D products, 1
    for any other dim."""
    batch = batch_blocks(spec)
    flat = _flat_products(spec)
    tile = BATCH_TILE[1:] if batch and not flat else DOT_TILE
    grid = iter(tile[:2])
    others = _tile_defaults(spec)  # loops that feed no product keep the tile heuristics
    sizes = []
    for i, b in enumerate(spec.blocks):
        if i in spec.dot_blocks:
            want = tile[2] if b.inner else next(grid, tile[1])
            sizes.append(max(spec.smallest_block(i), min(want, pow2_ceil(b.extent))))
        elif i in batch:
            sizes.append(1 if flat else min(BATCH_TILE[0], pow2_ceil(b.extent)))
        else:
            sizes.append(others[i] if b.inner else 1)
    return sizes, _dot_warps(spec, sizes), 3 if batch and not flat else DOT_STAGES


def _batch_last(spec: KernelSpec, sizes: list[int]) -> list[list[int]] | None:
    """Loop orders that launch batch tiles of one last (slowest): the programs running
    at once then share one batch's matrices in L2, as a 2-D product's do. None where
    no multi-dim loop holds one."""
    batch = {i for i in batch_blocks(spec) if sizes[i] == 1}
    orders = [
        sorted(range(len(refs)), key=lambda p: refs[p] in batch) for refs in spec.loop_order_blocks
    ]
    return orders if any(o != sorted(o) for o in orders) else None


def _flat_products(spec: KernelSpec) -> bool:
    """Whether the products' matrices are large enough on both sides (m and n, the dot
    blocks that no inner loop runs over) to be 2-D products over a batch tile of one."""
    sides = [b.extent for i, b in enumerate(spec.blocks) if i in spec.dot_blocks and not b.inner]
    return bool(sides) and min(pow2_ceil(n) for n in sides) >= FLAT_MIN


def _dot_warps(spec: KernelSpec, sizes: list[int]) -> int:
    """Warps of a product: a 3-D product spreads them over its batch tile first, so
    never more than that tile holds (a tile of one makes a 2-D product: no limit)."""
    return min([DOT_WARPS, *_batch_tiles(spec, sizes)])


def _batch_tiles(spec: KernelSpec, sizes: list[int]) -> list[int]:
    """The batch tiles of 3-D products that stay 3-D (larger than one)."""
    return [sizes[i] for i in batch_blocks(spec) if sizes[i] > 1]


def batch_blocks(spec: KernelSpec) -> set[int]:
    """The blocks (config indices) of the leading dims of 3-D (batched) products."""
    found: set[int] = set()
    for use in spec.uses:
        if use.role == "operand":
            found |= {ref for kind, ref in use.dims[:-2] if kind == "tile"}
    return found - spec.dot_blocks


def _row_warps(spec: KernelSpec, values: dict[str, Any]) -> int:
    # measured on an H200 (benchmarks/sweep_rows.py): 4 warps per 8K-element row is best
    largest = _largest(spec, values)
    return _clamp(pow2_ceil(largest // 2048), 4, 8 if _has_inner(spec) else 16)


def _largest(spec: KernelSpec, values: dict[str, Any]) -> int:
    """Elements of the largest value a program holds (operands of products aside)."""
    sizes = _sizes(spec, values)
    held = [elements(u, sizes) for u in spec.uses if u.role not in ("operand", "exchange")]
    return max(held, default=1)


def _sizes(spec: KernelSpec, values: dict[str, Any]) -> dict[str, list[int]]:
    rows = [
        pow2_ceil(n) if c is None else int(c)
        for n, c in zip(spec.reductions, values["reduction_loops"], strict=True)
    ]
    return {"tile": list(values["block_sizes"]), "reduction": rows}


def _shrink_values(spec: KernelSpec, values: dict[str, Any]) -> None:
    """Halve block sizes until no value a program holds exceeds DEFAULT_ELEMENTS."""
    while _largest(spec, values) > DEFAULT_ELEMENTS and _halve(spec, values):
        pass


def _fit(spec: KernelSpec, values: dict[str, Any]) -> None:
    """Shrink until the config fits the device: fewer stages for shared memory, more
    warps (up to 8) or smaller blocks for registers."""
    limits = spec.limits or HOPPER
    for _ in range(64):
        fp = footprint(spec, values)
        if fp.fits(limits):
            return
        if fp.shared_bytes > limits.shared_per_block and values["num_stages"] > 1:
            values["num_stages"] -= 1
        elif fp.shared_bytes <= limits.shared_per_block and values["num_warps"] < _most_warps(
            spec, values
        ):
            values["num_warps"] *= 2
        elif not _halve(spec, values):
            return  # nothing left to shrink: the smallest config is the default
        values["num_warps"] = min(values["num_warps"], _most_warps(spec, values))


def _most_warps(spec: KernelSpec, values: dict[str, Any]) -> int:
    tiles = _batch_tiles(spec, values["block_sizes"])
    return _dot_warps(spec, values["block_sizes"]) if tiles else 8


def _halve(spec: KernelSpec, values: dict[str, Any]) -> bool:
    """Halve the largest block that can shrink, the blocks of no load's last (contiguous)
    dim first, so that loads stay wide; the earliest of equals. False if none can."""
    sizes = values["block_sizes"]
    floor = [spec.smallest_block(i) for i in range(len(sizes))]
    shrinkable = [i for i, s in enumerate(sizes) if s > floor[i]]
    if not shrinkable:
        return _halve_chunk(spec, values)
    wide = _contiguous_blocks(spec)
    i = max(shrinkable, key=lambda j: (j not in wide, sizes[j], -j))
    sizes[i] //= 2
    return True


def _contiguous_blocks(spec: KernelSpec) -> set[int]:
    """Blocks (config indices) that are the last dim of a loaded value."""
    last = (u.dims[-1] for u in spec.uses if u.load and u.dims)
    return {ref for kind, ref in last if kind == "tile"}


def _halve_chunk(spec: KernelSpec, values: dict[str, Any]) -> bool:
    """Loop over a whole row in smaller chunks (the longest row first), for rows that
    only reductions read: one a loop carries, or a matrix product's, stays whole."""
    loops = values["reduction_loops"]
    held = {
        ref
        for u in spec.uses
        if u.role not in ("value", "exchange")
        for kind, ref in u.dims
        if kind == "reduction"
    }
    rows = enumerate(zip(spec.reductions, loops, strict=True))
    chunks = [(c or pow2_ceil(n), i) for i, (n, c) in rows if i not in held]
    size, i = max(chunks, default=(1, -1))
    if size <= 64:
        return False
    loops[i] = size // 2
    return True
