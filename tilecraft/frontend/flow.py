"""Control flow inside device loops: `if` on device values, and loops unrolled in Python.

An `if` whose condition is known while compiling (a host value) picks one arm. On a
scalar computed on the device it becomes a real branch (a `Branch` node). On a tile,
both arms are computed and merged element by element: the condition masks the stores
(and gathers) of each arm, and variables assigned in an arm become `torch.where`
selects after it.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import torch

from tilecraft.exc import ShapeMismatch, UnsupportedSyntax
from tilecraft.frontend.blocks import BlockTable
from tilecraft.frontend.builder import category
from tilecraft.frontend.ops import OPS
from tilecraft.ir.nodes import Access, Branch, Merged, Node, Value, walk_ops
from tilecraft.ir.types import broadcast_dims

if TYPE_CHECKING:
    from tilecraft.frontend.device import DeviceCompiler

MAX_UNROLL = 1024  # trips of a loop unrolled at compile time before we refuse
_MISSING = object()


# -- continue ---------------------------------------------------------------------------
def without_continue(stmts: list[ast.stmt]) -> list[ast.stmt]:
    """A loop body with its `continue`s turned into `if`/`else`: the statements after an
    `if` that may continue move into each of its arms, up to the `continue` (so that an
    `if` on a tile skips the rest of the trip lane by lane, as masked arms)."""
    for i, stmt in enumerate(stmts):
        if isinstance(stmt, ast.Continue):
            return stmts[:i]
        if isinstance(stmt, ast.If) and _continues(stmt):
            rest = stmts[i + 1 :]
            arms = without_continue(stmt.body + rest), without_continue(stmt.orelse + rest)
            branch = ast.copy_location(ast.If(stmt.test, arms[0] or [_pass(stmt)], arms[1]), stmt)
            return [*stmts[:i], branch]
    return stmts


class ContinueFree(ast.NodeTransformer):
    """Every loop's body `without_continue` (for eager mode, which runs the arms of an
    `if` on a tile one after the other, masked, as compiled code does)."""

    def visit_For(self, node: ast.For) -> ast.For:
        self.generic_visit(node)
        node.body = without_continue(node.body)
        return node


def _continues(node: ast.AST) -> bool:
    """Whether `node` holds a `continue` of the loop around it (not of a loop inside)."""
    if isinstance(node, ast.Continue):
        return True
    if isinstance(node, (ast.For, ast.While, ast.FunctionDef, ast.Lambda)):
        return False
    return any(_continues(child) for child in ast.iter_child_nodes(node))


def _pass(at: ast.stmt) -> ast.stmt:
    return ast.copy_location(ast.Pass(), at)


# -- if -------------------------------------------------------------------------------
def compile_if(c: DeviceCompiler, node: ast.If, test: Any = _MISSING) -> None:
    """Lower `if`/`elif`/`else` (an `elif` is an `if` nested in the `else` arm); `test`:
    its condition when already computed."""
    test = c.expr(node.test) if test is _MISSING else test
    if not isinstance(test, Value):
        c._body(node.body if test else node.orelse)
        return
    cond = test if test.type.dtype == torch.bool else OPS["ne"](c.b, test, 0)
    if cond.type.dims:
        _select_if(c, node, cond)
    else:
        _scalar_if(c, node, cond)


def _arm(c: DeviceCompiler, stmts: list[ast.stmt], before: dict[str, Any]) -> dict[str, Any]:
    c.env = dict(before)
    c._body(stmts)
    return c.env


def _changed(before: dict[str, Any], *arms: dict[str, Any]) -> list[str]:
    names = {n for arm in arms for n, v in arm.items() if before.get(n, _MISSING) is not v}
    return sorted(names)


def _select_if(c: DeviceCompiler, node: ast.If, cond: Value) -> None:
    """Both arms computed; stores masked by the condition; variables merged by selects."""
    outer = c.branch_mask()
    before = dict(c.env)
    c.masks.append(cond if outer is None else OPS["bitwise_and"](c.b, outer, cond))
    then = _arm(c, node.body, before)
    if node.orelse:
        negated = c.b.elementwise("not", cond, dtype=torch.bool)
        c.masks[-1] = negated if outer is None else OPS["bitwise_and"](c.b, outer, negated)
    orelse = _arm(c, node.orelse, before)
    c.masks.pop()
    c.env = before
    c.b.loc = c.src.loc(node)
    for name in _changed(before, then, orelse):
        a, b = then.get(name, _MISSING), orelse.get(name, _MISSING)
        if a is _MISSING or b is _MISSING:
            c.env.pop(name, None)  # defined on one side only: unbound after, as in Python
        elif _number_before_loop(a, b):
            c.env[name] = _number_before_loop(a, b)
        elif not _same_host(a, b):
            _check_mergeable(name, a, b)
            a, b = c.b.fit_ones((a, b))
            dims = c.b.broadcast(*(v for v in (a, b) if isinstance(v, Value)))
            picked = OPS["where"](c.b, aligned_mask(c, cond, dims) or cond, a, b)
            c.env[name] = c.named(picked, name)
        else:  # the same in both arms (`acc = v` in each): still a new value after the `if`
            c.env[name] = a


def _scalar_if(c: DeviceCompiler, node: ast.If, cond: Value) -> None:
    """A real branch: each arm in its own body, merged variables assigned at each end.

    Values over a whole dimension computed in chunks (`reduction_loops`) are recomputed
    by each of their consumers and cannot cross a branch: such an `if` is compiled again
    as a select (both arms computed, stores masked by the scalar condition)."""
    before, saved = dict(c.env), snapshot(c.table)
    arms: list[tuple[list[Node], dict[str, Any]]] = []
    for stmts in (node.body, node.orelse):
        c.b.bodies.append([])
        env = _arm(c, stmts, before)
        arms.append((c.b.bodies.pop(), env))
    c.env = before
    if _touches_rolled(c, [*arms[0][0], *arms[1][0]]):
        restore(c.table, saved)
        _select_if(c, node, cond)
        return
    c.b.loc = c.src.loc(node)
    merged = []
    (then_body, then), (else_body, orelse) = arms
    for name in _changed(before, then, orelse):
        a, b = then.get(name, _MISSING), orelse.get(name, _MISSING)
        if a is _MISSING or b is _MISSING:
            c.env.pop(name, None)
        elif _number_before_loop(a, b):
            c.env[name] = _number_before_loop(a, b)
        elif not _same_host(a, b):
            _check_mergeable(name, a, b)
            merged.append(_merge_scalar(c, name, (then_body, a), (else_body, b)))
        else:
            c.env[name] = a  # the same in both arms
    for m in merged:
        c.env[m.name] = m.out
    c.b.add(Branch(cond, then_body, else_body, merged, c.b.loc))


def snapshot(table: BlockTable) -> dict[str, Any]:
    """What compiling code adds to the block table, to undo it before compiling again."""
    lists = (
        "tile_specs",
        "reduction_extents",
        "loop_order_dims",
        "loop_order_blocks",
        "grids",
        "registered",
    )
    saved: dict[str, Any] = {name: len(getattr(table, name)) for name in lists}
    saved["blocks"] = set(table.blocks)
    saved["counters"] = (table.device_loops, table.memory_ops, table.loads)
    return saved


def restore(table: BlockTable, saved: dict[str, Any]) -> None:
    for name, length in saved.items():
        if isinstance(length, int):
            del getattr(table, name)[length:]
    for block in set(table.blocks) - saved["blocks"]:
        del table.blocks[block]
    table.device_loops, table.memory_ops, table.loads = saved["counters"]


def _touches_rolled(c: DeviceCompiler, body: list[Node]) -> bool:
    """Whether an op in `body` reads or makes a value over a chunked whole dimension."""
    rolled = {
        b.id
        for b in c.table.blocks.values()
        if b.kind == "reduction" and (b.fixed_size or 0) < _next_power_of_2(b.extent)
    }
    if not rolled:
        return False
    for op in walk_ops(body):
        dims = set(op.out.type.dims) if op.out else set()
        for a in (*op.args, *op.attrs.values()):
            if isinstance(a, Value):
                dims |= set(a.type.dims)
            elif isinstance(a, Access):
                dims |= set(a.dims)
        if dims & rolled:
            return True
    return False


def _next_power_of_2(n: int) -> int:
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


def _number_before_loop(*values: Any) -> Any:
    """The arm's value that stands for a number a device loop cannot carry (or None): the
    variable stays unreadable after the `if`."""
    from tilecraft.frontend.loops import NumberBeforeLoop  # loops imports this module

    return next((v for v in values if isinstance(v, NumberBeforeLoop)), None)


def _same_host(a: Any, b: Any) -> bool:
    if a is b:
        return True
    if isinstance(a, Value) or isinstance(b, Value):
        return False
    try:
        return type(a) is type(b) and bool(a == b)
    except Exception:
        return False


def _check_mergeable(name: str, a: Any, b: Any) -> None:
    for v in (a, b):
        if not isinstance(v, (Value, bool, int, float)):
            raise UnsupportedSyntax(
                f"`{name}` is assigned a {type(v).__name__} in one arm of an `if` on a device"
                " value and something else in the other: only tiles and numbers can be merged"
            )


def _merge_scalar(
    c: DeviceCompiler, name: str, then: tuple[list[Node], Any], orelse: tuple[list[Node], Any]
) -> Merged:
    values = [then[1], orelse[1]]
    tiles = [v for v in values if isinstance(v, Value)]
    dtype = _merged_dtype(values)
    dims = tiles[0].type.dims if tiles else ()
    if any(t.type.dims != dims for t in tiles):
        raise ShapeMismatch(
            f"`{name}` has shape {c.b.describe(tiles[0].type.dims)} after one arm of the `if` "
            f"and {c.b.describe(tiles[1].type.dims)} after the other; give it the same shape "
            "in both (or use torch.where)"
        )
    finals: list[Value] = []
    for body, value in (then, orelse):
        c.b.bodies.append(body)
        if isinstance(value, Value):
            finals.append(c.b.cast(value, dtype))  # type: ignore[arg-type]
        else:
            finals.append(c.b.op("full", (), dtype, dims, hint=name, value=value))
        c.b.bodies.pop()
    # numbers in both arms (numbers held on the device too): a number after the `if`
    weak = all(not isinstance(v, Value) or v.weak for v in values) and dtype != torch.bool
    out = Value(finals[0].type, c.b.fresh(name), weak)
    return Merged(name, finals[0], finals[1], out)


def _merged_dtype(values: list[Any]) -> torch.dtype:
    dtypes = [v.type.dtype for v in values if isinstance(v, Value) and not v.weak]
    values = [_number_like(v) if isinstance(v, Value) and v.weak else v for v in values]
    if not dtypes:
        dtypes = [torch.tensor(v).dtype for v in values]
        dtypes = [torch.float32 if d == torch.float64 else d for d in dtypes]
    result = dtypes[0]
    for d in dtypes[1:]:
        result = torch.promote_types(result, d)
    for v in values:
        if isinstance(v, float) and not result.is_floating_point:
            result = torch.float32
    return result


def _number_like(v: Value) -> Any:
    """A Python number of the kind a number held on the device is (a host float, `int(v)`,
    a counter carried by a `while`)."""
    return (True, 1, 1.0)[category(v)]


# -- masks of stores inside an `if` on a tile -------------------------------------------
def store_mask(c: DeviceCompiler, dims: tuple, extra: Any, what: str) -> Any:
    """`extra` combined with the mask of the enclosing `if` arms on tiles (or None)."""
    mask = c.branch_mask()
    if mask is None:
        return extra
    aligned = aligned_mask(c, mask, tuple(dims))
    if aligned is None:
        raise ShapeMismatch(
            f"a {what} inside an `if` on a tile of shape {c.b.describe(mask.type.dims)} must "
            f"cover that shape, but it has shape {c.b.describe(tuple(dims))}; use torch.where"
        )
    mask = as_tile_mask(c, aligned, tuple(dims))
    return mask if extra is None else OPS["bitwise_and"](c.b, extra, mask)


def aligned_mask(c: DeviceCompiler, mask: Value, dims: tuple) -> Value | None:
    """The condition of an `if` on a tile as a mask of shape `dims` (of what an arm stores
    or gathers): broadcast as PyTorch does, or else with its tiles placed where `dims` has
    them (`if flags[tile_r]:` around `out[tile_r, tile_v] = ...`); None if neither fits."""
    if broadcast_dims(dims, mask.type.dims) == dims and mask.type.rank <= len(dims):
        return mask
    tiles = [d for d in mask.type.dims if d is not None]
    placed = tuple(d if d in tiles else None for d in dims)
    if [d for d in placed if d is not None] != tiles:
        return None
    return c.b.op("reshape", (mask,), mask.type.dtype, placed, hint="mask")


def as_tile_mask(c: DeviceCompiler, mask: Value, dims: tuple) -> Value:
    """A scalar condition (an `if` on a scalar compiled as a select) as a mask of an
    access's shape: Triton's interpreter rejects `mask & scalar` as a memory mask."""
    if mask.type.dims or not dims:
        return mask
    whole = c.b.op("full", (), torch.bool, dims, hint="mask", value=True)
    return OPS["bitwise_and"](c.b, whole, mask)


# -- loops unrolled while compiling -------------------------------------------------------
def unrolled_items(iterable: Any) -> list[Any]:
    """The items of a loop over host values (`range(3)`, a tuple, `tc.static_range`)."""
    if isinstance(iterable, Value):
        raise UnsupportedSyntax(
            "a `for` loop over a tile: loop over tc.tile(...)/tc.grid(...) instead"
        )
    if not isinstance(iterable, Iterable) or isinstance(iterable, (str, bytes, torch.Tensor)):
        raise UnsupportedSyntax(
            f"device loops iterate over tc.tile(...), tc.grid(...), tc.static_range(...) or "
            f"a tuple/list/range of host values, not a {type(iterable).__name__}"
        )
    items = []
    for item in iterable:
        items.append(item)
        if len(items) > MAX_UNROLL:
            raise UnsupportedSyntax(
                f"this loop would be unrolled into more than {MAX_UNROLL} copies: "
                "use tc.grid(...) for a loop that runs on the device"
            )
    return items


def compile_unrolled(c: DeviceCompiler, node: ast.For, items: list[Any]) -> None:
    """Each trip of the loop compiled in turn, the target bound to one item."""
    body = without_continue(node.body)
    for item in items:
        c.assign(node.target, item)
        c._body(body)
    c._body(node.orelse)
