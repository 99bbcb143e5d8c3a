"""Numbers a cost model can learn from: a kernel's IR, its shapes, the GPU and a config.

`describe(bound)` sums up a bound kernel as JSON-able facts (kept in the tuning database
beside its trials, so a model can learn from kernels it cannot import). `features(desc,
config)` turns those facts and one config into a fixed-length vector that means the
same for every kernel: op counts, log2 bytes and FLOPs, the GPU's multiprocessor count
(`SMS`, by device name), then what the config does to
them (elements per program and per thread, programs and waves, padding, tile shape of a
matrix product, pid type, indexing, warps, stages).
"""

from __future__ import annotations

import math
from typing import Any

import torch

from tilecraft.ir.nodes import Access, Branch, DeviceKernel, Loop
from tilecraft.ir.ops import category
from tilecraft.runtime.bound import BoundKernel
from tilecraft.runtime.budget import pow2_ceil
from tilecraft.runtime.config import Config

VERSION = 2  # 2: the GPU's multiprocessor count is a feature
SMS = {"NVIDIA H200": 132, "NVIDIA H100 80GB HBM3": 132, "cpu": 4}
PID_TYPES = ("flat", "xyz", "persistent_blocked", "persistent_interleaved")
INDEXING = ("pointer", "block_ptr", "tensor_descriptor")


def describe(bound: BoundKernel, hardware: str = "") -> dict[str, Any]:
    """The facts about a bound kernel that `features` needs, as plain JSON."""
    kernels = bound.analyze(bound.default_config).kernels
    counts = dict.fromkeys(
        ("load", "store", "atomic", "dot", "reduce", "transcendental", "elementwise"), 0
    )
    unique_bytes = flops = 0.0
    for kernel in kernels:
        for op in kernel.walk():
            kind = _kind(op.name)
            counts[kind] += 1
            flops += _flops(kernel, op, kind)
            if kind in ("load", "store", "atomic"):
                unique_bytes += _bytes(kernel, op)
    spec = bound.spec
    return {
        "version": VERSION,
        "hardware": hardware,
        "sms": SMS.get(hardware, 132),
        "counts": counts,
        "kernels": len(kernels),
        "depth": max((_depth(k.body) for k in kernels), default=0),
        "itemsize": max(
            (p.dtype.itemsize for k in kernels for p in k.params if p.shape), default=4
        ),
        "bytes": unique_bytes,
        "flops": flops,
        "blocks": [[b.extent, b.inner, i in spec.dot_blocks] for i, b in enumerate(spec.blocks)],
        "reductions": list(spec.reductions),
        "memory_ops": spec.memory_ops,
    }


def features(desc: dict[str, Any], config: Config) -> list[float]:
    """One config of a described kernel as numbers (same length for every kernel)."""
    d = config.to_dict()
    blocks = desc["blocks"]
    sizes = [int(s or 1) for s in d.get("block_sizes") or [1] * len(blocks)]
    chunks = d.get("reduction_loops") or [None] * len(desc["reductions"])
    warps, stages = int(d.get("num_warps") or 4), int(d.get("num_stages") or 1)
    rows = [
        pow2_ceil(n) if c is None else int(c)
        for n, c in zip(desc["reductions"], chunks, strict=False)
    ]
    tile = math.prod(sizes) * math.prod(rows or [1])
    programs = math.prod(
        -(-ext // s) for (ext, inner, _), s in zip(blocks, sizes, strict=False) if not inner
    )
    # the share of masked lanes (an empty dim pads nothing: it runs no program)
    padded = math.prod(
        -(-ext // s) * s / ext if ext else 1.0
        for (ext, _, _), s in zip(blocks, sizes, strict=False)
    )
    dot = [s for (_, _, is_dot), s in zip(blocks, sizes, strict=False) if is_dot][-3:]
    inner = [s for (_, is_inner, _), s in zip(blocks, sizes, strict=False) if is_inner]
    indexing = d.get("indexing") or ["pointer"]
    indexing = [indexing] if isinstance(indexing, str) else indexing
    looped = [c is not None for c in chunks]
    return [
        *kernel_numbers(desc),
        math.log2(warps),
        stages,
        _log2(tile),
        _log2(tile / (32 * warps)),
        _log2(programs),
        _log2(desc["sms"]),
        _log2(programs / desc["sms"]),
        padded,
        *(_log2(s) for s in ([0, 0, 0] + dot)[-3:]),
        _log2(math.prod(inner)) if inner else 0.0,
        float(any(looped)),
        _log2(min(rows)) if rows else 0.0,
        *(float(d.get("pid_type", "flat") == p) for p in PID_TYPES),
        _log2(max([g or 1 for g in d.get("l2_groupings") or []] or [1])),
        *(sum(i == mode for i in indexing) / len(indexing) for mode in INDEXING),
        _mean(d.get("range_num_stages")),
        _mean(d.get("range_unroll_factors")),
        float(any(list(o) != sorted(o) for o in d.get("loop_orders") or [])),
    ]


def kernel_numbers(desc: dict[str, Any]) -> list[float]:
    """The kernel's part of `features`: what it computes and on which sizes, whatever
    the config (log2 sizes, op counts)."""
    counts = desc["counts"]
    extents = [ext for ext, _, _ in desc["blocks"]] + desc["reductions"]
    return [
        *(float(counts[k]) for k in sorted(counts)),
        desc["kernels"],
        desc["depth"],
        desc["itemsize"],
        _log2(desc["bytes"]),
        _log2(desc["flops"]),
        _log2(desc["flops"] / max(desc["bytes"], 1.0)),
        len(desc["blocks"]),
        len(desc["reductions"]),
        _log2(max(desc["reductions"], default=1)),
        _log2(math.prod(extents)),
        _log2(max(extents, default=1)),
    ]


def _kind(name: str) -> str:
    return "atomic" if name.startswith("atomic") else category(name)


def _extent(kernel: DeviceKernel, dims: tuple) -> float:
    return float(math.prod(kernel.blocks[d].extent for d in dims if d is not None))


def _flops(kernel: DeviceKernel, op: Any, kind: str) -> float:
    if kind == "dot":
        dims = {d for a in op.args[:2] for d in a.type.dims if d is not None}
        return 2.0 * _extent(kernel, tuple(dims))
    if kind == "reduce" and op.args and hasattr(op.args[0], "type"):
        return _extent(kernel, op.args[0].type.dims)
    if kind in ("transcendental", "elementwise") and op.out is not None:
        return _extent(kernel, op.out.type.dims)
    return 0.0


def _bytes(kernel: DeviceKernel, op: Any) -> float:
    access = next((a for a in op.args if isinstance(a, Access)), None)
    value = op.out if op.out is not None else next((a for a in op.args if hasattr(a, "type")), None)
    if access is None or value is None:
        return 0.0
    itemsize = access.param.dtype.itemsize if isinstance(access.param.dtype, torch.dtype) else 4
    return _extent(kernel, value.type.dims) * itemsize


def _depth(body: list) -> int:
    """The deepest nest of device loops, looking inside branches."""
    depths = [1 + _depth(n.body) for n in body if isinstance(n, Loop)]
    depths += [max(_depth(n.then), _depth(n.orelse)) for n in body if isinstance(n, Branch)]
    return max(depths, default=0)


def _log2(x: float) -> float:
    return math.log2(x) if x > 0 else 0.0


def _mean(values: Any) -> float:
    known = [v for v in values or [] if v is not None]
    return sum(known) / len(known) if known else -1.0
