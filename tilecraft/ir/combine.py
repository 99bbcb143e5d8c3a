"""A user's combine function (`hl.associative_scan`, `hl.reduce`), traced on scalars."""

from __future__ import annotations

from dataclasses import dataclass

from tilecraft.ir.nodes import Op, Value


@dataclass(frozen=True, eq=False)
class Combine:
    """`results = fn(*params)` as straight-line IR on 0-d values: the first half of
    `params` is the left (earlier) element, the second half the right one."""

    params: tuple[Value, ...]
    body: tuple[Op, ...]
    results: tuple[Value, ...]

    def __repr__(self) -> str:
        names = ", ".join(p.name for p in self.params)
        return f"combine({names}: {len(self.body)} ops)"
