"""Device loops that host code reaches several times (inside a host `for`, `while`, `if`).

Each time host code reaches a device loop while the kernel is specialized, the loop's
host locals are captured: one "trip". The loop is compiled once, from the first trip, and
launched on every trip. An int that differs between trips (a layer index) is therefore a
launch argument rather than a constant; any other host value the device code reads must be
the same on every trip (a tensor's dtype, shape and strides, a flag), or the loop is refused.

Where that fails (an int sizes a tile, the launch grid or a `tc.static_range`: the passes
of a tree reduction over halving lengths; a view's shape changes: the levels of a pyramid),
the loop is compiled once for each version of what differs (`variants`), and the launcher
picks the kernel by it.
"""

from __future__ import annotations

from typing import Any

import torch

from tilecraft.exc import TilecraftError, UnsupportedSyntax
from tilecraft.frontend.blocks import BlockSizeInt

Trip = dict[str, Any]  # the host locals where host code reached the loop
MAX_VARIANTS = 32  # kernels one device loop may be compiled into, one per value of its ints


def varying_ints(trips: list[Trip]) -> frozenset[str]:
    """The host ints that differ between trips: device code reads them as launch arguments."""
    return frozenset(
        name
        for name, value in trips[0].items()
        if _plain_int(value)
        and all(_plain_int(t.get(name)) for t in trips)
        and any(t[name] != value for t in trips)
    )


def variants(trips: list[Trip], names: set[str]) -> list[tuple[dict[str, Any], list[Trip]]]:
    """The trips grouped by the host values among `names` that differ between them (an
    int's value, a tensor's dtype, shape and strides), in the order host code reached them;
    each group with those values."""
    first = trips[0]
    differ = sorted(
        n for n in names if n in first and any(not _same(first[n], t.get(n)) for t in trips)
    )
    groups: list[tuple[dict[str, Any], list[Trip]]] = []
    for trip in trips:
        key = {n: trip.get(n) for n in differ}
        group = next((g for k, g in groups if all(map(_same, k.values(), key.values()))), None)
        if group is None:
            groups.append((key, [trip]))
        else:
            group.append(trip)
    return groups


def condition(key: dict[str, Any]) -> str | None:
    """A Python test that the host values are those of `key`, as a launcher picks a
    loop's kernel by them; None where one cannot be written down."""
    tests = []
    for name, value in key.items():
        if isinstance(value, torch.Tensor):
            now = f"({name}.dtype, tuple({name}.shape), {name}.stride())"
            tests.append(f"{now} == {_layout(value)!r}")
        elif value is None or type(value) in (bool, int, str):
            tests.append(f"{name} == {value!r}")
        else:
            return None
    return " and ".join(tests)


def first_env(trips: list[Trip]) -> Trip:
    """The host locals the loop is compiled with: the first trip's, each tensor taken from
    a trip where it does not start 16-byte aligned if there is one (a layer's weights
    `w[layer]`: the kernel then reads it without assuming alignment)."""
    env = dict(trips[0])
    for name, value in env.items():
        if isinstance(value, torch.Tensor):
            tensors = [t[name] for t in trips if isinstance(t.get(name), torch.Tensor)]
            env[name] = min(tensors, key=_aligned)
    return env


def check_same(trips: list[Trip], read: set[str], loc: Any) -> None:
    """Refuse a host value the device code read that is not the same on every trip."""
    first = trips[0]
    for name in sorted(read):
        if name not in first or _plain_int(first[name]):
            continue
        for trip in trips[1:]:
            if name not in trip or not _same(first[name], trip[name]):
                raise UnsupportedSyntax(
                    f"`{name}` is not the same each time host code reaches this device loop "
                    f"({_describe(first[name])}, then {_describe(trip.get(name))}): the loop "
                    "is compiled once, so what it reads from host code must keep its dtype, "
                    "shape, strides and value (ints and floats may change: they are passed "
                    "to each launch)",
                    loc,
                )


def explain(error: TilecraftError, ints: frozenset[str], versions: int = 0) -> TilecraftError:
    """`error` with a note on the ints that device code took as launch arguments, and on
    the kernels compiling the loop for each version of them would take (`versions`), where
    that is more than MAX_VARIANTS."""
    if not ints:
        return error
    names = ", ".join(f"`{n}`" for n in sorted(ints))
    verb, them, what = ("change", "them as launch arguments", "constants")
    if len(ints) == 1:
        verb, them, what = ("changes", "it as a launch argument", "a constant")
    note = (
        f" ({names} {verb} each time host code reaches this device loop, so device code "
        f"reads {them}, not as {what}"
    )
    if versions > MAX_VARIANTS:
        note += f"; a kernel for each of their {versions} versions would be over {MAX_VARIANTS}"
    return type(error)(error.message + note + ")", error.loc)


def _plain_int(value: Any) -> bool:
    return type(value) is int


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        tensors = isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)
        return tensors and _layout(a) == _layout(b)
    if isinstance(a, float) and isinstance(b, float):
        return True  # passed to each launch
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return type(a) is type(b) and len(a) == len(b) and all(map(_same, a, b))
    if isinstance(a, BlockSizeInt) or isinstance(b, BlockSizeInt):
        return a is b
    if a is b:
        return True
    try:
        return type(a) is type(b) and bool(a == b)
    except Exception:
        return False


def _layout(t: torch.Tensor) -> tuple:
    return t.dtype, tuple(t.shape), tuple(t.stride())


def _aligned(t: torch.Tensor) -> bool:
    return t.storage_offset() * t.element_size() % 16 == 0


def _describe(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        dtype = str(value.dtype).removeprefix("torch.")
        return f"{dtype}{list(value.shape)} strides {list(value.stride())}"
    return repr(value)
