"""Loops inside a device loop: nested `tc.tile`/`tc.grid` loops (with variables carried
across iterations), loops unrolled while compiling (`tc.static_range`, Python loops over
constants) and `range` loops with bounds read on the device (a mixin of the device
compiler)."""

from __future__ import annotations

import ast
import builtins
import operator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from tilecraft import language as lang
from tilecraft.exc import (
    ShapeMismatch,
    UnsupportedSyntax,
)
from tilecraft.frontend import flow, jagged
from tilecraft.frontend.facts import facts_of
from tilecraft.frontend.ops import OPS
from tilecraft.frontend.refs import TileRef
from tilecraft.frontend.trends import span_trend
from tilecraft.ir.nodes import Carried, Loop, Value

if TYPE_CHECKING:
    from tilecraft.exc import SourceLoc
    from tilecraft.frontend.blocks import BlockTable
    from tilecraft.frontend.builder import Builder
    from tilecraft.frontend.memory import MemoryLowering
    from tilecraft.frontend.source import KernelSource

LOCATED = (ast.Call, ast.BinOp, ast.Subscript, ast.Compare)  # expressions errors point into
TENSOR_QUERIES = ("size", "shape", "dtype", "dim", "ndim", "numel", "device", "stride")


class Loops:
    """The device compiler's handlers of loops."""

    b: Builder
    mem: MemoryLowering
    src: KernelSource
    table: BlockTable
    env: dict[str, Any]

    def expr(self, node: ast.expr) -> Any:
        raise NotImplementedError

    def _body(self, stmts: list[ast.stmt]) -> None:
        raise NotImplementedError

    def _callee(self, node: ast.expr) -> Any:
        raise NotImplementedError

    def stmt_For(self, node: ast.For) -> None:
        fn = self._callee(node.iter)
        if fn in (lang.tile, lang.grid):
            self._device_loop(node, fn, *self._call_args(node.iter))
        elif fn is lang.jagged_tile:
            self._jagged_loop(node, *self._call_args(node.iter))
        elif fn is builtins.range:
            self._range_loop(node, *self._call_args(node.iter))
        else:
            items = flow.unrolled_items(self.expr(node.iter))
            flow.compile_unrolled(self, node, items)  # type: ignore[arg-type]

    def _call_args(self, call: ast.expr) -> tuple[list[Any], dict[str, Any]]:
        assert isinstance(call, ast.Call)
        args = [self.expr(a) for a in call.args]
        return args, {k.arg: self.expr(k.value) for k in call.keywords if k.arg}

    def _range_loop(self, node: ast.For, args: list[Any], kwargs: dict[str, Any]) -> None:
        """`range` over host ints is unrolled; over values computed on the device, it is
        a loop on the device (as `tc.grid`)."""
        if not any(isinstance(a, Value) for a in args):
            items = flow.unrolled_items(range(*args, **kwargs))
            flow.compile_unrolled(self, node, items)  # type: ignore[arg-type]
        elif len(args) > 2 or kwargs:
            raise UnsupportedSyntax("`range(begin, end)` on the device takes no step")
        else:
            self._device_loop(node, lang.grid, args, {})

    def _jagged_loop(self, node: ast.For, args: list[Any], kwargs: dict[str, Any]) -> None:
        """`tc.jagged_tile(lengths)`: a tile loop up to the largest length, masked per lane
        (see frontend/jagged.py)."""
        parent = jagged.parent_of(self.b, args, kwargs)
        end = jagged.loop_end(self.b, parent)
        self._device_loop(node, lang.tile, [end], {}, parent if parent.type.dims else None)

    def _device_loop(
        self,
        node: ast.For,
        fn: Any,
        args: list[Any],
        kwargs: dict[str, Any],
        jagged_parent: Value | None = None,
    ) -> None:
        blocks, order = self._loop_blocks(node.iter, fn, args, kwargs, inner=True)
        index = self.table.next_device_loop()
        carried = self._carried(node)
        saved = dict(self.env)
        self.b.bodies.append([])
        self._bind_target(node.target, blocks)
        if jagged_parent is not None:
            ((block, _),) = blocks
            index_value = self.mem.tile_attr(block, "index")
            self.b.jagged[block] = jagged.lane_mask(self.b, jagged_parent, index_value)
        self._body(flow.without_continue(node.body))
        if jagged_parent is not None:
            del self.b.jagged[blocks[0][0]]
        self._check_tuples(carried)
        for c in carried:
            c.final = self._carried_final(c)
        body = self.b.bodies.pop()
        self.b.add(Loop(order, body, carried, self.src.loc(node), index))
        self.env = saved
        for c in carried:
            # the result is the carried variable itself, so that naming it (an inlined
            # helper's loop result assigned in its caller) renames the variable everywhere
            c.out = c.param
            self.env[c.name] = c.out
        for name, items in _tuples(carried).items():
            self.env[name] = tuple(c.out for c in items)

    def _carried(self, node: ast.For) -> list[Carried]:
        assigned = self._assigned_in(node)
        carried = []
        for name in sorted(assigned):
            init = self.env.get(name)
            if isinstance(init, (bool, int, float)):
                self.env[name] = NumberBeforeLoop(name, self.src.loc(node))
            elif isinstance(init, Value):
                param = Value(init.type, self.b.fresh(name))
                carried.append(Carried(name, init, param))
                self.env[name] = param
            elif _holds_tiles(init):  # a tuple of tiles: each one carried on its own
                if not isinstance(init, tuple) or not all(isinstance(v, Value) for v in init):
                    raise UnsupportedSyntax(
                        f"`{name}`, updated in the loop, holds tiles: make it a tile or a tuple"
                        " of tiles (each is then carried across iterations)"
                    )
                params = tuple(Value(v.type, self.b.fresh(name)) for v in init)
                items = zip(init, params, strict=True)
                carried += [Carried(name, v, p, item=i) for i, (v, p) in enumerate(items)]
                self.env[name] = params
        return carried

    @staticmethod
    def _assigned_in(node: ast.For) -> set[str]:
        stores = (n for s in node.body for n in ast.walk(s))
        return {n.id for n in stores if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}

    def _check_tuples(self, carried: list[Carried]) -> None:
        for name, items in _tuples(carried).items():
            final = self.env.get(name)
            if not isinstance(final, tuple) or len(final) != len(items):
                raise UnsupportedSyntax(
                    f"`{name}` must stay a tuple of {len(items)} tiles across loop iterations"
                )

    def _carried_final(self, c: Carried) -> Value:
        final = self.env.get(c.name)
        if c.item is not None:  # a tuple of as many items (checked in _check_tuples)
            final = self.env[c.name][c.item]
        if not isinstance(final, Value):
            raise UnsupportedSyntax(f"`{c.name}` must stay a tile across loop iterations")
        check_same_shape(self.b, c, final)
        return self.b.cast(final, c.param.type.dtype)  # type: ignore[return-value]

    # -- loops and targets --------------------------------------------------------
    def _loop_blocks(
        self, call: ast.expr, fn: Any, args: list[Any], kwargs: dict[str, Any], inner: bool
    ) -> tuple[list[tuple[int, bool]], list[int]]:
        """The blocks a loop binds (in the user's order) and its iteration order."""
        begin, end = (args + [kwargs.get("end")])[:2] if args else (None, None)
        begins, ends = _ranges(begin, end)
        third = "step" if fn is lang.grid else "block_size"
        block_size = kwargs.get(third, args[2] if len(args) > 2 else None)
        sizes = block_size if isinstance(block_size, (list, tuple)) else [block_size] * len(ends)
        multi = isinstance(begin, (list, tuple, torch.Size))
        out = []
        for lo, hi, size in zip(begins, ends, sizes, strict=True):
            if inner and not (isinstance(lo, int) and isinstance(hi, int)):
                launch = self.table.launch_blocks
                self.table.note_span(span_trend(lo, hi, self.b.bodies, launch))
            if fn is lang.grid:
                blk = self._stepped_grid(lo, hi, size)
            else:
                facts = tuple(facts_of(x, self.b.bodies, self.table.blocks) for x in (lo, hi))
                blk = self.table.tile(lo, hi, inner, size, facts)
            out.append((blk.id, fn is lang.grid))
        out = out if multi else out[:1]
        ids = [blk for blk, _ in out]
        if fn is not lang.grid:
            self.table.note_site(self.src.filename, call, ids)
        order = self.table.loop_order(ids) if len(out) > 1 and fn is lang.tile else None
        return out, ids if order is None else [ids[i] for i in order]

    def _bind_target(self, target: ast.expr, blocks: list[tuple[int, bool]]) -> None:
        refs = [self._grid_index(blk) if is_grid else TileRef(blk) for blk, is_grid in blocks]
        self._label(target, [blk for blk, _ in blocks])
        if isinstance(target, ast.Name):
            self.env[target.id] = refs[0] if len(refs) == 1 else tuple(refs)
        elif isinstance(target, ast.Tuple) and len(target.elts) == len(refs):
            for elt, ref in zip(target.elts, refs, strict=True):
                if not isinstance(elt, ast.Name):
                    raise UnsupportedSyntax("loop targets must be plain names")
                self.env[elt.id] = ref
        else:
            raise UnsupportedSyntax("the loop target does not match the number of tiled dims")

    def _label(self, target: ast.expr, blocks: list[int]) -> None:
        """Name the loop's blocks after the user's loop variables, for error messages."""
        names = [ast.unparse(e) for e in target.elts] if isinstance(target, ast.Tuple) else []
        if len(names) != len(blocks):
            whole = ast.unparse(target)
            names = [whole] if len(blocks) == 1 else [f"{whole}[{i}]" for i in range(len(blocks))]
        for block, name in zip(blocks, names, strict=True):
            self.table.label(block, name)

    def _grid_index(self, block: int) -> Value:
        index = self.b.op("tile_begin", (block,), torch.int32, (), hint="index")
        if block not in self.table.grid_steps:
            return index
        begin, step = self.table.grid_steps[block]
        return OPS["add"](self.b, OPS["mul"](self.b, index, step), begin)

    def _stepped_grid(self, begin: Any, end: Any, step: Any) -> Any:
        """The block of a `tc.grid` dim, one with a step as a grid over its positions'
        count (each index then `begin + i * step`)."""
        if step is None or step == 1:
            return self.table.grid(begin, end)
        if type(step) is not int or step < 1:
            raise UnsupportedSyntax(f"tc.grid's step must be a positive int, not {step!r}")
        if not (isinstance(begin, int) and isinstance(end, int)):
            raise UnsupportedSyntax("tc.grid with a step needs bounds known on the host")
        block = self.table.grid(0, max(-(-(end - begin) // step), 0))
        self.table.grid_steps[block.id] = (begin, step)
        return block


def check_same_shape(b: Builder, c: Carried, final: Value) -> None:
    """A variable carried across a loop's trips keeps its shape."""
    if final.type.dims != c.param.type.dims:
        raise ShapeMismatch(
            f"`{c.name}` changes shape inside the loop: {b.describe(c.param.type.dims)}"
            f" before, {b.describe(final.type.dims)} after"
        )


@dataclass(frozen=True)
class NumberBeforeLoop:
    """A variable that holds a Python number before a device loop and is assigned in its
    body: the loop runs on the device, so the number cannot be carried from one trip to
    the next, nor out of the loop (it was, silently: `acc = 0` then `acc = acc + ...`
    in a `tc.tile` loop gave 0). Reading it raises; assigning it first is fine."""

    name: str
    loop: SourceLoc

    def refuse(self) -> UnsupportedSyntax:
        return UnsupportedSyntax(
            f"`{self.name}` is a Python number before the device loop at line "
            f"{self.loop.lineno} and is assigned inside it, so its value cannot be carried "
            f"across the loop's trips or out of it: start it as a tile before the loop "
            f"(`{self.name} = tc.zeros([], dtype=torch.float32)` or `torch.zeros_like(...)`)"
        )


def _holds_tiles(value: Any) -> bool:
    """Whether a tuple or list holds a tile (at any depth)."""
    if isinstance(value, (tuple, list)):
        return any(isinstance(v, Value) or _holds_tiles(v) for v in value)
    return False


def _tuples(carried: list[Carried]) -> dict[str, list[Carried]]:
    """The tuple variables among the carried ones, with their items in order."""
    found: dict[str, list[Carried]] = {}
    for c in carried:
        if c.item is not None:
            found.setdefault(c.name, []).append(c)
    return found


def static_range(args: list[Any], kwargs: dict[str, Any]) -> range:
    if not all(isinstance(a, int) for a in [*args, *kwargs.values()]):
        raise UnsupportedSyntax(
            "tc.static_range needs ints known while compiling; use tc.grid(...) for bounds "
            "computed on the device"
        )
    return lang.static_range(*args, **kwargs)


def _ranges(begin: Any, end: Any) -> tuple[list[Any], list[Any]]:
    if end is None:
        sizes = list(begin) if isinstance(begin, (list, tuple, torch.Size)) else [begin]
        return [0] * len(sizes), [_bound(s) for s in sizes]
    begins = list(begin) if isinstance(begin, (list, tuple)) else [begin]
    ends = list(end) if isinstance(end, (list, tuple)) else [end]
    return [_bound(b) for b in begins], [_bound(e) for e in ends]


def _bound(v: Any) -> Any:
    if isinstance(v, Value):
        wrong = bool(v.type.dims) or v.type.dtype.is_floating_point
    else:
        wrong = not hasattr(type(v), "__index__")  # an int (a numpy int too), as range() takes
    if wrong:
        raise UnsupportedSyntax(
            "loop bounds must be integers: sizes, tile.begin/.end or scalars loaded on the "
            f"device, not {type(v).__name__}"
        )
    return v if isinstance(v, Value) else operator.index(v)  # a numpy int too, as range()
