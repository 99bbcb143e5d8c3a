"""Splitting a kernel into host code and device loops, and rewriting the host code.

The host code (everything outside the top-level `tc.tile`/`tc.grid` loops) stays Python:
tilecraft runs it as written, with each device loop replaced by either a capture of
the local variables (to learn shapes at bind time, on meta tensors), a kernel launch
(the generated launcher), or left in place with tile subscripts made eager (interpret
mode).
"""

from __future__ import annotations

import ast
import copy
import inspect
from collections.abc import Callable
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from tilecraft import language as lang
from tilecraft.exc import HostCodeError, NotInKernel, UnsupportedSyntax
from tilecraft.frontend.source import KernelSource

LOOP_FUNCS = (lang.tile, lang.grid)
HOST_FUNCS = (
    lang.register_block_size,
    lang.register_tunable,
    lang.specialize,
    lang.register_reduction_dim,
    lang.barrier,
    lang.host.cdiv,
    lang.host.next_power_of_2,
    lang.static_range,  # a plain `range` in host code
)


HOST_FLOW = (ast.For, ast.While, ast.If, ast.With)  # host statements a device loop may sit in


def device_loops(src: KernelSource) -> list[ast.For]:
    """The device loops of the kernel in source order: statements of its body, or of the
    host `for`/`while`/`if`/`with` statements around them (launched each time host code
    reaches them); checks that host code uses no tile op."""
    loops: list[ast.For] = []
    _collect(src, src.tree.body, loops)
    _check_device_names(src)
    if not loops:
        raise UnsupportedSyntax(
            "a kernel needs at least one `for ... in tc.tile(...)` loop", src.loc(src.tree)
        )
    return loops


def _collect(src: KernelSource, body: list[ast.stmt], loops: list[ast.For]) -> None:
    for stmt in body:
        if _is_device_loop(src, stmt):
            loops.append(stmt)  # type: ignore[arg-type]
        elif isinstance(stmt, HOST_FLOW):
            _check_host_expr(src, stmt)
            for block in _blocks(stmt):
                _collect(src, block, loops)
        else:
            _check_host_stmt(src, stmt)


def _blocks(stmt: ast.stmt) -> list[list[ast.stmt]]:
    """The statement lists of a host `for`/`while`/`if`/`with`."""
    return [stmt.body, getattr(stmt, "orelse", [])]  # type: ignore[attr-defined]


def _heads(stmt: ast.stmt) -> list[ast.AST]:
    """The parts of a host `for`/`while`/`if`/`with` that are not its statements."""
    heads = [getattr(stmt, f, None) for f in ("target", "iter", "test")]
    return [h for h in heads if h is not None] + getattr(stmt, "items", [])


def _check_host_expr(src: KernelSource, stmt: ast.stmt) -> None:
    for head in _heads(stmt):
        _check_host_stmt(src, head)


def _stored(node: ast.AST) -> set[str]:
    return {
        n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
    }


def _check_device_names(src: KernelSource) -> None:
    """Host code cannot read a variable that only a device loop defines."""
    host = {a.arg for a in ast.walk(src.tree.args) if isinstance(a, ast.arg)}
    _check_names(src, src.tree.body, host, set())


def _check_names(src: KernelSource, body: list[ast.stmt], host: set[str], device: set[str]) -> None:
    for stmt in body:
        if _is_device_loop(src, stmt):
            device |= _stored(stmt) - host
            continue
        flow = isinstance(stmt, HOST_FLOW)
        for node in (n for part in (_heads(stmt) if flow else [stmt]) for n in ast.walk(part)):
            _check_read(src, node, device)
        host |= _stored(getattr(stmt, "target", stmt) if flow else stmt)
        for block in _blocks(stmt) if flow else []:
            _check_names(src, block, host, device)


def _check_read(src: KernelSource, node: ast.AST, device: set[str]) -> None:
    if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in device:
        raise UnsupportedSyntax(
            f"`{node.id}` is computed inside a device loop and cannot be used by host "
            "code; store it to a tensor instead",
            src.loc(node),
        )


def _is_device_loop(src: KernelSource, stmt: ast.AST) -> bool:
    if not isinstance(stmt, ast.For) or not isinstance(stmt.iter, ast.Call):
        return False
    return src.resolve(stmt.iter.func) in LOOP_FUNCS


def _check_host_stmt(src: KernelSource, stmt: ast.AST) -> None:
    for node in ast.walk(stmt):
        if isinstance(node, ast.For) and _is_device_loop(src, node):
            raise UnsupportedSyntax(
                "a device loop can sit in host code's `for`, `while`, `if` and `with`, not "
                "in a `try` or a function defined in the kernel (each device loop is a "
                "launch of one compiled kernel)",
                src.loc(node),
            )
        obj = src.resolve(node.func) if isinstance(node, ast.Call) else None
        if _is_language_op(obj) and obj not in HOST_FUNCS:
            name = getattr(obj, "__name__", "op")
            raise NotInKernel(
                f"tc.{name}() is a device op: use it inside a `tc.tile` loop", src.loc(node)
            )


def _is_language_op(obj: object) -> bool:
    return inspect.isfunction(obj) and (getattr(obj, "__module__", None) or "").startswith(
        "tilecraft.language"
    )


class _HostCalls(ast.NodeTransformer):
    """Routes `register_block_size`/`register_tunable` to the values a config picks."""

    def __init__(self, src: KernelSource) -> None:
        self.src = src

    def visit_Call(self, node: ast.Call) -> ast.expr:
        self.generic_visit(node)
        obj = self.src.resolve(node.func)
        if obj is lang.register_block_size:
            node.func = ast.Name("_tc_block_size", ast.Load())
        elif obj is lang.register_tunable:
            node.func = ast.Name("_tc_tunable", ast.Load())
        return node


class _Rewrite(_HostCalls):
    """`_HostCalls`, and each device loop replaced by `make(index, loop)` (in source order)."""

    def __init__(self, src: KernelSource, make: Callable[[int, ast.For], ast.stmt]) -> None:
        super().__init__(src)
        self.make, self.count = make, 0

    def visit_For(self, node: ast.For) -> ast.stmt:
        if not _is_device_loop(self.src, node):
            self.generic_visit(node)
            return node
        self.count += 1
        return ast.copy_location(self.make(self.count - 1, node), node)


def rewrite_host(src: KernelSource, make: Callable[[int, ast.For], ast.stmt]) -> ast.Module:
    """A copy of the kernel whose device loops are replaced by `make(index, loop)`."""
    func = copy.deepcopy(src.tree)
    rewrite = _Rewrite(src, make)
    func.body = [rewrite.visit(stmt) for stmt in func.body]
    module = ast.Module(body=[func], type_ignores=[])
    return ast.fix_missing_locations(module)


def capture_stmt(index: int, loop: ast.For) -> ast.stmt:
    """`_tc_capture(index, locals())`: records the host locals where a loop starts."""
    call = ast.Call(
        ast.Name("_tc_capture", ast.Load()),
        [ast.Constant(index), ast.Call(ast.Name("locals", ast.Load()), [], [])],
        [],
    )
    return ast.Expr(call)


def compile_function(module: ast.Module, src: KernelSource, extra: dict[str, Any]) -> Any:
    """Compile a rewritten kernel module into a function (errors keep the user's lines)."""
    namespace = {**src.namespace, **extra}
    exec(compile(module, src.filename, "exec"), namespace)
    return namespace[src.tree.name]


# -- host code that reads values of tensors ---------------------------------------------------
VALUE_READS = ("item", "tolist", "__int__", "__float__", "__bool__", "__index__")
Element = tuple[int, int]  # (argument position, element offset in its storage)


class HostValueReads(TorchFunctionMode):
    """While host code runs on meta tensors: `t.item()` (or `int(t)`...) on an element of an
    argument tensor returns the element's real value, read through `lookup`, and records
    which element it was, so that kernels are specialized on the values their host code
    reads. A value computed from tensors cannot be read: that raises a HostCodeError."""

    def __init__(self, src: KernelSource, metas: tuple, lookup: Callable[[Element], Any]) -> None:
        super().__init__()
        self.src, self.lookup = src, lookup
        self.storages = {a.untyped_storage()._cdata: i for i, a in enumerate(metas) if _is_meta(a)}
        self.reads: list[Element] = []

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: Any = None):
        name = getattr(func, "__name__", "")
        if name not in VALUE_READS or not args or not _is_meta(args[0]):
            return func(*args, **(kwargs or {}))
        tensor = args[0]
        arg = self.storages.get(tensor.untyped_storage()._cdata)
        if arg is None or tensor.numel() != 1 or name == "tolist":
            raise HostCodeError(
                f"host code reads a value computed from tensors (`{name}`), which tilecraft "
                "cannot specialize on: read single elements of argument tensors "
                "(`int(lengths[0])`), pass the value as an int argument, or read it on the "
                "device inside the loop",
                self._user_line(),
            )
        element = (arg, int(tensor.storage_offset()))
        if element not in self.reads:
            self.reads.append(element)
        value = self.lookup(element)
        return {"__float__": float, "__bool__": bool}.get(name, _same)(value)

    def _user_line(self) -> Any:
        frame = inspect.currentframe()
        while frame is not None and frame.f_code.co_filename != self.src.filename:
            frame = frame.f_back
        return self.src.loc(ast.Pass(lineno=frame.f_lineno)) if frame is not None else None


def _same(value: Any) -> Any:
    return value


def _is_meta(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and value.device.type == "meta"


def read_element(args: tuple, element: Element) -> Any:
    """The value of one element of a real argument tensor (`element` as recorded on the
    meta tensor, whose storage starts where the argument does)."""
    arg, offset = element
    tensor = args[arg]
    return tensor.as_strided((), (), tensor.storage_offset() + offset).item()
