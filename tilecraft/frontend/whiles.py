"""`while` inside a device loop (a mixin of the device compiler).

On a condition known while compiling (host values only) the loop is unrolled, as a
Python loop over constants is. On a scalar computed on the device it is a loop on the
device, a `Loop` without blocks whose flag says whether to go on:

    looping = True
    while looping:
        cond = <the condition, on this trip's values>
        if cond:
            <the body>
        looping = cond

Variables the body assigns are carried across trips (tiles, and Python numbers held
before the loop, which become scalars of their Python type: int64, float64 or bool).
A condition on a tile has one truth value per lane and is refused, as PyTorch refuses
`bool()` of a tensor of several elements.
"""

from __future__ import annotations

import ast
import copy
from typing import TYPE_CHECKING, Any

import torch

from tilecraft.exc import DtypeError, ShapeMismatch, UnsupportedSyntax
from tilecraft.frontend import flow
from tilecraft.frontend.loops import check_same_shape
from tilecraft.frontend.ops import OPS
from tilecraft.ir.nodes import Carried, Loop, Value
from tilecraft.ir.types import TileType

if TYPE_CHECKING:
    from tilecraft.frontend.blocks import BlockTable
    from tilecraft.frontend.builder import Builder

NUMBER_DTYPES = {bool: torch.bool, int: torch.int64, float: torch.float64}


class Whiles:
    """The device compiler's handler of `while`."""

    b: Builder
    env: dict[str, Any]
    table: BlockTable

    def expr(self, node: ast.expr) -> Any:
        raise NotImplementedError

    def _body(self, stmts: list[ast.stmt]) -> None:
        raise NotImplementedError

    def stmt_While(self, node: ast.While) -> None:
        if node.orelse:
            raise UnsupportedSyntax("`while ... else` is not supported inside a device loop")
        if _breaks(node.body):
            flag = f"_tc_broken_{node.lineno}_{node.col_offset}"  # (one per loop: nested)
            self.env[flag] = False
            try:
                self._while(_without_break(node, flag))
            finally:
                self.env.pop(flag, None)
        else:
            self._while(node)

    def _while(self, node: ast.While) -> None:
        if self._unrolled_while(node):
            return
        carried = self._while_carried(node)
        saved = dict(self.env)
        self.b.bodies.append([])
        cond = self._condition(node)
        guarded = ast.copy_location(ast.If(node.test, flow.without_continue(node.body), []), node)
        flow.compile_if(self, guarded, cond)  # type: ignore[arg-type]
        flag = carried[-1]
        for c in carried[:-1]:
            c.final = self._while_final(c)
        flag.final = cond
        body = self.b.bodies.pop()
        self.b.add(Loop([], body, carried, self.b.loc, -1, flag.param))
        self.env = saved
        for c in carried[:-1]:
            c.out = c.param
            self.env[c.name] = c.param

    def _unrolled_while(self, node: ast.While) -> bool:
        """Unroll while the condition stays a host value; False (nothing compiled) where
        it is one computed on the device, from the start or after some trips (`lo = mid +
        1` in a branch on a load): then the loop runs on the device."""
        env, snapshot = dict(self.env), flow.snapshot(self.table)
        self.b.bodies.append([])
        for _ in range(flow.MAX_UNROLL):
            test = self.expr(node.test)
            if isinstance(test, Value):
                self.b.bodies.pop()
                self.env = env
                flow.restore(self.table, snapshot)
                return False
            if not test:
                body = self.b.bodies.pop()
                self.b.bodies[-1].extend(body)
                return True
            self._body(flow.without_continue(node.body))
        raise UnsupportedSyntax(
            f"this `while` on host values runs past {flow.MAX_UNROLL} trips while compiling"
        )

    def _condition(self, node: ast.While) -> Value:
        test = self.expr(node.test)
        if not isinstance(test, Value):  # a host value now, on the device before: taken
            test = self.b.op("full", (), torch.bool, (), hint="cond", value=bool(test))
        cond = test if test.type.dtype == torch.bool else OPS["ne"](self.b, test, 0)
        fitted = self.b.fit_to(cond, ())  # a tile holding one position is one value
        assert isinstance(fitted, Value)
        cond = fitted
        if any(d is not None for d in cond.type.dims):
            raise ShapeMismatch(
                f"a `while` condition must be one value; this one is a tile of shape "
                f"{self.b.describe(cond.type.dims)} (reduce it: `.any()`, `.all()`)"
            )
        if cond.type.dims:
            cond = self.b.op("reshape", (cond,), torch.bool, (), hint="cond")
        return cond

    def _while_carried(self, node: ast.While) -> list[Carried]:
        """A Carried per variable the body assigns that holds a tile or a number before
        the loop, and last the loop's flag (True before the first trip)."""
        stores = (n for s in node.body for n in ast.walk(s))
        names = {n.id for n in stores if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        carried = []
        for name in sorted(names):
            init = self.env.get(name)
            if type(init) in NUMBER_DTYPES:
                dtype = NUMBER_DTYPES[type(init)]
                init = self.b.op("full", (), dtype, (), hint=name, value=init)
                init.weak = dtype != torch.bool
            if isinstance(init, Value):
                param = Value(init.type, self.b.fresh(name), init.weak)
                carried.append(Carried(name, init, param))
                self.env[name] = param
            elif isinstance(init, (tuple, list)) and any(isinstance(v, Value) for v in init):
                raise UnsupportedSyntax(
                    f"`{name}`, a tuple of tiles, is assigned in a `while` loop: carry each "
                    "tile in a variable of its own"
                )
        true = self.b.op("full", (), torch.bool, (), hint="looping", value=True)
        flag = Value(TileType(torch.bool, ()), self.b.fresh("looping"))
        return [*carried, Carried("", true, flag)]

    def _while_final(self, c: Carried) -> Value:
        final = self.env.get(c.name)
        if isinstance(final, (bool, int, float)):
            final = self.b.op("full", (), c.param.type.dtype, (), hint=c.name, value=final)
        if not isinstance(final, Value):
            raise UnsupportedSyntax(f"`{c.name}` must stay a tile or a number across the loop")
        check_same_shape(self.b, c, final)
        if c.param.weak and _category(final.type.dtype) != _category(c.param.type.dtype):
            raise DtypeError(
                f"`{c.name}` holds a Python {_KINDS[_category(c.param.type.dtype)]} before the "
                f"loop and a {final.type.dtype} tile after a trip: start it as a number of "
                "the type it takes in the loop (`0.0`, not `0`)"
            )
        return self.b.cast(final, c.param.type.dtype)  # type: ignore[return-value]


_KINDS = ("bool", "int", "float")


def _breaks(stmts: list[ast.stmt]) -> bool:
    """Whether `stmts` hold a `break` of the loop around them (not of a loop inside)."""
    finder = _BreakToFlag()
    finder.visit(ast.Module(body=copy.deepcopy(stmts), type_ignores=[]))
    return finder.found


def _without_break(node: ast.While, flag: str) -> ast.While:
    """`while test: ... break ...` as `while not flag and (test): ... flag = True;
    continue ...` (the body `without_continue` then skips the rest of the trip)."""
    read = ast.Name(flag, ast.Load())
    test = ast.BoolOp(ast.And(), [ast.UnaryOp(ast.Not(), read), node.test])
    rewriter = _BreakToFlag(flag)
    body = [rewriter.visit(copy.deepcopy(s)) for s in node.body]
    loop = ast.While(test, [s for s in body if s is not None], [])
    return ast.fix_missing_locations(ast.copy_location(loop, node))


class _BreakToFlag(ast.NodeTransformer):
    """Each `break` of the loop (not of one inside) as `flag = True; continue`."""

    def __init__(self, flag: str = "") -> None:
        self.flag, self.found = flag, False

    def visit_Break(self, node: ast.Break) -> list[ast.stmt]:
        self.found = True
        done = ast.Assign([ast.Name(self.flag, ast.Store())], ast.Constant(True))
        return [ast.copy_location(done, node), ast.copy_location(ast.Continue(), node)]

    def _inner(self, node: ast.AST) -> ast.AST:  # a loop or function of its own
        return node

    visit_For = visit_While = visit_FunctionDef = visit_Lambda = _inner


def _category(dtype: torch.dtype) -> int:
    return 0 if dtype == torch.bool else (2 if dtype.is_floating_point else 1)
