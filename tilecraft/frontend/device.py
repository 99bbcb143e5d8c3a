"""Compiling one top-level device loop (Python AST) into a typed DeviceKernel."""

from __future__ import annotations

import ast
import builtins
import math
import operator
import re
import types
import warnings
from dataclasses import dataclass
from typing import Any

import torch

from tilecraft import language as lang
from tilecraft.exc import (
    LoweringError,
    NotInKernel,
    ShapeMismatch,
    SourceLoc,
    TilecraftError,
    UnsupportedOperation,
    UnsupportedSyntax,
)
from tilecraft.frontend import flow, inline, scans, views
from tilecraft.frontend.blocks import BlockSizeInt, BlockTable
from tilecraft.frontend.builder import Builder
from tilecraft.frontend.inline import HostCallable
from tilecraft.frontend.memory import MemoryLowering
from tilecraft.frontend.ops import OPS, lookup, unsupported
from tilecraft.frontend.source import KernelSource
from tilecraft.ir.nodes import Carried, DeviceKernel, Loop, Param, Value
from tilecraft.ir.types import TileType, broadcast_dims
from tilecraft.language.tiles import JAGGED_TILE_MESSAGE

BINOPS = {
    ast.Add: "add",
    ast.Sub: "sub",
    ast.Mult: "mul",
    ast.Div: "div",
    ast.FloorDiv: "floordiv",
    ast.Mod: "remainder",
    ast.Pow: "pow",
    ast.BitAnd: "bitwise_and",
    ast.BitOr: "bitwise_or",
    ast.BitXor: "bitwise_xor",
    ast.LShift: "lshift",
    ast.RShift: "rshift",
    ast.MatMult: "matmul",
}
PYOPS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
    ast.BitAnd: operator.and_,
    ast.BitOr: operator.or_,
    ast.BitXor: operator.xor,
    ast.LShift: operator.lshift,
    ast.RShift: operator.rshift,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
}
UNARY_PYOPS: dict[type, Any] = {
    ast.USub: operator.neg,
    ast.UAdd: operator.pos,
    ast.Not: operator.not_,
    ast.Invert: operator.invert,
}
CMPOPS = {ast.Lt: "lt", ast.LtE: "le", ast.Gt: "gt", ast.GtE: "ge", ast.Eq: "eq", ast.NotEq: "ne"}
LOCATED = (ast.Call, ast.BinOp, ast.Subscript, ast.Compare)  # expressions errors point into
TENSOR_QUERIES = ("size", "shape", "dtype", "dim", "ndim", "numel", "device", "stride")


GUARDED = (bool, int, float, str)  # constants whose value the launcher can check cheaply
UNGUARDED = (type(None), torch.dtype, torch.device, types.ModuleType, type)
KEYED = (torch.Tensor, bool, int, str, type(None), torch.dtype)  # specialized on by value


@dataclass(frozen=True)
class TileRef:
    """A `tc.tile` loop variable: one block of indices."""

    block: int


@dataclass(frozen=True)
class HostTensor:
    """A host tensor used on the device: its kernel parameter and its meta tensor."""

    param: Param
    meta: torch.Tensor


class DeviceCompiler:
    """Walks a device loop's statements, building IR with a Builder."""

    def __init__(
        self, src: KernelSource, host_locals: dict[str, Any], table: BlockTable, name: str
    ) -> None:
        self.src, self.host_locals, self.table, self.name = src, host_locals, table, name
        self.b = Builder(src.loc(src.tree), table.blocks, table=table, new_dim=table.reduction)
        self.env: dict[str, Any] = {}
        self.host_values: dict[str, Any] = {}
        self.host_exprs: dict[str, str | None] = {}  # how the launcher reaches a host name
        self.lifted: dict[str, Any] = {}  # host values by host expression, shared by scopes
        self.guards: dict[str, Any] = {}  # constants the launcher checks (see `_constant`)
        self.opaque: dict[int, str] = {}  # id -> host expression of objects read on device
        # arguments the specialization holds by value (ints, flags, strings, dtypes); only
        # a float or an object argument can change what host code computes without it
        arguments = [a.arg for a in src.tree.args.args + src.tree.args.kwonlyargs]
        self.keyed = set(arguments)
        self.guarding = not all(isinstance(host_locals.get(a), KEYED) for a in arguments)
        self.params: list[Param] = []
        self.mem = MemoryLowering(self.b, table)
        self.masks: list[Value] = []  # conditions of the enclosing `if` arms on tiles

    # -- entry -------------------------------------------------------------------
    def compile(self, loop: ast.For) -> DeviceKernel:
        self.b.loc = self.src.loc(loop)
        try:
            blocks, order = self._loop_blocks(
                self._callee(loop.iter), *self._call_args(loop.iter), inner=False
            )
            self._bind_target(loop.target, blocks)
        except TilecraftError as e:
            raise e.at(self.b.loc) from None
        grid_index = len(self.table.grids)
        self.table.grids.append(sum(not g for _, g in blocks))
        self._body(loop.body)
        return DeviceKernel(
            self.name,
            order,
            self.b.bodies[0],
            self.params,
            self.table.blocks,
            self.src.loc(loop),
            grid_index,
            self.guards,
        )

    def _body(self, stmts: list[ast.stmt]) -> None:
        for stmt in stmts:
            self.b.loc = self.src.loc(stmt)
            try:
                self.stmt(stmt)
            except TilecraftError as e:
                raise e.at(self.b.loc) from None
            except Exception as e:  # an internal failure: report it at the user's line
                raise LoweringError(f"{type(e).__name__}: {e}", self.b.loc) from e

    # -- statements ---------------------------------------------------------------
    def stmt(self, node: ast.stmt) -> None:
        handler = getattr(self, f"stmt_{type(node).__name__}", None)
        if handler is None:
            raise UnsupportedSyntax(
                f"`{type(node).__name__}` statements are not supported inside a device loop"
            )
        handler(node)

    def stmt_Assign(self, node: ast.Assign) -> None:
        value = self.expr(node.value)
        for target in node.targets:
            self.assign(target, value)

    def stmt_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is not None:
            self.assign(node.target, self.expr(node.value))

    def stmt_AugAssign(self, node: ast.AugAssign) -> None:
        load = ast.copy_location(
            type(node.target)(**{**vars(node.target), "ctx": ast.Load()}), node.target
        )
        value = self.binop(
            BINOPS[type(node.op)], self.expr(load), self.expr(node.value), type(node.op)
        )
        self.assign(node.target, value)

    def stmt_Expr(self, node: ast.Expr) -> None:
        if isinstance(node.value, ast.Call) and self._callee(node.value) is builtins.print:
            _print_left_out(self.src.loc(node))
            return  # print runs in interpret mode only
        self.expr(node.value)

    def stmt_Pass(self, node: ast.Pass) -> None:
        pass

    def stmt_Assert(self, node: ast.Assert) -> None:
        test = self.expr(node.test)
        if not isinstance(test, Value) and not test:
            raise ShapeMismatch("assertion failed inside the kernel")

    def stmt_If(self, node: ast.If) -> None:
        flow.compile_if(self, node)

    def branch_mask(self) -> Value | None:
        """Where the enclosing `if` arms on tiles are taken (None outside them)."""
        return self.masks[-1] if self.masks else None

    def named(self, value: Value, name: str) -> Value:
        if not self._is_named(value):
            value.name = self.b.fresh(name)
        return value

    def stmt_For(self, node: ast.For) -> None:
        fn = self._callee(node.iter)
        if fn in (lang.tile, lang.grid):
            self._device_loop(node, fn, *self._call_args(node.iter))
        elif fn is builtins.range:
            self._range_loop(node, *self._call_args(node.iter))
        else:
            flow.compile_unrolled(self, node, flow.unrolled_items(self.expr(node.iter)))

    def _call_args(self, call: ast.expr) -> tuple[list[Any], dict[str, Any]]:
        assert isinstance(call, ast.Call)
        args = [self.expr(a) for a in call.args]
        return args, {k.arg: self.expr(k.value) for k in call.keywords if k.arg}

    def _range_loop(self, node: ast.For, args: list[Any], kwargs: dict[str, Any]) -> None:
        """`range` over host ints is unrolled; over values computed on the device, it is
        a loop on the device (as `tc.grid`)."""
        if not any(isinstance(a, Value) for a in args):
            flow.compile_unrolled(self, node, flow.unrolled_items(range(*args, **kwargs)))
        elif len(args) > 2 or kwargs:
            raise UnsupportedSyntax("`range(begin, end)` on the device takes no step")
        else:
            self._device_loop(node, lang.grid, args, {})

    def _device_loop(self, node: ast.For, fn: Any, args: list[Any], kwargs: dict[str, Any]) -> None:
        blocks, order = self._loop_blocks(fn, args, kwargs, inner=True)
        index = self.table.next_device_loop()
        carried = self._carried(node)
        saved = dict(self.env)
        self.b.bodies.append([])
        self._bind_target(node.target, blocks)
        self._body(node.body)
        for c in carried:
            c.final = self._carried_final(c)
        body = self.b.bodies.pop()
        self.b.add(Loop(order, body, carried, self.src.loc(node), index))
        self.env = saved
        for c in carried:
            c.out = Value(c.param.type, c.param.name)
            self.env[c.name] = c.out

    def _carried(self, node: ast.For) -> list[Carried]:
        assigned = {
            n.id
            for s in node.body
            for n in ast.walk(s)
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
        }
        carried = []
        for name in sorted(assigned):
            init = self.env.get(name)
            if isinstance(init, Value):
                param = Value(init.type, self.b.fresh(name))
                carried.append(Carried(name, init, param))
                self.env[name] = param
        return carried

    def _carried_final(self, c: Carried) -> Value:
        final = self.env.get(c.name)
        if not isinstance(final, Value):
            raise UnsupportedSyntax(f"`{c.name}` must stay a tile across loop iterations")
        if final.type.dims != c.param.type.dims:
            raise ShapeMismatch(
                f"`{c.name}` changes shape inside the loop: {self.b.describe(c.param.type.dims)}"
                f" before, {self.b.describe(final.type.dims)} after"
            )
        return self.b.cast(final, c.param.type.dtype)  # type: ignore[return-value]

    # -- loops and targets --------------------------------------------------------
    def _loop_blocks(
        self, fn: Any, args: list[Any], kwargs: dict[str, Any], inner: bool
    ) -> tuple[list[tuple[int, bool]], list[int]]:
        """The blocks a loop binds (in the user's order) and its iteration order."""
        begin, end = (args + [kwargs.get("end")])[:2] if args else (None, None)
        begins, ends = _ranges(begin, end)
        block_size = kwargs.get("block_size", args[2] if len(args) > 2 else None)
        sizes = block_size if isinstance(block_size, (list, tuple)) else [block_size] * len(ends)
        multi = isinstance(begin, (list, tuple, torch.Size))
        out = []
        for lo, hi, size in zip(begins, ends, sizes, strict=True):
            if fn is lang.grid:
                blk = self.table.grid(lo, hi)
            else:
                blk = self.table.tile(lo, hi, inner, size)
            out.append((blk.id, fn is lang.grid))
        out = out if multi else out[:1]
        order = self.table.loop_order(len(out)) if len(out) > 1 and fn is lang.tile else None
        ids = [blk for blk, _ in out]
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
        return self.b.op("tile_begin", (block,), torch.int32, (), hint="index")

    def assign(self, target: ast.expr, value: Any) -> None:
        if isinstance(target, ast.Name):
            if isinstance(value, Value) and not self._is_named(value):
                value.name = self.b.fresh(target.id)
            self.env[target.id] = value
        elif isinstance(target, (ast.Tuple, ast.List)):
            values = list(value) if isinstance(value, (tuple, list)) else None
            if values is None or len(values) != len(target.elts):
                raise UnsupportedSyntax("cannot unpack this value into that many names")
            for elt, v in zip(target.elts, values, strict=True):
                self.assign(elt, v)
        elif isinstance(target, ast.Subscript):
            tensor = self.expr(target.value)
            if not isinstance(tensor, HostTensor):
                raise UnsupportedSyntax("only tensors from the host can be stored to")
            items = self._subscript(target.slice)
            mask = None
            if self.masks:  # inside an `if` on a tile: the arm's condition masks the store
                dims = self.mem.access(tensor.param, tensor.meta, items).dims
                mask = flow.store_mask(self, dims, None, "store")
            self.mem.store(tensor.param, tensor.meta, items, value, mask)
        else:
            raise UnsupportedSyntax(f"cannot assign to `{ast.unparse(target)}`")

    def _is_named(self, value: Value) -> bool:
        bound = [*self.env.values(), *self.host_values.values()]
        return any(v is value for v in bound)

    # -- expressions --------------------------------------------------------------
    def expr(self, node: ast.expr) -> Any:
        handler = getattr(self, f"expr_{type(node).__name__}", None)
        if handler is None:
            raise UnsupportedSyntax(f"`{ast.unparse(node)}` is not supported in a device loop")
        if not isinstance(node, LOCATED):
            return handler(node)
        saved, self.b.loc = self.b.loc, self.src.loc(node)
        try:  # errors and ops point at this expression, not just its statement
            return handler(node)
        except TilecraftError as e:
            raise e.at(self.b.loc) from None
        finally:
            self.b.loc = saved

    def expr_Constant(self, node: ast.Constant) -> Any:
        return node.value

    def expr_Name(self, node: ast.Name) -> Any:
        if node.id in self.env:
            return self.env[node.id]
        if node.id in self.host_locals:
            if node.id not in self.host_values:
                self.host_values[node.id] = self._from_host(node.id, self.host_locals[node.id])
            return self.host_values[node.id]
        if node.id in self.src.namespace:
            return self.src.namespace[node.id]
        if hasattr(builtins, node.id):
            return getattr(builtins, node.id)
        raise UnsupportedSyntax(f"name `{node.id}` is not defined")

    def _from_host(self, name: str, value: Any) -> Any:
        where = self.host_exprs.get(name, name)
        if where is not None and where in self.lifted:
            return self.lifted[where]
        if isinstance(value, types.FunctionType):
            return HostCallable(value, where)
        if isinstance(value, (torch.Tensor, float)) and where is None:
            raise UnsupportedOperation(
                f"`{name}` is a {type(value).__name__} that an inlined function reads from "
                "its module: pass it to the kernel as an argument"
            )
        if where is None:
            return value
        self.lifted[where] = lifted = self._lift(name, where, value)
        return lifted

    def _lift(self, name: str, where: str, value: Any) -> Any:
        """A host value as the device sees it; tensors and floats become arguments."""
        if isinstance(value, torch.Tensor):
            offset = int(value.storage_offset()) * value.element_size()
            param = Param(
                self._param_name(name),
                where,
                value.dtype,
                tuple(value.shape),
                tuple(value.stride()),
                offset,
            )
            self.params.append(param)
            return HostTensor(param, value)
        if isinstance(value, float):
            param = Param(self._param_name(name), where, torch.float32)
            self.params.append(param)
            return Value(TileType(torch.float32, ()), param.name)
        return self._constant(where, value, by_value=where in self.keyed)

    def _constant(self, where: str, value: Any, by_value: bool = False) -> Any:
        """A host value the device code reads as a constant. Numbers, strings and flags
        not pinned down by the specialization (`by_value`: an int argument is) get a guard
        in the launcher; objects and containers are remembered so that what device code
        reads from them (`opts.k`, `sizes[0]`) gets one."""
        if isinstance(value, GUARDED) and not isinstance(value, BlockSizeInt):
            finite = not isinstance(value, float) or math.isfinite(value)
            if self.guarding and not by_value and finite:
                self.guards[where] = value
        elif not isinstance(value, UNGUARDED) and not callable(value):
            self.opaque[id(value)] = where
        return value

    def _param_name(self, name: str) -> str:
        return self.b.fresh(re.sub(r"\W", "_", name))

    def expr_Tuple(self, node: ast.Tuple) -> tuple:
        return tuple(self.expr(e) for e in node.elts)

    def expr_List(self, node: ast.List) -> list:
        return [self.expr(e) for e in node.elts]

    def expr_Slice(self, node: ast.Slice) -> slice:
        parts = [None if p is None else self.expr(p) for p in (node.lower, node.upper, node.step)]
        return slice(*parts)

    def expr_Attribute(self, node: ast.Attribute) -> Any:
        obj = self.expr(node.value)
        if isinstance(obj, TileRef):
            return self.mem.tile_attr(obj.block, node.attr)
        if isinstance(obj, HostTensor):
            if node.attr not in TENSOR_QUERIES:
                raise UnsupportedOperation(f"tensor.{node.attr} on a host tensor in a device loop")
            return getattr(obj.meta, node.attr)
        if isinstance(obj, Value):
            if node.attr == "dtype":
                return obj.type.dtype
            if node.attr in views.TRANSPOSES:
                return views.TRANSPOSES[node.attr](self.b, obj)
            return _BoundMethod(obj, node.attr)
        if id(obj) in self.opaque:
            return self._constant(f"{self.opaque[id(obj)]}.{node.attr}", getattr(obj, node.attr))
        return getattr(obj, node.attr)

    def expr_Subscript(self, node: ast.Subscript) -> Any:
        obj = self.expr(node.value)
        if isinstance(obj, HostTensor):
            items = self._subscript(node.slice)
            return self.mem.load(obj.param, obj.meta, items, self._load_mask(obj, items))
        key = self.expr(node.slice)
        if isinstance(obj, Value):
            return views.index(self.b, obj, key)
        if id(obj) in self.opaque and isinstance(key, (int, str)):
            return self._constant(f"{self.opaque[id(obj)]}[{key!r}]", obj[key])
        return obj[key]

    def _load_mask(self, tensor: HostTensor, items: list[Any]) -> Value | None:
        """Inside an `if` on a tile, gathers read only where the arm is taken: an index
        computed for the other lanes may point anywhere."""
        mask = self.branch_mask()
        if mask is None or not any(isinstance(i, Value) and i.type.dims for i in items):
            return None
        dims = self.mem.access(tensor.param, tensor.meta, items).dims
        if broadcast_dims(dims, mask.type.dims) != dims or mask.type.rank > len(dims):
            return None
        return flow.as_tile_mask(self, mask, dims)

    def _subscript(self, node: ast.expr) -> list[Any]:
        items = node.elts if isinstance(node, ast.Tuple) else [node]
        out: list[Any] = []
        for item in items:
            value = self.expr(item)
            if isinstance(value, HostTensor):  # a 0-d tensor indexes with its value
                value = self.operand(value)
            out += list(value) if isinstance(value, tuple) else [value]
        return out

    def expr_BinOp(self, node: ast.BinOp) -> Any:
        return self.binop(
            BINOPS[type(node.op)], self.expr(node.left), self.expr(node.right), type(node.op)
        )

    def binop(self, name: str, left: Any, right: Any, pyop: Any) -> Any:
        if _on_device([left, right], {}):
            left, right = self.operand(left), self.operand(right)
        if not isinstance(left, Value) and not isinstance(right, Value):
            return PYOPS[pyop](left, right)
        return OPS[name](self.b, left, right)

    def expr_UnaryOp(self, node: ast.UnaryOp) -> Any:
        x = self.expr(node.operand)
        x = self.operand(x) if isinstance(x, HostTensor) else x
        if not isinstance(x, Value):
            return UNARY_PYOPS[type(node.op)](x)
        if isinstance(node.op, ast.USub):
            return OPS["neg"](self.b, x)
        if isinstance(node.op, ast.Not) or x.type.dtype == torch.bool:
            return OPS["not"](self.b, x)
        if isinstance(node.op, ast.Invert):
            return OPS["invert"](self.b, x)
        return x

    def expr_Compare(self, node: ast.Compare) -> Any:
        if len(node.ops) != 1:
            raise UnsupportedSyntax("chained comparisons: combine them with &")
        left, right = self.expr(node.left), self.expr(node.comparators[0])
        if isinstance(node.ops[0], (ast.Is, ast.IsNot, ast.In, ast.NotIn)):
            return _py_compare(node.ops[0], left, right)
        if _on_device([left, right], {}):
            left, right = self.operand(left), self.operand(right)
        if not isinstance(left, Value) and not isinstance(right, Value):
            return PYOPS[type(node.ops[0])](left, right)
        return OPS[CMPOPS[type(node.ops[0])]](self.b, left, right)

    def expr_BoolOp(self, node: ast.BoolOp) -> Any:
        values = [self.expr(v) for v in node.values]
        if not any(isinstance(v, Value) for v in values):
            result = values[0]
            for v in values[1:]:
                result = (result and v) if isinstance(node.op, ast.And) else (result or v)
            return result
        name = "bitwise_and" if isinstance(node.op, ast.And) else "bitwise_or"
        result = values[0]
        for v in values[1:]:
            result = OPS[name](self.b, result, v)
        return result

    def expr_IfExp(self, node: ast.IfExp) -> Any:
        test = self.expr(node.test)
        if isinstance(test, Value):
            body, orelse = self.operand(self.expr(node.body)), self.operand(self.expr(node.orelse))
            return OPS["where"](self.b, test, body, orelse)
        return self.expr(node.body if test else node.orelse)

    def expr_Call(self, node: ast.Call) -> Any:
        fn = self.expr(node.func)
        args = []
        for a in node.args:
            if isinstance(a, ast.Starred):
                args += list(self.expr(a.value))
            else:
                args.append(self.expr(a))
        kwargs = {k.arg: self.expr(k.value) for k in node.keywords if k.arg}
        if isinstance(fn, _BoundMethod):
            return self.call_op(fn.name, [fn.obj, *args], kwargs)
        return self.call(fn, args, kwargs)

    def call(self, fn: Any, args: list[Any], kwargs: dict[str, Any]) -> Any:
        if isinstance(fn, HostCallable) or (inline.inlinable(fn) and _on_device(args, kwargs)):
            callee = fn if isinstance(fn, HostCallable) else HostCallable(fn, None)
            return self.inline(callee, args, kwargs)
        if fn is lang.static_range:
            return _static_range(args, kwargs)
        if fn is lang.jagged_tile:
            raise UnsupportedOperation(JAGGED_TILE_MESSAGE)
        if fn in (lang.store, lang.atomic_add) and self.masks:
            args, kwargs = self._masked_store_args(fn, args, kwargs)
        special = self.mem.language_call(fn, args, kwargs)
        if special is NotImplemented:
            special = scans.language_call(self, fn, args, kwargs)
        if special is not NotImplemented:
            return special
        if fn in (lang.tile, lang.grid):
            raise UnsupportedSyntax("tc.tile/tc.grid can only be iterated by a for loop")
        if fn in (builtins.min, builtins.max) and any(isinstance(a, Value) for a in args):
            args = [self.operand(a) for a in args]
            result = args[0]
            for a in args[1:]:
                result = OPS["minimum" if fn is builtins.min else "maximum"](self.b, result, a)
            return result
        handler = lookup(fn)
        if handler is not None:
            name = next(k for k, v in OPS.items() if v is handler)
            return self.call_op(name, args, kwargs)
        if any(isinstance(a, (Value, HostTensor, TileRef)) for a in [*args, *kwargs.values()]):
            raise UnsupportedOperation(unsupported(getattr(fn, "__name__", str(fn))))
        if (getattr(fn, "__module__", None) or "").startswith("tilecraft.language"):
            raise NotInKernel(f"tc.{fn.__name__}() belongs in host code, outside the loops")
        return fn(*args, **kwargs)

    def inline(self, callee: HostCallable, args: list[Any], kwargs: dict[str, Any]) -> Any:
        """Compile a call of a Python function by compiling its body here."""
        src = inline.function_source(callee.fn)
        body, result = inline.split_return(src.tree)
        closure = callee.closure()
        saved = (self.src, self.env, self.host_locals, self.host_values, self.host_exprs)
        self.src, self.env = src, inline.bind_arguments(callee.fn, args, kwargs)
        self.host_locals = {name: value for name, (value, _) in closure.items()}
        self.host_exprs = {name: where for name, (_, where) in closure.items()}
        self.host_values, loc = {}, self.b.loc
        try:
            self._body(body)
            if result is None:
                return None
            self.b.loc = self.src.loc(result)
            try:
                return self.expr(result)
            except TilecraftError as e:
                raise e.at(self.b.loc) from None
        finally:
            self.src, self.env, self.host_locals, self.host_values, self.host_exprs = saved
            self.b.loc = loc

    def _masked_store_args(
        self, fn: Any, args: list[Any], kwargs: dict[str, Any]
    ) -> tuple[list[Any], dict[str, Any]]:
        """tc.store/tc.atomic_add inside an `if` on a tile: the arm's mask joins extra_mask."""
        tensor, index, *rest = args
        if not isinstance(tensor, HostTensor):
            return args, kwargs
        extra = kwargs.pop("extra_mask", rest[1] if len(rest) > 1 else None)
        items = list(index) if isinstance(index, (list, tuple)) else [index]
        dims = self.mem.access(tensor.param, tensor.meta, items).dims
        kwargs["extra_mask"] = flow.store_mask(self, dims, extra, fn.__name__)
        return [tensor, index, *rest[:1]], kwargs

    def call_op(self, name: str, args: list[Any], kwargs: dict[str, Any]) -> Any:
        if name not in OPS:
            raise UnsupportedOperation(unsupported(name))
        args = [self._argument(a) for a in args]
        kwargs = {k: self._argument(v) for k, v in kwargs.items()}
        return OPS[name](self.b, *args, **kwargs)

    # -- host values as operands ----------------------------------------------------
    def operand(self, x: Any) -> Any:
        """`x` as arithmetic sees it: a 0-d host tensor is read (a scalar load), a value
        device code cannot compute with is refused, naming its variable."""
        if isinstance(x, (Value, bool, int, float)):
            return x
        if isinstance(x, HostTensor):
            if x.meta.dim() == 0:
                return self.mem.load(x.param, x.meta, [], None)
            raise UnsupportedOperation(
                f"{self._named(x)} is a tensor of shape {list(x.meta.shape)}: index it with "
                "tiles to read its values (`t[tile]`), or pass a 0-d tensor or a number"
            )
        if isinstance(x, TileRef):
            raise UnsupportedOperation(
                f"{self._named(x)} is a tile (a range of indices): use `.index` for its "
                "indices, or `.begin`, `.end`, `.block_size`"
            )
        if isinstance(x, torch.Tensor):
            raise UnsupportedOperation(
                f"{self._named(x)} is a tensor that device code cannot reach: build it in "
                "host code (before the loop) or pass it as an argument, then index it with "
                "tiles; use tc.full or numbers for constants"
            )
        raise UnsupportedOperation(
            f"{self._named(x)} is a {type(x).__name__}, which device code cannot compute "
            "with: use numbers, 0-d tensors, tiles, or tensors indexed with tiles"
        )

    def _argument(self, x: Any) -> Any:
        """An argument of a tile op: tensors are operands; everything else passes (dims,
        dtypes, flags and functions are the op's business)."""
        if isinstance(x, (HostTensor, torch.Tensor)):
            return self.operand(x)
        tensors = (HostTensor, torch.Tensor)
        if isinstance(x, (list, tuple)) and any(isinstance(i, tensors) for i in x):
            return type(x)(self._argument(i) for i in x)
        return x

    def _named(self, x: Any) -> str:
        """How an error names `x`: by the variable that holds it, where one does."""
        for scope in (self.env, self.host_values):
            for name, value in scope.items():
                if value is x:
                    return f"`{name}`"
        return "this value"

    def _callee(self, node: ast.expr) -> Any:
        if isinstance(node, ast.Call):
            node = node.func
        try:
            return self.expr(node) if not isinstance(node, ast.Call) else None
        except TilecraftError:
            return None


def _on_device(args: list[Any], kwargs: dict[str, Any]) -> bool:
    """Whether a call's arguments hold device values (tiles, tensors, loop variables)."""
    stack = [*args, *kwargs.values()]
    while stack:
        a = stack.pop()
        if isinstance(a, (Value, HostTensor, TileRef)):
            return True
        if isinstance(a, (tuple, list)):
            stack += list(a)
    return False


@dataclass(frozen=True)
class _BoundMethod:
    obj: Value
    name: str


def _static_range(args: list[Any], kwargs: dict[str, Any]) -> range:
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
    if isinstance(v, Value) and (v.type.dims or v.type.dtype.is_floating_point):
        raise UnsupportedSyntax(
            "loop bounds must be integers: sizes, tile.begin/.end or scalars loaded on the device"
        )
    return v if isinstance(v, Value) else int(v)


def _py_compare(op: ast.cmpop, left: Any, right: Any) -> bool:
    if isinstance(op, ast.Is):
        return left is right
    if isinstance(op, ast.IsNot):
        return left is not right
    if isinstance(op, ast.In):
        return left in right
    return left not in right


_PRINT_WARNINGS: dict = {}  # said once per line, however often the kernel is compiled


def _print_left_out(loc: SourceLoc) -> None:
    """Say that compiled code leaves out a `print` in a kernel (it runs in eager mode)."""
    warnings.warn_explicit(
        "tilecraft: compiled kernels leave out `print`; TILECRAFT_INTERPRET=1 runs the"
        " kernel body eagerly in PyTorch, where it prints",
        UserWarning,
        loc.filename,
        loc.lineno,
        registry=_PRINT_WARNINGS,
    )
