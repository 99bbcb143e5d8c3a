"""Loads and stores: pointer arithmetic with masks, block pointers, tensor descriptors.

The `indexing` knob picks one per memory op ("pointer", "block_ptr" or
"tensor_descriptor", or a list with one entry per load/store in program order). An
access that a style cannot express (gathers, scalar indices, extra masks, tiles that
stop short of the tensor's end, unaligned tensors) falls back to "pointer".
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from tilecraft.codegen.common import expand
from tilecraft.ir.nodes import Access, Op, Param, Value

if TYPE_CHECKING:
    from tilecraft.codegen.kernel import KernelWriter

INT32_LIMIT = 2**31


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
    if choice not in supported_indexing() or op.name == "atomic_add":
        return "pointer"
    return choice if block_eligible(w, op, choice) else "pointer"


def block_eligible(w: KernelWriter, op: Op, kind: str) -> bool:
    access: Access = op.args[0]
    shape = access.param.shape or ()
    if op.attrs.get("extra_mask") is not None or not access.indices:
        return False
    if any(i.kind != "block" for i in access.indices):
        return False
    for dim, index in enumerate(access.indices):
        block = w.kernel.blocks[index.block]  # type: ignore[index]
        if (block.dynamic or block.end != shape[dim]) and w.has_mask(block.id):
            return False  # boundary checks clip at the tensor's end, not the tile's
    return kind != "tensor_descriptor" or descriptor_eligible(w, access)


def descriptor_eligible(w: KernelWriter, access: Access) -> bool:
    param = access.param
    strides, size = param.strides or (), param.dtype.itemsize
    if not w.aligned_inputs or param.offset_bytes % 16 or not strides or strides[-1] != 1:
        return False
    if any(s * size % 16 for s in strides[:-1]):
        return False
    blocks = [w.kernel.blocks[i.block].fixed_size or 1 for i in access.indices]  # type: ignore[index]
    return max(blocks) <= 256 and blocks[-1] * size >= 16


# -- block styles ----------------------------------------------------------------
def block_offsets(w: KernelWriter, access: Access) -> str:
    offsets = []
    for index in access.indices:
        block = w.kernel.blocks[index.block]  # type: ignore[index]
        if block.kind == "reduction":
            offsets.append(f"roffset_{block.id}" if w.is_rolled_id(block.id) else "0")
        else:
            offsets.append(f"offset_{block.id}")
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


def pointer(w: KernelWriter, access: Access) -> tuple[str, str | None]:
    """The pointer expression and mask of an access."""
    param = access.param
    wide = param.shape is not None and _numel(param.shape) >= INT32_LIMIT
    dims, starts = access.layout()
    rank, dim = len(dims), 0
    terms: list[str] = []
    masks: list[str] = []
    for index, pos in zip(access.indices, starts, strict=True):
        if index.kind != "newaxis":
            term = index_expr(w, index, rank, pos, masks)
            if term is not None:
                term = f"{term}.to(tl.int64)" if wide and index.kind != "scalar" else term
                step = stride(w, param, dim)
                terms.append(term if step == "1" else f"{term} * {step}")
            dim += 1
    if any(i.kind in ("unit", "newaxis") for i in access.indices):
        terms.append(f"tl.zeros({w.shape(access.dims)}, tl.int32)")  # keep size-1 dims
    offset = " + ".join(terms) if terms else "0"
    return f"{param.name} + ({offset})", " & ".join(dict.fromkeys(masks)) or None


def index_expr(w: KernelWriter, index: Any, rank: int, pos: int, masks: list[str]) -> str | None:
    if index.kind == "unit":
        return None
    if index.kind == "scalar":
        return index.value.name if isinstance(index.value, Value) else str(index.value)
    if index.kind == "block":
        if w.has_mask(index.block):
            masks.append(expand(f"mask_{index.block}", rank, pos))
        return expand(f"indices_{index.block}", rank, pos)
    value = index.value
    for i, d in enumerate(value.type.dims):
        if d is not None and w.has_mask(d):
            masks.append(expand(f"mask_{d}", rank, pos + i))
    return expand(value.name, rank, pos, value.type.rank)


def full_mask(w: KernelWriter, access: Access, base: str | None, extra: Value | None) -> str | None:
    if extra is None:
        return base
    extra_text = w.operand(extra, access.dims, None)
    return extra_text if base is None else f"({base}) & {extra_text}"


# -- ops -------------------------------------------------------------------------
def load(w: KernelWriter, op: Op) -> None:
    (access,) = op.args
    kind = choose_style(w, op)
    if kind == "tensor_descriptor":
        w.assign(op, f"{descriptor(w, access)}.load({block_offsets(w, access)})")
        return
    if kind == "block_ptr":
        check = boundary(w, access)
        pad = ', padding_option="zero"' if check else ""
        w.assign(op, f"tl.load({block_pointer(w, access)}{check}{pad})")
        return
    ptr, mask = pointer(w, access)
    mask = full_mask(w, access, mask, op.attrs.get("extra_mask"))
    masked = f", mask={mask}, other=0" if mask else ""
    w.assign(op, f"tl.load({ptr}{masked})")


def store(w: KernelWriter, op: Op, fn: str = "tl.store") -> None:
    access, value = op.args
    text = w.operand(value, access.dims, access.param.dtype)
    kind = choose_style(w, op)
    if kind != "pointer" and (not isinstance(value, Value) or value.type.dims != access.dims):
        text = f"tl.broadcast_to({text}, {w.shape(access.dims)})"
    if kind == "tensor_descriptor":
        w.line(f"{descriptor(w, access)}.store({block_offsets(w, access)}, {text})")
        return
    if kind == "block_ptr":
        w.line(f"tl.store({block_pointer(w, access)}, {text}{boundary(w, access)})")
        return
    ptr, mask = pointer(w, access)
    mask = full_mask(w, access, mask, op.attrs.get("extra_mask"))
    w.line(f"{fn}({ptr}, {text}{f', mask={mask}' if mask else ''})")


def atomic_add(w: KernelWriter, op: Op) -> None:
    store(w, op, "tl.atomic_add")
