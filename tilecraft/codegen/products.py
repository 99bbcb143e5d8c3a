"""Matrix products in generated code: `tl.dot` in the op's compute dtype, its operands
(interpreter upcasts, TF32 or IEEE float32, integer and float64 outputs), the sum with an
accumulator rounded once, and products whose inner dim is too short for `tl.dot`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from tilecraft.codegen.padding import padded_operand
from tilecraft.codegen.rules import convert, tl_dtype, triton_interpret
from tilecraft.ir.nodes import Op, Value
from tilecraft.ir.types import Dim

if TYPE_CHECKING:
    from tilecraft.codegen.kernel import KernelWriter

INTERPRETER_UPCAST = (torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2)
MIN_DOT_K = 16  # the shortest inner dim tl.dot accepts on a GPU (32 for 8-bit operands)


def op_dot(w: KernelWriter, op: Op) -> None:
    """`tl.dot` (a broadcast multiply summed over K when K is too short for it), in the
    op's compute dtype; with `product`, the product is cast before it is accumulated.
    A flat product (codegen/flat.py) is a 2-D `tl.dot`, which Hopper runs on wgmma."""
    assert op.out is not None
    a, b, acc = op.args
    k = a.type.dims[-1]
    a, b = padded_operand(w, a, k, 1), padded_operand(w, b, k, 2)
    flat = op.out in w.flat
    texts = [w.as_flat(v) if flat else batched(w, v, op.out) for v in (a, b)]
    acc_text = None if acc is None else w.as_flat(acc) if flat else acc.name
    compute, product = op.attrs["compute"], op.attrs.get("product")
    small = block_size(w, a.type.dims[-1]) < MIN_DOT_K * (2 if a.type.dtype.itemsize == 1 else 1)
    operands = dot_operands(w, a.type.dtype, b.type.dtype, *texts)
    if not small and acc is not None and acc.type.dtype == compute and product in (None, compute):
        w.assign(op, f"tl.dot({operands}, acc={acc_text})")
        return
    expr = small_product(w, op, *texts) if small else f"tl.dot({operands})"
    if acc is None:
        w.assign(op, w.cast_out(expr, compute, op.out.type.dtype))
        return
    assert acc_text is not None
    w.assign(op, accumulated(w, acc, acc_text, expr, compute, product))


def accumulated(
    w: KernelWriter, acc: Value, acc_text: str, expr: str, compute: torch.dtype, product: Any
) -> str:
    """`acc + product`, the product (`expr`, in `compute`) cast to `product` first where
    given, the sum taken in the wider of the two and rounded once to the accumulator's
    dtype: PyTorch's `addmm` of a bfloat16 accumulator adds in float32 and rounds once
    (the interpreter added two bfloat16 tiles as their bits: -0.0 + 1.0 gave -1.0)."""
    term = compute if product is None else product
    expr = w.cast_out(expr, compute, term)
    dtype = acc.type.dtype
    wide = dtype if dtype.itemsize >= term.itemsize else term
    total = f"{w.cast_out(acc_text, dtype, wide)} + {w.cast_out(expr, term, wide)}"
    return w.cast_out(total, wide, dtype)


def batched(w: KernelWriter, operand: Value, out: Value) -> str:
    """An operand of a 3-D `tl.dot` over the product's batch (which needs equal batch
    dims): one of a batch broadcast."""
    lead = out.type.dims[:-2]
    if operand.type.dims[:-2] == lead:
        return operand.name
    return f"tl.broadcast_to({operand.name}, {w.shape((*lead, *operand.type.dims[-2:]))})"


def dot_operands(w: KernelWriter, dtype: torch.dtype, other: torch.dtype, a: str, b: str) -> str:
    """`tl.dot`'s arguments for operands `a`, `b` (Triton text) of these dtypes."""
    if dtype in INTERPRETER_UPCAST and triton_interpret():
        # Triton's CPU interpreter multiplies bf16 wrongly and has no fp8 products: both
        # operands widened to float32 (from the bits, where it misreads them: rules.convert)
        wide = torch.float32
        return f"{convert(a, dtype, wide)}, {convert(b, other, wide)}"
    if dtype == torch.float32 and other == torch.float32:
        precision = "tf32" if w.allow_tf32 else "ieee"
        return f'{a}, {b}, input_precision="{precision}"'
    if not dtype.is_floating_point:  # tl.dot's result is float32 unless told
        return f"{a}, {b}, out_dtype=tl.int32"
    if dtype == torch.float64:
        return f"{a}, {b}, out_dtype=tl.float64"
    return f"{a}, {b}"


def block_size(w: KernelWriter, dim: Dim) -> int:
    return 1 if dim is None else w.kernel.blocks[dim].fixed_size or 1


def small_product(w: KernelWriter, op: Op, a_text: str, b_text: str) -> str:
    """A product whose inner dim is too short for `tl.dot` (which needs K >= 16 on a
    GPU), in the compute dtype: one outer product per k, each operand's k-th column
    or row picked out by a masked sum. (A broadcast multiply summed over K is what it
    means, but Triton's GPU compiler turns that pattern into a `tl.dot` of its own,
    which gave wrong sums for K < 16 and TF32 rounding on the H200.)"""
    a, b, _ = op.args
    assert op.out is not None
    compute = tl_dtype(op.attrs["compute"])
    rank, k = len(w.text_dims(op.out)), block_size(w, a.type.dims[-1])
    lead, lead_none = ":, " * (rank - 2), "None, " * (rank - 2)
    out, lanes = f"{op.out.name}_small", f"{op.out.name}_k"
    w.line(f"{lanes} = tl.arange(0, {k})")

    def term(kk: str) -> str:
        col = f"tl.where({lanes}[{lead_none}None, :] == {kk}, {a_text}.to({compute}), 0)"
        row = f"tl.where({lanes}[{lead_none}:, None] == {kk}, {b_text}.to({compute}), 0)"
        col, row = f"tl.sum({col}, {rank - 1})", f"tl.sum({row}, {rank - 2})"
        return f"{col}[{lead}:, None] * {row}[{lead}None, :]"

    w.line(f"{out} = {term('0')}")
    w.line(f"for {lanes}_i in tl.static_range(1, {k}):")
    w.line(f"    {out} = {out} + {term(lanes + '_i')}")
    return out
