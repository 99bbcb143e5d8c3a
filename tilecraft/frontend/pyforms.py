"""Python forms inside device loops beyond ops (a mixin of the device compiler): local
functions (`def` and `lambda`, inlined where called), comprehensions over host values
(unrolled while compiling), dict literals with host keys, and `sum` of tiles.

A local function sees the variables of the scope where it is called, as a Python
closure sees them at call time (where it is called from its own kernel or helper; from
elsewhere, those of its definition).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tilecraft.exc import UnsupportedSyntax
from tilecraft.frontend import flow, inline
from tilecraft.frontend.ops import OPS
from tilecraft.ir.nodes import Value

if TYPE_CHECKING:
    from tilecraft.frontend.builder import Builder
    from tilecraft.frontend.source import KernelSource


@dataclass(eq=False)
class LocalFunction:
    """A `def` or `lambda` of the device code: its tree, where it is written, its
    defaults (evaluated where it is defined, as Python does) and that scope."""

    tree: ast.FunctionDef
    src: KernelSource
    defaults: dict[str, Any]
    scope: dict[str, Any] = field(default_factory=dict)

    def bind(self, args: list[Any], kwargs: dict[str, Any]) -> dict[str, Any]:
        a = self.tree.args
        names = [p.arg for p in (*a.posonlyargs, *a.args)]
        if len(args) > len(names):
            raise UnsupportedSyntax(f"`{self.tree.name}` takes {len(names)} positional arguments")
        bound = dict(zip(names, args, strict=False))
        for name, value in kwargs.items():
            if name in bound or name not in names + [p.arg for p in a.kwonlyargs]:
                raise UnsupportedSyntax(f"`{self.tree.name}` got an unexpected `{name}=`")
            bound[name] = value
        for name in names + [p.arg for p in a.kwonlyargs]:
            if name not in bound:
                if name not in self.defaults:
                    raise UnsupportedSyntax(f"`{self.tree.name}` is missing `{name}`")
                bound[name] = self.defaults[name]
        return bound


class PythonForms:
    """The device compiler's handlers of local functions, comprehensions and dicts."""

    b: Builder
    env: dict[str, Any]
    src: KernelSource

    def expr(self, node: ast.expr) -> Any:
        raise NotImplementedError

    def _body(self, stmts: list[ast.stmt]) -> None:
        raise NotImplementedError

    def assign(self, target: ast.expr, value: Any) -> None:
        raise NotImplementedError

    # -- local functions ---------------------------------------------------------
    def stmt_FunctionDef(self, node: ast.FunctionDef) -> None:
        self.env[node.name] = self._local_function(node)

    def expr_Lambda(self, node: ast.Lambda) -> LocalFunction:
        ret = ast.copy_location(ast.Return(node.body), node.body)
        tree = ast.FunctionDef("<lambda>", node.args, [ret], [], None, None)
        return self._local_function(ast.copy_location(tree, node))

    def _local_function(self, tree: ast.FunctionDef) -> LocalFunction:
        a = tree.args
        if a.vararg or a.kwarg or tree.decorator_list:
            raise UnsupportedSyntax(
                f"`{tree.name}` in a device loop takes named arguments only (no *args, "
                "**kwargs or decorators)"
            )
        positional = [p.arg for p in (*a.posonlyargs, *a.args)]
        with_defaults = positional[len(positional) - len(a.defaults) :]
        defaults = dict(zip(with_defaults, a.defaults, strict=True))
        defaults |= {p.arg: d for p, d in zip(a.kwonlyargs, a.kw_defaults, strict=True) if d}
        values = {name: self.expr(d) for name, d in defaults.items()}
        return LocalFunction(tree, self.src, values, dict(self.env))

    def call_local(self, fn: LocalFunction, args: list[Any], kwargs: dict[str, Any]) -> Any:
        """The function's body compiled here, its arguments bound in its scope."""
        body, result = inline.split_return(fn.tree)
        scope = {**fn.scope, **self.env} if self.src is fn.src else dict(fn.scope)
        saved, loc = (self.src, self.env), self.b.loc
        self.src, self.env = fn.src, {**scope, **fn.bind(args, kwargs)}
        try:
            self._body(body)
            return None if result is None else self.expr(result)
        finally:
            (self.src, self.env), self.b.loc = saved, loc

    # -- comprehensions and dicts --------------------------------------------------
    def expr_ListComp(self, node: ast.ListComp) -> list[Any]:
        return [self.expr(node.elt) for _ in self._trips(node.generators)]

    expr_GeneratorExp = expr_ListComp  # consumed where it is made: sum(...), torch.stack

    def expr_DictComp(self, node: ast.DictComp) -> dict[Any, Any]:
        found = {}
        for _ in self._trips(node.generators):
            found[self._key(node.key)] = self.expr(node.value)
        return found

    def expr_Dict(self, node: ast.Dict) -> dict[Any, Any]:
        if any(k is None for k in node.keys):
            raise UnsupportedSyntax("`**` in a dict in a device loop")
        return {self._key(k): self.expr(v) for k, v in zip(node.keys, node.values, strict=True)}

    def _key(self, node: ast.expr | None) -> Any:
        assert node is not None
        key = self.expr(node)
        if isinstance(key, Value):
            raise UnsupportedSyntax("a dict's keys in a device loop are host values, not tiles")
        return key

    def _trips(self, generators: list[ast.comprehension]) -> Any:
        """Bind the comprehension's targets for each trip (its variables do not leak)."""
        saved = dict(self.env)
        try:
            yield from self._nested(generators)
        finally:
            self.env = saved

    def _nested(self, generators: list[ast.comprehension]) -> Any:
        if not generators:
            yield None
            return
        first, rest = generators[0], generators[1:]
        if first.is_async:
            raise UnsupportedSyntax("`async for` in a device loop")
        for item in flow.unrolled_items(self.expr(first.iter)):
            self.assign(first.target, item)
            tests = [self.expr(t) for t in first.ifs]
            if any(isinstance(t, Value) for t in tests):
                raise UnsupportedSyntax(
                    "a comprehension's `if` on a device value: it picks items while "
                    "compiling; use torch.where on the items"
                )
            if all(tests):
                yield from self._nested(rest)


def sum_of_tiles(b: Builder, args: list[Any], kwargs: dict[str, Any]) -> Any:
    """`sum(items, start=0)` where an item is a tile: `start + item0 + item1 ...` as Python
    adds them (NotImplemented otherwise)."""
    if not args or len(args) > 2 or set(kwargs) - {"start"}:
        return NotImplemented
    items = list(args[0]) if isinstance(args[0], (list, tuple)) else None
    if items is None or not any(isinstance(v, Value) for v in items):
        return NotImplemented
    total = args[1] if len(args) == 2 else kwargs.get("start", 0)
    for item in items:
        both = isinstance(total, Value) or isinstance(item, Value)
        total = OPS["add"](b, total, item) if both else total + item
    return total
