"""Interpret mode for `if` statements inside device loops.

An `if` on a tile cannot run as a Python `if` (a tensor of many elements has no truth
value). As compiled kernels do, both arms run: stores in each arm are masked by its
condition, and the variables the arms assign are merged with `torch.where` after them.
An `if` on a host value or a scalar tensor stays a Python `if`.
"""

from __future__ import annotations

import ast
import contextlib
import copy
import itertools
from collections.abc import Iterator
from typing import Any

import torch

from tilecraft.language.state import eager_context
from tilecraft.language.tiles import Tile

UNSET = type("Unset", (), {"__repr__": lambda self: "<unset>"})()


def is_tile_condition(cond: Any) -> bool:
    return isinstance(cond, torch.Tensor) and cond.dim() > 0


def get_local(scope: dict[str, Any], name: str) -> Any:
    return scope.get(name, UNSET)


def merge(cond: torch.Tensor, then: Any, orelse: Any) -> Any:
    """A variable after an `if` on a tile: `then` where `cond` holds, else `orelse`."""
    if then is UNSET or orelse is UNSET or isinstance(then, Tile) or isinstance(orelse, Tile):
        return UNSET  # a tile loop's variable: compiled code has no use of it after the loop
    if then is orelse:
        return then
    return torch.where(cond.to(torch.bool), then, orelse)


@contextlib.contextmanager
def masked(cond: torch.Tensor, negate: bool = False, active: bool = True) -> Iterator[None]:
    """Stores inside run only where `cond` (or its negation) holds (anywhere unless
    `active`: the `else` arm of an `if` on a host value)."""
    if not active:
        yield
        return
    ctx = eager_context("tile")
    mask = cond.to(torch.bool)
    mask = ~mask if negate else mask
    ctx.masks.append(mask if not ctx.masks else ctx.masks[-1] & mask)
    try:
        yield
    finally:
        ctx.masks.pop()


def eager_names() -> dict[str, Any]:
    """The helpers the rewritten code calls, by the names it uses."""
    return {
        "_tc_is_tile": is_tile_condition,
        "_tc_get": get_local,
        "_tc_merge": merge,
        "_tc_masked": masked,
    }


class EagerBranches(ast.NodeTransformer):
    """Rewrites each `if` so that a tile condition runs both arms, masked and merged."""

    def __init__(self) -> None:
        self.counter = itertools.count()

    def visit_If(self, node: ast.If) -> list[ast.stmt]:
        # The `else` arm is written once, after both ways of running the `if` arm: were it
        # written in both, an `elif` chain would double in size with each `elif`.
        self.generic_visit(node)
        k = next(self.counter)
        cond, tile = f"_tc_cond_{k}", f"_tc_tile_{k}"
        names = sorted(_assigned(node.body) | _assigned(node.orelse))
        select = [
            *(_stmt(f"_tc_before_{k}_{n} = _tc_get(locals(), {n!r})") for n in names),
            _with(f"_tc_masked({cond})", node.body),
            *(_stmt(f"_tc_then_{k}_{n} = _tc_get(locals(), {n!r})") for n in names),
            *(_stmt(f"{n} = _tc_before_{k}_{n}") for n in names),
        ]
        merges = [
            _stmt(f"{n} = _tc_merge({cond}, _tc_then_{k}_{n}, _tc_get(locals(), {n!r}))")
            for n in names
        ]
        orelse: list[ast.stmt] = [
            _with(f"_tc_masked({cond}, negate=True, active={tile})", node.orelse)
        ]
        stmts = [
            ast.Assign([ast.Name(cond, ast.Store())], node.test),
            _stmt(f"{tile} = _tc_is_tile({cond})"),
            ast.If(_expr(tile), select, [ast.If(_expr(cond), copy.deepcopy(node.body), [])]),
            *([ast.If(_expr(f"{tile} or not {cond}"), orelse, [])] if node.orelse else []),
            *([ast.If(_expr(tile), merges, [])] if names else []),
        ]
        return [ast.copy_location(s, node) for s in stmts]


def _assigned(stmts: list[ast.stmt]) -> set[str]:
    return {
        n.id
        for s in stmts
        for n in ast.walk(s)
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store) and not n.id.startswith("_tc_")
    }


def _stmt(text: str) -> ast.stmt:
    return ast.parse(text).body[0]


def _expr(text: str) -> ast.expr:
    return ast.parse(text, mode="eval").body


def _with(context: str, body: list[ast.stmt]) -> ast.With:
    item = ast.withitem(_expr(context), None)
    return ast.With([item], copy.deepcopy(body) or [ast.Pass()])
