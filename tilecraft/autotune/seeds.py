"""Starting points that experience says are good, per kind of kernel.

Random configs are mostly slow and some take long to compile, so quick tuning starts
from these (and from the tuning database) instead, then climbs.
"""

from __future__ import annotations

from typing import Any

from tilecraft.autotune.space import ConfigSpace
from tilecraft.runtime.config import Config

# (block_m, block_n, block_k, warps, stages): classic tiles for matrix products on GPUs
DOT_TILES = [
    (128, 256, 64, 8, 3),
    (128, 128, 64, 4, 4),
    (64, 128, 64, 4, 4),
    (128, 64, 32, 4, 4),
    (64, 64, 32, 4, 3),
]
ROW_SHAPES = [(1, 4), (1, 8), (2, 4), (2, 8), (4, 8), (1, 16)]  # (rows per program, warps)


def heuristic_seeds(space: ConfigSpace) -> list[Config]:
    """Valid configs to try first: matmul tiles for dot kernels, row shapes for the rest."""
    base = space.values(space.default_config)
    candidates = _dot_seeds(space, base) if space.spec.dot_blocks else _row_seeds(space, base)
    return [c for c in (space.snap(v) for v in candidates) if space.is_valid(c)]


def _dot_seeds(space: ConfigSpace, base: dict[str, Any]) -> list[dict[str, Any]]:
    dims = sorted(space.spec.dot_blocks)
    if len(dims) < 3:
        return []
    m, n, k = dims[-3:] if len(space.spec.blocks) == 3 else dims[:3]
    out = []
    for bm, bn, bk, warps, stages in DOT_TILES:
        values = {
            **base,
            f"block_sizes[{m}]": bm,
            f"block_sizes[{n}]": bn,
            f"block_sizes[{k}]": bk,
            "num_warps": warps,
            "num_stages": stages,
        }
        out.append(values)
        if "l2_groupings[0]" in base:
            out.append({**values, "l2_groupings[0]": 8})
    return out


def _row_seeds(space: ConfigSpace, base: dict[str, Any]) -> list[dict[str, Any]]:
    grid = [i for i, b in enumerate(space.spec.blocks) if not b.inner]
    if len(grid) != 1:
        return [{**base, "num_warps": w} for w in (4, 8)]
    return [
        {**base, f"block_sizes[{grid[0]}]": rows, "num_warps": warps} for rows, warps in ROW_SHAPES
    ]
