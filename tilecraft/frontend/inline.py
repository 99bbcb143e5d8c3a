"""Functions called on tiles inside a device loop (an epilogue lambda passed to the
kernel, a helper `def`) are inlined: their source is compiled in the caller's device
compiler, their closure variables taken as host values.

A tensor the function captures (`lambda acc, tile: acc + bias[tile[1]]`) becomes a
kernel argument, passed by the launcher through the function object that the host
code holds (`epilogue.__closure__[0].cell_contents`).
"""

from __future__ import annotations

import ast
import functools
import inspect
import linecache
import types
from dataclasses import dataclass
from typing import Any

from tilecraft.exc import UnsupportedOperation, UnsupportedSyntax
from tilecraft.frontend.source import KernelSource, namespace_of

LIBRARIES = ("torch", "triton", "numpy", "math", "builtins", "operator")
# tilecraft's own DSL functions are ops, not helpers to inline; its kernel library's
# (tilecraft.vision, the shipped examples) are user code like any other
DSL_MODULES = ("tilecraft.language", "tilecraft.frontend", "tilecraft.runtime", "tilecraft.ir")


@dataclass(frozen=True)
class HostCallable:
    """A function the device code may call; `path` reaches it from the host code."""

    fn: types.FunctionType
    path: str | None

    def closure(self) -> dict[str, tuple[Any, str | None]]:
        """Names the function can read: (value, host expression) for each."""
        code, found = self.fn.__code__, {}
        for name in code.co_names:
            if name in self.fn.__globals__:
                where = f"{self.path}.__globals__[{name!r}]" if self.path else None
                found[name] = (self.fn.__globals__[name], where)
        cells = zip(code.co_freevars, self.fn.__closure__ or (), strict=True)
        for i, (name, cell) in enumerate(cells):
            where = f"{self.path}.__closure__[{i}].cell_contents" if self.path else None
            found[name] = (cell.cell_contents, where)
        return found


def inlinable(fn: Any) -> bool:
    """A user's Python function (not a library's), whose source tilecraft can compile."""
    if not isinstance(fn, types.FunctionType):
        return False
    return not _library(getattr(fn, "__module__", None) or "")


def library_module(value: Any) -> bool:
    """A library's module or tilecraft's DSL (`torch`, `tc`): its attributes (`torch.float32`)
    are not a user's values that may change between calls."""
    return isinstance(value, types.ModuleType) and _library(value.__name__)


def _library(module: str) -> bool:
    """Whether code of the module named `module` is a library's, not a user's."""
    if module.startswith(DSL_MODULES) or module == "tilecraft":
        return True
    return module.split(".")[0] in LIBRARIES


def function_source(fn: types.FunctionType) -> KernelSource:
    """The function as a KernelSource (a lambda becomes a `def` returning its body)."""
    code = fn.__code__
    filename = code.co_filename
    lines = linecache.getlines(filename)
    if not lines:
        raise UnsupportedOperation(
            f"cannot read the source of `{fn.__qualname__}` to compile it on the device"
        )
    tree = _function_node(fn, _parsed(filename, len(lines), "".join(lines)))
    namespace = namespace_of(fn)
    return KernelSource(fn, tree, filename, lines, namespace)


@functools.lru_cache(maxsize=64)
def _parsed(filename: str, size: int, text: str) -> ast.Module:
    return ast.parse(text, filename)


def _function_node(fn: types.FunctionType, module: ast.Module) -> ast.FunctionDef:
    code = fn.__code__
    params = list(code.co_varnames[: code.co_argcount + code.co_kwonlyargcount])
    found: list[ast.FunctionDef] = []
    for node in ast.walk(module):
        if isinstance(node, ast.FunctionDef):  # (a decorated one's code starts at its first
            # decorator's line)
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            if node.name == code.co_name and first == code.co_firstlineno:
                found.append(node)
        elif isinstance(node, ast.Lambda) and code.co_name == "<lambda>":
            found += [_as_def(node)] if node.lineno == code.co_firstlineno else []
    found = [f for f in found if [a.arg for a in (*f.args.args, *f.args.kwonlyargs)] == params]
    if len(found) != 1:
        raise UnsupportedOperation(
            f"cannot find the source of `{fn.__qualname__}` (line {code.co_firstlineno}) "
            "unambiguously: define it on a line of its own"
        )
    return found[0]


def _as_def(node: ast.Lambda) -> ast.FunctionDef:
    ret = ast.copy_location(ast.Return(node.body), node.body)
    func = ast.FunctionDef(name="<lambda>", args=node.args, body=[ret], decorator_list=[])
    return ast.copy_location(func, node)


def bind_arguments(fn: types.FunctionType, args: list[Any], kwargs: dict[str, Any]) -> dict:
    """The function's parameters bound to the call's values (defaults filled in)."""
    try:
        bound = inspect.signature(fn).bind(*args, **kwargs)
    except TypeError as e:
        raise UnsupportedSyntax(f"calling `{fn.__qualname__}`: {e}") from None
    bound.apply_defaults()
    return dict(bound.arguments)


def split_return(tree: ast.FunctionDef) -> tuple[list[ast.stmt], ast.expr | None]:
    """The statements before the final `return`, and what it returns."""
    body = list(tree.body)
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]  # the docstring
    result = None
    last = body[-1] if body else None
    if isinstance(last, ast.Return):
        result = last.value
        body.pop()
    if any(isinstance(n, ast.Return) for s in body for n in ast.walk(s)):
        raise UnsupportedSyntax(
            f"`{tree.name}` is inlined on the device: it may `return` only at its end"
        )
    return body, result
