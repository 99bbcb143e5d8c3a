"""Folding what a specialization fixes into the host launcher's code.

A launcher only ever runs on arguments with the dtypes, shapes, strides and devices (and
the int, bool, str and dtype values) it was specialized on: they are `Kernel.key`. Host
expressions computed from those alone are constants, and two kinds of host work cost
microseconds a call for nothing:

- allocations: `torch.empty([m, n], dtype=torch.promote_types(x.dtype, y.dtype),
  device=x.device)` becomes `torch.empty(32, 48, dtype=_tc_float32, device=_tc_cpu)`
  (`torch.empty`, `zeros` and `ones` whose every argument folds);
- `x, y = torch.broadcast_tensors(x, y)` whose results only reach kernel launches (after
  the allocations are folded): a launch reads a tensor's data pointer, which expanding
  does not move (the strides are compiled into the kernel), so the statement goes.

What is known is tracked statement by statement (`Facts`): a tensor's metadata can only
change through the tensor object, so where a tensor may reach code that could change it
(any use but a read of its metadata, a view method, a `*_like` allocation or a launch),
no tensor's metadata is trusted from there on. What is not folded runs as written.
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable
from typing import Any

import torch

from tilecraft.codegen.fold_facts import (
    CONSTANT_TYPES,
    Const,
    Fact,
    Facts,
    Many,
    TensorFact,
    is_int,
    is_value,
    truthy,
)
from tilecraft.frontend.source import KernelSource
from tilecraft.language.tunables import specialize

ALLOCATORS = {torch.empty: "empty", torch.zeros: "zeros", torch.ones: "ones"}
LIKE = (torch.empty_like, torch.zeros_like, torch.ones_like, torch.full_like)
# methods that read metadata, and methods that return a new tensor object (a view, never
# `self`: not `contiguous`, `to`, `flatten`, which may return it)
READS = {"dtype", "shape", "device", "ndim", "size", "stride", "dim", "numel", "is_cuda"}
VIEWS = {"view", "reshape", "expand", "permute", "transpose", "unsqueeze", "squeeze", "narrow"}
VIEWS |= {"select", "data_ptr", "is_contiguous", "element_size"}
BINARY: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
}
COMPARE: dict[type, Callable[[Any, Any], Any]] = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
}
SCOPES = (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


def fold_host(
    host: ast.Module, src: KernelSource, args: tuple, devices: tuple, kernels: set[str]
) -> tuple[ast.Module, dict[str, str]]:
    """`host` (the launcher module) with folded allocations and broadcasts, and the module
    constants the folded code reads (name -> source). `args` are the specialization's
    arguments as meta tensors and values, `devices` the tensors' real devices."""
    fn = host.body[0]
    if not isinstance(fn, ast.FunctionDef) or not _foldable(fn):
        return host, {}
    folder = _Folder(src, kernels, _locals(fn))
    fn.body = folder.block(fn.body, _parameter_facts(fn, args, devices))
    fn.body = folder.drop_unread(folder.drop_broadcasts(fn.body)) or [ast.Pass()]
    return host, folder.constants


def _foldable(fn: ast.FunctionDef) -> bool:
    """Plain positional parameters, no `global`/`nonlocal`, no attribute stores (`.data =`)."""
    a = fn.args
    if a.vararg or a.kwarg or a.kwonlyargs or a.posonlyargs:
        return False
    for node in ast.walk(fn):
        if isinstance(node, (ast.Global, ast.Nonlocal)):
            return False
        if isinstance(node, ast.Attribute) and not isinstance(node.ctx, ast.Load):
            return False
    return True


def _locals(fn: ast.FunctionDef) -> set[str]:
    return {a.arg for a in fn.args.args} | _stored(fn)


def _parameter_facts(fn: ast.FunctionDef, args: tuple, devices: tuple) -> Facts:
    facts = Facts()
    if len(fn.args.args) != len(args):
        return facts
    for param, value, device in zip(fn.args.args, args, devices, strict=True):
        if isinstance(value, torch.Tensor) and device is not None:
            facts.names[param.arg] = TensorFact(value, device)
        elif type(value) in (int, bool, str, torch.dtype) or value is None:  # keyed by value
            facts.names[param.arg] = Const(value)
    return facts


class _Folder:
    """Walks the host statements in order, folding allocations with what is known."""

    def __init__(self, src: KernelSource, kernels: set[str], local: set[str]) -> None:
        self.src, self.kernels, self.local = src, kernels, local
        self.constants: dict[str, str] = {}  # module-level names of folded dtypes, devices
        self.pure: set[ast.stmt] = set()  # assignments of constants (no side effects)

    def block(self, body: list[ast.stmt], facts: Facts) -> list[ast.stmt]:
        out = []
        for stmt in body:
            out += self.statement(stmt, facts)
        return out

    def statement(self, stmt: ast.stmt, facts: Facts) -> list[ast.stmt]:
        """`stmt` folded (none, one or several statements); `facts` updated past it."""
        if isinstance(stmt, ast.If):
            return self._if(stmt, facts)
        if isinstance(stmt, ast.Assert) and truthy(self.fact(stmt.test, facts)):
            return []  # a check the specialization passed: `assert k == k2`
        if self._escapes(stmt, facts):
            facts.forget_tensors()
        if isinstance(stmt, (ast.Assign, ast.Expr, ast.Return, ast.Assert, ast.AnnAssign)):
            stmt = _Allocations(self, facts).visit(stmt)
        single = isinstance(stmt, ast.Assign) and len(stmt.targets) == 1
        value = self.fact(stmt.value, facts) if isinstance(stmt, ast.Assign) and single else None
        for name in _stored(stmt):
            facts.names.pop(name, None)
        if isinstance(stmt, ast.Assign) and single:
            self._bind(stmt.targets[0], value, facts)
            if isinstance(value, Const) and _names_only(stmt.targets[0]):
                self.pure.add(stmt)  # not `out[0] = 1`: that stores into a tensor
        return [stmt]

    def _if(self, stmt: ast.If, facts: Facts) -> list[ast.stmt]:
        test = self.fact(stmt.test, facts)
        if isinstance(test, Const) and is_value(test.value):  # e.g. a launch's guard
            return self.block(stmt.body if test.value else stmt.orelse, facts)
        if self._escapes(stmt.test, facts):
            facts.forget_tensors()
        other = facts.copy()
        stmt.body = self.block(stmt.body, facts) or [ast.Pass()]
        stmt.orelse = self.block(stmt.orelse, other)
        facts.merge(other)
        return [stmt]

    def drop_unread(self, body: list[ast.stmt]) -> list[ast.stmt]:
        """`body` less the assignments of constants (`m, k = x.size()`) nothing reads after."""
        read: set[str] = set()
        out: list[ast.stmt] = []
        for stmt in reversed(body):
            if stmt in self.pure and not (_stored(stmt) & read):
                continue
            read |= {n.id for n in ast.walk(stmt) if isinstance(n, ast.Name)}
            out.append(stmt)
        return out[::-1]

    def _bind(self, target: ast.expr, fact: Fact | None, facts: Facts) -> None:
        if fact is None:
            return
        if isinstance(target, ast.Name):
            facts.names[target.id] = fact
            return
        if not isinstance(target, (ast.Tuple, ast.List)):
            return
        items: tuple = ()
        if isinstance(fact, Many):
            items = fact.items
        elif isinstance(fact, Const) and isinstance(fact.value, (tuple, list)):
            items = tuple(Const(v) for v in fact.value)
        if len(items) == len(target.elts):
            for elt, item in zip(target.elts, items, strict=True):
                self._bind(elt, item, facts)

    # -- what escapes ------------------------------------------------------------------
    def _escapes(self, node: ast.AST, facts: Facts) -> bool:
        """Whether a tensor the facts describe may reach code that could change it."""
        tensors = {k for k, v in facts.names.items() if isinstance(v, (TensorFact, Many))}
        if not tensors:
            return False
        parents = {c: p for p in ast.walk(node) for c in ast.iter_child_nodes(p)}
        for name in ast.walk(node):
            is_tensor = isinstance(name, ast.Name) and name.id in tensors
            if is_tensor and not self._safe_use(name, parents, node, facts):  # type: ignore[arg-type]
                return True
        return False

    def _safe_use(
        self, name: ast.Name, parents: dict[ast.AST, ast.AST], stmt: ast.AST, facts: Facts
    ) -> bool:
        if not isinstance(name.ctx, ast.Load) or _in_scope(name, parents):
            return isinstance(name.ctx, ast.Store)
        value: ast.expr = name
        parent = parents.get(value)
        while isinstance(parent, ast.IfExp) and value is not parent.test:
            test = self.fact(parent.test, facts)  # a branch that never runs is safe
            if not isinstance(test, Const) or not is_value(test.value):
                return False
            if value is not (parent.body if test.value else parent.orelse):
                return True
            value, parent = parent, parents.get(parent)
        if parent is stmt and isinstance(stmt, ast.Assign):  # `y = x`: y is tracked too
            return len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)
        return self._safe_operand(value, parent, parents)

    def _safe_operand(
        self, value: ast.expr, parent: ast.AST | None, parents: dict[ast.AST, ast.AST]
    ) -> bool:
        if isinstance(parent, ast.Attribute):
            call = parents.get(parent)
            if parent.attr in VIEWS:
                return isinstance(call, ast.Call) and call.func is parent
            return parent.attr in READS
        if isinstance(parent, ast.Call) and value in parent.args:
            func = parent.func
            if isinstance(func, ast.Subscript):
                return self._launches(parent)
            return self._is(func, *LIKE, torch.broadcast_tensors)
        return False

    def _is(self, node: ast.expr, *objects: Any) -> bool:
        """Whether `node` names one of `objects` (a module's attribute, not a local)."""
        found = self._resolve(node)
        return found is not None and any(found is o for o in objects)

    # -- what is known ----------------------------------------------------------------
    def _resolve(self, node: ast.expr) -> Any:
        root = node
        while isinstance(root, ast.Attribute):
            root = root.value
        if isinstance(root, ast.Name) and root.id in self.local:
            return None
        return self.src.resolve(node)

    def fact(self, node: ast.expr, facts: Facts) -> Fact | None:
        """What the specialization fixes about the value of `node`, or None."""
        try:
            return self._fact(node, facts)
        except Exception:  # noqa: BLE001 - it fails when run, as written: not folded
            return None

    def _fact(self, node: ast.expr, facts: Facts) -> Fact | None:
        if isinstance(node, ast.Constant):
            return Const(node.value)
        if isinstance(node, ast.Name):
            return facts.names.get(node.id)
        if isinstance(node, (ast.Tuple, ast.List)):
            return self._sequence(node, facts)
        if isinstance(node, ast.Attribute):
            return self._attribute(node, facts)
        if isinstance(node, ast.Call):
            return self._call(node, facts)
        if isinstance(node, ast.BinOp) and type(node.op) in BINARY:
            left, right = self._value(node.left, facts), self._value(node.right, facts)
            if is_int(left) and is_int(right):
                return Const(BINARY[type(node.op)](left.value, right.value))
        if isinstance(node, ast.IfExp):
            test = self._value(node.test, facts)
            if test is not None and is_value(test.value):
                return self._fact(node.body if test.value else node.orelse, facts)
        if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in COMPARE:
            left, right = self._value(node.left, facts), self._value(node.comparators[0], facts)
            if left is not None and right is not None and is_value((left.value, right.value)):
                return Const(COMPARE[type(node.ops[0])](left.value, right.value))
        if isinstance(node, ast.Subscript):
            base, index = self._value(node.value, facts), self._value(node.slice, facts)
            if base is not None and is_int(index):
                return Const(base.value[index.value])
        return None

    def _value(self, node: ast.expr, facts: Facts) -> Const | None:
        found = self._fact(node, facts)
        return found if isinstance(found, Const) else None

    def _sequence(self, node: ast.Tuple | ast.List, facts: Facts) -> Fact | None:
        items = [self._fact(e, facts) for e in node.elts]
        if items and all(isinstance(i, TensorFact) for i in items):
            return Many(tuple(i for i in items if isinstance(i, TensorFact)))
        if not all(isinstance(i, Const) for i in items):
            return None
        values = [i.value for i in items if isinstance(i, Const)]
        return Const(tuple(values) if isinstance(node, ast.Tuple) else values)

    def _attribute(self, node: ast.Attribute, facts: Facts) -> Fact | None:
        base = self._fact(node.value, facts)
        if isinstance(base, TensorFact):
            if node.attr == "device":
                return Const(base.device)
            if node.attr in ("dtype", "shape", "ndim"):
                return Const(getattr(base.meta, node.attr))
            return None
        found = self._resolve(node)
        return Const(found) if isinstance(found, torch.dtype) else None

    def _call(self, node: ast.Call, facts: Facts) -> Fact | None:
        func = node.func
        args = [self._fact(a, facts) for a in node.args]
        if node.keywords:
            return None
        if isinstance(func, ast.Attribute) and func.attr in ("size", "stride", "dim", "numel"):
            base = self._fact(func.value, facts)
            if isinstance(base, TensorFact) and all(is_int(a) for a in args):
                method = getattr(base.meta, func.attr)
                return Const(method(*(a.value for a in args if isinstance(a, Const))))
            return None
        if self._is(func, specialize) and len(args) == 1:
            return args[0]
        if self._is(func, torch.promote_types) and all(isinstance(a, Const) for a in args):
            return Const(torch.promote_types(*(a.value for a in args if isinstance(a, Const))))
        if self._is(func, torch.broadcast_tensors) and all(isinstance(a, TensorFact) for a in args):
            tensors = [a for a in args if isinstance(a, TensorFact)]
            views = torch.broadcast_tensors(*(t.meta for t in tensors))
            return Many(tuple(TensorFact(v, t.device) for v, t in zip(views, tensors, strict=True)))
        return None

    # -- broadcasts whose results only reach launches ----------------------------------
    def drop_broadcasts(self, body: list[ast.stmt]) -> list[ast.stmt]:
        """`body` less its `a, b = torch.broadcast_tensors(a, b)` statements whose results
        are, from there on, only arguments of launches (read for their data pointers)."""
        out = []
        for i, stmt in enumerate(body):
            names = self._broadcast_names(stmt)
            if names is not None and self._only_launched(names, body[i + 1 :]):
                continue
            out.append(stmt)
        return out

    def _broadcast_names(self, stmt: ast.stmt) -> list[str] | None:
        """The names of `a, b = torch.broadcast_tensors(a, b)` (the same names both sides)."""
        if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1):
            return None
        target, value = stmt.targets[0], stmt.value
        if not (isinstance(target, ast.Tuple) and isinstance(value, ast.Call)):
            return None
        if not self._is(value.func, torch.broadcast_tensors) or value.keywords:
            return None
        names = [e.id for e in target.elts if isinstance(e, ast.Name)]
        given = [a.id for a in value.args if isinstance(a, ast.Name)]
        same = len(names) == len(target.elts) == len(value.args) and names == given
        return names if same and len(set(names)) == len(names) else None

    def _only_launched(self, names: list[str], rest: list[ast.stmt]) -> bool:
        module = ast.Module(body=list(rest), type_ignores=[])
        parents = {c: p for p in ast.walk(module) for c in ast.iter_child_nodes(p)}
        for node in ast.walk(module):
            if isinstance(node, ast.Name) and node.id in names:
                parent = parents.get(node)
                if not isinstance(parent, ast.Call) or node not in parent.args:
                    return False
                if not (isinstance(node.ctx, ast.Load) and self._launches(parent)):
                    return False
        return True

    def _launches(self, call: ast.Call) -> bool:
        """Whether `call` is a kernel launch, `_kernel[grid](...)`."""
        func = call.func
        if not isinstance(func, ast.Subscript) or not isinstance(func.value, ast.Name):
            return False
        return func.value.id in self.kernels

    # -- what is written ---------------------------------------------------------------
    def constant(self, value: Any) -> ast.expr | None:
        """`value` as an expression of the generated code, or None where it has none."""
        if isinstance(value, CONSTANT_TYPES):
            return ast.Constant(value)
        if isinstance(value, (tuple, list)):  # torch.Size too
            elts = [e for e in map(self.constant, value) if e is not None]
            if len(elts) != len(value):
                return None
            ctx = ast.Load()
            return ast.List(elts, ctx) if isinstance(value, list) else ast.Tuple(elts, ctx)
        if isinstance(value, torch.dtype):
            return self._named(str(value).removeprefix("torch."), repr(value))
        if isinstance(value, torch.device):
            name = str(value).replace(":", "")
            return self._named(name, f"torch.device({str(value)!r})")
        return None

    def _named(self, name: str, source: str) -> ast.expr:
        name = f"_tc_{name}"
        self.constants[name] = source
        return ast.Name(name, ast.Load())

    def allocation(self, node: ast.Call, facts: Facts) -> ast.Call | None:
        """`torch.empty(...)` (zeros, ones) with constant arguments, where all fold."""
        kind = next((k for f, k in ALLOCATORS.items() if self._is(node.func, f)), None)
        if kind is None or not node.args:  # `torch.empty()` fails as written
            return None
        if any(k.arg not in ("dtype", "device") for k in node.keywords):
            return None
        args = [self.fact(a, facts) for a in node.args]
        keywords = {k.arg: self.fact(k.value, facts) for k in node.keywords if k.arg}
        if not all(isinstance(f, Const) for f in (*args, *keywords.values())):
            return None
        sizes = [f.value for f in args if isinstance(f, Const)]
        if len(sizes) == 1 and isinstance(sizes[0], (tuple, list)):
            sizes = list(sizes[0])
        if not all(is_int(Const(s)) for s in sizes):
            return None
        written = [self.constant(s) for s in sizes] if sizes else [ast.Tuple([], ast.Load())]
        kwargs = {k: self.constant(f.value) for k, f in keywords.items() if isinstance(f, Const)}
        if any(e is None for e in (*written, *kwargs.values())):
            return None
        func = ast.Attribute(ast.Name("torch", ast.Load()), kind, ast.Load())
        keys = [ast.keyword(k, v) for k, v in kwargs.items() if v is not None]
        return ast.Call(func, [e for e in written if e is not None], keys)


class _Allocations(ast.NodeTransformer):
    """Replaces the allocations of one statement that fold (not inside nested scopes)."""

    def __init__(self, folder: _Folder, facts: Facts) -> None:
        self.folder, self.facts = folder, facts

    def visit_Call(self, node: ast.Call) -> ast.expr:
        folded = self.folder.allocation(node, self.facts)
        if folded is not None:
            return ast.copy_location(folded, node)
        self.generic_visit(node)
        return node

    def generic_visit(self, node: ast.AST) -> ast.AST:
        if isinstance(node, SCOPES):
            return node
        return super().generic_visit(node)


def _names_only(target: ast.expr) -> bool:
    if isinstance(target, (ast.Tuple, ast.List)):
        return all(_names_only(t) for t in target.elts)
    return isinstance(target, ast.Name)


def _in_scope(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> bool:
    """Whether `node` is inside a lambda or comprehension (names there may be its own)."""
    while node in parents:
        node = parents[node]
        if isinstance(node, SCOPES):
            return True
    return False


def _stored(node: ast.AST) -> set[str]:
    names = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load):
            names.add(n.id)
        elif isinstance(n, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)):
            names.add(n.name)
        elif isinstance(n, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in n.names}
    return names
