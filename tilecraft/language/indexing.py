"""Eager semantics of subscripts in device code: tiles as slices, index tensors bounded.

Compiled kernels never touch memory outside a tensor: a position whose computed index
lies outside `0 <= i < size` reads as `other` (0 unless given) and is not written. Eager
mode does the same, where PyTorch would raise an IndexError or wrap a negative index,
so both modes agree on stencils such as `x[t.index - 1]`. Plain ints and 0-d tensors
keep PyTorch's meaning (a negative int counts from the end).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeGuard

import torch

from tilecraft.exc import IndexOutOfBounds
from tilecraft.language.state import _current, user_frame
from tilecraft.language.tiles import Tile

Key = tuple[Any, ...]


def _flatten(key: object) -> list[object]:
    items = key if isinstance(key, tuple) else (key,)
    out: list[object] = []
    for item in items:
        is_tiles = isinstance(item, tuple) and item and all(isinstance(t, Tile) for t in item)
        out.extend(item if is_tiles else [item])  # type: ignore[arg-type]
    return out


def eager_key(key: object) -> Key:
    """Turn a subscript with tiles into one PyTorch understands (tiles become slices)."""
    return tuple(slice(i.begin, i.end) if isinstance(i, Tile) else i for i in _flatten(key))


def tensor_key(tensor: torch.Tensor, key: object) -> Key:
    """`eager_key` for a subscript of `tensor`. A tile reaching past the end of its dim
    (Helion lets a kernel index so, masking the rest) becomes its index vector, so those
    positions are bounded as compiled kernels bound them: they read 0, are not written."""
    items = _flatten(key)
    over = [k for k, dim in _tile_dims(items, tensor.dim()) if _overhangs(items[k], tensor, dim)]
    if len(over) != 1 or any(is_vector(i) for i in items):
        return eager_key(tuple(items))  # (several would pair up as index vectors do)
    tile = items[over[0]]
    assert isinstance(tile, Tile)
    items[over[0]] = tile.index
    return eager_key(tuple(items))


def _tile_dims(items: list[object], rank: int) -> list[tuple[int, int]]:
    """(position, tensor dim) of each tile in a subscript."""
    consumed = sum(i is not None and i is not Ellipsis for i in items)
    found, dim = [], 0
    for k, item in enumerate(items):
        if isinstance(item, Tile):
            found.append((k, dim))
        dim += rank - consumed if item is Ellipsis else item is not None
    return found


def _overhangs(tile: object, tensor: torch.Tensor, dim: int) -> bool:
    assert isinstance(tile, Tile)
    return dim < tensor.dim() and (tile.begin < 0 or tile.end > tensor.shape[dim])


def integer_index(item: object) -> TypeGuard[torch.Tensor]:
    """An integer index tensor, a vector or a 0-d value the kernel computed: bounded."""
    return (
        isinstance(item, torch.Tensor)
        and not item.dtype.is_floating_point
        and item.dtype != torch.bool
    )


def is_vector(item: object) -> bool:
    """An integer index tensor (PyTorch's advanced indexing), to be bounded."""
    return integer_index(item) and item.dim() > 0


def _normalize(key: Key, rank: int) -> Key | None:
    """`key` with `...` spelled out, or None where it holds a boolean mask (which keeps
    PyTorch's own meaning)."""
    if any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in key):
        return None
    consumed = sum(i is not None and i is not Ellipsis for i in key)
    out: list[Any] = []
    for item in key:
        out += [slice(None)] * (rank - consumed) if item is Ellipsis else [item]
    return tuple(out)


def _dims(key: Key) -> list[int | None]:
    """The tensor dim each subscript of a normalized key consumes (None for `None`)."""
    dims: list[int | None] = []
    dim = 0
    for item in key:
        dims.append(None if item is None else dim)
        dim += item is not None
    return dims


def is_device_scalar(item: object) -> bool:
    """A 0-d integer tensor index: a value the kernel computed (`j = idx[b]`)."""
    return integer_index(item) and item.dim() == 0


def bounded(tensor: torch.Tensor, key: Key) -> tuple[Key, torch.Tensor | None]:
    """`key` with each out-of-range vector index replaced by 0, and where the positions
    read are in range (None when no index could be out of range). A device scalar counts
    from the end when negative, as in PyTorch, and is out of range outside
    `[-size, size)`: as compiled kernels mask it (codegen/access.py `scalar_expr`)."""
    normal = _normalize(key, tensor.dim())
    if normal is not None:
        normal = _ints_past_ends(normal, tensor)
    if normal is None or not any(is_vector(i) or is_device_scalar(i) for i in normal):
        return key, None
    dims = _dims(normal)
    safe = list(normal)
    valid: torch.Tensor | None = None
    for k, (item, dim) in enumerate(zip(normal, dims, strict=True)):
        if is_device_scalar(item):
            assert dim is not None and isinstance(item, torch.Tensor)
            size = tensor.shape[dim]
            inside = (item >= -size) & (item < size)
            safe[k] = torch.where(inside, torch.where(item < 0, item + size, item), 0)
            valid = inside if valid is None else valid & inside
        elif is_vector(item):
            assert dim is not None
            size = tensor.shape[dim]
            inside = (item >= 0) & (item < size)
            safe[k] = torch.where(inside, item, 0)
            slot = torch.where(inside, item, size)
            ok = _validity(normal, tensor.dim(), k, dim, slot, size)
            valid = ok if valid is None else valid & ok
    return tuple(safe), valid


def _ints_past_ends(key: Key, tensor: torch.Tensor) -> Key:
    """`key` with each int outside its dim's `[-size, size)` as a 0-d tensor, so it is
    bounded as a device scalar is: in eager mode `tile.begin + 1` is an int, where compiled
    code computes it on the device and masks it."""
    items = list(key)
    for k, (item, dim) in enumerate(zip(key, _dims(key), strict=True)):
        if type(item) is int and dim is not None:
            size = tensor.shape[dim]
            if not -size <= item < size:
                items[k] = torch.tensor(item, device=tensor.device)
    return tuple(items)


def _validity(key: Key, rank: int, k: int, dim: int, slot: torch.Tensor, size: int) -> torch.Tensor:
    """Whether index `k` (of dim `dim`) is in range, laid out as `tensor[key]` lays out
    its result: a tiny table, True at each position and False in an extra slot that each
    out-of-range index points to, indexed with a key of the same structure, so PyTorch
    places the mask's dims where it places the result's (size 1 along slices)."""
    shape = [1] * rank
    shape[dim] = size + 1
    table = torch.ones(size + 1, dtype=torch.bool, device=slot.device)
    table[size] = False
    probe: list[Any] = []
    for j, item in enumerate(key):
        if j == k:
            probe.append(slot)
        elif is_vector(item):
            probe.append(torch.zeros_like(item))
        elif isinstance(item, slice):
            probe.append(slice(None))
        else:
            probe.append(item if item is None else 0)
    return table.view(shape)[tuple(probe)]


def _source(tensor: torch.Tensor, key: Key) -> torch.Tensor:
    """What a bounded read indexes: the tensor, or where an index tensor indexes a dim of
    length 0 (so every position is out of range), zeros of a shape `key` can index."""
    normal = _normalize(key, tensor.dim()) or key
    empty = [d for d, i in zip(_dims(normal), normal, strict=True) if integer_index(i)]
    if not any(tensor.shape[d] == 0 for d in empty if d is not None):
        return tensor
    shape = [max(s, 1) if d in empty else s for d, s in enumerate(tensor.shape)]
    return tensor.new_zeros(()).expand(shape)


def check_bounds(
    valid: torch.Tensor | None, mask: torch.Tensor | None, tensor: torch.Tensor
) -> None:
    """In the bounds-check mode, raise where an index is out of range at a position the
    access would touch (`mask`); otherwise such positions are masked silently."""
    ctx = _current.get()
    if ctx is None or not ctx.check or valid is None:
        return
    bad = ~valid if mask is None else mask & ~valid
    if bool(bad.any()):
        raise _out_of_bounds(tensor)


def _out_of_bounds(tensor: torch.Tensor) -> IndexOutOfBounds:
    """The error compiled code's check raises, naming the user's line and tensor: the
    innermost caller outside tilecraft and PyTorch is the kernel's (eager) body."""
    from tilecraft.runtime.checks import out_of_bounds

    frame = user_frame()
    names = [n for n, v in frame.f_locals.items() if v is tensor]
    what = f"`{names[0]}[...]`" if names else "a subscript"
    return out_of_bounds(frame.f_code.co_filename, frame.f_lineno, what)


def read(
    tensor: torch.Tensor, key: object, mask: torch.Tensor | None = None, other: Any = 0
) -> torch.Tensor:
    """`tensor[key]`, positions out of range or where `mask` is False reading `other`."""
    safe, valid = bounded(tensor, tensor_key(tensor, key))
    check_bounds(valid, mask, tensor)
    if valid is not None:
        mask = valid if mask is None else mask & valid
    if mask is None:
        return tensor[safe]
    value = _source(tensor, safe)[safe]
    fill = torch.as_tensor(other, device=value.device).to(value.dtype)
    return torch.where(mask, value, fill)


def write(
    tensor: torch.Tensor,
    key: object,
    value: Any,
    mask: torch.Tensor | None = None,
    accumulate: bool = False,
) -> None:
    """`tensor[key] = value` (or `+=` with `accumulate`, summing repeated positions as
    atomics do), skipping positions out of range or where `mask` is False."""
    safe, valid = bounded(tensor, tensor_key(tensor, key))
    check_bounds(valid, mask, tensor)
    if valid is not None:
        mask = valid if mask is None else mask & valid
    if (mask is None and not accumulate) or tensor.dim() == 0:
        tensor[safe] = tensor[safe] + value if accumulate else value
        return
    targets = _targets(tensor, safe, mask, value)
    if targets is not None:
        where, (values,) = targets
        tensor.index_put_(where, values, accumulate=accumulate)


def update(
    tensor: torch.Tensor,
    key: object,
    combine: Callable[..., torch.Tensor],
    mask: torch.Tensor | None,
    *operands: Any,
) -> None:
    """`tensor[key] = combine(tensor[key], *operands)` one position at a time, as atomics
    apply (a position indexed twice is updated twice), skipping positions out of range or
    where `mask` is False."""
    safe, valid = bounded(tensor, tensor_key(tensor, key))
    check_bounds(valid, mask, tensor)
    if valid is not None:
        mask = valid if mask is None else mask & valid
    if tensor.dim() == 0:
        if mask is None or bool(mask.all()):
            new = combine(tensor[()], *(torch.as_tensor(v).to(tensor) for v in operands))
            tensor.copy_(new)
        return
    targets = _targets(tensor, safe, mask, *operands)
    if targets is None:
        return
    where, values = targets
    # index_put_, not `tensor[...] =`: eager mode's assignment applies the `if` masks again
    if _distinct(tensor, where):
        tensor.index_put_(where, combine(tensor[where], *values))
        return
    for k, position in enumerate(zip(*where, strict=True)):
        new = combine(tensor[position], *(v[k] for v in values))
        tensor.index_put_(position, new)


def _targets(
    tensor: torch.Tensor, key: Key, mask: torch.Tensor | None, *operands: Any
) -> tuple[tuple[torch.Tensor, ...], list[torch.Tensor]] | None:
    """The coordinates of the positions of `tensor[key]` that `mask` keeps, and each
    operand's values there (None when every position is out of range)."""
    if _source(tensor, key) is not tensor:
        return None
    coords = _coordinates(tensor, key)
    shape = coords[0].shape if coords else torch.Size()
    keep = torch.ones((), dtype=torch.bool) if mask is None else mask
    keep = keep.to(tensor.device).broadcast_to(shape)
    values = [
        torch.as_tensor(v, device=tensor.device).to(tensor.dtype).broadcast_to(shape)[keep]
        for v in operands
    ]
    return tuple(c[keep] for c in coords), values


def _distinct(tensor: torch.Tensor, where: tuple[torch.Tensor, ...]) -> bool:
    """Whether the coordinates name each position at most once."""
    if not where or where[0].numel() < 2:
        return True
    flat = torch.zeros_like(where[0])
    for coord, size in zip(where, tensor.shape, strict=True):
        flat = flat * size + coord
    return bool(flat.unique().numel() == flat.numel())


def _coordinates(tensor: torch.Tensor, key: Key) -> list[torch.Tensor]:
    """For each dim of `tensor`, the position along it of each element of `tensor[key]`."""
    out = []
    for dim, size in enumerate(tensor.shape):
        shape = [1] * tensor.dim()
        shape[dim] = size
        positions = torch.arange(size, device=tensor.device).view(shape)
        out.append(positions.expand(tensor.shape)[key])
    return out
