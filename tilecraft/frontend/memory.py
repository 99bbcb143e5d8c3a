"""Lowering memory accesses, tile attributes, tile creation and matrix products."""

from __future__ import annotations

import inspect
from typing import Any

import torch

from tilecraft import language as lang
from tilecraft.exc import DtypeError, ShapeMismatch, UnsupportedOperation, UnsupportedSyntax
from tilecraft.frontend import creation, jagged, views
from tilecraft.frontend.blocks import BlockSizeInt, BlockTable
from tilecraft.frontend.builder import Builder
from tilecraft.frontend.refs import HostTensor, TileRef, TileSizeInt
from tilecraft.ir.nodes import Access, Index, Op, Param, Value, gather_dims
from tilecraft.ir.types import Block, Dim, broadcast_dims
from tilecraft.runtime.cpu import interpreter_set as interpreted


class MemoryLowering:
    """Builds loads, stores and tile-creation ops for the device compiler."""

    def __init__(self, b: Builder, table: BlockTable) -> None:
        self.b, self.table = b, table
        self.tile_values: dict[int, tuple[str, int]] = {}  # id(value) -> (attribute, block)
        # id(value) -> (tensor, subscript) of reads of whole dims and positions (`x[b, :]`)
        self.whole_reads: dict[int, tuple[HostTensor, list[Any]]] = {}

    # -- subscripts -----------------------------------------------------------------
    def access(self, param: Param, meta: torch.Tensor, items: list[Any]) -> Access:
        shape = list(meta.shape)
        items = _every_dim(items, len(shape), f"`{param.host_expr}`")
        vectors = sum(isinstance(i, Value) and bool(i.type.dims) for i in items)
        indices: list[Index] = []
        dim = 0
        for item in items:
            if item is None:
                indices.append(Index("newaxis"))
                continue
            # a lone `tile.index` is the tile itself; several vectors index jointly
            item = self._as_tile(item, shape[dim]) if vectors == 1 else item
            indices.append(self._index(param, dim, shape[dim], item))
            dim += 1
        self._check_gathers(param, indices)
        return Access(param, tuple(indices))

    def _index(self, param: Param, dim: int, size: int, item: Any) -> Index:
        """The subscript `item` of dim `dim` (of length `size`) of `param`."""
        if isinstance(item, TileRef):  # one reaching past the dim is masked there
            return Index("block", block=item.block, in_range=self._fits(item.block, size))
        if isinstance(item, slice):
            return self._slice(item, size)
        if isinstance(item, Value):
            if item.type.dtype == torch.bool:
                raise DtypeError(
                    "a tile of booleans cannot index a tensor on the device (the result's size "
                    "would depend on the data): use tc.load(..., extra_mask=mask) or torch.where"
                )
            if item.type.dtype.is_floating_point:
                raise DtypeError(f"tensors are indexed with integers, not {item.type.dtype}")
            if item.type.dims:
                return Index("gather", value=item)
            return Index("scalar", value=item, in_range=self._in_range(item, size))
        if isinstance(item, int) and not isinstance(item, bool):
            if not -size <= item < size:
                raise ShapeMismatch(
                    f"index {item} is out of bounds for dim {dim} of `{param.host_expr}`, "
                    f"which has size {size}"
                )
            return Index("scalar", value=item % size)
        raise UnsupportedSyntax(f"cannot index a tensor with {type(item).__name__}")

    def _as_tile(self, item: Any, size: int) -> Any:
        """`tile.index` as a subscript reads what the tile does: no gather, no bounds mask
        (when the tile's range lies inside the dim)."""
        attr = self.tile_values.get(id(item)) if isinstance(item, Value) else None
        if attr is None or attr[0] != "index":
            return item
        return TileRef(attr[1]) if self._fits(attr[1], size) else item

    def _slice(self, item: slice, size: int) -> Index:
        """A slice: a whole-dimension block of its length, starting at its first position."""
        if isinstance(item.start, Value) or isinstance(item.stop, Value):
            return self._device_slice(item)
        parts = (item.start, item.stop, item.step)
        if not all(p is None or (isinstance(p, int) and not isinstance(p, bool)) for p in parts):
            raise UnsupportedSyntax(_DEVICE_SLICE)
        if item.step is not None and item.step <= 0:
            raise UnsupportedSyntax("slice steps must be positive (as in PyTorch)")
        start, stop, step = item.indices(size)
        length = len(range(start, stop, step))
        if length == 1:
            return Index("unit", value=start)
        block = self.table.reduction(length).id
        offset = start if length else 0
        return Index("block", block=block, offset=offset, step=step, in_range=True)

    def _device_slice(self, item: slice) -> Index:
        """`x[s : s + n]` with `s` computed on the device and `n` an int known on the host
        (`t.begin * 2 : t.begin * 2 + block * 2`): a gather of `n` positions from `s`, masked
        to the tensor's bounds."""
        start, length = item.start, self._slice_length(item.start, item.stop)
        step = 1 if item.step is None else item.step
        if not isinstance(step, int) or isinstance(step, bool) or step <= 0:
            raise UnsupportedSyntax(
                "a slice with bounds computed on the device needs a positive int step"
            )
        # `s : s + tile.block_size`: the tile's own dim, as Helion's symbolic block size is
        keep = isinstance(length, TileSizeInt) and step == 1
        positions = self.arange(length if keep else len(range(0, length, step)))
        if step != 1:
            positions = self.b.elementwise("mul", positions, step)
        return Index("gather", value=self.b.elementwise("add", positions, start))

    def _slice_length(self, start: Any, stop: Any) -> int:
        """`n` of a slice `s : s + n` (or `s + n`'s operands in either order)."""
        producer = self._producer(stop) if isinstance(stop, Value) else None
        args = producer.args if producer is not None and producer.name == "add" else ()
        if any(self._same_scalar(start, a) for a in args):
            other = args[0] if self._same_scalar(start, args[1]) else args[1]
            if isinstance(other, int) and not isinstance(other, bool) and other >= 0:
                return other
        raise UnsupportedSyntax(_DEVICE_SLICE)

    def _same_scalar(self, a: Any, b: Any) -> bool:
        """The same value, or the same attribute of one tile (`t.begin` read twice)."""
        if a is b:
            return True
        attr = self.tile_values.get(id(a))
        return attr is not None and attr == self.tile_values.get(id(b)) and attr[0] != "index"

    def _producer(self, value: Value) -> Op | None:
        """The op computing `value` in the bodies built so far."""
        return next(
            (n for body in self.b.bodies for n in body if isinstance(n, Op) and n.out is value),
            None,
        )

    def _in_range(self, value: Value, size: int) -> bool:
        """Whether a scalar index is within `[0, size)` by construction (a grid index or a
        tile's begin over a range inside the dim), so it needs no bounds mask."""
        producer = self._producer(value)
        if producer is None or producer.name != "tile_begin":
            return False
        return _inside(self.table.blocks[producer.args[0]], size)

    def _check_gathers(self, param: Param, indices: list[Index]) -> None:
        """Index tiles broadcast together, as PyTorch's advanced indexing does."""
        if gather_dims(tuple(indices)) is None:
            shapes = " and ".join(self.b.describe(i.dims()) for i in indices if i.kind == "gather")
            raise ShapeMismatch(
                f"the index tiles of `{param.host_expr}[...]` have shapes {shapes}, which do "
                "not broadcast together (PyTorch pairs index tensors up element by element); "
                "for every pair, index with `a[:, None]` and `b[None, :]`"
            )

    def _fits(self, block_id: int, size: int) -> bool:
        return _inside(self.table.blocks[block_id], size)

    def reread(self, value: Value, key: Any) -> tuple[HostTensor, list[Any]] | None:
        """`rows[tile_n, :]` where `rows = x[b, :, h, :]` read whole dims in a device loop:
        the tile's part read from the tensor itself (`x[b, tile_n, h, :]`), as eager mode
        indexes the view it holds. The whole read is dropped where nothing else uses it.
        None where `value` is no such read or `key` holds no tile (the tile's own ops)."""
        read = self.whole_reads.get(id(value))
        keys = list(key) if isinstance(key, tuple) else [key]
        if read is None or None in keys or not any(isinstance(k, TileRef) for k in keys):
            return None
        tensor, items = read
        free = [n for n, item in enumerate(items) if isinstance(item, slice)]
        composed = list(items)
        for n, k in zip(free, _every_dim(keys, len(free), "this tile"), strict=True):
            composed[n] = k
        return tensor, composed

    def load(
        self,
        param: Param,
        meta: torch.Tensor,
        items: list[Any],
        extra_mask: Value | None = None,
        other: Any = None,
        eviction_policy: str | None = None,
    ) -> Value:
        acc = self.access(param, meta, items)
        _check_other(other)
        self._check_mask(param, acc, extra_mask)
        extra_mask = self._jagged_mask(param, acc, extra_mask)
        out = self._load(param, acc, extra_mask, other, eviction_policy)
        whole = _every_dim(items, meta.dim(), f"`{param.host_expr}`")
        if extra_mask is None and other is None and all(map(_whole_or_position, whole)):
            self.whole_reads[id(out)] = (HostTensor(param, meta), whole)
        return out

    def _load(self, param: Param, acc: Access, extra_mask: Value | None, other: Any,
              eviction_policy: str | None) -> Value:  # fmt: skip
        index = self.table.next_memory_op()
        return self.b.op(
            "load",
            (acc,),
            param.dtype,
            acc.dims,
            hint="load",
            extra_mask=_mask(extra_mask),
            other=None if other is None or other == 0 else other,
            eviction_policy=_eviction_policy(eviction_policy),
            mem_index=index,
            load_index=self.table.next_load(),
        )

    def _jagged_mask(self, param: Param, acc: Access, mask: Any) -> Value | None:
        """The extra mask joined with those of the jagged tiles the access spans."""
        return jagged.access_mask(self.b, acc.dims, _mask(mask), f"`{param.host_expr}[...]`")

    def _check_mask(self, param: Param, acc: Access, mask: Any) -> None:
        """An extra mask broadcasts to the shape accessed (or it would mask other elements)."""
        dims = mask.type.dims if isinstance(mask, Value) else ()
        if broadcast_dims(acc.dims, dims) != acc.dims:
            raise ShapeMismatch(
                f"extra_mask of shape {self.b.describe(dims)} does not broadcast to "
                f"`{param.host_expr}[...]` of shape {self.b.describe(acc.dims)}"
            )

    def store(
        self,
        param: Param,
        meta: torch.Tensor,
        items: list[Any],
        value: Any,
        extra_mask: Value | None = None,
        name: str = "store",
        sem: str | None = None,
    ) -> Value | None:
        return self.write(name, param, meta, items, (value,), extra_mask, sem)

    def write(
        self,
        name: str,
        param: Param,
        meta: torch.Tensor,
        items: list[Any],
        operands: tuple[Any, ...],
        extra_mask: Value | None = None,
        sem: str | None = None,
    ) -> Value | None:
        """A store or an atomic `name` of `operands` (the value; a compare-and-swap's
        expected value and new value) to `param[items]`; an atomic's result is the values
        before its update (dropped again where the kernel never reads it: ir/nodes.py
        `drop_unused_results`)."""
        _check_atomic_dtype(name, param)
        acc = self.access(param, meta, items)
        operands = tuple(self.b.fit_to(self._stored(v, acc), acc.dims) for v in operands)
        for value in operands:
            self._check_value(param, acc, value)
        self._check_mask(param, acc, extra_mask)
        extra_mask = self._jagged_mask(param, acc, extra_mask)
        index = self.table.next_memory_op()
        attrs: dict[str, Any] = {"extra_mask": _mask(extra_mask), "mem_index": index}
        attrs.update({"sem": _sem(sem, name)} if sem is not None else {})
        if name == "store":
            self.b.effect(name, (acc, *operands), **attrs)
            return None
        return self.b.op(name, (acc, *operands), param.dtype, acc.dims, hint="old", **attrs)

    def _stored(self, value: Any, acc: Access) -> Any:
        """A value as a store writes it: a host tensor read whole (`dst[i] = row`), leading
        dims of size 1 past the destination's dropped (`x[i] = y[i : i + 1]`), as PyTorch."""
        if isinstance(value, HostTensor):
            value = self.load(value.param, value.meta, [slice(None)] * value.meta.dim())
        if isinstance(value, Value) and value.type.rank > len(acc.dims):
            extra = value.type.rank - len(acc.dims)
            if all(d is None for d in value.type.dims[:extra]):
                dims = value.type.dims[extra:]
                value = self.b.op("reshape", (value,), value.type.dtype, dims, hint="view")
        return value

    def _check_value(self, param: Param, acc: Access, value: Any) -> None:
        """A value written to `param[...]` broadcasts to the shape accessed."""
        if isinstance(value, Value):
            joined = broadcast_dims(acc.dims, value.type.dims)
            if joined != acc.dims or value.type.rank > len(acc.dims):
                raise ShapeMismatch(
                    f"cannot store a tile of shape {self.b.describe(value.type.dims)} into "
                    f"`{param.host_expr}[...]` of shape {self.b.describe(acc.dims)}"
                    + self.b.chunked_hint(acc.dims + value.type.dims)
                )
        elif not isinstance(value, (int, float, bool)):
            raise UnsupportedSyntax(f"cannot store a {type(value).__name__}")

    # -- tile attributes ---------------------------------------------------------------
    def tile_attr(self, block: int, attr: str) -> Any:
        value = self._tile_attr(block, attr)
        self.tile_values[id(value)] = (attr, block)
        return value

    def _tile_attr(self, block: int, attr: str) -> Any:
        info = self.table.blocks[block]
        if attr == "index":
            return self.b.op("tile_index", (block,), torch.int32, (block,), hint="index")
        if attr == "begin":
            return self.b.op("tile_begin", (block,), torch.int32, (), hint="begin")
        if attr == "end":
            return self.b.op("tile_end", (block,), torch.int32, (), hint="end")
        if attr == "id":
            return self.b.op("tile_id", (block,), torch.int32, (), hint="tile_id")
        if attr == "block_size":
            size = info.fixed_size
            return size if size is None else TileSizeInt(size, block)
        if attr == "count" and not info.dynamic and info.fixed_size:  # tiles in the loop
            return -(-info.extent // info.fixed_size)
        raise UnsupportedOperation(f"tiles have no attribute `{attr}`")

    def tile_function(self, fn: Any, tile: Any) -> Any:
        """`tc.tile_index(t)` and the like: Helion's calls for the tile attributes."""
        if not isinstance(tile, TileRef):
            raise UnsupportedSyntax(f"tc.{fn.__name__} takes a tile of a tc.tile loop")
        return self.tile_attr(tile.block, lang.tiles.TILE_ATTRIBUTES[fn])

    def subscript(self, x: Any, index: Any) -> Any:
        """`tc.subscript(x, [...])`: `x[...]` written as a call."""
        items = list(index) if isinstance(index, (list, tuple)) else [index]
        if isinstance(x, HostTensor):
            return self.load(x.param, x.meta, items)
        if not isinstance(x, Value):
            raise UnsupportedSyntax("tc.subscript indexes a tile or a tensor from the host")
        return views.index(self.b, x, tuple(items))

    # -- tc.* calls --------------------------------------------------------------------
    def language_call(self, fn: Any, args: list[Any], kwargs: dict[str, Any]) -> Any:
        if fn in (lang.zeros, lang.ones, lang.full):
            kwargs = {k: v for k, v in kwargs.items() if k != "device"}  # tiles: one device
            if fn is not lang.full:
                args = [args[0], int(fn is lang.ones), *args[1:]]
            return self.full(*args, **kwargs)
        if fn in lang.tiles.TILE_ATTRIBUTES:
            return self.tile_function(fn, *args, **kwargs)
        if fn is lang.subscript:
            return self.subscript(*args, **kwargs)
        if fn is lang.arange:
            return self.arange(*args, **kwargs)
        if fn in (lang.load, lang.store) or fn in lang.memory.ATOMICS:
            return self.memory_call(fn, args, kwargs)
        return NotImplemented

    def memory_call(self, fn: Any, args: list[Any], kwargs: dict[str, Any]) -> Value | None:
        """`tc.load`, `tc.store`, the atomics, arguments bound as their stubs declare."""
        try:
            bound = inspect.signature(fn).bind(*args, **kwargs).arguments
        except TypeError as e:
            raise UnsupportedSyntax(f"tc.{fn.__name__}: {e}") from None
        tensor, index = bound.pop("tensor"), bound.pop("index")
        if not isinstance(tensor, HostTensor):
            raise UnsupportedSyntax(f"tc.{fn.__name__} needs a tensor from the host")
        items = list(index) if isinstance(index, (list, tuple)) else [index]
        if fn is lang.load:
            return self.load(tensor.param, tensor.meta, items, **bound)
        if fn is lang.atomic_cas:
            operands = (bound.pop("expected"), bound.pop("value"))
            return self.write("atomic_cas", tensor.param, tensor.meta, items, operands, **bound)
        return self.store(tensor.param, tensor.meta, items, name=fn.__name__, **bound)

    def _shape_dims(self, shape: Any) -> tuple[Dim, ...]:
        items = list(shape) if isinstance(shape, (list, tuple, torch.Size)) else [shape]
        return views.shape_dims(self.b, items)

    def full(self, shape: Any, value: Any, dtype: torch.dtype = torch.float32) -> Value:
        if isinstance(value, Value):  # a scalar computed on the device (`fill[0]`)
            return creation.full(self.b, self._shape_dims(shape), value, dtype)
        return self.b.op("full", (), dtype, self._shape_dims(shape), hint="acc", value=value)

    def arange(
        self, begin: Any, end: Any = None, step: Any = 1, dtype: torch.dtype = torch.int32
    ) -> Value:
        if isinstance(step, torch.dtype):  # `tc.arange(a, b, torch.int64)`
            step, dtype = 1, step
        if step != 1:
            return self._stepped(begin, end, step, dtype)
        lo, hi = (0, begin) if end is None else (begin, end)
        if end is None and isinstance(begin, TileSizeInt):  # the tile's dim, as Helion's
            lanes = self.b.elementwise(  # `tile.begin + arange(tile.block_size)` meets tiles
                "sub", self.tile_attr(begin.block, "index"), self.tile_attr(begin.block, "begin")
            )
            return self.b.cast(lanes, dtype)  # type: ignore[return-value]
        if end is None and isinstance(begin, BlockSizeInt):  # over `tc.zeros([bm])`'s dim
            registered = self.table.registered_block(begin).id
            positions = self.arange(int(begin), dtype=dtype)
            return self.b.op("reshape", (positions,), dtype, (registered,), hint="view")
        if isinstance(lo, Value) or isinstance(hi, Value):
            return self.b.cast(self._tile_range(lo, hi), dtype)  # type: ignore[return-value]
        if int(hi) - int(lo) == 1:
            return self.b.op("full", (), dtype, (None,), hint="arange", value=int(lo))
        block = self.table.reduction(int(hi) - int(lo))
        return self.b.op("arange", (), dtype, (block.id,), hint="arange", begin=int(lo))

    def _stepped(self, begin: Any, end: Any, step: Any, dtype: torch.dtype) -> Value:
        """`tc.arange(a, b, step)` of ints known while compiling."""
        lo, hi = (0, begin) if end is None else (begin, end)
        ints = all(isinstance(v, int) and not isinstance(v, bool) for v in (lo, hi, step))
        if not ints or step <= 0:
            raise UnsupportedSyntax("tc.arange with a step needs ints known on the host, step > 0")
        count = len(range(lo, hi, step))
        positions = self.b.elementwise("mul", self.arange(count, dtype=dtype), step)
        return self.b.cast(self.b.elementwise("add", positions, lo), dtype)  # type: ignore[return-value]

    def _tile_range(self, lo: Any, hi: Any) -> Value:
        """`tc.arange(tile.begin, tile.end)`: the tile's own indices."""
        begin, end = self.tile_values.get(id(lo)), self.tile_values.get(id(hi))
        if begin is None or end is None or begin != ("begin", end[1]) or end[0] != "end":
            raise UnsupportedSyntax(
                "tc.arange bounds must be ints, or a tile's .begin and .end (use tile.index)"
            )
        return self.tile_attr(end[1], "index")


_DEVICE_SLICE = (
    "slice bounds must be ints known on the host, or `s : s + n` with `s` computed on the "
    "device and `n` an int known on the host (a block size); for other positions computed "
    "on the device index with a tile of indices (`x[t.index + k]`)"
)


def _every_dim(items: list[Any], rank: int, what: str) -> list[Any]:
    """A subscript's items with `...` expanded and missing trailing dims as `:`."""
    consumed = sum(1 for i in items if i is not None and i is not Ellipsis)
    if consumed > rank or sum(i is Ellipsis for i in items) > 1:
        raise ShapeMismatch(f"{what} has {rank} dims but is indexed with {consumed}")
    rest = [slice(None)] * (rank - consumed)
    if Ellipsis in items:
        at = next(k for k, i in enumerate(items) if i is Ellipsis)
        return items[:at] + rest + items[at + 1 :]
    return items + rest


def _whole_or_position(item: Any) -> bool:
    """A subscript item `:` or one position (an int or a scalar computed on the device)."""
    if isinstance(item, slice):
        return item == slice(None)
    if isinstance(item, Value):
        return not item.type.dims
    return isinstance(item, int) and not isinstance(item, bool)


def _inside(block: Block, size: int) -> bool:
    """Whether every position of `block` lies in a dim of length `size`."""
    if block.dynamic:  # device-computed bounds, inside the dim if proven so (frontend/facts)
        low, high = block.bounds or (None, None)
        return low is not None and high is not None and low >= 0 and high <= size
    return block.begin >= 0 and block.end <= size


EVICTION_POLICIES = {"": None, "first": "evict_first", "last": "evict_last"}


def _eviction_policy(policy: str | None) -> str | None:
    """Triton's name for a load's eviction policy (Helion's short names accepted too)."""
    if policy is None or policy in ("evict_first", "evict_last"):
        return policy
    if policy in EVICTION_POLICIES:
        return EVICTION_POLICIES[policy]
    raise UnsupportedOperation(
        f"eviction_policy={policy!r}: use 'evict_first', 'evict_last' or None"
    )


def _sem(sem: str, name: str) -> str:
    if sem not in lang.memory.SEMANTICS:
        raise UnsupportedOperation(f"tc.{name}(sem={sem!r}): use one of {lang.memory.SEMANTICS}")
    return sem


def _mask(mask: Any) -> Value | None:
    if mask is None or (isinstance(mask, Value) and mask.type.dtype == torch.bool):
        return mask
    raise DtypeError("extra_mask must be a tile of booleans (a comparison such as `x > 0`)")


def _check_other(other: Any) -> None:
    if other is not None and not isinstance(other, (int, float, bool, Value)):
        raise UnsupportedSyntax(f"tc.load(other=...) must be a number or a tile, not {other!r}")


def _check_atomic_dtype(name: str, param: Param) -> None:
    """Refuse an atomic that Triton's GPU compiler refuses for the tensor's dtype
    (`language.memory.atomic_refusal`)."""
    why = None if name == "store" else lang.memory.atomic_refusal(name, param.dtype)
    if why is None and name != "store" and param.dtype == torch.bfloat16 and interpreted():
        why = (
            "Triton's interpreter has no bfloat16 atomics (NumPy has no bfloat16): run it "
            "eagerly on the CPU (TILECRAFT_INTERPRET=1) or on a GPU"
        )
    if why is not None:
        raise DtypeError(f"tc.{name} cannot update `{param.host_expr}` of {param.dtype}: {why}")
