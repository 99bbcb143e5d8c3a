"""`torch.sort`, `argsort`, `msort`, `topk`, `kthvalue`, `median` and `nanmedian` on a
tile, along any of its dims (the dim is moved last, and the results' back).

sort ranks every element by comparing all pairs along the dim (stable, NaN largest, as
PyTorch): O(n^2) work, so rows are limited to MAX_SORT elements. topk selects the k best
one at a time (k rounds of reductions): O(k n), any row length, chunked rows included.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from tilecraft.exc import DtypeError, ShapeMismatch, UnsupportedOperation
from tilecraft.frontend import jagged
from tilecraft.frontend.builder import Builder, Operand
from tilecraft.frontend.gathers import pick
from tilecraft.frontend.ops import OPS, ValuesIndices, _axis, op, reduce, view
from tilecraft.frontend.views import movedim, whole_extent
from tilecraft.ir.nodes import Value
from tilecraft.ir.types import Dim

MAX_SORT = 256  # a sort compares all pairs: a 256-long row is a 256 x 256 comparison
MAX_TOPK = 32  # topk takes k rounds of reductions


def _strictly_before(b: Builder, xj: Value, xi: Value, descending: bool) -> Value:
    """Whether element j sorts strictly before element i (NaN is the largest value)."""
    nan_j, nan_i = OPS["isnan"](b, xj), OPS["isnan"](b, xi)
    if descending:
        return OPS["or"](b, OPS["gt"](b, xj, xi), OPS["and"](b, nan_j, OPS["not"](b, nan_i)))  # type: ignore[no-any-return]
    return OPS["or"](b, OPS["lt"](b, xj, xi), OPS["and"](b, nan_i, OPS["not"](b, nan_j)))  # type: ignore[no-any-return]


def _same(b: Builder, xj: Value, xi: Value) -> Value:
    both_nan = OPS["and"](b, OPS["isnan"](b, xj), OPS["isnan"](b, xi))
    return OPS["or"](b, OPS["eq"](b, xj, xi), both_nan)  # type: ignore[no-any-return]


def _positions(b: Builder, block: int) -> Value:
    index = b.op("tile_index", (block,), torch.int32, (block,), hint="position")
    if b.blocks[block].kind == "reduction":
        return index
    begin = b.op("tile_begin", (block,), torch.int32, (), hint="begin")
    return b.elementwise("sub", index, begin)


def _ranks(b: Builder, x: Value, descending: bool) -> tuple[Value, Value]:
    """(each element's place in a stable sort along the last dim; the positions there)."""
    if x.type.dtype == torch.bool:
        x = b.cast(x, torch.int8)  # type: ignore[assignment]
    lead = (":",) * (x.type.rank - 1)
    block = x.type.dims[-1]
    assert block is not None
    pos = _positions(b, block)
    xi, xj = view(b, x, (*lead, ":", "None")), view(b, x, (*lead, "None", ":"))
    earlier = OPS["lt"](b, view(b, pos, ("None", ":")), view(b, pos, (":", "None")))
    tie = OPS["and"](b, _same(b, xj, xi), earlier)
    before = OPS["or"](b, _strictly_before(b, xj, xi, descending), tie)
    return reduce(b, "sum", b.cast(before, torch.int32), -1, False), pos  # type: ignore[arg-type]


def _sorted(b: Builder, x: Value, out_block: int, descending: bool) -> ValuesIndices:
    """Element i goes to position rank(i) (a stable order); output position r takes the
    element of rank r. O(n^2) work along the dim: meant for rows of modest length."""
    rank, pos = _ranks(b, x, descending)
    lead = (":",) * (x.type.rank - 1)
    chosen = OPS["eq"](
        b, view(b, rank, (*lead, "None", ":")), view(b, _positions(b, out_block), (":", "None"))
    )
    values = pick(b, chosen, view(b, x, (*lead, "None", ":")), -1)
    where = b.cast(view(b, pos, ("None", ":")), torch.int64)
    indices = reduce(b, "sum", OPS["where"](b, chosen, where, 0), -1, False)
    return ValuesIndices(values, indices)


def _along(
    b: Builder, x: Value, dim: int, what: str, fn: Callable[[Value, int], ValuesIndices]
) -> ValuesIndices:
    """`fn(x', block)` along the last dim of x' (x with `dim` moved last), its results
    moved back: sorts along any dim."""
    if not isinstance(x, Value) or x.type.rank == 0:
        raise UnsupportedOperation(f"{what} needs a tile", b.loc)
    axis = _axis(b, x, dim)
    last = x.type.rank - 1
    moved = x if axis == last else movedim(b, x, axis, last)
    jagged.refuse(b, moved, last, what, "sort each lane's elements with a tc.tile loop")
    values, indices = fn(moved, moved.type.dims[-1])  # type: ignore[arg-type]
    if axis == last or values.type.rank != x.type.rank:
        return ValuesIndices(values, indices)
    return ValuesIndices(movedim(b, values, last, axis), movedim(b, indices, last, axis))


def _one(b: Builder, x: Value) -> ValuesIndices:
    """Sorting one element: itself, at index 0."""
    return ValuesIndices(x, b.op("full", (), torch.int64, x.type.dims, hint="zeros", value=0))


def _length(b: Builder, block: int) -> int:
    info = b.blocks[block]
    return info.extent if info.kind == "reduction" else (info.fixed_size or 0)


@op("sort")
def _sort(
    b: Builder, x: Value, dim: int = -1, descending: bool = False, stable: bool = False
) -> ValuesIndices:
    """Stable; NaN sorts as the largest value, as in PyTorch."""
    return _along(b, x, dim, "sort", lambda x, block: _sort_last(b, x, block, descending))


def _sort_last(b: Builder, x: Value, block: Dim, descending: bool) -> ValuesIndices:
    if block is None:
        return _one(b, x)
    if _length(b, block) > MAX_SORT:
        raise UnsupportedOperation(
            f"sort of rows longer than {MAX_SORT} (it compares all pairs): use topk for "
            "the first few, or sort in PyTorch",
            b.loc,
        )
    return _sorted(b, x, block, descending)


@op("argsort")
def _argsort(
    b: Builder, x: Value, dim: int = -1, descending: bool = False, stable: bool = False
) -> Value:
    """`torch.argsort`: the indices of a stable sort (of ties, PyTorch's unstable sort may
    give another order)."""
    return _sort(b, x, dim, descending).indices


@op("msort")
def _msort(b: Builder, x: Value) -> Value:
    """`torch.msort(x)`: `torch.sort(x, dim=0).values`."""
    return _sort(b, x, 0).values


@op("topk")
def _topk(
    b: Builder, x: Value, k: int, dim: int = -1, largest: bool = True, sorted: bool = True
) -> ValuesIndices:
    """The k largest (or smallest) along a dim, in order; NaN counts as largest."""
    if not isinstance(k, int) or isinstance(k, bool) or not 0 < k <= MAX_TOPK:
        raise UnsupportedOperation(f"topk needs k as an int from 1 to {MAX_TOPK}", b.loc)
    return _along(b, x, dim, "topk", lambda x, block: _topk_last(b, x, block, k, largest))


def _topk_last(b: Builder, x: Value, block: Dim, k: int, largest: bool) -> ValuesIndices:
    if block is None:
        if k != 1:
            raise ShapeMismatch(f"topk: k={k} is out of range for a dim of length 1", b.loc)
        return _one(b, x)
    if k > _length(b, block):
        raise ShapeMismatch(f"topk: k={k} is out of range for this dim", b.loc)
    if k == 1:  # a dim of 1, which broadcasts and stores as PyTorch's does
        return _first(b, x, block, largest)
    if b.new_dim is None:
        raise UnsupportedOperation("topk is not available here", b.loc)
    return _select(b, x, block, b.new_dim(k).id, k, largest)


@op("kthvalue")
def _kthvalue(b: Builder, x: Value, k: int, dim: int = -1, keepdim: bool = False) -> ValuesIndices:
    """The k-th smallest along a dim and its position (NaN is the largest value; of ties,
    the one a stable sort puts k-th, where PyTorch may give another's index)."""
    if isinstance(x, Value) and x.type.dtype == torch.bool:
        raise DtypeError("kthvalue of a bool tile (PyTorch refuses it too)", b.loc)
    return _along(b, x, dim, "kthvalue", lambda x, block: _kth_last(b, x, block, k, keepdim))


def _kth_last(b: Builder, x: Value, block: Dim, k: int, keepdim: bool) -> ValuesIndices:
    n = 1 if block is None else whole_extent(b, x, x.type.rank - 1, "kthvalue")
    if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= n or n > MAX_SORT:
        raise ShapeMismatch(
            f"kthvalue: k={k!r} needs to be an int from 1 to the dim's length ({n}; at most "
            f"{MAX_SORT})",
            b.loc,
        )
    if block is None:
        values, indices = _one(b, x)
    else:
        rank, pos = _ranks(b, x, descending=False)
        chosen = OPS["eq"](b, rank, k - 1)
        values = pick(b, chosen, x, -1)
        where = b.cast(pos, torch.int64)
        indices = reduce(b, "sum", OPS["where"](b, chosen, where, 0), -1, False)
    return _kept(b, ValuesIndices(values, indices), block, keepdim)


@op("median")
def _median(b: Builder, x: Value, dim: int | None = None, keepdim: bool = False) -> object:
    """The lower of the two middle values along a dim and its position (PyTorch's); NaN,
    at the first NaN's position, where the row holds one. Without `dim`, of all elements
    (the value alone)."""
    return _middle(b, x, dim, keepdim, "median")


@op("nanmedian")
def _nanmedian(b: Builder, x: Value, dim: int | None = None, keepdim: bool = False) -> object:
    """`median` of the elements that are not NaN (NaN where all are)."""
    return _middle(b, x, dim, keepdim, "nanmedian")


def _middle(b: Builder, x: Value, dim: int | None, keepdim: bool, what: str) -> object:
    if isinstance(x, Value) and x.type.dtype == torch.bool:
        raise DtypeError(f"{what} of a bool tile (PyTorch refuses it too)", b.loc)
    if dim is None:
        flat = OPS["flatten"](b, x) if isinstance(x, Value) and x.type.rank != 1 else x
        return _middle(b, flat, 0, False, what).values  # type: ignore[attr-defined]
    skip = what == "nanmedian"
    return _along(b, x, dim, what, lambda x, block: _middle_last(b, x, block, keepdim, skip))


def _middle_last(b: Builder, x: Value, block: Dim, keepdim: bool, skip: bool) -> ValuesIndices:
    if block is None:
        values, indices = _one(b, x)
    else:
        n = whole_extent(b, x, x.type.rank - 1, "median")
        if n == 0:  # PyTorch raises too
            raise ShapeMismatch("median of a dim of length 0 has no value", b.loc)
        if n > MAX_SORT:
            raise UnsupportedOperation(f"median of rows longer than {MAX_SORT} (a sort)", b.loc)
        rank, pos = _ranks(b, x, descending=False)
        nan = OPS["isnan"](b, x) if x.type.dtype.is_floating_point else None
        middle: Operand = (n - 1) // 2
        if skip and nan is not None:  # the middle of the numbers (NaN sorts after them)
            count = reduce(b, "sum", b.cast(OPS["not"](b, nan), torch.int32), -1, True)  # type: ignore[arg-type]
            half = OPS["floordiv"](b, OPS["sub"](b, count, 1), 2)
            middle = OPS["maximum"](b, half, 0)  # no numbers: the first NaN
        chosen = OPS["eq"](b, rank, middle)
        where = b.cast(pos, torch.int64)
        values = pick(b, chosen, x, -1)
        indices = reduce(b, "sum", OPS["where"](b, chosen, where, 0), -1, False)
        if not skip and nan is not None:
            seen = OPS["gt"](b, reduce(b, "sum", b.cast(nan, torch.int32), -1, False), 0)  # type: ignore[arg-type]
            first = reduce(b, "min", OPS["where"](b, nan, where, 2**62), -1, False)
            values = OPS["where"](b, seen, math.nan, values)
            indices = OPS["where"](b, seen, first, indices)
    return _kept(b, ValuesIndices(values, indices), block, keepdim)


def _kept(b: Builder, found: ValuesIndices, block: Dim, keepdim: bool) -> ValuesIndices:
    """A reduced dim's results with the dim kept or not (a dim of 1 is there already)."""
    if keepdim == (block is None):  # as it is
        return found
    fix = OPS["squeeze"] if block is None else OPS["unsqueeze"]
    return ValuesIndices(fix(b, found.values, -1), fix(b, found.indices, -1))


def _first(b: Builder, x: Value, block: int, largest: bool) -> ValuesIndices:
    """topk with k=1: the best element and its first position, kept as a dim of 1."""
    xs = b.cast(x, torch.int8) if x.type.dtype == torch.bool else x
    pos = b.cast(_positions(b, block), torch.int64)
    best, index = _best(b, xs, pos, None, largest)  # type: ignore[arg-type]
    return ValuesIndices(b.cast(best, x.type.dtype), index)  # type: ignore[arg-type]


def _select(
    b: Builder, x: Value, block: int, out_block: int, k: int, largest: bool
) -> ValuesIndices:
    """k rounds: the best element not yet taken (its first position on ties) goes to
    output position t."""
    dtype = x.type.dtype
    if dtype == torch.bool:
        x = b.cast(x, torch.int8)  # type: ignore[assignment]
    pos: Value = b.cast(_positions(b, block), torch.int64)  # type: ignore[assignment]
    out_dims = (*x.type.dims[:-1], out_block)
    slot = view(b, _positions(b, out_block), (*([("None")] * (x.type.rank - 1)), ":"))
    values: Value = b.op("full", (), x.type.dtype, out_dims, hint="top", value=0)
    indices: Value = b.op("full", (), torch.int64, out_dims, hint="top_index", value=0)
    taken: Value | None = None
    for t in range(k):
        best, index = _best(b, x, pos, taken, largest)
        hit = OPS["eq"](b, pos, index)
        taken = hit if taken is None else OPS["or"](b, taken, hit)
        here = OPS["eq"](b, slot, t)
        values = OPS["where"](b, here, best, values)
        indices = OPS["where"](b, here, index, indices)
    return ValuesIndices(b.cast(values, dtype), indices)  # type: ignore[arg-type]


def _best(
    b: Builder, x: Value, pos: Value, taken: Value | None, largest: bool
) -> tuple[Value, Value]:
    """The best remaining value along the last dim (kept as a dim of 1) and its first
    position. NaN is the largest value: first for largest=True, last otherwise."""
    is_float = x.type.dtype.is_floating_point
    worst = (-math.inf if largest else math.inf) if is_float else _int_bound(x, largest)
    nan = OPS["isnan"](b, x) if is_float else None
    skip = taken
    if nan is not None and not largest:
        skip = nan if skip is None else OPS["or"](b, skip, nan)
    cand = x if skip is None else OPS["where"](b, skip, worst, x)
    best = reduce(b, "max" if largest else "min", cand, -1, True)
    if nan is not None and not largest:  # only NaN left: the best is NaN
        left = nan if taken is None else OPS["and"](b, nan, OPS["not"](b, taken))
        real = (
            OPS["not"](b, left)
            if taken is None
            else OPS["and"](b, OPS["not"](b, left), OPS["not"](b, taken))
        )
        count = reduce(b, "sum", b.cast(real, torch.int32), -1, True)  # type: ignore[arg-type]
        best = OPS["where"](b, OPS["eq"](b, count, 0), math.nan, best)
    match = OPS["eq"](b, x, best)
    if nan is not None:
        match = OPS["or"](b, match, OPS["and"](b, nan, OPS["isnan"](b, best)))
    if taken is not None:
        match = OPS["and"](b, match, OPS["not"](b, taken))
    first = OPS["where"](b, match, pos, 2**62)
    return best, reduce(b, "min", first, -1, True)


def _int_bound(x: Value, largest: bool) -> int:
    info = torch.iinfo(x.type.dtype)
    return info.min if largest else info.max


# -- searchsorted and bucketize --------------------------------------------------------
MAX_BOUNDARIES = 1024  # boundaries compared with every value (a tile of values x this)


@op("searchsorted")
def _searchsorted(
    b: Builder, sorted_sequence: Value, values: Operand, *, out_int32: bool = False,
    right: bool = False, side: str | None = None, sorter: Any = None,
) -> Value:  # fmt: skip
    """Where each value would go in a sorted row of boundaries: the count of boundaries
    it follows, as PyTorch's binary search counts them (left: `not b >= v`, so NaN goes
    last; right: `not b > v`), each value compared with every boundary."""
    if sorter is not None or not isinstance(sorted_sequence, Value):
        raise UnsupportedOperation("searchsorted of a tile takes a row of boundaries", b.loc)
    if sorted_sequence.type.rank != 1:
        raise ShapeMismatch("searchsorted of tiles takes a 1-D row of boundaries", b.loc)
    count = whole_extent(b, sorted_sequence, 0, "searchsorted")
    if count > MAX_BOUNDARIES:
        raise UnsupportedOperation(
            f"searchsorted compares each value with all {count} boundaries; at most "
            f"{MAX_BOUNDARIES} on a tile",
            b.loc,
        )
    right = right or side == "right"
    if isinstance(values, Value):  # each value against the row: a new last dim
        values = view(b, values, (":",) * values.type.rank + ("None",))
    after = b.elementwise("gt" if right else "ge", sorted_sequence, values, dtype=torch.bool)
    follows = OPS["not"](b, after)
    total = reduce(b, "sum", b.cast(follows, torch.int32), -1, False)  # type: ignore[arg-type]
    return b.cast(total, torch.int32 if out_int32 else torch.int64)  # type: ignore[return-value]


@op("bucketize")
def _bucketize(
    b: Builder, values: Operand, boundaries: Value, *, out_int32: bool = False,
    right: bool = False,
) -> Value:  # fmt: skip
    """torch.bucketize: searchsorted with the arguments the other way round."""
    return _searchsorted(b, boundaries, values, out_int32=out_int32, right=right)
