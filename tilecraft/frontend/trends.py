"""How a loop's trip count changes from one program of a launch to the next: the default of
`reversed_launches` (launch the programs that loop longest first).

A scalar computed on the device has a trend over the launch: it never decreases as the
program's tile advances (+1: a tile's begin or end, `min(tile_m.end, n)`), never increases
(-1), is the same in every program (0: ints of the host), or is unknown (None: a value
loaded from memory, as a jagged row's length). The trends come from the ops that made the
scalar, like its facts (frontend/facts.py): `min`, `max`, `+` and `-`.
"""

from __future__ import annotations

from tilecraft.ir.nodes import Node, Op, Value

Trend = int | None


def span_trend(
    begin: Value | int, end: Value | int, bodies: list[list[Node]], launch: set[int]
) -> Trend:
    """The trend of a loop's trip count `end - begin` over the programs of a launch whose
    tiles are the blocks `launch`."""
    return _combine(trend(end, bodies, launch), _negate(trend(begin, bodies, launch)))


def trend(value: Value | int, bodies: list[list[Node]], launch: set[int]) -> Trend:
    """The trend of an int or a scalar made by the ops of `bodies` (see the module)."""
    if isinstance(value, bool) or not isinstance(value, (int, Value)):
        return None
    if isinstance(value, int):
        return 0
    op = next((n for body in bodies for n in body if isinstance(n, Op) and n.out is value), None)
    if op is None:
        return None
    if op.name in ("tile_begin", "tile_end"):
        return 1 if op.args[0] in launch else None
    if op.name not in ("minimum", "maximum", "add", "sub") or len(op.args) != 2:
        return None
    a, b = (trend(x, bodies, launch) for x in op.args)
    return _combine(a, _negate(b) if op.name == "sub" else b)


def _combine(a: Trend, b: Trend) -> Trend:
    """The trend of a sum (or min, max) of two scalars of these trends."""
    if a is None or b is None:
        return None
    if a == 0 or a == b:
        return b
    return a if b == 0 else None


def _negate(a: Trend) -> Trend:
    return None if a is None else -a
