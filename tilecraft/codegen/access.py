"""Loads and stores: pointer arithmetic with masks, block pointers, tensor descriptors.

The `indexing` knob picks one per memory op ("pointer", "block_ptr" or
"tensor_descriptor", or a list with one entry per load/store in program order). An
access that a style cannot express (gathers, scalar indices, extra masks, tiles that
stop short of the tensor's end, unaligned tensors) falls back to "pointer".
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

import torch

from tilecraft.codegen import flat
from tilecraft.codegen.common import expand
from tilecraft.codegen.rules import tl_dtype
from tilecraft.ir.nodes import Access, Index, Op, Param, Value
from tilecraft.runtime.cpu import interpreter_set

if TYPE_CHECKING:
    from tilecraft.codegen.kernel import KernelWriter

INT32_LIMIT = 2**31
HINTS = {"first": "evict_first", "last": "evict_last"}  # load_eviction_policies -> Triton


@functools.cache
def supported_indexing() -> list[str]:
    """The indexing styles this Triton offers (imported late: TRITON_INTERPRET must be set
    before Triton is first imported, and importing tilecraft must not do that)."""
    import triton.language as tl

    has_block_ptr = "removed" not in (tl.make_block_ptr.__doc__ or "")
    has_descriptor = hasattr(tl, "make_tensor_descriptor")
    return ["pointer"] + ["block_ptr"] * has_block_ptr + ["tensor_descriptor"] * has_descriptor


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def choose_style(w: KernelWriter, op: Op) -> str:
    choice = w.choices.get("indexing") or "pointer"
    if isinstance(choice, list):
        index = op.attrs.get("mem_index", 0)
        choice = choice[index] if index < len(choice) and choice[index] else "pointer"
    if choice not in supported_indexing():
        return "pointer"
    bulk_add = choice == "tensor_descriptor" and descriptor_adds(op)
    if op.name.startswith("atomic_") and not bulk_add:
        return "pointer"  # atomics go through pointers, but for a descriptor's bulk add
    return choice if block_eligible(w, op, choice) else "pointer"


# what a tensor descriptor's `atomic_add` (a TMA reduction on Hopper: one bulk copy that the
# memory system adds in, not an atomic per element) takes
DESCRIPTOR_ADD_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.int32)


def descriptor_adds(op: Op) -> bool:
    """Whether this `tc.atomic_add` may be a tensor descriptor's: relaxed (a bulk reduction
    orders nothing), its result unread, of a type TMA adds, and where this Triton lowers it
    (from 3.4; its CPU interpreter does not)."""
    import triton.language as tl

    access: Access = op.args[0]
    if op.name != "atomic_add" or op.attrs.get("sem") != "relaxed" or op.out is not None:
        return False  # (a bulk reduction returns nothing)
    if access.param.dtype not in DESCRIPTOR_ADD_DTYPES:
        return False
    lowered = hasattr(getattr(tl, "tensor_descriptor", None), "atomic_add")
    return lowered and not interpreter_set()


def block_eligible(w: KernelWriter, op: Op, kind: str) -> bool:
    access: Access = op.args[0]
    shape = access.param.shape or ()
    if op.attrs.get("extra_mask") is not None or op.attrs.get("other") is not None:
        return False
    if 0 in shape:
        return False  # nothing to read; keep block pointers and descriptors off empty tensors
    if not access.indices or any(
        i.kind != "block" or i.step != 1 or not i.in_range for i in access.indices
    ):
        return False
    for dim, index in enumerate(access.indices):
        block = w.kernel.blocks[index.block]  # type: ignore[index]
        if (block.dynamic or index.offset + block.end != shape[dim]) and w.has_mask(block.id):
            return False  # boundary checks clip at the tensor's end, not the tile's
    return kind != "tensor_descriptor" or descriptor_eligible(w, access)


MIN_DESCRIPTOR_BOX = 128  # bytes a tensor descriptor's box holds at least (see below)


def descriptor_eligible(w: KernelWriter, access: Access) -> bool:
    param = access.param
    strides, size = param.strides or (), param.dtype.itemsize
    if not w.aligned_inputs or param.offset_bytes % 16 or not strides or strides[-1] != 1:
        return False
    if any(s * size % 16 for s in strides[:-1]):
        return False
    blocks = [w.kernel.blocks[i.block].fixed_size or 1 for i in access.indices]  # type: ignore[index]
    # descriptor offsets start 16-byte aligned: a tile loop's begin (`tc.tile(3, n)`) too
    last = w.kernel.blocks[access.indices[-1].block]  # type: ignore[index]
    start = access.indices[-1].offset + (0 if last.begin_value else last.begin)
    aligned = start * size % 16 == 0 and (last.aligned or not last.begin_value)
    # boxes under 128 bytes (16 float32 row statistics) read in a pipelined loop failed with
    # "misaligned address" on an H200 (Triton 3.6); with 32 they ran (benchmarks/RESULTS.md)
    box = _numel(tuple(blocks)) * size >= MIN_DESCRIPTOR_BOX
    return max(blocks) <= 256 and blocks[-1] * size >= 16 and aligned and box


# -- block styles ----------------------------------------------------------------
def block_offsets(w: KernelWriter, access: Access) -> str:
    offsets = []
    for index in access.indices:
        block = w.kernel.blocks[index.block]  # type: ignore[index]
        if block.kind != "reduction":
            offsets.append(f"offset_{block.id}")
        elif w.is_rolled_id(block.id):
            start = f"{index.offset} + " if index.offset else ""
            offsets.append(f"{start}roffset_{block.id}")
        else:
            offsets.append(str(index.offset))
    return "[" + ", ".join(offsets) + "]"


def block_pointer(w: KernelWriter, access: Access) -> str:
    param, rank = access.param, len(access.indices)
    strides = ", ".join(stride(w, param, d) for d in range(rank))
    order = list(range(rank))[::-1]
    return (
        f"tl.make_block_ptr({param.name}, {list(param.shape or ())}, [{strides}], "
        f"{block_offsets(w, access)}, {w.shape(access.dims)}, {order})"
    )


def descriptor(w: KernelWriter, access: Access) -> str:
    param = access.param
    name = f"{param.name}_desc_" + "_".join(str(i.block) for i in access.indices)
    if name not in w.descriptors:
        rank = len(access.indices)
        strides = ", ".join(stride(w, param, d) for d in range(rank - 1))
        w.descriptors[name] = (
            f"{name} = tl.make_tensor_descriptor({param.name}, "
            f"shape={list(param.shape or ())}, strides=[{strides}{', ' if strides else ''}1]"
            f", block_shape={w.shape(access.dims)})"
        )
    return name


def boundary(w: KernelWriter, access: Access) -> str:
    dims = [d for d, i in enumerate(access.indices) if w.has_mask(i.block)]  # type: ignore[arg-type]
    return f", boundary_check={dims}" if dims else ""


# -- pointers --------------------------------------------------------------------
def stride(w: KernelWriter, param: Param, dim: int) -> str:
    """A tensor's stride: a constant, since strides are part of the specialization (a
    constant also spares the launch an argument); an argument where it is unknown."""
    if param.strides is not None and dim < len(param.strides):
        return str(param.strides[dim])
    name = f"{param.name}_stride_{dim}"
    w.strides[name] = f"{param.host_expr}.stride({dim})"
    return name


def pointer(w: KernelWriter, access: Access, drop: int = 0) -> tuple[str, list[str], list[str]]:
    """The pointer expression of an access, its tile masks and its scalar masks; with
    `drop`, on a tile without its first `drop` dims (each holding one position)."""
    param = access.param
    wide = param.shape is not None and _numel(param.shape) >= INT32_LIMIT
    dims, starts = access.layout()
    rank, dim = len(dims) - drop, 0
    terms: list[str] = []
    masks: list[str] = []
    scalars: list[str] = []
    for index, pos in zip(access.indices, starts, strict=True):
        if index.kind != "newaxis":
            size = (param.shape or ())[dim]
            term: str | None
            if index.kind == "block" and pos < drop:
                term = lead_position(w, index, size, scalars)
            else:
                term = index_expr(
                    w, index, rank, pos - drop, size, scalars if index.kind == "scalar" else masks
                )
            if term is not None:
                term = f"{term}.to(tl.int64)" if wide and _computed(index) else term
                step = stride(w, param, dim)
                terms.append(term if step == "1" else f"{term} * {step}")
            dim += 1
    if any(i.kind in ("unit", "newaxis") for i in access.indices):
        terms.append(f"tl.zeros({w.shape(access.dims[drop:])}, tl.int32)")  # keep size-1 dims
    offset = " + ".join(terms) if terms else "0"
    return f"{param.name} + ({offset})", list(dict.fromkeys(masks)), scalars


def lead_position(w: KernelWriter, index: Index, size: int, scalars: list[str]) -> str:
    """The one position of a block of one element, a scalar (a flat access's leading dim,
    codegen/flat.py), adding its scalar masks."""
    block = w.kernel.blocks[index.block]  # type: ignore[index]
    start = "0" if block.kind == "reduction" else f"offset_{block.id}"
    position = start if index.step == 1 else f"{index.step} * {start}"
    position = f"({index.offset} + {position})" if index.offset else position
    if w.has_mask(block.id):
        scalars.append(f"({start} < {block.end_code()})")
    if not index.in_range:
        scalars.append(f"(({position} >= 0) & ({position} < {size}))")
    return position


def _computed(index: Index) -> bool:
    """Whether an index is a device value (which may need int64 arithmetic)."""
    return index.kind in ("block", "gather") or isinstance(index.value, Value)


def index_expr(
    w: KernelWriter, index: Index, rank: int, pos: int, size: int, masks: list[str]
) -> str | None:
    """The offsets along one dim of an access (None for none), adding its masks."""
    if index.kind == "unit":
        return str(index.value) if index.value else None
    if index.kind == "scalar":
        return scalar_expr(index, size, masks)
    if index.kind == "block":
        if w.has_mask(index.block):  # type: ignore[arg-type]
            masks.append(expand(f"mask_{index.block}", rank, pos))
        if not index.in_range:
            masks.append(bound(w, expand(block_bounds(w, index, size), rank, pos)))
        return expand(block_positions(index), rank, pos)
    value = index.value
    assert isinstance(value, Value)
    for i, d in enumerate(value.type.dims):
        if d is not None and w.has_mask(d):
            masks.append(expand(f"mask_{d}", rank, pos + i))
    if not index.in_range:
        inside = f"(({value.name} >= 0) & ({value.name} < {size}))"
        masks.append(bound(w, expand(inside, rank, pos, value.type.rank)))
    return expand(value.name, rank, pos, value.type.rank)


BOUND = "#bound:"  # marks the bounds masks of computed indices (the check mode's subject)


def bound(w: KernelWriter, mask: str) -> str:
    """A bounds mask, marked so the check mode can tell it from the tiles' own masks."""
    return BOUND + mask if w.check else mask


def split_bounds(masks: list[str]) -> tuple[list[str], list[str]]:
    """(the tiles' masks, the computed indices' bounds masks, unmarked)."""
    tiles = [m for m in masks if not m.startswith(BOUND)]
    return tiles, [m.removeprefix(BOUND) for m in masks if m.startswith(BOUND)]


def check_bounds(w: KernelWriter, op: Op, masks: list[str], extra: Value | None) -> list[str]:
    """In the check mode, report (to the launcher, through `_tc_check`) any lane whose
    computed index is out of range while its tile and `extra_mask` would touch it; return
    the masks with the bounds unmarked (the access stays masked either way)."""
    tiles, bounds = split_bounds(masks)
    if not bounds:
        return tiles
    access: Access = op.args[0]
    w.checks.append(f"{op.loc.filename}:{op.loc.lineno}: `{access.param.host_expr}[...]`")
    live = " & ".join(tiles + ([] if extra is None else [w.operand(extra, access.dims, None)]))
    inside = " & ".join(bounds)
    flag = f"tl.where({inside}, 0, {len(w.checks)})"
    if live:
        flag = f"tl.where({live}, {flag}, 0)"
    if access.dims:
        flag = f"tl.max({flag} + tl.zeros({w.shape(access.dims)}, tl.int32))"
    w.line(f"tl.atomic_max(_tc_check, {flag})")
    return tiles + bounds


def check_index(w: KernelWriter, op: Op) -> None:
    """In the check mode, report a lane of the flags `op.args[0]` (an index into a tile,
    in range where True) that is False on a lane its tiles hold; else nothing."""
    if not w.check:
        return
    (ok,) = op.args
    dims = w.text_dims(ok)
    w.checks.append(f"{op.loc.filename}:{op.loc.lineno}: {op.attrs['what']}")
    live = [f"({w.operand(ok, dims, None)} == 0)"]
    live += [
        expand(f"mask_{d}", len(dims), k)
        for k, d in enumerate(dims)
        if d is not None and w.has_mask(d)
    ]
    flag = f"tl.where({' & '.join(live)}, {len(w.checks)}, 0)"
    if dims:
        flag = f"tl.max({flag} + tl.zeros({w.shape(dims)}, tl.int32))"
    w.line(f"tl.atomic_max(_tc_check, {flag})")


def block_positions(index: Index) -> str:
    """The positions a block index reads: `offset + step * i` for a partial slice."""
    plain = text = f"indices_{index.block}"
    if index.step != 1:
        text = f"{index.step} * {text}"
    if index.offset:
        text = f"{index.offset} + {text}"
    return text if text == plain else f"({text})"


def block_bounds(w: KernelWriter, index: Index, size: int) -> str:
    """The mask of a tile's positions inside a dim it reaches past (as Helion allows)."""
    block = w.kernel.blocks[index.block]  # type: ignore[index]
    positions = block_positions(index)
    if block.dynamic or block.begin + index.offset < 0:
        return f"(({positions} >= 0) & ({positions} < {size}))"
    return f"({positions} < {size})"


def scalar_expr(index: Index, size: int, masks: list[str]) -> str:
    """A scalar index; a device value counts from the end when negative, as in PyTorch,
    and is masked outside `[-size, size)` (where PyTorch would raise)."""
    value = index.value
    if not isinstance(value, Value):
        return str(value)
    if index.in_range:
        return value.name
    name = value.name
    masks.append(f"(({name} >= -{size}) & ({name} < {size}))")
    return f"tl.where({name} < 0, {name} + {size}, {name})"


def full_mask(
    w: KernelWriter,
    access: Access,
    masks: list[str],
    scalars: list[str],
    extra: Value | None,
    drop: int = 0,
) -> str | None:
    """The mask of a pointer access (on its tile without its first `drop` dims, as in
    `pointer`): its tiles', its scalar indices' and the user's.

    Scalar masks select over a tile mask, never stand alone on a tile: Triton's
    interpreter broadcasts a scalar comparison (and types `scalar & tile`) as int32, a
    mask it rejects."""
    user = [] if extra is None else [w.operand(extra, access.dims, None)]
    if extra is not None and extra.type.rank == 0:
        scalars, user = scalars + user, []
    mask = " & ".join(masks + user) or None
    if not scalars:
        return mask
    ok = " & ".join(scalars)
    dims = access.dims[drop:]
    if mask is None and dims:
        mask = f"tl.full({w.shape(dims)}, True, tl.int1)"
    return ok if mask is None else f"tl.where({ok}, {mask}, False)"


def tuned_eviction(w: KernelWriter, op: Op) -> str | None:
    """The config's cache eviction hint for this load (`load_eviction_policies`, one entry
    per load in program order): "last" keeps the lines in cache for reuse, "first" marks a
    read that will not be reused. A hint the user wrote on the load wins."""
    policies = w.choices.get("load_eviction_policies") or []
    index = op.attrs.get("load_index", 0)
    return HINTS.get(policies[index] or "") if index < len(policies) else None


# -- ops -------------------------------------------------------------------------
def load(w: KernelWriter, op: Op) -> None:
    (access,) = op.args
    kind = choose_style(w, op)
    if kind == "tensor_descriptor":
        w.assign(op, f"{descriptor(w, access)}.load({block_offsets(w, access)})")
        return
    policy = op.attrs.get("eviction_policy") or tuned_eviction(w, op)
    hint = f", eviction_policy={policy!r}" if policy else ""
    if kind == "block_ptr":
        check = boundary(w, access)
        pad = ', padding_option="zero"' if check else ""
        w.assign(op, f"tl.load({block_pointer(w, access)}{check}{pad}{hint})")
        return
    drop = int(op.out in w.flat)
    ptr, masks, scalars = pointer(w, access, drop)
    masks = check_bounds(w, op, masks, op.attrs.get("extra_mask"))
    mask = full_mask(w, access, masks, scalars, op.attrs.get("extra_mask"), drop)
    other = op.attrs.get("other")
    fill = "0" if other is None else w.operand(other, access.dims, access.param.dtype)
    if access.param.dtype in (torch.float8_e4m3fn, torch.float8_e5m2) and fill == "0":
        fill = "0.0"  # Triton casts float32 to fp8, not int32
    masked = f", mask={mask}, other={fill}" if mask else ""
    w.assign(op, f"tl.load({ptr}{masked}{hint})")


def store(w: KernelWriter, op: Op, fn: str = "tl.store") -> None:
    access, value = op.args
    if flat.writes_flat(w, op):
        flat_store(w, op, fn)
        return
    text = w.operand(value, access.dims, access.param.dtype)
    kind = choose_style(w, op)
    if kind != "pointer":  # block stores take the pointer's element type and shape exactly
        element, shape = block_element(access.param.dtype), w.shape(access.dims)
        if not isinstance(value, Value):  # a number
            text = f"tl.full({shape}, {text}, {element})"
        elif value.type.dims != access.dims:
            text = f"tl.broadcast_to(({text}).to({element}), {shape})"
        else:
            text = f"({text}).to({element})"
    if kind == "tensor_descriptor":
        method = "atomic_add" if fn == "tl.atomic_add" else "store"
        w.line(f"{descriptor(w, access)}.{method}({block_offsets(w, access)}, {text})")
        return
    if kind == "block_ptr":
        w.line(f"tl.store({block_pointer(w, access)}, {text}{boundary(w, access)})")
        return
    ptr, masks, scalars = pointer(w, access)
    masks = check_bounds(w, op, masks, op.attrs.get("extra_mask"))
    mask = full_mask(w, access, masks, scalars, op.attrs.get("extra_mask"))
    sem = op.attrs.get("sem")
    order = f", sem={sem!r}" if sem else ""
    written(w, op, f"{fn}({ptr}, {text}{f', mask={mask}' if mask else ''}{order})", mask)


def block_element(dtype: torch.dtype) -> str:
    """The element type of a block pointer or tensor descriptor over a tensor of `dtype`,
    which a stored value must have (a pointer store converts; these refuse: a uint8 max
    computed as int32, a bool tile into a bool tensor, which Triton holds as int8, failed
    to compile on an H200)."""
    return "tl.int8" if dtype == torch.bool else tl_dtype(dtype)


def written(w: KernelWriter, op: Op, call: str, mask: str | None) -> None:
    """The line of a store or an atomic; an atomic whose result is read assigns the values
    before its update, 0 in the lanes it leaves alone (what Triton returns there is not
    defined; a compare-and-swap's masked lanes read the tensor's first element)."""
    if op.out is None:
        w.line(call)
        return
    w.assign(op, call)
    if mask:
        w.line(f"{op.out.name} = tl.where({mask}, {op.out.name}, 0)")


def flat_store(w: KernelWriter, op: Op, fn: str) -> None:
    """A store of a flat value through 2-D pointers (codegen/flat.py)."""
    access, value = op.args
    text = w.operand(value, access.dims[1:], access.param.dtype)
    ptr, masks, scalars = pointer(w, access, 1)
    mask = full_mask(w, access, masks, scalars, None, 1)
    sem = op.attrs.get("sem")
    order = f", sem={sem!r}" if sem else ""
    w.line(f"{fn}({ptr}, {text}{f', mask={mask}' if mask else ''}{order})")
