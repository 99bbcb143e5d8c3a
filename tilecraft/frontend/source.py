"""Reading a kernel's Python source: the parsed function, locations, name resolution."""

from __future__ import annotations

import ast
import inspect
import linecache
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tilecraft.exc import SourceLoc, UnsupportedSyntax


@dataclass
class KernelSource:
    """A kernel function's AST with line numbers matching its file, and its namespace."""

    fn: Callable[..., Any]
    tree: ast.FunctionDef
    filename: str
    lines: list[str]
    namespace: dict[str, Any]
    indent: int = 0  # columns removed by dedenting the function's source

    def loc(self, node: ast.AST) -> SourceLoc:
        lineno = getattr(node, "lineno", self.tree.lineno)
        text = self.lines[lineno - 1] if 0 < lineno <= len(self.lines) else ""
        col = getattr(node, "col_offset", None)
        return SourceLoc(self.filename, lineno, text, None if col is None else col + self.indent)

    def resolve(self, node: ast.expr) -> Any:
        """The object a dotted name (`torch.exp`, `tc.tile`) refers to, or None."""
        parts: list[str] = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name) or node.id not in self.namespace:
            return None
        obj = self.namespace[node.id]
        for attr in reversed(parts):
            obj = getattr(obj, attr, None)
        return obj


def _namespace(fn: Callable[..., Any]) -> dict[str, Any]:
    namespace = dict(fn.__globals__)
    names = fn.__code__.co_freevars
    for name, cell in zip(names, fn.__closure__ or (), strict=True):
        namespace[name] = cell.cell_contents
    return namespace


def read_source(fn: Callable[..., Any]) -> KernelSource:
    """Parse `fn` into a KernelSource (its decorators dropped)."""
    filename = inspect.getsourcefile(fn) or "<unknown>"
    raw_lines, first = inspect.getsourcelines(fn)
    tree = ast.parse(textwrap.dedent("".join(raw_lines)))
    ast.increment_lineno(tree, first - 1)
    func = tree.body[0]
    if not isinstance(func, ast.FunctionDef):
        raise UnsupportedSyntax("@tc.kernel applies to a plain `def` function")
    func.decorator_list = []
    module = inspect.getmodule(fn)
    # a module loaded from its file but not registered in sys.modules has no module object
    # here: its lines come from the file (the function's own would not match line numbers)
    file_lines = inspect.getsourcelines(module)[0] if module else linecache.getlines(filename)
    indent = len(raw_lines[0]) - len(raw_lines[0].lstrip())
    return KernelSource(fn, func, filename, file_lines, _namespace(fn), indent)
