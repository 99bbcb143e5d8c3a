"""Products over a K dim whose last tile stops short: the lanes past its end must be 0 in
both operands' K positions, not just in one.

A load writes 0 in lanes past its tile's end, and the Triton product adds up all lanes
of its tiles, so a product of two loads needs nothing more. A computed operand holds
whatever its expression gives there (an attention's probabilities: `exp2(0 - max)`, which
is inf for a row whose maximum is below -128), and `inf * 0` is NaN. Such an operand is
zeroed past the end first (`tl.where`; one select per element, only on tiles with a mask).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tilecraft.codegen.common import expand
from tilecraft.ir.nodes import Op, Value
from tilecraft.ir.types import Dim

if TYPE_CHECKING:
    from tilecraft.codegen.kernel import KernelWriter

# ops that move or convert their first argument's elements, keeping zeros zero
KEEPS_ZEROS = ("permute", "reshape", "index_view", "cast", "to", "expand")


def zero_padded(producers: dict[str, Op], value: Value, k: Dim) -> bool:
    """Whether `value` is 0 in lanes past block `k`'s end: a load over `k` (masked by it,
    without another fill value), or one moved or converted (a transpose, a cast)."""
    op = producers.get(value.name)
    while op is not None and op.name in KEEPS_ZEROS and isinstance(op.args[0], Value):
        op = producers.get(op.args[0].name)
    if op is None or op.out is None or op.name != "load" or k not in op.out.type.dims:
        return False
    return op.attrs.get("other") in (None, 0, 0.0)


def padded_operand(w: KernelWriter, value: Value, k: Dim, k_from_end: int) -> Value:
    """`value` (an operand of a product over block `k`, at `k_from_end` dims from its last)
    with its lanes past `k`'s end set to 0, unless they are 0 already."""
    if k is None or not w.has_mask(k) or zero_padded(w.producers(), value, k):
        return value
    rank = len(w.text_dims(value))
    mask = expand(f"mask_{k}", rank, rank - k_from_end)
    w.copies += 1
    padded = Value(value.type, f"{value.name}_k{w.copies}", value.weak)
    w.line(f"{padded.name} = tl.where({mask}, {value.name}, 0)")
    if value in w.flat:
        w.flat.names.add(padded.name)
    return padded
