"""Lowering memory accesses, tile attributes, tile creation and matrix products."""

from __future__ import annotations

from typing import Any

import torch

from tilecraft import language as lang
from tilecraft.exc import DtypeError, ShapeMismatch, UnsupportedOperation, UnsupportedSyntax
from tilecraft.frontend.blocks import BlockSizeInt, BlockTable
from tilecraft.frontend.builder import Builder
from tilecraft.ir.nodes import Access, Index, Param, Value, gather_dims
from tilecraft.ir.types import Dim, broadcast_dims


class MemoryLowering:
    """Builds loads, stores and tile-creation ops for the device compiler."""

    def __init__(self, b: Builder, table: BlockTable) -> None:
        self.b, self.table = b, table
        self.tile_values: dict[int, tuple[str, int]] = {}  # id(value) -> (attribute, block)

    # -- subscripts -----------------------------------------------------------------
    def access(self, param: Param, meta: torch.Tensor, items: list[Any]) -> Access:
        from tilecraft.frontend.device import TileRef

        shape = list(meta.shape)
        consumed = sum(1 for i in items if i is not None)
        if consumed > len(shape):
            raise ShapeMismatch(
                f"`{param.host_expr}` has {len(shape)} dims but is indexed with {consumed}"
            )
        items = items + [slice(None)] * (len(shape) - consumed)
        indices: list[Index] = []
        dim = 0
        for item in items:
            if item is None:
                indices.append(Index("newaxis"))
                continue
            size = shape[dim]
            if isinstance(item, TileRef):
                self._check_fits(param, dim, size, item.block)
                indices.append(Index("block", block=item.block))
            elif isinstance(item, slice):
                if item != slice(None):
                    raise UnsupportedSyntax("only full slices `:` are supported on tensors")
                indices.append(
                    Index("unit", value=0)
                    if size == 1
                    else Index("block", block=self.table.reduction(size).id)
                )
            elif isinstance(item, Value) and item.type.dims:
                if item.type.dtype.is_floating_point:
                    raise DtypeError("a gather index tile must hold integers")
                indices.append(Index("gather", value=item))
            elif isinstance(item, (int, Value)):
                indices.append(
                    Index("scalar", value=item % size if isinstance(item, int) else item)
                )
            else:
                raise UnsupportedSyntax(f"cannot index a tensor with {type(item).__name__}")
            dim += 1
        self._check_gathers(param, indices)
        return Access(param, tuple(indices))

    def _check_gathers(self, param: Param, indices: list[Index]) -> None:
        """Index tiles broadcast together, as PyTorch's advanced indexing does."""
        if gather_dims(tuple(indices)) is None:
            shapes = " and ".join(self.b.describe(i.dims()) for i in indices if i.kind == "gather")
            raise ShapeMismatch(
                f"the index tiles of `{param.host_expr}[...]` have shapes {shapes}, which do "
                "not broadcast together (PyTorch pairs index tensors up element by element); "
                "for every pair, index with `a[:, None]` and `b[None, :]`"
            )

    def _check_fits(self, param: Param, dim: int, size: int, block_id: int) -> None:
        block = self.table.blocks[block_id]
        if not block.dynamic and block.end > size:
            raise ShapeMismatch(
                f"a tile over {block.begin}:{block.end} indexes dim {dim} of "
                f"`{param.host_expr}`, which has size {size}"
            )

    def load(
        self, param: Param, meta: torch.Tensor, items: list[Any], extra_mask: Value | None
    ) -> Value:
        acc = self.access(param, meta, items)
        index = self.table.next_memory_op()
        return self.b.op(
            "load",
            (acc,),
            param.dtype,
            acc.dims,
            hint="load",
            extra_mask=extra_mask,
            mem_index=index,
        )

    def store(
        self,
        param: Param,
        meta: torch.Tensor,
        items: list[Any],
        value: Any,
        extra_mask: Value | None = None,
        name: str = "store",
    ) -> None:
        acc = self.access(param, meta, items)
        if isinstance(value, Value):
            joined = broadcast_dims(acc.dims, value.type.dims)
            if joined != acc.dims or value.type.rank > len(acc.dims):
                raise ShapeMismatch(
                    f"cannot store a tile of shape {self.b.describe(value.type.dims)} into "
                    f"`{param.host_expr}[...]` of shape {self.b.describe(acc.dims)}"
                )
        elif not isinstance(value, (int, float, bool)):
            raise UnsupportedSyntax(f"cannot store a {type(value).__name__}")
        index = self.table.next_memory_op()
        self.b.effect(name, (acc, value), extra_mask=extra_mask, mem_index=index)

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
            return info.fixed_size
        raise UnsupportedOperation(f"tiles have no attribute `{attr}`")

    # -- tc.* calls --------------------------------------------------------------------
    def language_call(self, fn: Any, args: list[Any], kwargs: dict[str, Any]) -> Any:
        from tilecraft.frontend.device import HostTensor

        if fn is lang.zeros or fn is lang.full:
            if fn is lang.zeros:
                args = [args[0], 0, *args[1:]]
            return self.full(*args, **kwargs)
        if fn is lang.arange:
            return self.arange(*args, **kwargs)
        if fn in (lang.load, lang.store, lang.atomic_add):
            tensor, index, *rest = args
            if not isinstance(tensor, HostTensor):
                raise UnsupportedSyntax(f"tc.{fn.__name__} needs a tensor from the host")
            items = list(index) if isinstance(index, (list, tuple)) else [index]
            if fn is lang.load:
                return self.load(
                    tensor.param,
                    tensor.meta,
                    items,
                    kwargs.get("extra_mask", rest[0] if rest else None),
                )
            value = rest[0] if rest else kwargs["value"]
            mask = kwargs.get("extra_mask", rest[1] if len(rest) > 1 else None)
            self.store(tensor.param, tensor.meta, items, value, mask, fn.__name__)
            return None
        return NotImplemented

    def _shape_dims(self, shape: Any) -> tuple[Dim, ...]:
        from tilecraft.frontend.device import TileRef

        items = list(shape) if isinstance(shape, (list, tuple, torch.Size)) else [shape]
        dims: list[Dim] = []
        for item in items:
            if isinstance(item, TileRef):
                dims.append(item.block)
            elif isinstance(item, BlockSizeInt):
                dims.append(self.table.registered_block(item).id)
            elif isinstance(item, int):
                dims.append(None if item == 1 else self.table.reduction(item).id)
            else:
                raise UnsupportedSyntax("tile shapes are lists of tiles and ints")
        return tuple(dims)

    def full(self, shape: Any, value: Any, dtype: torch.dtype = torch.float32) -> Value:
        if isinstance(value, Value):
            raise UnsupportedSyntax("tc.full needs a constant fill value")
        return self.b.op("full", (), dtype, self._shape_dims(shape), hint="acc", value=value)

    def arange(self, begin: Any, end: Any = None, dtype: torch.dtype = torch.int32) -> Value:
        lo, hi = (0, begin) if end is None else (begin, end)
        if isinstance(lo, Value) or isinstance(hi, Value):
            return self.b.cast(self._tile_range(lo, hi), dtype)  # type: ignore[return-value]
        if int(hi) - int(lo) == 1:
            return self.b.op("full", (), dtype, (None,), hint="arange", value=int(lo))
        block = self.table.reduction(int(hi) - int(lo))
        return self.b.op("arange", (), dtype, (block.id,), hint="arange", begin=int(lo))

    def _tile_range(self, lo: Any, hi: Any) -> Value:
        """`tc.arange(tile.begin, tile.end)`: the tile's own indices."""
        begin, end = self.tile_values.get(id(lo)), self.tile_values.get(id(hi))
        if begin is None or end is None or begin != ("begin", end[1]) or end[0] != "end":
            raise UnsupportedSyntax(
                "tc.arange bounds must be ints, or a tile's .begin and .end (use tile.index)"
            )
        return self.tile_attr(end[1], "index")
