"""Atomics in generated code: `tc.atomic_add` and its kin, and compare-and-swap, masked
as stores are (`access.py`), their results assigned where the kernel reads them."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tilecraft.codegen import flat
from tilecraft.codegen.access import check_bounds, full_mask, pointer, store, written
from tilecraft.codegen.rules import tl_dtype
from tilecraft.ir.nodes import Access, Op, Value
from tilecraft.runtime.cpu import interpreter_set

if TYPE_CHECKING:
    from tilecraft.codegen.kernel import KernelWriter


def atomic(w: KernelWriter, op: Op) -> None:
    """`tc.atomic_add` and its kin (max, min, and, or, xor, xchg): Triton's function of the
    same name, masked as a store is, its result assigned where the kernel reads it."""
    floats = op.args[0].param.dtype.is_floating_point
    if op.name == "atomic_xchg" and floats and interpreter_set() and not flat.writes_flat(w, op):
        _exchange_bits(w, op)
        return
    store(w, op, f"tl.{op.name}")


def _exchange_bits(w: KernelWriter, op: Op) -> None:
    """Triton's interpreter exchanges integers only: exchange a float's bits."""
    access, value = op.args
    bits = f"tl.int{access.param.dtype.itemsize * 8}"
    ptr, masks, scalars = pointer(w, access)
    masks = check_bounds(w, op, masks, op.attrs.get("extra_mask"))
    mask = full_mask(w, access, masks, scalars, op.attrs.get("extra_mask"))
    new = f"{_whole(w, access, value)}.to({bits}, bitcast=True)"
    where = f"({ptr}).to(tl.pointer_type({bits}), bitcast=True)"
    call = f"tl.atomic_xchg({where}, {new}{f', mask={mask}' if mask else ''})"
    back = f".to({tl_dtype(access.param.dtype)}, bitcast=True)" if op.out is not None else ""
    written(w, op, call + back, mask)


def atomic_cas(w: KernelWriter, op: Op) -> None:
    """Triton's compare-and-swap takes no mask: a masked-off lane swaps at the tensor's
    first element with its expected value as the new one, which changes nothing."""
    access, expected, value = op.args
    ptr, masks, scalars = pointer(w, access)
    masks = check_bounds(w, op, masks, op.attrs.get("extra_mask"))
    mask = full_mask(w, access, masks, scalars, op.attrs.get("extra_mask"))
    cmp, new = (_whole(w, access, v) for v in (expected, value))
    if mask:
        ptr = f"tl.where({mask}, {ptr}, {access.param.name})"
        new = f"tl.where({mask}, {new}, {cmp})"
    sem = op.attrs.get("sem")
    written(w, op, f"tl.atomic_cas({ptr}, {cmp}, {new}{f', sem={sem!r}' if sem else ''})", mask)


def _whole(w: KernelWriter, access: Access, x: Value | float) -> str:
    """An operand of a compare-and-swap as a tile of the accessed shape and dtype (Triton's
    takes neither numbers nor smaller tiles)."""
    dtype, shape = access.param.dtype, w.shape(access.dims)
    text = w.operand(x, access.dims, dtype)
    if not isinstance(x, Value):
        return f"tl.full({shape}, {text}, {tl_dtype(dtype)})"
    return f"tl.broadcast_to({text}, {shape})" if access.dims else text
