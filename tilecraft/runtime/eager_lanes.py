"""Eager mode's accumulators carried over their own tile loop, kept as compiled code keeps
them.

An accumulator made over a `register_block_size` dim (`acc = tc.full([tm, bn], -inf)`) and
updated in `for tn in tc.tile(n, block_size=bn)` has lanes past the row's end in the loop's
last tile. Compiled code leaves them as they were (`codegen.kernel.live_lanes`: a select at
the end of each iteration), so `acc.amax(-1)` is PyTorch's row maximum; eagerly the short
tile is padded with zeros and those lanes computed (`max(acc, 0)`). So each loop nested in a
device loop snapshots, as an iteration starts, the variables its body assigns, and at the
iteration's end puts back the lanes past a short tile's end, along the dim that was made
from the tile's registered block size (`language.creation` marks the dim on the tensor it
makes, and `created` on those PyTorch's creation functions make and on elementwise ops'
results; the loop reads the mark once and carries it along).
"""

from __future__ import annotations

import ast
from typing import Any

import torch

from tilecraft.language.creation import mark_lanes
from tilecraft.language.tiles import LANES, Tile
from tilecraft.runtime.eager_index import assigned_names

# PyTorch's functions making a tensor of a given size, by the position of the size: a tile
# made by one with a `register_block_size` value as a dim is marked as `tc.full`'s is
_SIZED = {torch.full: 0, torch.zeros: 0, torch.ones: 0}
_SIZED |= {torch.Tensor.new_full: 1, torch.Tensor.new_zeros: 1, torch.Tensor.new_ones: 1}
# elementwise functions: their result's lanes are their arguments' (of the result's shape)
_POINTWISE = {
    getattr(owner, name)
    for owner in (torch, torch.Tensor)
    for name in ("add", "sub", "mul", "div", "maximum", "minimum", "where", "exp", "exp2", "log",
                 "log2", "abs", "neg", "sqrt", "rsqrt", "sigmoid", "tanh", "clamp")
}  # fmt: skip
_POINTWISE |= {getattr(torch.Tensor, n) for n in ("to", "float", "clone", "type_as")}
_POINTWISE |= {
    getattr(torch.Tensor, f"__{prefix}{name}__")
    for name in ("add", "sub", "mul", "truediv", "pow")
    for prefix in ("", "i", "r")
} | {torch.Tensor.__neg__}


def created(func: Any, args: tuple, result: Any) -> Any:
    """`result` of `func(*args)`, its dims made from `register_block_size` values marked
    where `func` makes a tensor of a size (`torch.full([tm, bn], ...)`, `x.new_zeros(tm,
    bn)`) or, elementwise, as an argument of its shape is (`torch.ones([tm, bn]) - 1`);
    anything else unchanged."""
    at = _SIZED.get(func)
    if at is None:
        return _derived(args, result) if func in _POINTWISE else result
    if len(args) <= at:
        return result
    size = args[at] if isinstance(args[at], (list, tuple, torch.Size)) else args[at:]
    return mark_lanes(result, size)


def _derived(args: tuple, result: Any) -> Any:
    """`result` marked as the first argument of its shape that is marked (the lanes of an
    elementwise op's result are those of its arguments)."""
    if not isinstance(result, torch.Tensor) or hasattr(result, LANES):
        return result
    for a in args:
        lanes = getattr(a, LANES, None) if isinstance(a, torch.Tensor) else None
        if lanes and a.shape == result.shape:
            setattr(result, LANES, lanes)
            break
    return result


class CarriedLanes(ast.NodeTransformer):
    """Around every `for` loop it visits (not the one it starts from: `visit_nested`): each
    name its body assigns gets its value at an iteration's start kept (`_tc_old_*`) and,
    at the iteration's end, `_tc_keep`; its lanes (`_tc_lanes_*`, found once a loop) ride
    along in plain variables, as tensor attributes are slow to read under eager mode's
    torch-function mode."""

    def __init__(self) -> None:
        self.count = 0

    def visit_nested(self, loop: ast.For) -> ast.For:
        self.generic_visit(loop)
        return loop

    def visit_For(self, node: ast.For) -> list[ast.stmt] | ast.For:
        self.generic_visit(node)
        # (eager mode's own names left out: inner loops' snapshots)
        bound = {n for s in node.body for n in assigned_names(s) if not n.startswith("_tc_")}
        names = sorted(bound - assigned_names(node.target))
        if not names:
            return node
        self.count += 1
        target, k = ast.unparse(node.target), self.count
        before = "\n".join(f"_tc_lanes_{k}_{n} = None" for n in names)
        start = "\n".join(
            f"try:\n    _tc_old_{k}_{n} = {n}\nexcept NameError:\n    _tc_old_{k}_{n} = None"
            for n in names
        )
        end = "\n".join(
            f"if _tc_old_{k}_{n} is not None:\n    {n}, _tc_lanes_{k}_{n} = _tc_keep("
            f"{target}, _tc_old_{k}_{n}, {n}, _tc_lanes_{k}_{n})"
            for n in names
        )
        node.body = [*_statements(start), *node.body, *_statements(end)]
        return [*_statements(before), node]


def _statements(code: str) -> list[ast.stmt]:
    return ast.parse(code).body


def keep(target: Any, old: Any, new: Any, lanes: dict | None) -> tuple[Any, dict]:
    """`new` with the lanes past the end of each short tile of `target` (the loop's tile
    or tiles) taken from `old`, along the dim of `lanes` (`{dim: RegisteredSize}`; None:
    read off `old`, as the loop's first iteration starts) made from that tile's registered
    block size; and the lanes."""
    if lanes is None:
        lanes = getattr(old, LANES, {}) if isinstance(old, torch.Tensor) else {}
    if not lanes or not isinstance(new, torch.Tensor):
        return new, lanes
    for tile in target if isinstance(target, tuple) else (target,):
        if not isinstance(tile, Tile) or tile.registered is None:
            continue
        dims = [d for d, size in lanes.items() if size is tile.registered]
        if dims and len(tile) < tile.registered and new.shape == old.shape:
            live = torch.arange(old.size(dims[0]), device=old.device) < len(tile)
            shape = [-1 if d == dims[0] else 1 for d in range(old.dim())]
            new = torch.where(live.view(shape), new, old)
    return new, lanes
