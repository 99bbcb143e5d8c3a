"""Values chosen per config or per specialization: block sizes, tunables, specialize."""

from __future__ import annotations

from dataclasses import dataclass

from tilecraft.language.state import eager_context
from tilecraft.language.tiles import RegisteredSize


@dataclass(frozen=True)
class PowerOfTwo:
    """A tunable power of two in `[low, high]`."""

    low: int
    high: int
    default: int | None = None


@dataclass(frozen=True)
class Choice:
    """A tunable picked from a fixed list of values; the first is the default."""

    values: tuple[object, ...]

    def __init__(self, *values: object) -> None:
        object.__setattr__(self, "values", tuple(values))


@dataclass(frozen=True)
class IntRange:
    """A tunable integer in `[low, high]`."""

    low: int
    high: int
    default: int | None = None


Fragment = PowerOfTwo | Choice | IntRange


# Helion's names for the fragments (`helion.autotuner`), as thin subclasses
class PowerOfTwoFragment(PowerOfTwo):
    """Helion's `PowerOfTwoFragment(low, high, default_val)`: a tunable power of two.

    Example::

        block = hl.register_tunable("block", PowerOfTwoFragment(16, 256, 64))
    """

    def __init__(self, low: int, high: int, default_val: int | None = None) -> None:
        super().__init__(low, high, default_val)


class IntegerFragment(IntRange):
    """Helion's `IntegerFragment(low, high, default_val)`: a tunable integer."""

    def __init__(self, low: int, high: int, default_val: int | None = None) -> None:
        super().__init__(low, high, default_val)


class EnumFragment(Choice):
    """Helion's `EnumFragment(choices)`: a tunable picked from `choices` (the first is the
    default)."""

    def __init__(self, choices: tuple[object, ...] | list[object]) -> None:
        super().__init__(*choices)


class BooleanFragment(Choice):
    """Helion's `BooleanFragment()`: a tunable flag, False by default."""

    def __init__(self) -> None:
        super().__init__(False, True)


def fragment_default(fragment: Fragment) -> object:
    """The value a fragment takes when nothing was tuned."""
    if isinstance(fragment, Choice):
        return fragment.values[0]
    return fragment.default if fragment.default is not None else fragment.low


def register_block_size(low: int, high: int | None = None) -> int:
    """Declare a tuned block size (a power of two), for `tile(..., block_size=b)`.

    Example::

        block_k = tc.register_block_size(k)
        for tile_k in tc.tile(k, block_size=block_k): ...
    """
    ctx = eager_context("register_block_size")
    size = ctx.next_registered(high if high is not None else low, low if high else None)
    return RegisteredSize(size)


def register_tunable(name: str, fragment: Fragment) -> object:
    """Declare a named tunable value; the config picks it (`Config(name=value)`).

    Example::

        unroll = tc.register_tunable("unroll", tc.language.Choice(1, 2, 4))
    """
    ctx = eager_context("register_tunable")
    return ctx.tunables.get(name, fragment_default(fragment))


def specialize(value: int) -> int:
    """Compile a separate kernel for each value of this host integer (e.g. a size).

    Example::

        n = tc.specialize(x.size(1))
    """
    return value


@dataclass(frozen=True)
class constexpr:  # noqa: N801 (Helion's spelling: `hl.constexpr`)
    """Helion's mark of a kernel argument to compile a kernel per value of:
    `def f(x: torch.Tensor, n: tc.constexpr)`. As an annotation it changes nothing here:
    int, bool and str arguments are specialized on already, and a float argument is read
    at run time (the same code serves every value). A value wrapped at the call
    (`f(x, tc.constexpr(4))`) is refused: pass the value itself.

    Example::

        @tc.kernel
        def scale(x: torch.Tensor, factor: tc.constexpr) -> torch.Tensor: ...
    """

    value: object
