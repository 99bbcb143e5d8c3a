"""Reading a kernel's Python source: the parsed function, locations, name resolution."""

from __future__ import annotations

import ast
import dis
import inspect
import linecache
import textwrap
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch

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


CONSTANTS = (bool, int, float, complex, str, bytes, type(None), torch.dtype)


def global_reads(fn: Callable[..., Any]) -> list[tuple[dict[str, Any], str]]:
    """The module-level names `fn`, and the functions it calls by name, read whose values
    are numbers, strings, dtypes, tuples, lists and dicts of them or numeric numpy arrays,
    as (module globals, name), and the attributes of module-level objects they read so
    (`CONFIG.gain`, as (module globals, "CONFIG.gain")): compiled code and eager mode take
    them as constants, so a kernel is specialized on their values, read again at every
    call (a module's `SCALE = 2.0` set to 3.0 later, `OFFSETS[1] = 3` in place or
    `CONFIG.gain = 3.0` recompiles). Closure variables holding constants count too."""
    from tilecraft.frontend.inline import inlinable, library_module  # (it imports this module)

    found: list[tuple[dict[str, Any], str]] = []
    seen: set[Any] = set()  # functions (by id) and (module globals' id, name) pairs
    stack = [fn]
    while stack:
        item = stack.pop()
        f = getattr(item, "__wrapped__", item)  # a tc.kernel: its function
        if id(f) in seen or not (f is fn or inlinable(f)):  # user code, not a library's
            continue
        seen.add(id(f))
        for name in sorted(_code_names(f.__code__) & f.__globals__.keys()):
            value = f.__globals__[name]
            if _constant(value) and (id(f.__globals__), name) not in seen:
                seen.add((id(f.__globals__), name))
                found.append((f.__globals__, name))
            elif callable(value):
                stack.append(value)
        found += [({n: c}, n) for n, c in closure_cells(f).items() if _constant(_contents(c))]
        for dotted in sorted(_attribute_reads(f.__code__)):  # `CONFIG.gain`, `mod.SCALE`
            root = f.__globals__.get(dotted.split(".")[0])
            if not library_module(root) and _constant(module_value(f.__globals__, dotted)):
                found.append((f.__globals__, dotted))
    return found


def closure_cells(fn: Callable[..., Any]) -> dict[str, types.CellType]:
    """A function's closure: its free variables' cells by name (read through the cell,
    a `nonlocal` rebinding is seen too)."""
    return dict(zip(fn.__code__.co_freevars, fn.__closure__ or (), strict=True))


def _contents(cell: types.CellType) -> Any:
    try:
        return cell.cell_contents
    except ValueError:  # not bound yet
        return None


def _codes(code: types.CodeType) -> Iterator[types.CodeType]:
    """A code object and those nested in it (its functions, lambdas, comprehensions)."""
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _codes(const)


def _attribute_reads(code: types.CodeType) -> set[str]:
    """The attributes of module-level names (`CONFIG.gain`, `a.b.c` and `a.b`) a code
    object and those nested in it read."""
    found: set[str] = set()
    for each in _codes(code):
        chain = ""
        for ins in dis.get_instructions(each):
            if ins.opname == "LOAD_GLOBAL":
                chain = ins.argval
            elif ins.opname == "LOAD_ATTR" and chain:
                chain += "." + ins.argval
                found.add(chain)
            elif ins.opname != "EXTENDED_ARG":  # (an argument's high bits, the next one's)
                chain = ""
    return found


def module_value(namespace: dict[str, Any], dotted: str) -> Any:
    """The value of a module-level name or of an attribute path from one (None where an
    attribute is missing or raises)."""
    root, *attrs = dotted.split(".")
    value = namespace.get(root)
    if isinstance(value, types.CellType):  # a closure variable (`_closure_reads`)
        value = _contents(value)
    for attr in attrs:
        try:
            value = getattr(value, attr, None)
        except Exception:  # noqa: BLE001 - a property that raises: no constant
            return None
    return value


def _code_names(code: types.CodeType) -> set[str]:
    """The global (and attribute) names a code object and those nested in it read."""
    return set().union(*(each.co_names for each in _codes(code)))


def _constant(value: Any) -> bool:
    if isinstance(value, (tuple, list)):
        return all(_constant(v) for v in value)
    if isinstance(value, dict):
        return all(_constant(k) and _constant(v) for k, v in value.items())
    if isinstance(value, np.ndarray):  # device code reads its elements as numbers
        return value.dtype.kind in "biuf"
    return isinstance(value, CONSTANTS)


def frozen(value: Any) -> Any:
    """A module constant's value as a key: lists, dicts and numpy arrays (changed in
    place, the same object holds other values) as tuples of their contents at this call."""
    if isinstance(value, (tuple, list)):
        return (type(value).__name__, *[frozen(v) for v in value])
    if isinstance(value, dict):
        return ("dict", *[(k, frozen(v)) for k, v in value.items()])
    if isinstance(value, np.ndarray):
        return ("ndarray", value.dtype.str, value.shape, value.tobytes())
    return value


def refreshed(src: KernelSource, reads: list[tuple[dict[str, Any], str]]) -> KernelSource:
    """`src` with its namespace read again where one of the constants it `reads`
    (`global_reads`: the kernel's own module's, its closure's) is another object since."""
    own = src.fn.__code__.co_freevars
    if all(
        src.namespace.get(n) is module_value(d, n)
        for d, n in reads
        if "." not in n and (d is src.fn.__globals__ or n in own)
    ):
        return src
    return replace(src, namespace=namespace_of(src.fn))


def namespace_of(fn: Callable[..., Any]) -> dict[str, Any]:
    """A function's globals and its closure's values over them."""
    cells = closure_cells(fn)
    return {**fn.__globals__, **{name: cell.cell_contents for name, cell in cells.items()}}


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
    return KernelSource(fn, func, filename, file_lines, namespace_of(fn), indent)
