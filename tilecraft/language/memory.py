"""Explicit memory ops: `load`, `store` and the atomics `atomic_add`, `atomic_max`,
`atomic_min`, `atomic_and`, `atomic_or`, `atomic_xor`, `atomic_xchg`, `atomic_cas` (each
with an optional extra mask).

Each atomic returns, as Helion's and Triton's do, a tile (shaped as `tensor[index]`, of
its dtype) of the values each position held just before that lane's update: `old =
tc.atomic_add(counter, [0], 1)` takes a ticket. Lanes that update nothing (masked off by
`extra_mask` or an `if` on a tile, or out of range) read 0. Where several lanes meet at one
position the hardware picks their order; eager mode applies them one at a time in lane
order. A kernel that ignores the result pays nothing for it: the compiled code then
discards what Triton's atomic returns.

Indices computed on the device (`t.index + 1`, loaded ids) are bounded: positions out of
range read as `other` (0 unless given) and are not written, where PyTorch would raise
an IndexError (see `tilecraft.language.indexing`).
"""

from __future__ import annotations

import linecache
from collections.abc import Callable, Sequence

import torch

from tilecraft.exc import DtypeError, SourceLoc, UnsupportedOperation
from tilecraft.language.indexing import accumulate, eager_key, read, update, write
from tilecraft.language.state import eager_context, user_frame

__all__ = [
    "atomic_add",
    "atomic_and",
    "atomic_cas",
    "atomic_max",
    "atomic_min",
    "atomic_or",
    "atomic_xchg",
    "atomic_xor",
    "eager_key",
    "load",
    "store",
]


def load(
    tensor: torch.Tensor,
    index: Sequence[object],
    extra_mask: torch.Tensor | None = None,
    eviction_policy: str | None = None,
    other: float | torch.Tensor | None = None,
) -> torch.Tensor:
    """Load `tensor[index]`; elements where `extra_mask` is False read as `other` (0).

    `index` lists one subscript per dim: tiles, slices, ints or index tiles (gathers;
    out-of-range indices read as `other` too). `eviction_policy` ("evict_first" or
    "evict_last", or Helion's "first"/"last") is passed to Triton's `tl.load` as a cache
    hint where the load is a pointer or block-pointer load, and ignored elsewhere.

    Example::

        x_tile = tc.load(x, [tile_m, tile_n], extra_mask=keep, eviction_policy="evict_last")
        shifted = tc.load(x, [tile.index - 1], other=float("-inf"))
    """
    eager_context("load")
    return read(tensor, tuple(index), extra_mask, 0 if other is None else other)


def store(
    tensor: torch.Tensor,
    index: Sequence[object],
    value: torch.Tensor | float,
    extra_mask: torch.Tensor | None = None,
) -> None:
    """Store `value` to `tensor[index]`, skipping elements where `extra_mask` is False
    (and positions whose computed index is out of range).

    Example::

        tc.store(out, [tile_m], values, extra_mask=values > 0)
    """
    write(tensor, tuple(index), value, eager_context("store").branch_mask(extra_mask))


def atomic_add(
    tensor: torch.Tensor,
    index: Sequence[object],
    value: torch.Tensor | float,
    sem: str | None = None,
    extra_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """Atomically add `value` to `tensor[index]` (safe when programs overlap; repeated
    positions of a gather all add), skipping elements where `extra_mask` is False.

    `sem` is the memory ordering Triton's `tl.atomic_add` takes ("relaxed", "acquire",
    "release" or "acq_rel"; Triton's default, acq_rel, when not given). A relaxed add of a
    whole tile may go through a tensor descriptor (`indexing="tensor_descriptor"`): one
    TMA reduction per tile on Hopper instead of an atomic per element, where its result
    is not used.

    Returns the values before the update (0 in lanes that add nothing; see the module
    docstring).

    Example::

        tc.atomic_add(out, [tile_m], partial_sum, sem="relaxed")
        ticket = tc.atomic_add(counter, [0], 1)  # 0, 1, 2, ... one per program
    """
    _refuse("atomic_add", tensor, sem)
    mask = eager_context("atomic_add").branch_mask(extra_mask)
    return accumulate(tensor, tuple(index), value, mask)


def atomic_refusal(name: str, dtype: torch.dtype) -> str | None:
    """Why Triton's GPU compiler refuses atomic `name` on `dtype` (its interpreter runs them
    all), or None: 16-bit floats only add, no atomic takes 8-bit values, and only a
    compare-and-swap takes 16-bit integers."""
    half = dtype in (torch.float16, torch.bfloat16)
    small = dtype.itemsize < 2 or (dtype.itemsize == 2 and not half)
    if name == "atomic_cas" and dtype.itemsize >= 2:
        return None
    if small or (half and name != "atomic_add"):
        return (
            "Triton's GPU atomics update 32- and 64-bit values (atomic_add float16 and "
            "bfloat16 ones too); update a float32 or int32 copy"
        )
    return None


SEMANTICS = ("relaxed", "acquire", "release", "acq_rel")  # an atomic's `sem=`


def _refuse(name: str, tensor: torch.Tensor, sem: str | None) -> None:
    """Eager mode refuses what compiled code refuses (frontend/memory.py), at the user's line."""
    why = atomic_refusal(name, tensor.dtype)
    if why is None and (sem is None or sem in SEMANTICS):
        return
    frame = user_frame()
    line = frame.f_lineno
    where = SourceLoc(
        frame.f_code.co_filename, line, linecache.getline(frame.f_code.co_filename, line)
    )
    if why is not None:
        raise DtypeError(f"tc.{name} cannot update a tensor of {tensor.dtype}: {why}", where)
    raise UnsupportedOperation(f"tc.{name}(sem={sem!r}): use one of {SEMANTICS}", where)


def _atomic(
    name: str,
    combine: Callable[..., torch.Tensor],
    tensor: torch.Tensor,
    index: Sequence[object],
    operands: tuple[object, ...],
    sem: str | None,
    extra_mask: torch.Tensor | None,
) -> torch.Tensor:
    _refuse(name, tensor, sem)
    mask = eager_context(name).branch_mask(extra_mask)
    return update(tensor, tuple(index), combine, mask, *operands)


def atomic_max(
    tensor: torch.Tensor,
    index: Sequence[object],
    value: torch.Tensor | float,
    sem: str | None = None,
    extra_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """Atomically set `tensor[index]` to the larger of itself and `value`, skipping
    elements where `extra_mask` is False; `sem` as for `atomic_add`. Returns the values
    before the update (0 where skipped), as every atomic does.

    Example::

        tc.atomic_max(row_max, [tile_m], x[tile_m, tile_n].amax(1))
        was_max = tc.atomic_max(best, [0], score) < score
    """
    return _atomic("atomic_max", torch.maximum, tensor, index, (value,), sem, extra_mask)


def atomic_min(
    tensor: torch.Tensor,
    index: Sequence[object],
    value: torch.Tensor | float,
    sem: str | None = None,
    extra_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """Atomically set `tensor[index]` to the smaller of itself and `value`.

    Example::

        tc.atomic_min(first_hit, [bucket], tile.index, extra_mask=hit)
    """
    return _atomic("atomic_min", torch.minimum, tensor, index, (value,), sem, extra_mask)


def atomic_and(
    tensor: torch.Tensor,
    index: Sequence[object],
    value: torch.Tensor | int,
    sem: str | None = None,
    extra_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """Atomically set `tensor[index]` to its bitwise AND with `value` (integer tensors).

    Example::

        tc.atomic_and(flags, [word], ~bits)
    """
    return _atomic("atomic_and", torch.bitwise_and, tensor, index, (value,), sem, extra_mask)


def atomic_or(
    tensor: torch.Tensor,
    index: Sequence[object],
    value: torch.Tensor | int,
    sem: str | None = None,
    extra_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """Atomically set `tensor[index]` to its bitwise OR with `value` (integer tensors).

    Example::

        tc.atomic_or(seen, [ids // 32], 1 << (ids % 32))
    """
    return _atomic("atomic_or", torch.bitwise_or, tensor, index, (value,), sem, extra_mask)


def atomic_xor(
    tensor: torch.Tensor,
    index: Sequence[object],
    value: torch.Tensor | int,
    sem: str | None = None,
    extra_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """Atomically set `tensor[index]` to its bitwise XOR with `value` (integer tensors).

    Example::

        tc.atomic_xor(parity, [0], x[tile])
    """
    return _atomic("atomic_xor", torch.bitwise_xor, tensor, index, (value,), sem, extra_mask)


def atomic_xchg(
    tensor: torch.Tensor,
    index: Sequence[object],
    value: torch.Tensor | float,
    sem: str | None = None,
    extra_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """Atomically write `value` to `tensor[index]`; where programs write one position,
    one of their values stays. Returns the values it replaced (0 where skipped).

    Example::

        previous = tc.atomic_xchg(owner, [bucket], tile.id)
    """
    return _atomic("atomic_xchg", _replace, tensor, index, (value,), sem, extra_mask)


def atomic_cas(
    tensor: torch.Tensor,
    index: Sequence[object],
    expected: torch.Tensor | float,
    value: torch.Tensor | float,
    sem: str | None = None,
    extra_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """Atomically compare and swap: where `tensor[index]` equals `expected`, write
    `value`; elsewhere leave it. Returns the values found (0 where skipped): the swap
    took place where they equal `expected`.

    Example::

        claimed = tc.atomic_cas(slots, [key % n], -1, key) == -1  # claim an empty slot
    """
    return _atomic("atomic_cas", _swap_if, tensor, index, (expected, value), sem, extra_mask)


def _replace(old: torch.Tensor, new: torch.Tensor) -> torch.Tensor:
    return new


def _swap_if(old: torch.Tensor, expected: torch.Tensor, new: torch.Tensor) -> torch.Tensor:
    return torch.where(old == expected, new, old)


# each atomic and the name of its IR op (Triton's function of the same name)
ATOMICS = {
    atomic_add: "atomic_add",
    atomic_max: "atomic_max",
    atomic_min: "atomic_min",
    atomic_and: "atomic_and",
    atomic_or: "atomic_or",
    atomic_xor: "atomic_xor",
    atomic_xchg: "atomic_xchg",
    atomic_cas: "atomic_cas",
}
