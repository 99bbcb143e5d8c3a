"""Writing a body whose whole-dimension blocks are looped over in chunks.

With `reduction_loops=[chunk]`, values spanning a rolled dimension are never
materialized whole. Each consumer of such values (a reduction over the dimension, or
a store) gets its own loop over chunks, which recomputes the values it needs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from tilecraft.codegen import scans
from tilecraft.codegen.common import expand, is_rolled, reduce_compute
from tilecraft.codegen.rules import TL_REDUCE, identity, tl_dtype
from tilecraft.exc import LoweringError
from tilecraft.ir.nodes import Access, Branch, Loop, Node, Op, Value, walk_ops
from tilecraft.ir.ops import writes

if TYPE_CHECKING:
    from tilecraft.codegen.kernel import KernelWriter


class RolledBody:
    """Emits `nodes`, deferring values over rolled blocks into per-consumer loops."""

    def __init__(self, w: KernelWriter, nodes: list[Node]) -> None:
        self.w, self.nodes = w, nodes
        self.rolled = {b.id for b in w.kernel.blocks.values() if is_rolled(b)}
        self.deferred: dict[int, Op] = {}

    def spans_rolled(self, op: Op) -> set[int]:
        dims = set(op.out.type.dims) if op.out else set()
        for a in op.args:
            if isinstance(a, Access):
                dims |= set(a.dims)
        return {d for d in dims if d is not None} & self.rolled

    def write(self) -> None:
        for node in self.nodes:
            if isinstance(node, Loop):
                self.check_not_deferred(node.body)
                self.w.loop(node)
            elif isinstance(node, Branch):
                self.check_branch(node)
                self.w.branch(node)
            elif node.out is not None and writes(node.name) and self.spans_rolled(node):
                raise LoweringError(
                    f"the values `{node.name}` returns span a looped reduction dim, whose chunks "
                    "are not kept; use reduction_loops=[None] for "
                    "this kernel",
                    node.loc,
                )
            elif node.out is not None and self.spans_rolled(node):
                self.deferred[id(node.out)] = node
            elif self.spans_rolled(node) or self.uses_deferred(node):
                self.roll(node)
            else:
                self.w.op(node)

    def uses_deferred(self, op: Op) -> bool:
        return any(id(v) in self.deferred for v in op.inputs())

    def check_branch(self, node: Branch) -> None:
        self.check_not_deferred([*node.then, *node.orelse])
        for m in node.merged:
            dims = {*m.then.type.dims, *m.orelse.type.dims}
            if dims & self.rolled:
                raise LoweringError(
                    f"`{m.name}` spans a looped reduction dim and is assigned under an `if`; "
                    "use reduction_loops=[None] for this kernel",
                    node.loc,
                )

    def check_not_deferred(self, body: list[Node]) -> None:
        for op in walk_ops(body):
            if self.uses_deferred(op):
                raise LoweringError(
                    "a value over a looped reduction dim is used in a nested loop or branch; "
                    "use reduction_loops=[None] for this kernel",
                    op.loc,
                )

    def needed(self, op: Op) -> list[Op]:
        """The deferred ops `op` depends on, in program order."""
        seen: dict[int, Op] = {}
        stack = list(op.inputs())
        while stack:
            v = stack.pop()
            producer = self.deferred.get(id(v))
            if producer is not None and id(producer) not in seen:
                seen[id(producer)] = producer
                stack += producer.inputs()
        order = {id(n): i for i, n in enumerate(self.nodes)}
        return sorted(seen.values(), key=lambda n: order[id(n)])

    def rolled_block(self, op: Op, needed: list[Op]) -> int:
        blocks = set().union(self.spans_rolled(op), *(self.spans_rolled(n) for n in needed))
        if len(blocks) != 1:
            raise LoweringError("an op spans several looped reduction dims", op.loc)
        for n in [op, *needed]:
            dims = n.out.type.dims if n.out is not None else ()
            if any(dims.count(b) > 1 for b in blocks):  # all pairs: one chunk at a time can't
                raise LoweringError(
                    "this op holds a looped dim twice (two dims of the same size, or all "
                    "pairs of its elements as sort and topk make): use reduction_loops=[None] "
                    "for this kernel",
                    n.loc,
                )
        return blocks.pop()

    def roll(self, op: Op) -> None:
        needed = self.needed(op)
        block = self.w.kernel.blocks[self.rolled_block(op, needed)]
        size = self.w.size(block.id)
        if op.name == "reduce":
            self.init_accumulator(op)
        elif not writes(op.name):
            raise LoweringError(f"{op.name} over a looped reduction dim", op.loc)
        for n in needed:
            if n.name == "scan" and n.attrs["block"] == block.id:
                scans.init_carry(self.w, n)
        self.w.line(f"for roffset_{block.id} in tl.range(0, {block.extent}, {size}):")
        self.w.depth += 1
        self.w.define_indices(block, f"roffset_{block.id}")
        for n in needed:
            self.w.op(n)
        if op.name == "reduce":
            self.accumulate(op)
        else:
            self.w.op(op)
        self.w.depth -= 1
        self.w.live.discard(block.id)
        for n in needed:
            self.w.scan_carries.pop(id(n), None)
        if op.name == "reduce":
            self.finish(op)

    def init_accumulator(self, op: Op) -> None:
        x: Value = op.args[0]
        kind, compute = op.attrs["kind"], reduce_compute(op)
        if kind == "custom":
            raise LoweringError(
                "hl.reduce over a looped reduction dim: use reduction_loops=[None]", op.loc
            )
        shape = self.w.shape(x.type.dims)
        assert op.out is not None
        self.w.line(
            f"{op.out.name}_acc = tl.full({shape}, {identity(kind, compute)}, {tl_dtype(compute)})"
        )
        if kind.startswith("arg"):
            self.w.line(f"{op.out.name}_idx = tl.full({shape}, 0, tl.int64)")

    def accumulate(self, op: Op) -> None:
        x: Value = op.args[0]
        assert op.out is not None
        kind, axis, block = op.attrs["kind"], op.attrs["axis"], op.attrs["block"]
        acc, compute = f"{op.out.name}_acc", reduce_compute(op)
        value = self.w.operand(x, x.type.dims, compute)
        mask = expand(f"mask_{block}", x.type.rank, axis)
        masked = f"tl.where({mask}, {value}, {identity(kind, compute)})"
        if not self.w.has_mask(block):  # the chunks tile the row exactly
            masked, mask = value, "True"
        if kind in ("sum", "prod"):
            sign = "+" if kind == "sum" else "*"
            self.w.line(f"{acc} = {acc} {sign} {masked}")
            return
        if kind in ("max", "min") and compute == torch.float32:  # NaN stays, as in PyTorch
            fn = "maximum" if kind == "max" else "minimum"
            self.w.line(f"{acc} = tl.{fn}({acc}, {masked}, propagate_nan=tl.PropagateNan.ALL)")
            return
        self.w.line(f"{op.out.name}_v = {value}")
        value = f"{op.out.name}_v"
        better = ">" if kind in ("max", "argmax") else "<"
        take = f"{value} {better} {acc}"
        if compute.is_floating_point:  # the first NaN wins and stays, as in PyTorch
            take = f"({take}) | (({value} != {value}) & ({acc} == {acc}))"
        self.w.line(f"take = {take}" if mask == "True" else f"take = {mask} & ({take})")
        self.w.line(f"{acc} = tl.where(take, {value}, {acc})")
        if kind.startswith("arg"):
            index = expand(f"indices_{block}", x.type.rank, axis)
            self.w.line(
                f"{op.out.name}_idx = tl.where(take, {index}.to(tl.int64), {op.out.name}_idx)"
            )

    def finish(self, op: Op) -> None:
        x: Value = op.args[0]
        assert op.out is not None
        kind, axis = op.attrs["kind"], op.attrs["axis"]
        keep = ", keep_dims=True" if len(op.out.type.dims) == x.type.rank else ""
        acc, out, compute = f"{op.out.name}_acc", op.out, reduce_compute(op)
        if kind.startswith("arg"):
            self.finish_arg(op, acc, axis, keep)
            return
        if kind == "prod":
            expr = scans.reduce_by(self.w, op, acc, axis, keep)
        else:
            expr = f"{TL_REDUCE[kind]}({acc}, {axis}{keep})"
        if kind not in ("sum", "prod") and compute.is_floating_point:
            self.w.line(f"{out.name}_in = {acc}")
            expr = scans.nan_aware(self.w, kind, out.name, axis, keep, "", compute)
        self.w.line(f"{out.name} = {self.w.cast_out(expr, compute, out.type.dtype)}")

    def finish_arg(self, op: Op, acc: str, axis: int, keep: str) -> None:
        """The first index holding the best value (or the first NaN) across the lanes."""
        assert op.out is not None
        name, kind = op.out.name, op.attrs["kind"][3:]
        best = f"{TL_REDUCE[kind]}({acc}, {axis}, keep_dims=True)"
        match = f"{acc} == {name}_best"
        if reduce_compute(op).is_floating_point:
            self.w.line(f"{name}_in = {acc}")
            best = scans.nan_aware(self.w, kind, name, axis, ", keep_dims=True", "")
            match = f"({match}) | (({acc} != {acc}) & ({name}_best != {name}_best))"
        self.w.line(f"{name}_best = {best}")
        self.w.line(f"{name} = tl.min(tl.where({match}, {name}_idx, {2**62}), {axis}{keep})")
