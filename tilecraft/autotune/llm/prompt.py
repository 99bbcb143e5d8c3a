"""What the model sees, built in one place: the kernel source, a summary of its IR, the
argument shapes, the config space, the hardware, the results so far and the closest
tuning-database entries, then the reply format.

To see exactly what would be sent, before anything is sent::

    import softmax  # examples/softmax.py
    from tilecraft.autotune.llm.prompt import SYSTEM, render_prompt

    bound = softmax.softmax.bind(softmax.inputs(shape=(8, 64), device="cpu"))
    print(SYSTEM)
    print(render_prompt(bound))
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from typing import Any

import torch

from tilecraft.autotune.llm.context import DBEntry
from tilecraft.autotune.search.common import cost
from tilecraft.autotune.space import ConfigSpace, space_of
from tilecraft.autotune.trial import Trial
from tilecraft.ir.nodes import Branch, DeviceKernel, Loop, Node
from tilecraft.runtime.bound import BoundKernel
from tilecraft.runtime.config import Config

SYSTEM = (
    "You are an expert in GPU kernel performance tuning for Triton. You propose configs "
    "for a kernel autotuner and reply with one JSON object only."
)
BEST_SHOWN = 10  # fastest results shown
FAILURES_SHOWN = 8
PROPOSALS = 8  # configs asked for per round
SUMMARIZED_OPS = ("load", "store", "reduce", "dot")


def build_prompt(
    space: ConfigSpace,
    bound: BoundKernel | None = None,
    trials: Iterable[Trial] = (),
    db_entries: Iterable[DBEntry] = (),
) -> str:
    """The user message of one round (see the module docstring for its parts)."""
    trials = list(trials)
    sections = [
        ("Kernel source", kernel_source(bound)),
        ("IR summary (default config)", ir_summary(bound)),
        ("Arguments (dtype[shape], in order)", bound.spec_key if bound else "unknown"),
        ("Hardware", describe_hardware()),
        ("Config space (knob: valid values; default)", describe_space(space)),
        (
            "Results so far: fastest (ms; differences from the default)",
            describe_best(space, trials),
        ),
        ("Results so far: failed (status: reason; config)", describe_failures(space, trials)),
        ("Same kernel at other shapes (tuning database)", describe_entries(space, db_entries)),
        ("Reply format", reply_format()),
    ]
    return "\n\n".join(f"## {title}\n{body}".rstrip() for title, body in sections) + "\n"


def render_prompt(
    bound: BoundKernel,
    trials: Iterable[Trial] = (),
    db_entries: Iterable[DBEntry] = (),
) -> str:
    """Exactly the prompt the LLM-guided searches would send for `bound` (the system
    message is `SYSTEM`), without sending anything."""
    space = space_of(bound, torch.cuda.is_available())
    return build_prompt(space, bound, trials, db_entries)


def kernel_source(bound: BoundKernel | None) -> str:
    if bound is None:
        return "(not available)"
    tree = bound.src.tree
    return "```python\n" + "".join(bound.src.lines[tree.lineno - 1 : tree.end_lineno]) + "```"


def ir_summary(bound: BoundKernel | None) -> str:
    """Per device kernel: op counts, the loop nest over blocks, and the dtypes."""
    if bound is None:
        return "(not available)"
    kernels = bound.analyze(bound.default_config).kernels
    return "\n".join(_kernel_summary(kernel) for kernel in kernels)


def _kernel_summary(kernel: DeviceKernel) -> str:
    counts = Counter(op.name for op in kernel.walk())
    ops = ", ".join(f"{counts.get(name, 0)} {name}" for name in SUMMARIZED_OPS)
    others = sorted(set(counts) - set(SUMMARIZED_OPS))
    dtypes = {str(p.dtype).removeprefix("torch.") for p in kernel.params if p.is_tensor}
    dtypes |= {str(op.out.type.dtype).removeprefix("torch.") for op in kernel.walk() if op.out}
    lines = [
        f"kernel {kernel.name}: {ops}" + (f"; other ops: {', '.join(others)}" if others else ""),
        f"  grid over {_blocks(kernel, kernel.grid_blocks)}",
        *_loop_nest(kernel, kernel.body, depth=2),
        f"  dtypes: {', '.join(sorted(dtypes))}",
    ]
    return "\n".join(lines)


def _loop_nest(kernel: DeviceKernel, body: list[Node], depth: int) -> list[str]:
    lines: list[str] = []
    for node in body:
        if isinstance(node, Loop):
            head = f"device loop {node.index} over {_blocks(kernel, node.blocks)}"
            lines += [" " * depth + head, *_loop_nest(kernel, node.body, depth + 2)]
        elif isinstance(node, Branch):
            lines += _loop_nest(kernel, [*node.then, *node.orelse], depth)
    return lines


def _blocks(kernel: DeviceKernel, ids: list[int]) -> str:
    parts = [f"{kernel.blocks[b].kind} block {b} (extent {kernel.blocks[b].extent})" for b in ids]
    return ", ".join(parts) or "nothing (one program)"


def describe_hardware() -> str:
    """The GPU's name, SMs, memory sizes and bandwidth; or the CPU interpreter."""
    if not torch.cuda.is_available():
        return "CPU (Triton interpreter): times are interpreted, not GPU times"
    p = torch.cuda.get_device_properties(torch.cuda.current_device())
    facts = [p.name, f"{p.multi_processor_count} SMs"]
    sizes = {
        "shared memory per SM": getattr(p, "shared_memory_per_multiprocessor", None),
        "shared memory per block (opt-in)": getattr(p, "shared_memory_per_block_optin", None),
        "L2": getattr(p, "L2_cache_size", None),
        "memory": p.total_memory,
    }
    facts += [f"{name} {size // 1024} KiB" for name, size in sizes.items() if size]
    registers = getattr(p, "regs_per_multiprocessor", None)
    facts += [f"{registers} registers per SM"] if registers else []
    clock, width = getattr(p, "memory_clock_rate", 0), getattr(p, "memory_bus_width", 0)
    if clock and width:  # kHz * bits, double data rate
        facts.append(f"memory bandwidth ~{2 * clock * 1e3 * width / 8 / 1e9:.0f} GB/s")
    facts.append(f"compute capability {p.major}.{p.minor}")
    return ", ".join(facts)


def describe_space(space: ConfigSpace) -> str:
    lines = [f"{k.name}: {_json(list(k.choices))}; default {_json(k.default)}" for k in space.knobs]
    lines.append(f"default config: {_json(space.values(space.default()))}")
    return "\n".join(lines)


def describe_best(space: ConfigSpace, trials: list[Trial]) -> str:
    ranked = sorted((t for t in trials if t.ok), key=cost)[:BEST_SHOWN]
    rows = [f"{t.time_ms:.4g} ms {_json(difference(space, t.config))}" for t in ranked]
    return "\n".join(rows) or "(none yet)"


def describe_failures(space: ConfigSpace, trials: list[Trial]) -> str:
    failed = [t for t in trials if not t.ok][:FAILURES_SHOWN]
    rows = [
        f"{t.status}{': ' + t.error[:120] if t.error else ''} {_json(difference(space, t.config))}"
        for t in failed
    ]
    return "\n".join(rows) or "(none)"


def describe_entries(space: ConfigSpace, entries: Iterable[DBEntry]) -> str:
    rows = [f"{key}: {ms:.4g} ms {_json(difference(space, c))}" for c, ms, key in entries]
    return "\n".join(rows) or "(none)"


def reply_format() -> str:
    return (
        f"Propose up to {PROPOSALS} new configs likely to be faster than the fastest above, "
        "not already measured. Reply with one JSON object and nothing else:\n"
        '{"configs": [{"<knob name>": <value>, ...}, ...]}\n'
        "Each config lists only the knobs that differ from the default config; use the knob "
        "names and valid values listed above."
    )


def difference(space: ConfigSpace, config: Config) -> dict[str, Any]:
    """The knob values of `config` that differ from the default config."""
    default = space.values(space.default())
    return {name: v for name, v in space.values(config).items() if default.get(name) != v}


def _json(value: Any) -> str:
    return json.dumps(value, default=str)
