"""Batched products over a batch tile of one, written as 2-D Triton ("flat" values).

Triton lowers only 2-D `tl.dot`s to Hopper's wgmma: a 3-D one, even over a batch of one,
falls back to the older mma (bmm 64x1024^3 bf16 ran at about 80 TFLOP/s on the H200).
When a config gives the leading dim of a 3-D product one element, the product and the
values joined to it (the accumulator its loop carries, the loads of its operands, the
elementwise ops, reductions, views and stores around it: an attention's row statistics
too) are written without that dim ("flat"), so that the loop reads like a plain matrix
product's. So is a load that a squeeze of its leading dim follows (`x[tile_b, tile_m,
:].squeeze(0)`, a row of a batch tile of one): the flat load is the squeezed tile. (Triton
3.6 on the H200 miscomputed a 3-D load reshaped to 2-D and pipelined (num_stages >= 2)
when the tile fed two products, one as the left operand and one as the right: an attention
backward's dK.) The plan is made per kernel and config, before any code is written:

- a flat value's Triton variable holds the tile without its leading dim (a loop-carried
  variable is flat before, inside and after its loop, or not at all);
- any other consumer gets a copy with the leading dim put back (`x[None, :, :]`, which
  moves no data), and a product whose operand is not flat reshapes it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tilecraft.codegen.common import is_rolled
from tilecraft.ir.nodes import Access, Branch, Carried, Loop, Node, Op, Value
from tilecraft.ir.ops import Kind, lookup, writes
from tilecraft.ir.types import Dim

if TYPE_CHECKING:
    from tilecraft.codegen.kernel import KernelWriter

FLAT_INDICES = ("block", "scalar", "unit", "newaxis")  # what a flat load or store may index


@dataclass
class FlatPlan:
    """The names of the values written flat (see the module docstring)."""

    names: set[str] = field(default_factory=set)

    def __contains__(self, value: object) -> bool:
        # by rank too: a user combine function's 0-d values are named in their own space
        return isinstance(value, Value) and value.type.rank >= 2 and value.name in self.names


def plan_flat(w: KernelWriter) -> FlatPlan:
    """The flat values of the writer's kernel under its config (none in the check mode,
    whose bounds reports are written for full-rank accesses)."""
    if w.check:
        return FlatPlan()
    ops, carried = w.kernel.walk(), _carried(w.kernel.body)
    wanted = _wanted(w, ops, carried)
    assumed = {c.param.name for c in carried if c.param.name in wanted}
    while True:  # drop carried variables whose value at the end of a trip is not flat
        names = _forward(w, ops, wanted, assumed)
        broken = {c.param.name for c in carried if c.param.name in assumed - _finals(c, names)}
        if not broken:
            return FlatPlan(names)
        assumed -= broken


def _finals(c: Carried, names: set[str]) -> set[str]:
    return {c.param.name} if c.final is not None and c.final.name in names else set()


def _carried(body: list[Node]) -> list[Carried]:
    found: list[Carried] = []
    for node in body:
        if isinstance(node, Loop):
            found += node.carried + _carried(node.body)
        elif isinstance(node, Branch):
            found += _carried(node.then) + _carried(node.orelse)
    return found


# -- which values may be flat --------------------------------------------------------
def unit_lead(w: KernelWriter, dims: tuple[Dim, ...]) -> bool:
    """Whether `dims` are two or more whose first holds one element under this config,
    and none of which is looped over in chunks."""
    if len(dims) < 2 or any(d is not None and is_rolled(w.kernel.blocks[d]) for d in dims):
        return False
    lead = dims[0]
    return lead is None or (w.kernel.blocks[lead].fixed_size or 1) == 1


def flat_product(w: KernelWriter, op: Op) -> bool:
    """A 3-D product whose operands, accumulator and result all have a leading dim of one."""
    if op.name != "dot" or op.out is None:
        return False
    a, b, acc = op.args
    values = [op.out, a, b] + ([] if acc is None else [acc])
    return all(v.type.rank == 3 and unit_lead(w, v.type.dims) for v in values)


def _elementwise(op: Op) -> bool:
    return lookup(op.name).kind == Kind.ELEMENTWISE or op.name == "expand"


def _transpose(op: Op) -> bool:
    """A swap of the last two dims of a 3-D tile (`k.transpose(1, 2)`): `tl.trans` on
    the 2-D tile."""
    return op.name == "permute" and tuple(op.attrs["perm"]) == (0, 2, 1)


FLAT_REDUCTIONS = ("sum", "max", "min", "argmax", "argmin")
FLAT_OPS = ("dot", "load", "full", "reduce", "index_view", "reshape")


def _may_be_flat(op: Op) -> bool:
    return op.name in FLAT_OPS or _elementwise(op) or _transpose(op)


def _wanted(w: KernelWriter, ops: list[Op], carried: list[Carried]) -> set[str]:
    """The values joined to a flat product through ops that can be written flat, and
    through loops: the part of the kernel over a batch of one around its products."""
    links: dict[str, set[str]] = {}

    def link(x: Value, y: Value) -> None:
        if unit_lead(w, x.type.dims) and unit_lead(w, y.type.dims):
            links.setdefault(x.name, set()).add(y.name)
            links.setdefault(y.name, set()).add(x.name)

    for op in ops:
        if op.out is not None and _may_be_flat(op):
            links.setdefault(op.out.name, set())
            for arg in op.args:
                if isinstance(arg, Value):
                    link(op.out, arg)
    for c in carried:
        link(c.param, c.init)
        if c.final is not None:
            link(c.param, c.final)
    wanted = {op.out.name for op in ops if op.out is not None and flat_product(w, op)}
    wanted |= _squeezed_loads(w, ops)
    stack = list(wanted)
    while stack:
        for name in links.get(stack.pop(), ()):
            if name not in wanted:
                wanted.add(name)
                stack.append(name)
    return wanted


def _squeezed_loads(w: KernelWriter, ops: list[Op]) -> set[str]:
    """The loads of unit-lead tiles whose leading dim a reshape drops (a squeeze)."""
    loads = {op.out.name for op in ops if op.name == "load" and op.out is not None}
    found = set()
    for op in ops:
        if op.name == "reshape" and op.out is not None and isinstance(op.args[0], Value):
            x = op.args[0]
            if x.name in loads and unit_lead(w, x.type.dims) and _drops_lead(x, op.out):
                found.add(x.name)
    return found


def _drops_lead(x: Value, out: Value) -> bool:
    return out.type.dims == x.type.dims[1:]


def squeezes_flat(w: KernelWriter, op: Op) -> bool:
    """A reshape that drops a flat value's leading dim: the flat variable is its result."""
    if op.name != "reshape" or op.out is None or op.out in w.flat:
        return False
    x = op.args[0]
    return x in w.flat and _drops_lead(x, op.out)


def _forward(w: KernelWriter, ops: list[Op], wanted: set[str], assumed: set[str]) -> set[str]:
    """The flat values, in program order, given the carried variables assumed flat."""
    names = set(assumed)
    for op in ops:
        if op.out is not None and _writes_flat(w, op, names, op.out.name in wanted):
            names.add(op.out.name)
    return names


def _writes_flat(w: KernelWriter, op: Op, names: set[str], wanted: bool) -> bool:
    """Whether `op` writes its value flat, given the flat values before it."""
    assert op.out is not None
    if not unit_lead(w, op.out.type.dims):
        return False
    if op.name == "load":
        return wanted and flat_access(w, op)
    if op.name == "full":
        return wanted
    if op.name == "dot":
        return flat_product(w, op)
    if _elementwise(op):
        return _flat_elementwise(op, names)
    source = op.args[0]
    if op.name == "index_view" and _new_lead(op, names):
        return wanted  # the view without its new leading axis (`index[None, :, None]`)
    if not isinstance(source, Value) or source.name not in names:
        return False
    if op.name == "reduce":
        return op.attrs["kind"] in FLAT_REDUCTIONS and op.attrs["axis"] != 0
    if op.name == "index_view":
        return op.attrs["index"][0] == ":"  # the source's leading dim stays first
    return op.name == "reshape" or _transpose(op)


def _new_lead(op: Op, names: set[str]) -> bool:
    """A view of a value that is not flat putting a new axis first: a causal mask's
    `tile_m.index[None, :, None]` beside a batch tile of one is flat as `index[:, None]`."""
    source = op.args[0]
    flat_source = isinstance(source, Value) and source.name in names
    return op.attrs["index"][0] == "None" and not flat_source


def _flat_elementwise(op: Op, names: set[str]) -> bool:
    """An elementwise op on flat values: every operand of its rank is flat (lower ranks
    broadcast from the right, as they do on the flat tiles), and one is."""
    assert op.out is not None
    if any(isinstance(a, Value) for a in op.attrs.values()):
        return False
    rank = op.out.type.rank
    full = [a for a in op.args if isinstance(a, Value) and a.type.rank == rank]
    return bool(full) and all(v.name in names for v in full)


def flat_access(w: KernelWriter, op: Op) -> bool:
    """A load or store that can be written on tiles without their leading dim: pointer
    indexing, a leading dim that is a plain tile of one (or a new axis), no gathers, no
    extra mask; a store writes a flat value of the access's shape."""
    from tilecraft.codegen.access import choose_style  # access imports this module

    access: Access = op.args[0]
    dims, starts = access.layout()
    if not unit_lead(w, dims) or choose_style(w, op) != "pointer":
        return False
    if op.attrs.get("extra_mask") is not None or isinstance(op.attrs.get("other"), Value):
        return False
    value = op.args[1] if op.name != "load" else None
    if value is not None and (not isinstance(value, Value) or value.type.dims != dims):
        return False
    for index, start in zip(access.indices, starts, strict=True):
        if index.kind not in FLAT_INDICES:
            return False
        if index.kind == "block" and start == 0 and not lead_block(w, index.block):
            return False
    return True


def lead_block(w: KernelWriter, block_id: int | None) -> bool:
    """A block whose single position is a scalar the kernel already holds."""
    if block_id is None:
        return False
    block = w.kernel.blocks[block_id]
    return block.kind != "grid" and (block.kind != "reduction" or not is_rolled(block))


# -- writing ---------------------------------------------------------------------------
def writes_flat(w: KernelWriter, op: Op) -> bool:
    """Whether the writer writes `op` flat: its value is flat, or it stores a flat value
    through flat pointers."""
    if op.out is not None:  # (an atomic whose result is read is not: none is planned flat)
        return op.out in w.flat
    stores = writes(op.name) and len(op.args) == 2  # (a compare-and-swap is never flat)
    return stores and op.args[1] in w.flat and flat_access(w, op)


def unflatten(w: KernelWriter, op: Op) -> Op:
    """`op` reading full-rank copies of the flat values it takes, unless it writes flat
    itself (the copies are written before it)."""
    if not w.flat.names or writes_flat(w, op) or squeezes_flat(w, op):
        return op
    copies: dict[str, Value] = {}
    for v in op.inputs():
        if v in w.flat and v.name not in copies:
            # a fresh name each time: one assigned both before and inside a loop would
            # become a variable the loop carries
            w.copies += 1
            copy = copies[v.name] = Value(v.type, f"{v.name}_3d_{w.copies}", v.weak)
            w.line(f"{copy.name} = {w.as_full(v)}")
    if not copies:
        return op
    args = tuple(_swap(a, copies) for a in op.args)
    attrs = {k: _swap(a, copies) for k, a in op.attrs.items()}
    return dataclasses.replace(op, args=args, attrs=attrs)


def _swap(x: Any, copies: dict[str, Value]) -> Any:
    """`x` (an op's argument) with values replaced by their copies named in `copies`."""
    if isinstance(x, Value):
        return copies.get(x.name, x)
    if isinstance(x, Access):
        indices = tuple(dataclasses.replace(i, value=_swap(i.value, copies)) for i in x.indices)
        return Access(x.param, indices)
    return x
