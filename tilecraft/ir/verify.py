"""Checking a DeviceKernel against the op table before code is generated from it.

The frontend builds IR through handlers; the verifier checks what they built against
each op's entry in `tilecraft.ir.ops` (known op, operand count, result shape and dtype
of elementwise ops, blocks that exist), so a handler bug is reported at the user's line
as an internal error instead of surfacing as wrong Triton code.
"""

from __future__ import annotations

from typing import Any

import torch

from tilecraft.exc import LoweringError
from tilecraft.ir.nodes import DeviceKernel, Op, Value, walk_ops
from tilecraft.ir.ops import OPDEFS, Result, is_elementwise
from tilecraft.ir.types import broadcast_dims


def verify(kernel: DeviceKernel) -> DeviceKernel:
    """`kernel`, checked: raise LoweringError at the first op that breaks its entry."""
    for op in walk_ops(kernel.body):
        problem = _problem(kernel, op)
        if problem:
            raise LoweringError(f"internal error: invalid IR for `{op.name}`: {problem}", op.loc)
    return kernel


def _problem(kernel: DeviceKernel, op: Op) -> str | None:
    opdef = OPDEFS.get(op.name)
    if opdef is None:
        return "the op table has no such op"
    if op.out is not None and any(
        d is not None and d not in kernel.blocks for d in op.out.type.dims
    ):
        return "its result uses a block the kernel does not have"
    if is_elementwise(opdef):
        return _elementwise_problem(op, opdef.arity, opdef.result)
    return None


def _elementwise_problem(op: Op, arity: int, result: Result) -> str | None:
    if len(op.args) != arity:
        return f"{len(op.args)} operands, the table says {arity}"
    values = [a for a in op.args if isinstance(a, Value)]
    if not values or op.out is None:
        return "an elementwise op needs a tile operand and a result"
    dims: Any = ()
    for v in values:
        dims = broadcast_dims(dims, v.type.dims) if dims is not None else None
    if dims != op.out.type.dims:
        return f"result dims {op.out.type.dims} are not the operands' broadcast {dims}"
    if result is Result.BOOL and op.out.type.dtype != torch.bool:
        return "a test or comparison must give bool"
    return None
