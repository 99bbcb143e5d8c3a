"""What the compiler can prove about an integer scalar computed on the device: a number it
is always a multiple of, and static bounds.

A tile loop with device-computed bounds (`tc.tile(0, min(tile_m.begin, n))`, a causal
attention's keys before its query tile) normally masks every tile, since its last one may
stop short. When both bounds are multiples of the loop's block size, no tile stops short
and the loop needs no mask at all (and its reads may use tensor descriptors); when they
stay inside a dim, its reads need no bounds check. The facts come from the ops that made
the scalar: tile offsets (multiples of their block size), ints of the host, and `min`,
`max`, `+`, `-`, `*`, `//` over them. Anything else proves nothing.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from tilecraft.ir.nodes import Node, Op, Value
from tilecraft.ir.types import Block


@dataclass(frozen=True)
class Facts:
    """`multiple`: the value is always a multiple of it (0: always 0); `low`, `high`: it
    lies in `[low, high]` (None: unbounded)."""

    multiple: int = 1
    low: int | None = None
    high: int | None = None

    def below(self, other: Facts) -> bool:
        """Whether this value is never more than `other`."""
        return self.high is not None and other.low is not None and self.high <= other.low


UNKNOWN = Facts()
_proving = [True]


@contextlib.contextmanager
def unproven() -> Iterator[None]:
    """Kernels analysed inside prove nothing (every loop with device-computed bounds is
    masked, as before these proofs): for measuring what they gain."""
    _proving.append(False)
    try:
        yield
    finally:
        _proving.pop()


def facts_of(value: Value | int, bodies: list[list[Node]], blocks: dict[int, Block]) -> Facts:
    """The facts of an int or a scalar made by the ops of `bodies`."""
    if not _proving[-1] or isinstance(value, bool) or not isinstance(value, (int, Value)):
        return UNKNOWN
    if isinstance(value, int):
        return Facts(abs(value), value, value)
    if value.type.dims or value.type.dtype.is_floating_point:
        return UNKNOWN
    op = next((n for body in bodies for n in body if isinstance(n, Op) and n.out is value), None)
    if op is None:
        return UNKNOWN
    if op.name in ("tile_begin", "tile_end"):
        return _tile_facts(blocks[op.args[0]], op.name == "tile_end")
    rule = RULES.get(op.name)
    if rule is None or len(op.args) != 2:
        return UNKNOWN
    a, b = (facts_of(x, bodies, blocks) for x in op.args)
    return rule(a, b)


def _tile_facts(block: Block, end: bool) -> Facts:
    """The facts of a tile's begin (or end) in its loop: an offset `begin + k * size`."""
    size = block.fixed_size or 1
    if block.dynamic:
        bounds = block.bounds or (None, None)
        return Facts(size if block.aligned else 1, *bounds)
    count = max(-(-block.extent // size), 1)
    if end:  # begin + size, begin + 2 * size, ..., and the loop's end
        first = min(block.begin + size, block.end)
        return Facts(math.gcd(block.begin, size, block.end), first, block.end)
    return Facts(math.gcd(block.begin, size), block.begin, block.begin + (count - 1) * size)


def _minimum(a: Facts, b: Facts) -> Facts:
    if a.below(b):
        return a
    if b.below(a):
        return b
    low = None if a.low is None or b.low is None else min(a.low, b.low)
    return Facts(math.gcd(a.multiple, b.multiple), low, _known(min, a.high, b.high))


def _maximum(a: Facts, b: Facts) -> Facts:
    if a.below(b):
        return b
    if b.below(a):
        return a
    high = None if a.high is None or b.high is None else max(a.high, b.high)
    return Facts(math.gcd(a.multiple, b.multiple), _known(max, a.low, b.low), high)


def _known(pick: Callable[[list[int]], int], x: int | None, y: int | None) -> int | None:
    """A bound one side is enough for (a minimum's upper bound, a maximum's lower one)."""
    known = [v for v in (x, y) if v is not None]
    return pick(known) if known else None


def _sum(a: Facts, b: Facts, sign: int) -> Facts:
    low_b, high_b = (b.low, b.high) if sign > 0 else (_neg(b.high), _neg(b.low))
    low = None if a.low is None or low_b is None else a.low + low_b
    high = None if a.high is None or high_b is None else a.high + high_b
    return Facts(math.gcd(a.multiple, b.multiple), low, high)


def _neg(x: int | None) -> int | None:
    return None if x is None else -x


def _product(a: Facts, b: Facts) -> Facts:
    if None in (a.low, a.high, b.low, b.high):
        return Facts(a.multiple * b.multiple)
    corners = [x * y for x in (a.low, a.high) for y in (b.low, b.high)]  # type: ignore[operator]
    return Facts(a.multiple * b.multiple, min(corners), max(corners))


def _quotient(a: Facts, b: Facts) -> Facts:
    """`a // c` for a positive constant `c` (floor division keeps the bounds' order)."""
    if b.low is None or b.low != b.high or b.low <= 0:
        return UNKNOWN
    c = b.low
    multiple = a.multiple // c if a.multiple % c == 0 else 1
    low = None if a.low is None else a.low // c
    high = None if a.high is None else a.high // c
    return Facts(multiple, low, high)


RULES = {
    "minimum": _minimum,
    "maximum": _maximum,
    "clamp_min": _maximum,
    "clamp_max": _minimum,
    "add": lambda a, b: _sum(a, b, 1),
    "sub": lambda a, b: _sum(a, b, -1),
    "mul": _product,
    "floordiv": _quotient,
}
