"""Compiling one top-level device loop (Python AST) into a typed DeviceKernel."""

from __future__ import annotations

import ast
import builtins
import inspect
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
from tilecraft.frontend import flow, inline, operators, scans, views
from tilecraft.frontend.blocks import BlockTable
from tilecraft.frontend.builder import Builder
from tilecraft.frontend.host_names import KEYED, HostNames
from tilecraft.frontend.inline import HostCallable
from tilecraft.frontend.loops import Loops, static_range
from tilecraft.frontend.memory import MemoryLowering
from tilecraft.frontend.operators import BINOPS, Operators
from tilecraft.frontend.ops import OPS, lookup, method_operands
from tilecraft.frontend.pyforms import LocalFunction, PythonForms, sum_of_tiles
from tilecraft.frontend.refs import HostTensor, TileRef, on_device
from tilecraft.frontend.refusals import unsupported
from tilecraft.frontend.signatures import check_arguments, without_inplace
from tilecraft.frontend.source import KernelSource
from tilecraft.frontend.whiles import Whiles
from tilecraft.ir.nodes import DeviceKernel, Param, Value, drop_unused_results

LOCATED = (ast.Call, ast.BinOp, ast.Subscript, ast.Compare)  # expressions errors point into
TENSOR_QUERIES = ("size", "shape", "dtype", "dim", "ndim", "numel", "device", "stride")
NEW_TILES = ("new_zeros", "new_ones", "new_empty", "new_full")  # `w.new_zeros(n)`: a tile


class DeviceCompiler(Loops, Whiles, PythonForms, HostNames, Operators):
    """Walks a device loop's statements, building IR with a Builder."""

    def __init__(
        self,
        src: KernelSource,
        host_locals: dict[str, Any],
        table: BlockTable,
        name: str,
        runtime_ints: frozenset[str] = frozenset(),
    ) -> None:
        self.src, self.host_locals, self.table, self.name = src, host_locals, table, name
        self.runtime_ints = runtime_ints  # host ints passed to each launch (frontend/trips)
        self.kernel_src = src
        self.b = Builder(src.loc(src.tree), table.blocks, table=table, new_dim=table.reduction)
        self.env: dict[str, Any] = {}
        self.host_values: dict[str, Any] = {}
        self.host_exprs: dict[str, str | None] = {}  # how the launcher reaches a host name
        self.lifted: dict[str, Any] = {}  # host values by host expression, shared by scopes
        self.python_bools: set[int] = set()
        self.guards: dict[str, Any] = {}  # constants the launcher checks (see `_constant`)
        self.opaque: dict[int, str] = {}  # id -> host expression of objects read on device
        # arguments the specialization holds by value (ints, flags, strings, dtypes); only
        # a float or an object argument can change what host code computes without it
        arguments = [a.arg for a in src.tree.args.args + src.tree.args.kwonlyargs]
        self.keyed = set(arguments)
        self.guarding = not all(isinstance(host_locals.get(a), KEYED) for a in arguments)
        self.params: list[Param] = []
        self.mem = MemoryLowering(self.b, table)
        self.masks = self.b.masks  # conditions of the enclosing `if` arms on tiles

    # -- entry -------------------------------------------------------------------
    def compile(self, loop: ast.For) -> DeviceKernel:
        self.b.loc = self.src.loc(loop)
        try:
            blocks, order = self._loop_blocks(
                loop.iter, self._callee(loop.iter), *self._call_args(loop.iter), inner=False
            )
            if any(self.table.blocks[blk].dynamic for blk, _ in blocks):
                raise UnsupportedOperation(
                    "the tiles of a launch need bounds known on the host when it is compiled "
                    "(they size its grid): tile a fixed extent and mask the positions past "
                    "the bound"
                )
            self._bind_target(loop.target, blocks)
            self.table.launch_blocks.update(blk for blk, _ in blocks)
        except TilecraftError as e:
            raise e.at(self.b.loc) from None
        grid_index = len(self.table.grids)
        self.table.grids.append(sum(not g for _, g in blocks))
        self._body(flow.without_continue(loop.body))
        kernel = DeviceKernel(
            self.name,
            order,
            self.b.bodies[0],
            self.params,
            self.table.blocks,
            self.src.loc(loop),
            grid_index,
            self.guards,
        )
        return drop_unused_results(kernel)

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
        before = self.expr(load)
        value = self.binop(BINOPS[type(node.op)], before, self.expr(node.value), type(node.op))
        if isinstance(node.target, ast.Name):
            value = operators.augmented(self.b, node.target.id, before, value)
        self.assign(node.target, value)

    def stmt_Expr(self, node: ast.Expr) -> None:
        callee = self._callee(node.value) if isinstance(node.value, ast.Call) else None
        if callee is not None and any(callee is fn for fn in lang.debug.LEFT_OUT):
            _print_left_out(self.src.loc(node), callee.__name__)
            return  # prints and breakpoints act in interpret mode only
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
            if self._device_list(tensor):  # `cache[i] = p[t]`: a list built in device code
                tensor[self.expr(target.slice)] = value
                return
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
        # a tuple's items too: a tuple carried across a loop holds the loop's results, whose
        # names the generated code gives them (unpacking the tuple must not rename them)
        items = [x for v in bound if isinstance(v, tuple) for x in v]
        return any(v is value for v in (*bound, *items))

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

    def expr_Attribute(self, node: ast.Attribute) -> Any:
        obj = self.expr(node.value)
        if isinstance(obj, TileRef):
            return self.mem.tile_attr(obj.block, node.attr)
        if isinstance(obj, HostTensor):
            if node.attr in NEW_TILES:
                return _BoundMethod(obj, node.attr)
            if node.attr in TENSOR_QUERIES:
                return getattr(obj.meta, node.attr)
            if not callable(getattr(torch.Tensor, node.attr, None)):
                raise UnsupportedOperation(f"tensor.{node.attr} on a host tensor in a device loop")
            return _BoundMethod(self.operand(obj), node.attr)  # `w.float()`: of `w[:]`
        if isinstance(obj, Value):
            if node.attr == "dtype":
                return obj.type.dtype
            if node.attr == "shape":
                return views.sizes(self.b, obj)
            if node.attr == "ndim":
                return obj.type.rank
            if node.attr in views.TRANSPOSES:
                return views.TRANSPOSES[node.attr](self.b, obj)
            known = callable(getattr(torch.Tensor, node.attr, None)) or node.attr == "device"
            if not known:  # no such attribute, or a property of no meaning here (`.real`)
                raise UnsupportedOperation(unsupported(node.attr))
            return _BoundMethod(obj, node.attr)
        if id(obj) in self.opaque:
            return self._member(f"{self.opaque[id(obj)]}.{node.attr}", getattr(obj, node.attr))
        return getattr(obj, node.attr)

    def expr_Subscript(self, node: ast.Subscript) -> Any:
        obj = self.expr(node.value)
        if isinstance(obj, torch.Tensor):
            obj = self._reached(obj)
        if isinstance(obj, HostTensor):
            items = self._subscript(node.slice)
            return self.mem.load(obj.param, obj.meta, items, self._load_mask(obj, items))
        key = self.expr(node.slice)
        if isinstance(obj, Value):
            reread = self.mem.reread(obj, key)
            if reread is not None:  # a tile of a whole read: read from its tensor
                tensor, items = reread
                return self.mem.load(tensor.param, tensor.meta, items, self._load_mask(*reread))
            return views.index(self.b, obj, key)
        if id(obj) in self.opaque and isinstance(key, (int, str)):
            return self._member(f"{self.opaque[id(obj)]}[{key!r}]", obj[key])
        return obj[key]

    def _load_mask(self, tensor: HostTensor, items: list[Any]) -> Value | None:
        """Inside an `if` on a tile, gathers read only where the arm is taken: an index
        computed for the other lanes may point anywhere."""
        mask = self.branch_mask()
        if mask is None or not any(isinstance(i, Value) and i.type.dims for i in items):
            return None
        dims = self.mem.access(tensor.param, tensor.meta, items).dims
        aligned = flow.aligned_mask(self, mask, dims)
        return None if aligned is None else flow.as_tile_mask(self, aligned, dims)

    def _subscript(self, node: ast.expr) -> list[Any]:
        items = node.elts if isinstance(node, ast.Tuple) else [node]
        out: list[Any] = []
        for item in items:
            value = self.expr(item)
            if isinstance(value, HostTensor):  # a 0-d tensor indexes with its value
                value = self.operand(value)
            # a list holding tiles indexes as a tuple does (Helion's `x[[tile_m, tile_n]]`)
            several = isinstance(value, tuple) or _tile_list(value)
            out += list(value) if several else [value]
        return out

    def expr_Call(self, node: ast.Call) -> Any:
        fn = self.expr(node.func)
        args = []
        for a in node.args:
            if isinstance(a, ast.Starred):
                args += list(self.expr(a.value))
            else:
                args.append(self.expr(a))
        kwargs = {k.arg: self.expr(k.value) for k in node.keywords if k.arg}
        if isinstance(fn, _BoundMethod) and isinstance(fn.obj, HostTensor):
            return self._new_tile(fn.obj, fn.name, args, kwargs)
        if isinstance(fn, _BoundMethod):
            return self.call_op(fn.name, method_operands(fn.name, fn.obj, args), kwargs)
        return self.call(fn, args, kwargs)

    def _new_tile(
        self, tensor: HostTensor, name: str, args: list[Any], kwargs: dict[str, Any]
    ) -> Any:
        """`w.new_zeros(shape)` in a device loop: a new tile of `w`'s dtype, as
        `torch.zeros(shape)` makes (`w` itself is not read)."""
        if kwargs.get("dtype") is None:
            kwargs["dtype"] = tensor.meta.dtype
        return self.call_op(name.removeprefix("new_"), args, kwargs)

    def call(self, fn: Any, args: list[Any], kwargs: dict[str, Any]) -> Any:
        if isinstance(fn, LocalFunction):
            return self.call_local(fn, args, kwargs)
        total = sum_of_tiles(self.b, args, kwargs) if fn is builtins.sum else NotImplemented
        if total is not NotImplemented:
            return total
        if isinstance(fn, HostCallable) or (inline.inlinable(fn) and on_device(args, kwargs)):
            callee = fn if isinstance(fn, HostCallable) else HostCallable(fn, self._global(fn))
            return self.inline(callee, args, kwargs)
        if fn is lang.static_range:
            return static_range(args, kwargs)
        if getattr(fn, "__module__", None) == lang.refused.__name__:
            raise lang.refused.refusal(lang.refused.REFUSED[fn])
        if (fn is lang.store or fn in lang.memory.ATOMICS) and self.masks:
            args, kwargs = self._masked_store_args(fn, args, kwargs)
        special = self.mem.language_call(fn, args, kwargs)
        if special is NotImplemented:
            special = scans.language_call(self, fn, args, kwargs)
        if special is not NotImplemented:
            return special
        if fn in (lang.tile, lang.grid, lang.jagged_tile):
            raise UnsupportedSyntax(
                f"tc.{fn.__name__} can only be iterated by a for loop inside a device loop"
            )
        if fn in (builtins.min, builtins.max) and any(isinstance(a, Value) for a in args):
            args = [self.operand(a) for a in args]
            result = args[0]
            for a in args[1:]:
                result = OPS["minimum" if fn is builtins.min else "maximum"](self.b, result, a)
            return result
        if self._device_list(getattr(fn, "__self__", None)):  # `cache.append(p[t])`
            return fn(*args, **kwargs)
        handler = lookup(fn)
        special = operators.builtin_call(self.b, fn, args, kwargs)
        if special is NotImplemented and handler is not None:
            name = next(k for k, v in OPS.items() if v is handler)
            op = lambda: self.call_op(name, args, kwargs)  # noqa: E731
            special = operators.numbers_only_call(self.b, fn, args, kwargs, op)
            special = op() if special is NotImplemented else special
            special = operators.tensor_of_host_floats(self.b, special)
        if special is not NotImplemented:
            return special
        if any(isinstance(a, (Value, HostTensor, TileRef)) for a in [*args, *kwargs.values()]):
            raise UnsupportedOperation(unsupported(getattr(fn, "__name__", str(fn))))
        if fn in lang.host.INT_HELPERS:  # `tc.cdiv(n, 4)` of ints known while compiling
            return fn(*args, **kwargs)
        if (getattr(fn, "__module__", None) or "").startswith("tilecraft.language"):
            raise NotInKernel(f"tc.{fn.__name__}() belongs in host code, outside the loops")
        result = fn(*args, **kwargs)
        if isinstance(result, torch.Tensor) and result.dim() > 0:  # refused here, not at a use
            raise UnsupportedOperation(
                f"`{getattr(fn, '__name__', fn)}(...)` makes a tensor in device code: build "
                "it in host code (before the loop) or pass it in; tc.zeros, tc.full and "
                "tc.rand make tiles"
            )
        return result

    def _global(self, fn: Any) -> str | None:
        """The name by which the launcher reaches a function of the kernel's own module
        (it runs in that namespace), so values the function reads from its module can be
        passed to the kernel; None inside an inlined function."""
        if self.src is not self.kernel_src:
            return None
        return next((n for n, v in self.src.namespace.items() if v is fn), None)

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
        """tc.store or an atomic inside an `if` on a tile: the arm's mask joins extra_mask."""
        try:
            bound = inspect.signature(fn).bind(*args, **kwargs).arguments
        except TypeError:
            return args, kwargs  # reported by the memory call
        tensor, index = bound["tensor"], bound["index"]
        if not isinstance(tensor, HostTensor):
            return args, kwargs
        items = list(index) if isinstance(index, (list, tuple)) else [index]
        dims = self.mem.access(tensor.param, tensor.meta, items).dims
        extra = bound.get("extra_mask")
        bound["extra_mask"] = flow.store_mask(self, dims, extra, fn.__name__)
        return [], dict(bound)

    def call_op(self, name: str, args: list[Any], kwargs: dict[str, Any]) -> Any:
        if name not in OPS:
            raise UnsupportedOperation(unsupported(name))
        args = [self._argument(a) for a in args]
        kwargs = without_inplace(name, {k: self._argument(v) for k, v in kwargs.items()})
        check_arguments(name, OPS[name], args, kwargs)
        return OPS[name](self.b, *args, **kwargs)

    # -- host values as operands ----------------------------------------------------
    def operand(self, x: Any) -> Any:
        """`x` as arithmetic sees it: a 0-d host tensor is read (a scalar load), a value
        device code cannot compute with is refused, naming its variable."""
        if isinstance(x, (Value, bool, int, float)):
            return x
        if isinstance(x, HostTensor):  # read whole, as `x[:]` (a 0-d tensor: its value)
            return self.mem.load(x.param, x.meta, [slice(None)] * x.meta.dim(), None)
        if isinstance(x, TileRef):
            raise UnsupportedOperation(
                f"{self._named(x)} is a tile (a range of indices): use `.index` for its "
                "indices, or `.begin`, `.end`, `.block_size`"
            )
        if isinstance(x, torch.Tensor) and self._held(x):
            return self.operand(self._reached(x))
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
        dtypes, flags and functions are the op's business); a complex number (`n ** 0.5` of
        a negative int) is refused as an operand is, not left to fail in code generation."""
        if isinstance(x, (HostTensor, torch.Tensor, complex)):
            return self.operand(x)
        tensors = (HostTensor, torch.Tensor)
        if isinstance(x, (list, tuple)) and any(isinstance(i, tensors) for i in x):
            return type(x)(self._argument(i) for i in x)
        return x

    def _callee(self, node: ast.expr) -> Any:
        if isinstance(node, ast.Call):
            node = node.func
        try:
            return self.expr(node) if not isinstance(node, ast.Call) else None
        except TilecraftError:
            return None


@dataclass(frozen=True)
class _BoundMethod:
    obj: Value | HostTensor
    name: str


_PRINT_WARNINGS: dict = {}  # said once per line, however often the kernel is compiled


def _print_left_out(loc: SourceLoc, name: str) -> None:
    """Say that compiled code leaves out a `print` (or `device_print`, `breakpoint`) in a
    kernel (it acts in eager mode)."""
    what = "stops" if name == "breakpoint" else "prints"
    warnings.warn_explicit(
        f"tilecraft: compiled kernels leave out `{name}`; TILECRAFT_INTERPRET=1 runs the"
        f" kernel body eagerly in PyTorch, where it {what}",
        UserWarning,
        loc.filename,
        loc.lineno,
        registry=_PRINT_WARNINGS,
    )


def _tile_list(value: Any) -> bool:
    return isinstance(value, list) and any(isinstance(v, TileRef) for v in value)
