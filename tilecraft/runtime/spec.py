"""`KernelSpec`: the facts about a bound kernel that its configs are made of."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tilecraft.frontend.blocks import BlockSpec, BlockTable
from tilecraft.ir.nodes import DeviceKernel

# One dim of a value: ("tile", config index), ("reduction", config index) or ("fixed", size).
DimRef = tuple[str, int]


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
    dot_blocks: set[int] = field(default_factory=set)  # block_sizes of tl.dot's matrix dims
    values: list[tuple[DimRef, ...]] = field(default_factory=list)  # shapes of all values

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
    )
    for kernel in kernels:
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
    return spec


def _dim_ref(table: BlockTable, block_id: int) -> DimRef:
    block = table.blocks[block_id]
    if block.config_index is not None and block.kind in ("tile", "reduction"):
        return (block.kind, block.config_index)
    return ("fixed", block.fixed_size or 1)
