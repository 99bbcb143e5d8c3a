"""Checking a DeviceKernel against the op table before code is generated from it.

The frontend builds IR through handlers; the verifier checks what they built against
each op's entry in `tilecraft.ir.ops` (known op, operand count, result shape and dtype
of elementwise and memory ops, blocks that exist), so a handler bug is reported at the
user's line as an internal error instead of surfacing as wrong Triton code.
"""

from __future__ import annotations

from typing import Any

import torch

from tilecraft.exc import LoweringError
from tilecraft.ir.nodes import Access, DeviceKernel, Op, Value, walk_ops
from tilecraft.ir.ops import OPDEFS, Kind, Result, is_elementwise
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
    if opdef.kind is Kind.MEMORY:
        return _memory_problem(op, opdef.arity)
    return None


def _memory_problem(op: Op, arity: int) -> str | None:
    """A load, store or atomic: its access and operands, and a result where it has one
    (a load's and a read atomic's: the tile accessed, of the tensor's dtype)."""
    if len(op.args) != arity or not isinstance(op.args[0], Access):
        return f"it takes an access and {arity - 1} operands"
    if op.out is None:
        return "a load needs a result" if op.name == "load" else None
    if op.name == "store":
        return "a store has no result"
    access: Access = op.args[0]
    if op.out.type.dims != access.dims or op.out.type.dtype != access.param.dtype:
        return f"its result {op.out.type} is not the tile it accesses"
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
