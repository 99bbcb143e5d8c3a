"""Starting points that experience says are good, per kind of kernel.

Random configs are mostly slow and some take long to compile, so quick tuning starts
from these (and from the tuning database) instead, then climbs.
"""

from __future__ import annotations

import math
import re
from typing import Any

from tilecraft.autotune.space import ConfigSpace
from tilecraft.runtime.config import Config

# (block_m, block_n, block_k, warps, stages): classic tiles for matrix products on GPUs
# (the first two win the H200's bf16 landscapes and Helion's quick effort at 4096^3)
DOT_TILES = [
    (128, 256, 64, 8, 3),
    (256, 128, 64, 8, 3),
    (128, 256, 64, 8, 4),
    (128, 128, 64, 4, 4),
    (64, 128, 64, 4, 4),
    (128, 64, 32, 4, 4),
    (64, 64, 32, 4, 3),
]
# (rows per program, warps): one or two rows and many warps win on the H200 (Helion's
# rms_norm: 2 rows, 32 warps; the landscapes' layer_norm and sum_rows: 1 row, 16-32)
ROW_SHAPES = [(1, 4), (1, 8), (2, 4), (2, 8), (4, 8), (1, 16), (2, 16), (1, 32)]
# (inner block, rows per program, warps, unroll of the device loops) for kernels that loop
# over a long dim: long chunks with few rows stream best (Helion's quick effort lands on
# 2048-8192 wide chunks for two-pass softmax and row sums; the default's 1024 x 8 rows
# trails), or shorter chunks unrolled, which keep as many loads in flight in fewer
# registers (its KL divergence at 2048x32768: 512 x 4 rows, unrolled 4 times, 16 warps;
# the same loop not unrolled takes 1.23x as long on the H200, unrolled twice 1.06x).
LOOPED_SHAPES = [
    (4096, 1, 8, None),
    (8192, 1, 16, None),
    (512, 4, 16, 4),
    (2048, 2, 16, None),
    (2048, 1, 4, None),
    (1024, 2, 8, None),
]


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
    if out:  # the top tile on persistent programs too (Helion's pick at 4096^3 on the H200)
        out.insert(2, {**out[0], "pid_type": "persistent_blocked", "num_stages": 4})
    return out


def _row_seeds(space: ConfigSpace, base: dict[str, Any]) -> list[dict[str, Any]]:
    grid = [i for i, b in enumerate(space.spec.blocks) if not b.inner]
    if len(grid) != 1:
        return [{**base, "num_warps": w} for w in (4, 8)]
    rows_first = [
        {**base, f"block_sizes[{grid[0]}]": rows, "num_warps": warps} for rows, warps in ROW_SHAPES
    ]
    return _looped_seeds(space, base, grid[0]) + rows_first


def _looped_seeds(space: ConfigSpace, base: dict[str, Any], grid: int) -> list[dict[str, Any]]:
    """Long inner chunks over few rows, for kernels with device loops (`LOOPED_SHAPES`)."""
    inner = [i for i, b in enumerate(space.spec.blocks) if b.inner]
    out = []
    loops = [k for k in base if k.startswith("range_unroll_factors[")]
    for chunk, rows, warps, unroll in LOOPED_SHAPES if inner else []:
        values = {**base, f"block_sizes[{grid}]": rows, "num_warps": warps}
        values.update({f"block_sizes[{i}]": chunk for i in inner})
        out.append({**values, **dict.fromkeys(loops, unroll)} if unroll else values)
    return out


def spec_distance(a: str, b: str) -> float:
    """How far apart two specializations (`spec_key`s) are: the summed log2 distance of
    their sizes, infinite when they differ in rank or dtypes."""
    sizes_a, sizes_b = _sizes(a), _sizes(b)
    if len(sizes_a) != len(sizes_b) or re.sub(r"\d+", "", a) != re.sub(r"\d+", "", b):
        return math.inf
    return sum(
        abs(math.log2(x + 1) - math.log2(y + 1)) for x, y in zip(sizes_a, sizes_b, strict=True)
    )


def nearest_bests(best: dict[str, tuple[float, Config]], spec_key: str, n: int = 4) -> list[Config]:
    """The best configs (`best`: spec_key -> (time, config)) of the `n` specializations
    nearest to `spec_key`, the nearest first; those of other ranks or dtypes last."""
    order = sorted(best, key=lambda other: (spec_distance(other, spec_key), other))
    return [best[other][1] for other in order if other != spec_key][:n]


def _sizes(spec_key: str) -> list[int]:
    return [int(x) for x in re.findall(r"\d+", re.sub(r"[a-z]+\d+", "", spec_key))]
