"""Eager mode's accumulators carried over their own tile loop, kept as compiled code keeps
them.

An accumulator made over a `register_block_size` dim (`acc = tc.full([tm, bn], -inf)`) and
updated in `for tn in tc.tile(n, block_size=bn)` has lanes past the row's end in the loop's
last tile. Compiled code leaves them as they were (`codegen.kernel.live_lanes`: a select at
the end of each iteration), so `acc.amax(-1)` is PyTorch's row maximum; eagerly the short
tile is padded with zeros and those lanes computed (`max(acc, 0)`). So each loop nested in a
device loop snapshots, as an iteration starts, the variables its body assigns, and at the
iteration's end puts back the lanes past a short tile's end, along the dim that was made
from the tile's registered block size (`language.creation` marks it; the mark follows the
variable from iteration to iteration).
"""

from __future__ import annotations

import ast
from typing import Any

import torch

from tilecraft.language.tiles import LANES, Tile


class CarriedLanes(ast.NodeTransformer):
    """Wrap the body of every `for` loop it visits (not the one it starts from:
    `visit_nested`) in a snapshot of its assigned names and a `_tc_keep` of each."""

    def __init__(self) -> None:
        self.count = 0

    def visit_nested(self, loop: ast.For) -> ast.For:
        self.generic_visit(loop)
        return loop

    def visit_For(self, node: ast.For) -> ast.For:
        self.generic_visit(node)
        names = sorted(_assigned(node.body) - _assigned([node.target]))
        if not names:
            return node
        self.count += 1
        entry, target = f"_tc_entry_{self.count}", ast.unparse(node.target)
        start = f"{entry} = _tc_entry(locals(), {tuple(names)!r})"
        ends = [f"if {n!r} in {entry}:\n    {n} = _tc_keep({target}, {entry}[{n!r}], {n})"
                for n in names]  # fmt: skip
        node.body = [*_statements(start), *node.body, *_statements("\n".join(ends))]
        return node


def _statements(code: str) -> list[ast.stmt]:
    return ast.parse(code).body


def _assigned(body: list[Any]) -> set[str]:
    """The plain names `body` binds, leaving out other scopes and eager mode's own."""
    names: set[str] = set()
    stack = list(body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.Lambda, ast.comprehension, ast.ClassDef)):
            continue
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        stack.extend(ast.iter_child_nodes(node))
    return {n for n in names if not n.startswith("_tc_")}


def entry(scope: dict[str, Any], names: tuple[str, ...]) -> dict[str, Any]:
    """The bound ones of `names` as an iteration starts."""
    return {n: scope[n] for n in names if n in scope}


def keep(target: Any, old: Any, new: Any) -> Any:
    """`new` with the lanes past the end of each short tile of `target` (the loop's tile
    or tiles) taken from `old`, along `old`'s dim made from that tile's registered block
    size; marked as `old` is."""
    lanes = getattr(old, LANES, None)
    if not lanes or not isinstance(new, torch.Tensor) or new.shape != old.shape:
        return new
    for tile in target if isinstance(target, tuple) else (target,):
        if not isinstance(tile, Tile) or tile.registered is None:
            continue
        dims = [d for d, size in lanes.items() if size is tile.registered]
        if dims and len(tile) < tile.registered:
            live = torch.arange(old.size(dims[0]), device=old.device) < len(tile)
            shape = [-1 if d == dims[0] else 1 for d in range(old.dim())]
            new = torch.where(live.view(shape), new, old)
    setattr(new, LANES, lanes)
    return new
