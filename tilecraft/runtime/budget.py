"""Register and shared-memory budgets: what a config asks of one GPU multiprocessor,
estimated from the IR before anything compiles, against the device's limits.

A config over budget spills registers or fails Triton's shared-memory check, and the
largest (a 1024x1024 tile) keep Triton's compiler busy for minutes. The default config
is shrunk until it fits (`heuristics.py`) and the config space offers only configs that
fit (`autotune/space.py`). On a CPU a Hopper GPU's limits apply too: Triton's interpreter
is no place for a million-element tile either.

The estimate leans low, so that it never rules out a config that compiles and runs well:
on the landscapes recorded on an H200 (`benchmarks/landscapes/h200`) it keeps every
config within 10% of the best, and rules out most of the configs that failed Triton's
shared-memory check or did not compile within the timeout (tests/test_budget.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from tilecraft.runtime.spec import KernelSpec, TileUse, pow2_ceil


@dataclass(frozen=True)
class Limits:
    """What one program (a block of threads) may use on a device."""

    regs_per_thread: int = 255
    regs_per_sm: int = 65536
    shared_per_block: int = 232448  # 227 KB, Hopper's opt-in maximum per block


HOPPER = Limits()
REG_OVERHEAD = 32  # registers for offsets, pointers, masks and loop counters
WORD = 4  # bytes per register


def device_limits(args: tuple) -> Limits:
    """The limits of the GPU the arguments live on; a Hopper GPU's for CPU arguments."""
    for a in args:
        if isinstance(a, torch.Tensor) and a.device.type == "cuda":
            props = torch.cuda.get_device_properties(a.device)
            shared = getattr(props, "shared_memory_per_block_optin", 0) or HOPPER.shared_per_block
            regs = getattr(props, "regs_per_multiprocessor", 0) or HOPPER.regs_per_sm
            return Limits(HOPPER.regs_per_thread, int(regs), int(shared))
    return HOPPER


@dataclass(frozen=True)
class Footprint:
    """A config's estimated registers per thread and shared memory per program."""

    registers: int
    shared_bytes: int
    threads: int
    maxnreg: int | None = None  # the config's own cap on registers per thread

    def fits(self, limits: Limits) -> bool:
        return not self.excess(limits)

    def excess(self, limits: Limits) -> str:
        """Why the config does not fit, or "" when it does."""
        if self.registers > limits.regs_per_thread:
            return f"about {self.registers} registers per thread (limit {limits.regs_per_thread})"
        if self.maxnreg and self.registers > self.maxnreg:
            # ptxas refuses what cannot fit it ("Insufficient registers"): 8 of the 8 such
            # failures of the H200 landscapes, and none of their fastest configs, are over it
            return f"about {self.registers} registers per thread (maxnreg {self.maxnreg})"
        if self.registers * self.threads > limits.regs_per_sm:
            return (
                f"about {self.registers} registers for each of {self.threads} threads"
                f" (limit {limits.regs_per_sm} per multiprocessor)"
            )
        if self.shared_bytes > limits.shared_per_block:
            return (
                f"about {self.shared_bytes // 1024} KB of shared memory"
                f" (limit {limits.shared_per_block // 1024} KB)"
            )
        return ""


def footprint(spec: KernelSpec, config: dict[str, Any]) -> Footprint:
    """The estimated footprint of `config` (a Config's dict, defaults filled in): the
    largest of its launches' (each top-level loop compiles to a kernel of its own)."""
    sizes = _sizes(spec, config)
    threads = 32 * int(config.get("num_warps") or 4)
    launches = [[u for u in spec.uses if u.launch == i] for i in {u.launch for u in spec.uses}]
    words = max((_live_words(uses, sizes) for uses in launches), default=0.0)
    registers = REG_OVERHEAD + math.ceil(words / threads)
    shared = max((_shared_bytes(uses, sizes, config) for uses in launches), default=0)
    return Footprint(registers, shared, threads, config.get("maxnreg"))


def fits(spec: KernelSpec, config: dict[str, Any]) -> bool:
    """Whether `config` fits the spec's device limits (a Hopper GPU's when unknown)."""
    return footprint(spec, config).fits(spec.limits or HOPPER)


def _sizes(spec: KernelSpec, config: dict[str, Any]) -> dict[str, list[int]]:
    blocks = [int(b or 1) for b in config.get("block_sizes") or []]
    blocks += [1] * (len(spec.blocks) - len(blocks))
    loops = list(config.get("reduction_loops") or [])
    loops += [None] * (len(spec.reductions) - len(loops))
    rows = [
        pow2_ceil(n) if c is None else int(c) for n, c in zip(spec.reductions, loops, strict=False)
    ]
    return {"tile": blocks, "reduction": rows}


def elements(use: TileUse, sizes: dict[str, list[int]]) -> int:
    """The elements of one program's copy of the value."""
    n = 1
    for kind, ref in use.dims:
        n *= ref if kind == "fixed" else sizes[kind][ref]
    return n


def _words(use: TileUse, sizes: dict[str, list[int]]) -> float:
    # 16-bit values pack two to a register; narrower ones are widened to 16 bits at least
    return elements(use, sizes) * max(use.itemsize, 2) / WORD


def _live_words(uses: list[TileUse], sizes: dict[str, list[int]]) -> float:
    """Registers' worth of values live at once, at least, in the busiest loop (or outside
    all loops): the values its loops carry, and its largest load (elementwise chains are
    fused, a product updates its accumulator in place, operands sit in shared memory)."""
    busiest = 0.0
    for scope in {u.scope for u in uses}:
        inside = [u for u in uses if u.scope == scope]
        carried = sum(
            _words(u, sizes) for u in uses if u.role == "carried" and _encloses(u.scope, scope)
        )
        loaded = max((_words(u, sizes) for u in inside if u.role == "value" and u.load), default=0)
        busiest = max(busiest, carried + loaded)
    return busiest


def _encloses(outer: tuple[int, ...], inner: tuple[int, ...]) -> bool:
    return inner[: len(outer)] == outer


def _shared_bytes(uses: list[TileUse], sizes: dict[str, list[int]], config: dict) -> int:
    """A launch's shared memory: its products' pipelined operands and, on top (Triton
    reuses scratch space, not the pipeline's buffers), its largest scan exchange."""
    exchanges = (elements(u, sizes) * u.itemsize for u in uses if u.role == "exchange")
    return _pipeline_bytes(uses, sizes, config) + max(exchanges, default=0)


def _pipeline_bytes(uses: list[TileUse], sizes: dict[str, list[int]], config: dict) -> int:
    """Shared memory of the products' operands: each loop's loaded operands once per stage
    in flight beyond the first (Triton's pipeliner keeps `stages - 1` copies), computed
    ones once (`spec.py`'s `_staged`), summed over the loops: Triton keeps every pipelined
    loop's buffers for the whole kernel (the H200 asked exactly the sum, 288 KB, of a
    causal attention's two key loops)."""
    per_loop: dict[int | None, int] = {}
    for use in (u for u in uses if u.role == "operand"):
        copies = _copies(use, config) if use.load else 1
        nbytes = elements(use, sizes) * use.itemsize * copies
        # float32 products without TF32 stage their operands in wider layouts: a 64x64x64
        # float32 attention with 2 stages asked for 272 KB on the H200, 2.4x this sum (a
        # bf16 one of 128x64x64 and 4 stages 1.38x: first calls drop stages for such)
        nbytes = int(nbytes * (FP32_OPERAND_FACTOR if use.itemsize == 4 else 1))
        per_loop[use.loop] = per_loop.get(use.loop, 0) + nbytes
    return sum(per_loop.values())


FP32_OPERAND_FACTOR = 2.5


def _copies(use: TileUse, config: dict) -> int:
    """Operand copies in flight: `stages - 1`, times the loop's unroll factor (each unrolled
    step is pipelined with its own buffers: 170 of the landscapes' 215 shared-memory
    failures are over budget with it counted, 78 without)."""
    if use.loop is None:
        return 1
    stages = _item(config.get("range_num_stages"), use.loop) or config.get("num_stages") or 1
    unroll = _item(config.get("range_unroll_factors"), use.loop) or 1
    return max(int(stages) - 1, 1) * int(unroll)


def _item(values: Any, index: int | None) -> Any:
    if not isinstance(values, list) or index is None or index >= len(values):
        return None
    return values[index]
