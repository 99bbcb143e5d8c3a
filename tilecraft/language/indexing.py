"""Eager semantics of subscripts in device code: tiles as slices, index tensors bounded.

Compiled kernels never touch memory outside a tensor: a position whose computed index
lies outside `0 <= i < size` reads as `other` (0 unless given) and is not written. Eager
mode does the same, where PyTorch would raise an IndexError or wrap a negative index,
so both modes agree on stencils such as `x[t.index - 1]`. Plain ints and 0-d tensors
keep PyTorch's meaning (a negative int counts from the end).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple, TypeGuard

import torch

from tilecraft.exc import IndexOutOfBounds
from tilecraft.language.overhang import Padded, padded
from tilecraft.language.state import _current, plain_indexing, user_frame
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


def subscript(tensor: torch.Tensor, key: object) -> Padded:
    """What `tensor[key]` indexes: `tensor_key`'s subscript of `tensor`, or where tiles
    reaching past its dims meet index tensors or each other, a padded copy's
    (`overhang.padded`)."""
    items = _flatten(key)
    tiles = _tile_dims(items, tensor.dim())
    over = [(k, dim) for k, dim in tiles if _overhangs(items[k], tensor, dim)]
    if len(over) > 1 or (over and any(is_vector(i) for i in items)):
        return padded(tensor, items, over)
    return Padded(tensor, tensor_key(tensor, key), None, lambda: None)


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


@plain_indexing
def read(
    tensor: torch.Tensor, key: object, mask: torch.Tensor | None = None, other: Any = 0
) -> torch.Tensor:
    """`tensor[key]`, positions out of range or where `mask` is False reading `other`."""
    pad, safe, valid = _bounded_subscript(tensor, key)
    check_bounds(valid, mask, tensor)
    tensor = pad.tensor
    if valid is not None:
        mask = valid if mask is None else mask & valid
    if mask is None:
        return tensor[safe]
    value = _source(tensor, safe)[safe]
    fill = torch.as_tensor(other, device=value.device).to(value.dtype)
    return torch.where(mask, value, fill)


@plain_indexing
def write(tensor: torch.Tensor, key: object, value: Any, mask: torch.Tensor | None = None) -> None:
    """`tensor[key] = value`, skipping positions out of range or where `mask` is False."""
    pad, safe, mask = _checked(tensor, key, mask)
    tensor = pad.tensor
    if mask is None or tensor.dim() == 0:
        tensor[safe] = value
    else:
        targets = _targets(tensor, safe, mask, value)
        if targets is not None:
            tensor.index_put_(targets.where, targets.values[0])
    pad.write_back()


def _bounded_subscript(
    tensor: torch.Tensor, key: object
) -> tuple[Padded, Key, torch.Tensor | None]:
    """What `tensor[key]` indexes (`subscript`), `key` made safe to index it with, and
    where the positions it reaches are inside `tensor` and in range (None: everywhere)."""
    pad = subscript(tensor, key)
    safe, valid = bounded(pad.tensor, pad.key)
    if pad.inside is not None:
        inside = _source(pad.inside, safe)[safe]
        valid = inside if valid is None else valid & inside
    return pad, safe, valid


def _checked(
    tensor: torch.Tensor, key: object, mask: torch.Tensor | None
) -> tuple[Padded, Key, torch.Tensor | None]:
    """What `tensor[key]` writes to, `key` made safe to index it with, and the positions
    to touch: those `mask` keeps whose indices are in range (raising in the bounds-check
    mode where one is not)."""
    pad, safe, valid = _bounded_subscript(tensor, key)
    check_bounds(valid, mask, tensor)
    if valid is not None:
        mask = valid if mask is None else mask & valid
    return pad, safe, mask


@plain_indexing
def accumulate(
    tensor: torch.Tensor, key: object, value: Any, mask: torch.Tensor | None = None
) -> torch.Tensor:
    """`tensor[key] += value`, summing repeated positions as atomics do and skipping
    positions out of range or where `mask` is False; returns what each position held
    before its lane's add, the lanes adding one at a time in lane order (0 where skipped)."""
    pad, safe, mask = _checked(tensor, key, mask)
    old = _accumulate(pad.tensor, safe, mask, value)
    pad.write_back()
    return old


def _accumulate(
    tensor: torch.Tensor, safe: Key, mask: torch.Tensor | None, value: Any
) -> torch.Tensor:
    if tensor.dim() == 0:
        return _scalar_update(tensor, safe, mask, torch.add, value)
    targets = _targets(tensor, safe, mask, value)
    if targets is None:
        return _nothing(tensor, safe)
    where, (values,) = targets.where, targets.values
    if tensor.dtype.is_floating_point or tensor.dtype.is_complex:
        return targets.spread(_in_lane_order(tensor, where, torch.add, values))
    # integers add exactly in any order: one scatter, and the earlier lanes' sums by a scan
    # (int64 wraps as the dtype does, modulo its width)
    old = tensor[where]
    if not _distinct(tensor, where):
        order, first = _groups(_flat_positions(tensor, where))
        wide = values.index_select(0, order).to(torch.int64)
        before = wide.cumsum(0) - wide
        earlier = _unsorted(order, before - before.index_select(0, first))
        old = (old.to(torch.int64) + earlier).to(tensor.dtype)
    tensor.index_put_(where, values, accumulate=True)
    return targets.spread(old)


@plain_indexing
def update(
    tensor: torch.Tensor,
    key: object,
    combine: Callable[..., torch.Tensor],
    mask: torch.Tensor | None,
    *operands: Any,
) -> torch.Tensor:
    """`tensor[key] = combine(tensor[key], *operands)` one position at a time, as atomics
    apply (a position indexed twice is updated twice, in lane order), skipping positions
    out of range or where `mask` is False; returns what each position held before its
    lane's update (0 where skipped)."""
    pad, safe, mask = _checked(tensor, key, mask)
    tensor = pad.tensor
    if tensor.dim() == 0:
        return _scalar_update(tensor, safe, mask, combine, *operands)
    targets = _targets(tensor, safe, mask, *operands)
    if targets is None:
        return _nothing(tensor, safe)
    old = targets.spread(_in_lane_order(tensor, targets.where, combine, *targets.values))
    pad.write_back()
    return old


def _in_lane_order(
    tensor: torch.Tensor,
    where: tuple[torch.Tensor, ...],
    combine: Callable[..., torch.Tensor],
    *values: torch.Tensor,
) -> torch.Tensor:
    """Apply `combine` at each lane's position in lane order, and return what each lane
    found there: in rounds, the r-th lane at each position in round r (as many rounds as
    the most lanes that meet at one position)."""
    ranks = torch.zeros_like(where[0]) if _distinct(tensor, where) else _ranks(tensor, where)
    old = tensor.new_empty(ranks.shape)
    for r in range(int(ranks.max()) + 1 if ranks.numel() else 0):
        lanes = ranks == r
        at = tuple(c[lanes] for c in where)
        found = tensor[at]
        # index_put_, not `tensor[...] =`: eager mode's assignment applies the `if` masks again
        tensor.index_put_(at, combine(found, *(v[lanes] for v in values)))
        old[lanes] = found
    return old


def _ranks(tensor: torch.Tensor, where: tuple[torch.Tensor, ...]) -> torch.Tensor:
    """Each lane's count of the earlier lanes at its position."""
    order, first = _groups(_flat_positions(tensor, where))
    return _unsorted(order, torch.arange(len(order), device=order.device) - first)


# (no subscripts with index tensors here: eager mode bounds and masks those as the kernel's)
def _groups(positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The lanes sorted by position (lane order kept among equals), and for each place in
    that order the place where its position's lanes start."""
    order = torch.argsort(positions, stable=True)
    ranked = positions.index_select(0, order)
    starts = torch.ones_like(ranked, dtype=torch.bool)
    starts[1:] = ranked[1:] != ranked[:-1]
    places = torch.arange(len(ranked), device=ranked.device)
    return order, torch.where(starts, places, 0).cummax(0).values


def _unsorted(order: torch.Tensor, sorted_values: torch.Tensor) -> torch.Tensor:
    """Values given in the order `order` lists the lanes in, put back in lane order."""
    return torch.empty_like(sorted_values).index_put_((order,), sorted_values)


def _scalar_update(
    tensor: torch.Tensor,
    key: Key,
    mask: torch.Tensor | None,
    combine: Callable[..., torch.Tensor],
    *operands: Any,
) -> torch.Tensor:
    """An atomic on a 0-d tensor (applied where `mask` holds everywhere) and its old value."""
    old = tensor[key].clone()
    if mask is None or bool(mask.all()):
        new = combine(tensor[()], *(torch.as_tensor(v).to(tensor) for v in operands))
        tensor.copy_(new)
    return old if mask is None else torch.where(mask, old, torch.zeros_like(old))


def _nothing(tensor: torch.Tensor, key: Key) -> torch.Tensor:
    """The old values of an atomic that touches no position: zeros of its shape."""
    return torch.zeros_like(_source(tensor, key)[key])


class Targets(NamedTuple):
    """The positions an atomic or a masked store touches: `where`, their coordinates (one
    tensor per dim); `values`, each operand's value there; `keep`, which lanes of the
    access (shaped as `tensor[key]`) they are."""

    where: tuple[torch.Tensor, ...]
    values: list[torch.Tensor]
    keep: torch.Tensor

    def spread(self, old: torch.Tensor) -> torch.Tensor:
        """Values of the kept lanes laid out as the access, 0 in the other lanes."""
        out = old.new_zeros(self.keep.shape)
        out[self.keep] = old
        return out


def _targets(
    tensor: torch.Tensor, key: Key, mask: torch.Tensor | None, *operands: Any
) -> Targets | None:
    """The positions of `tensor[key]` that `mask` keeps and each operand's values there
    (None when every position is out of range)."""
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
    return Targets(tuple(c[keep] for c in coords), values, keep)


def _distinct(tensor: torch.Tensor, where: tuple[torch.Tensor, ...]) -> bool:
    """Whether the coordinates name each position at most once."""
    if not where or where[0].numel() < 2:
        return True
    flat = _flat_positions(tensor, where)
    return bool(flat.unique().numel() == flat.numel())


def _flat_positions(tensor: torch.Tensor, where: tuple[torch.Tensor, ...]) -> torch.Tensor:
    """Each position's offset in `tensor` laid out contiguously."""
    flat = torch.zeros_like(where[0])
    for coord, size in zip(where, tensor.shape, strict=True):
        flat = flat * size + coord
    return flat


def _coordinates(tensor: torch.Tensor, key: Key) -> list[torch.Tensor]:
    """For each dim of `tensor`, the position along it of each element of `tensor[key]`."""
    out = []
    for dim, size in enumerate(tensor.shape):
        shape = [1] * tensor.dim()
        shape[dim] = size
        positions = torch.arange(size, device=tensor.device).view(shape)
        out.append(positions.expand(tensor.shape)[key])
    return out
