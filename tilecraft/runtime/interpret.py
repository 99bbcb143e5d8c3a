"""TILECRAFT_INTERPRET=1: run a kernel's body eagerly in PyTorch, tiles and all."""

from __future__ import annotations

import ast
import builtins
import math
import operator
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from tilecraft import language as lang
from tilecraft.frontend.flow import ContinueFree
from tilecraft.frontend.host import compile_function, device_loops, rewrite_host
from tilecraft.frontend.source import KernelSource
from tilecraft.language.indexing import is_vector, read, write
from tilecraft.language.state import (
    EagerContext,
    Sites,
    eager_context,
    indexing_is_plain,
    running_eagerly,
)
from tilecraft.language.tiles import Tile, lanes
from tilecraft.runtime import eager_index, eager_lanes, eager_numerics, eager_short
from tilecraft.runtime.eager_flow import EagerBranches, eager_names


def _getitem(obj: Any, key: Any) -> Any:
    """`obj[key]`: on tensors, tiles as slices and computed indices bounded as compiled."""
    if not isinstance(obj, torch.Tensor):
        return obj[key]
    key = eager_index.computed_ints(eager_index.tile_key(key), obj)
    mask = eager_context("load").branch_mask()
    if mask is not None and _gathers(key):
        # a gather inside an `if` on a tile reads only where the arm is taken, as
        # compiled kernels do
        try:
            return read(obj, key, mask)
        except RuntimeError:  # the mask does not fit the gather: read as written
            pass
    return eager_short.mark(read(obj, key), key)


def _gathers(key: Any) -> bool:
    items = key if isinstance(key, tuple) else (key,)
    return any(isinstance(i, torch.Tensor) and i.dim() > 0 for i in items)


def _setitem(obj: Any, key: Any, value: Any) -> None:
    if not isinstance(obj, torch.Tensor):
        obj[key] = value
        return
    key = eager_index.computed_ints(eager_index.tile_key(key), obj)
    mask = eager_context("store").branch_mask()
    try:
        write(obj, key, value, mask)
    except RuntimeError:
        if not isinstance(value, torch.Tensor):
            raise
        # a block-sized value stored to a tile cut short at the end: its extra lanes are
        # the ones compiled code masks off
        write(obj, key, _trimmed(value, read(obj, key).shape), mask)


def _trimmed(value: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    if value.dim() != len(shape) or any(v < s for v, s in zip(value.shape, shape, strict=True)):
        raise RuntimeError(f"cannot store a tile of shape {tuple(value.shape)} into {tuple(shape)}")
    return value[tuple(slice(0, s) for s in shape)]


def _padded(args: tuple) -> tuple | None:
    """Tensor arguments padded with zeros to a common shape, where some are tiles cut short
    at a loop's end and others block-sized (compiled code's masked lanes read 0); None
    where the shapes differ otherwise (a padded dim must be a block's: a power of two)."""
    tensors = [a for a in args if isinstance(a, torch.Tensor) and a.dim() > 0]
    rank = max((t.dim() for t in tensors), default=0)
    if not tensors or any(t.dim() != rank for t in tensors):
        return None
    target = [max(t.size(d) for t in tensors) for d in range(rank)]
    uneven = {d for t in tensors for d in range(rank) if 1 < t.size(d) < target[d]}
    if any(not eager_short.is_block(target[d]) for d in uneven):
        return None  # not a block against a tile cut short: the user's shapes differ
    out = []
    for a in args:
        if isinstance(a, torch.Tensor) and a.dim() == rank and list(a.shape) != target:
            if any(1 < n < t for n, t in zip(a.shape, target, strict=True)) is False:
                return None
            pad = [
                p
                for n, t in zip(reversed(a.shape), reversed(target), strict=True)
                for p in (0, t - n if n > 1 else 0)
            ]
            a = torch.nn.functional.pad(a, pad)
        out.append(a)
    return tuple(out)


class _RealPowers(ast.NodeTransformer):
    """`a ** b` -> `_tc_pow(a, b)`: of Python floats, a negative base to a fractional power
    is a Python complex, which then spreads through the tile (even from an `if` arm not
    taken, as both arms run on tiles); compiled code computes it on the device, NaN."""

    def visit_BinOp(self, node: ast.BinOp) -> ast.expr:
        self.generic_visit(node)
        if not isinstance(node.op, ast.Pow):
            return node
        return ast.copy_location(_call("_tc_pow", node.left, node.right), node)


def _real_pow(base: Any, exponent: Any) -> Any:
    result = base**exponent
    return math.nan if isinstance(result, complex) else result


class _EagerSubscripts(ast.NodeTransformer):
    """`x[k]` -> `_tc_getitem(x, k)` and `x[k] = v` -> `_tc_setitem(x, k, v)`."""

    def __init__(self, device_names: set[str]) -> None:
        self.device_names = device_names  # what the device loop binds; other names are host's

    def visit_Subscript(self, node: ast.Subscript) -> ast.expr:
        self.generic_visit(node)
        key = self._key(node.value, node.slice)
        return ast.copy_location(_call("_tc_getitem", node.value, key), node)

    def _key(self, obj: ast.expr, index: ast.expr) -> ast.expr:
        """The key of `obj[index]`, its items known before the loop marked."""
        return eager_index.mark_key(obj, _key(index), self.device_names)

    def visit_Assign(self, node: ast.Assign) -> ast.stmt | list[ast.stmt]:
        if not any(_stores_item(t) for t in node.targets):
            self.generic_visit(node)
            return node
        if len(node.targets) == 1 and isinstance(node.targets[0], ast.Subscript):
            return ast.copy_location(self._store(node.targets[0], self.visit(node.value))[0], node)
        # `a[t], b[t] = ...` or `a[t] = b[t] = ...`: the value once, then each store
        temp = self._temp()
        stmts: list[ast.stmt] = [ast.Assign([ast.Name(temp, ast.Store())], self.visit(node.value))]
        for target in node.targets:
            stmts += self._store(target, ast.Name(temp, ast.Load()))
        return [ast.copy_location(stmt, node) for stmt in stmts]

    def _store(self, target: ast.expr, value: ast.expr) -> list[ast.stmt]:
        """Statements storing `value` to `target` (item stores through `_tc_setitem`)."""
        if isinstance(target, ast.Subscript):
            obj, key = self.visit(target.value), self._key(target.value, self.visit(target.slice))
            return [ast.Expr(_call("_tc_setitem", obj, key, value))]
        if isinstance(target, (ast.Tuple, ast.List)) and _stores_item(target):
            parts = [self._temp() for _ in target.elts]
            names: list[ast.expr] = [
                ast.Starred(ast.Name(n, ast.Store()), ast.Store())
                if isinstance(e, ast.Starred)
                else ast.Name(n, ast.Store())
                for n, e in zip(parts, target.elts, strict=True)
            ]
            stmts: list[ast.stmt] = [ast.Assign([ast.Tuple(names, ast.Store())], value)]
            for n, e in zip(parts, target.elts, strict=True):
                inner = e.value if isinstance(e, ast.Starred) else e
                stmts += self._store(inner, ast.Name(n, ast.Load()))
            return stmts
        return [ast.Assign([self.visit(target)], value)]

    def _temp(self) -> str:
        self.temps = getattr(self, "temps", 0) + 1
        return f"_tc_stored_{self.temps}"

    def visit_AugAssign(self, node: ast.AugAssign) -> ast.stmt:
        target = node.target
        if isinstance(target, ast.Name):  # a tile is a value: updated in place on a copy
            op = ast.Constant(INPLACE[type(node.op)])
            value = _call(
                "_tc_augmented", ast.Name(target.id, ast.Load()), self.visit(node.value), op
            )
            return ast.copy_location(ast.Assign([target], value), node)
        if not isinstance(target, ast.Subscript):
            self.generic_visit(node)
            return node
        obj, key = self.visit(target.value), self._key(target.value, self.visit(target.slice))
        new = ast.BinOp(_call("_tc_getitem", obj, key), node.op, self.visit(node.value))
        return ast.copy_location(ast.Expr(_call("_tc_setitem", obj, key, new)), node)


INPLACE = {
    ast.Add: "iadd",
    ast.Sub: "isub",
    ast.Mult: "imul",
    ast.Div: "itruediv",
    ast.FloorDiv: "ifloordiv",
    ast.Mod: "imod",
    ast.Pow: "ipow",
    ast.BitAnd: "iand",
    ast.BitOr: "ior",
    ast.BitXor: "ixor",
    ast.LShift: "ilshift",
    ast.RShift: "irshift",
    ast.MatMult: "imatmul",
}


def augmented(old: Any, value: Any, op: str) -> Any:
    """`old op= value` as compiled kernels compute it: PyTorch's in-place update (the
    result keeps `old`'s dtype), applied to a copy, so that a tile read from a tensor
    (`acc = x[t]; acc += 1`) does not write through to the tensor, nor to other names
    bound to the same tile."""
    if isinstance(old, torch.Tensor):
        old = old.clone()
    return getattr(operator, op)(old, value)


def _stores_item(target: ast.expr) -> bool:
    """Whether an assignment target stores to a subscript (`x[k]`, or one in a tuple)."""
    if isinstance(target, ast.Starred):
        return _stores_item(target.value)
    if isinstance(target, (ast.Tuple, ast.List)):
        return any(_stores_item(e) for e in target.elts)
    return isinstance(target, ast.Subscript)


class _JaggedLanes(ast.NodeTransformer):
    """`for t in tc.tile(...)` (or `tc.jagged_tile`) whose tiles give the lengths of a
    `tc.jagged_tile` inside -> `for t in _tc_lanes(tc.tile(...))`: one lane at a time,
    each jagged tile is cut to its lane's length exactly (as eager mode cuts tiles at a
    tensor's end), so nothing past a length is ever read, stored or reduced; compiled
    code masks those positions."""

    def visit_For(self, node: ast.For) -> ast.For:
        self.generic_visit(node)
        tiled = _calls(node.iter, "tile", *JAGGED)
        if tiled and _names(node.target) & _jagged_inputs(node):
            node.iter = ast.copy_location(_call("_tc_lanes", node.iter), node.iter)
        return node


def _names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _jagged_inputs(loop: ast.For) -> set[str]:
    """The names the lengths of the `tc.jagged_tile` loops in `loop` are computed from
    (through the assignments anywhere in `loop`)."""
    needed: set[str] = set()
    for n in ast.walk(loop):
        if isinstance(n, ast.For) and _calls(n.iter, *JAGGED):
            needed |= _names(n.iter)
    sources: dict[str, set[str]] = {}
    for n in ast.walk(loop):
        if isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign)) and n.value is not None:
            targets = n.targets if isinstance(n, ast.Assign) else [n.target]
            for name in set().union(*(_names(t) for t in targets)):
                sources.setdefault(name, set()).update(_names(n.value))
    frontier = set(needed)
    while frontier:
        frontier = set().union(*(sources.get(n, set()) for n in frontier)) - needed
        needed |= frontier
    return needed


JAGGED = ("jagged_tile", "vtile")  # the jagged loop's names (Helion's newer: `hl.vtile`)


def _calls(node: ast.AST, *names: str) -> bool:
    """Whether `node` calls a function of one of `names` (`tc.tile(...)`, `tile(...)`)."""
    if not isinstance(node, ast.Call):
        return False
    fn = node.func
    return (fn.attr if isinstance(fn, ast.Attribute) else getattr(fn, "id", None)) in names


def _call(name: str, *args: ast.expr) -> ast.Call:
    return ast.Call(ast.Name(name, ast.Load()), list(args), [])


def _key(node: ast.expr) -> ast.expr:
    if isinstance(node, ast.Slice):
        parts = [p or ast.Constant(None) for p in (node.lower, node.upper, node.step)]
        return _call("slice", *parts)
    if isinstance(node, ast.Tuple):
        return ast.Tuple([_key(e) for e in node.elts], ast.Load())
    return node


def _builtin_extreme(builtin: Any, elementwise: Any) -> Any:
    """Python's `max`/`min`, elementwise on tensors as in compiled kernels (NaN wins)."""

    def extreme(*args: Any, **kwargs: Any) -> Any:
        if len(args) < 2 or not any(isinstance(a, torch.Tensor) for a in args):
            return builtin(*args, **kwargs)
        result = torch.as_tensor(args[0])
        for a in args[1:]:
            result = elementwise(result, torch.as_tensor(a, device=result.device))
        return result

    return extreme


def eager_function(src: KernelSource) -> Any:
    """The kernel as a plain Python function whose device loops run eagerly."""
    device_loops(src)  # the checks of host code compiled code makes, at the same lines
    branches = EagerBranches()

    def eager_loop(_: int, loop: ast.For) -> ast.stmt:
        loop = branches.visit(ContinueFree().visit(loop))
        subscripts = _EagerSubscripts(eager_index.assigned_names(loop))
        loop = _JaggedLanes().visit(subscripts.visit(_RealPowers().visit(loop)))
        return eager_lanes.CarriedLanes().visit_nested(loop)

    module = rewrite_host(src, eager_loop)
    extra = {
        **eager_names(),
        "_tc_getitem": _getitem,
        "_tc_literal": eager_index.literal,
        "_tc_augmented": augmented,
        "_tc_setitem": _setitem,
        "_tc_lanes": lanes,
        "_tc_pow": _real_pow,
        "_tc_block_size": lang.register_block_size,
        "_tc_tunable": lang.register_tunable,
        "_tc_keep": eager_lanes.keep,
        "max": _builtin_extreme(builtins.max, torch.maximum),
        "min": _builtin_extreme(builtins.min, torch.minimum),
    }
    return compile_function(module, src, extra)


def run_eagerly(
    fn: Any,
    args: tuple,
    tunables: dict[str, Any],
    check: bool = False,
    blocks: tuple[Sites, list[int]] = ({}, []),
) -> Any:
    """Call an eager kernel function with DSL ops computing on the arguments' device;
    `blocks`: the config's block sizes, of each tile loop's line and of each
    `register_block_size` (BoundKernel.eager_blocks)."""
    devices = [a.device for a in args if isinstance(a, torch.Tensor)]
    device = devices[0] if devices else torch.device("cpu")
    sites, registered = blocks
    ctx = EagerContext(
        device, sites=sites, registered=list(registered), tunables=tunables, check=check
    )
    with running_eagerly(ctx), _FloatAccumulation():
        return fn(*args)


_SUBSCRIPTS = {torch.Tensor.__getitem__, torch.Tensor.__setitem__}


def _bounded_subscript(key: Any) -> bool:
    """A subscript with tiles or integer index vectors (which bounded reads and writes
    handle); plain PyTorch indexing otherwise."""
    items = key if isinstance(key, tuple) else (key,)
    return _has_tile(key) or any(is_vector(i) for i in items)


def _has_tile(key: Any) -> bool:
    items = key if isinstance(key, tuple) else (key,)
    return any(isinstance(i, Tile) or (isinstance(i, tuple) and _has_tile(i)) for i in items)


_ELEMENTWISE = (
    {
        getattr(torch.Tensor, f"__{prefix}{name}__")
        for name in ("add", "sub", "mul", "truediv")
        for prefix in ("", "i", "r")
    }
    | {
        getattr(owner, name)
        for owner in (torch, torch.Tensor)
        for name in ("add", "sub", "mul", "div", "maximum", "minimum", "where")
    }
    | {torch.Tensor.add_, torch.Tensor.sub_, torch.Tensor.mul_, torch.Tensor.div_}
)
_ACCUMULATING = {torch.addmm, torch.baddbmm, torch.Tensor.addmm, torch.Tensor.baddbmm}
# uninitialized memory read in eager mode would differ from compiled code, where
# `empty_like` on a tile is zeros
_ZEROED = {
    torch.empty: torch.zeros,
    torch.empty_like: torch.zeros_like,
    torch.Tensor.new_empty: torch.Tensor.new_zeros,
}
_PRODUCTS = {torch.mm, torch.bmm, torch.matmul, torch.Tensor.mm, torch.Tensor.bmm}
# scans of 16-bit floats accumulate in float32, as compiled (PyTorch's CUDA kernels
# accumulate in the 16-bit type: a row's cumsum drifted by whole units)
_SCANS = {torch.cumsum, torch.Tensor.cumsum, torch.cumprod, torch.Tensor.cumprod}
# gathers, by the position of their index argument
_GATHERS = {torch.gather: 2, torch.Tensor.gather: 2}
_GATHERS |= {torch.take_along_dim: 1, torch.Tensor.take_along_dim: 1}
_PRODUCTS |= {torch.Tensor.matmul, torch.Tensor.__matmul__}
_RESHAPES = {torch.reshape, torch.Tensor.reshape, torch.Tensor.view}


class _FloatAccumulation(TorchFunctionMode):
    """`torch.addmm(acc_f32, a_bf16, b_bf16)` accumulates in float32, as compiled kernels do
    (plain PyTorch requires equal dtypes); a tile cut short at a loop's end meeting a
    block-sized one (a `register_block_size` accumulator) is padded with zeros, as compiled
    code's masked lanes read 0."""

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: Any = None):
        kwargs = kwargs or {}
        if func in _SUBSCRIPTS and not indexing_is_plain() and _bounded_subscript(args[1]):
            # a function the kernel calls (an epilogue, a helper) indexing a tensor with tiles
            # or index vectors: bounded as in the kernel body (and as compiled)
            if func is torch.Tensor.__getitem__:
                return _getitem(args[0], args[1])
            return _setitem(*args)
        func = _ZEROED.get(func, func)
        if func in _GATHERS and len(args) > _GATHERS[func]:
            args = eager_index.taken_lanes_only(args, _GATHERS[func])
            eager_index.gathers_in_range(args, _GATHERS[func], kwargs)
        if func in _ACCUMULATING and len(args) >= 3:
            return _accumulate(*args, **kwargs)
        if func in _PRODUCTS and len(args) >= 2:
            return _product(*args, **kwargs)
        half = func in _SCANS and args[0].dtype in (torch.float16, torch.bfloat16)
        if half and kwargs.get("dtype") is None:
            return func(*args, **{**kwargs, "dtype": torch.float32}).to(args[0].dtype)
        # holds a tile cut to one element (eager_short.py); tilecraft's own ops (a store's
        # `index_put_`) shape their operands themselves: a value stored to a tensor as long
        # as the block was widened to it
        plain = indexing_is_plain()
        marked = _marked(args) and not plain
        if marked or (func in _ELEMENTWISE and not plain):
            args = eager_short.widen(args)
        try:  # (as compiled code computes it, where PyTorch's CPU kernels differ)
            result = eager_numerics.call(func, args, kwargs)
        except RuntimeError as e:
            result = _short_tile_retry(func, args, kwargs, e)
        result = eager_lanes.created(func, args, result)
        return eager_short.carry(result, args) if marked else result


def _short_tile_retry(func: Any, args: tuple, kwargs: dict, error: RuntimeError) -> Any:
    """`func` again with a tile cut short at its loop's end padded as compiled code holds
    it (block-sized, its masked lanes 0), where that is what made it fail."""
    if func in _ELEMENTWISE and "must match" in str(error):
        padded = _padded(args)
        if padded is not None:
            return func(*padded, **kwargs)
    if func in _RESHAPES and "is invalid for input of size" in str(error) and not kwargs:
        grown = eager_short.grown_to_reshape(args[0], _shape_arg(args[1:]))
        if grown is not None:
            return grown
    raise error


def _shape_arg(args: tuple) -> list[int]:
    """The sizes of `x.reshape(2, 3)` or `x.reshape([2, 3])`."""
    sizes = args[0] if len(args) == 1 and isinstance(args[0], (list, tuple)) else args
    return [int(s) for s in sizes]


def _marked(args: tuple) -> bool:
    return any(isinstance(a, torch.Tensor) and hasattr(a, "_tilecraft_short") for a in args)


def _product(a: torch.Tensor, b: torch.Tensor, out_dtype: Any = None) -> torch.Tensor:
    """`torch.mm(a, b, out_dtype)` as compiled: accumulated in float32 (int32 for int8),
    rounded once to `out_dtype` or the operands' dtype (PyTorch's CPU kernels have no
    `out_dtype` and no fp8)."""
    result = lang.creation.exact_matmul(*eager_short.padded_inner(a, b))
    return result.to(out_dtype or torch.promote_types(a.dtype, b.dtype))


def _accumulate(
    acc: torch.Tensor,
    a: torch.Tensor,
    b: torch.Tensor,
    *,
    beta: Any = 1,
    alpha: Any = 1,
    out_dtype: Any = None,
) -> torch.Tensor:
    """`torch.addmm(acc_f32, a_bf16, b_bf16)` accumulates in float32, as compiled kernels
    do (plain PyTorch requires equal dtypes): the sum is taken in the wider of the
    accumulator's and the product's dtypes and rounded once, as PyTorch's addmm does. A
    `beta` of 0 ignores the accumulator, its NaN and infinities too, as PyTorch documents;
    integer products take the scales truncated to integers, as PyTorch does."""
    dtype = out_dtype or acc.dtype
    acc = acc.to(dtype)
    if not dtype.is_floating_point:  # integer products: the scales truncated (PyTorch's)
        beta, alpha = int(beta), int(alpha)
    if beta == 0:
        acc = torch.zeros_like(acc)
    elif beta != 1:
        acc = acc * beta
    product = lang.creation.exact_matmul(*eager_short.padded_inner(a, b))
    if alpha != 1:
        product = product * alpha
    wide = dtype if dtype.itemsize >= product.dtype.itemsize else product.dtype
    return (acc.to(wide) + product.to(wide)).to(dtype)
