"""Mapping program ids to tiles: flat, xyz and persistent launches, L2 grouping."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tilecraft.exc import InvalidConfig
from tilecraft.ir.types import Block

MAX_GRID_YZ = 65535


@dataclass
class GridPlan:
    """How one kernel's grid dims become program ids, per the config's pid knobs."""

    blocks: list[Block]  # first varies fastest
    pid_type: str
    group: int  # l2 grouping of the first two dims (1 = none)
    num_sms: int
    reverse: bool = False  # launch the last tile first (programs of uneven work: longest first)

    def counts(self) -> list[int]:
        return [-(-b.extent // (b.fixed_size or 1)) for b in self.blocks]

    def total(self) -> int:
        n = 1
        for c in self.counts():
            n *= c
        return n

    def launch_grid(self) -> tuple[int, ...]:
        if self.pid_type == "xyz":
            return tuple(self.counts())
        if self.pid_type.startswith("persistent"):
            return (min(self.num_sms, self.total()),)
        return (self.total(),)

    def validate(self) -> None:
        if self.pid_type == "xyz":
            if len(self.blocks) > 3:
                raise InvalidConfig("pid_type='xyz' supports at most 3 grid dims")
            if any(c > MAX_GRID_YZ for c in self.counts()[1:]):
                raise InvalidConfig(
                    f"pid_type='xyz' needs at most {MAX_GRID_YZ} programs "
                    "along grid dims 2 and 3: use 'flat' or bigger blocks"
                )
        if self.group > 1 and (len(self.blocks) < 2 or self.pid_type == "xyz"):
            raise InvalidConfig(
                "l2_groupings needs a grid of at least 2 tiled dims and a pid_type other than 'xyz'"
            )


def plan_grid(blocks: list[Block], choices: dict[str, Any], index: int, num_sms: int) -> GridPlan:
    """The GridPlan a config chooses for top-level loop `index`."""
    groups = choices.get("l2_groupings") or []
    group = groups[index] if index < len(groups) and groups[index] else 1
    programs = num_sms * int(choices.get("num_sm_multiplier") or 1)  # of a persistent kernel
    reverses = choices.get("reversed_launches") or []
    reverse = bool(reverses[index]) if index < len(reverses) else False
    plan = GridPlan(blocks, choices.get("pid_type") or "flat", int(group), programs, reverse)
    plan.validate()
    return plan


def pid_lines(plan: GridPlan, pid: str) -> list[str]:
    """Lines that set `pid_<block>` for every grid block from the flat id `pid`."""
    blocks, counts = plan.blocks, plan.counts()
    needed = blocks if plan.group > 1 else blocks[:-1]  # the slowest dim needs no count
    lines = [f"num_blocks_{b.id} = {c}" for b, c in zip(needed, counts, strict=False)]
    if plan.reverse:
        lines.append(f"launch_pid = {plan.total() - 1} - {pid}")
        pid = "launch_pid"
    start = 0
    if plan.group > 1:
        lines += _grouped(blocks[0].id, blocks[1].id, plan.group, pid)
        start, pid = 2, f"{pid} // (num_blocks_{blocks[0].id} * num_blocks_{blocks[1].id})"
    for i, block in enumerate(blocks[start:], start):
        last = i == len(blocks) - 1
        lines.append(f"pid_{block.id} = {pid}" + ("" if last else f" % num_blocks_{block.id}"))
        pid = f"{pid} // num_blocks_{block.id}"
    return lines


def _grouped(m: int, n: int, group: int, pid: str) -> list[str]:
    """Triton-tutorial style grouping: `group` rows of dim m share their dim-n tiles in L2."""
    return [
        f"tile_pid = {pid} % (num_blocks_{m} * num_blocks_{n})",
        f"group_span = {group} * num_blocks_{n}",
        f"first_m = tile_pid // group_span * {group}",
        f"group_rows = tl.minimum(num_blocks_{m} - first_m, {group})",
        f"pid_{m} = first_m + tile_pid % group_span % group_rows",
        f"pid_{n} = tile_pid % group_span // group_rows",
    ]


def program_lines(plan: GridPlan) -> tuple[list[str], bool]:
    """The kernel's first lines; True when the body goes inside a persistent loop."""
    if plan.pid_type == "xyz":
        last = [f"{c - 1} - " if plan.reverse else "" for c in plan.counts()]
        ids = [f"pid_{b.id} = {last[i]}tl.program_id({i})" for i, b in enumerate(plan.blocks)]
        return ids, False
    if plan.pid_type == "flat":
        return ["pid = tl.program_id(0)", *pid_lines(plan, "pid")], False
    total, programs = plan.total(), "tl.num_programs(0)"
    if plan.pid_type == "persistent_interleaved":
        head = f"for virtual_pid in tl.range(tl.program_id(0), {total}, {programs}):"
    else:
        per = f"tl.cdiv({total}, {programs})"
        head = (
            f"for virtual_pid in tl.range(tl.program_id(0) * {per}, "
            f"tl.minimum((tl.program_id(0) + 1) * {per}, {total})):"
        )
    return [head], True
