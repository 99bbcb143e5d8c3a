"""Eager mode's indices: which out-of-range ones read 0 and which are refused (integers, and
the index tiles of gathers).

Compiled code masks an index it computes (`x[t.begin + 6]` past the end reads 0 and is not
written) and refuses at its line one it knows when it compiles (`x[t, 9]`, `x[t, n]` with
`n` from host code, `x[t, x.size(1)]`). Eagerly both are Python ints; the kernel body's
source tells them apart: subscripts whose items use host names and constants only are
marked (`mark_key`), and `computed_ints` refuses those out of range as compiled code does.
"""

from __future__ import annotations

import ast
import linecache
import sys
from types import FrameType
from typing import Any

import torch

from tilecraft.exc import ShapeMismatch, SourceLoc
from tilecraft.language.state import eager_context
from tilecraft.language.tiles import SliceEnd, Tile


class _Literal(int):
    """An integer index known before the device loop runs (`x[t, 9]`, `x[t, n]`), of a
    host tensor: compiled code refuses it out of range, so eager mode raises there too."""


class _TileLiteral(int):
    """One in a subscript of a tile value (`a[:, 9]`): compiled code refuses it past the
    dim's extent or block size, so eager mode raises where the dims are whole (no tile in
    scope is cut short at a loop's end; a short one's lanes up to its block are masked)."""


def literal(value: Any, host: bool) -> Any:
    """`_tc_literal`: an int item marked as known before the loop (of a host tensor or not)."""
    if type(value) is not int:
        return value
    return _Literal(value) if host else _TileLiteral(value)


def _refused(item: int, frame: FrameType | None) -> bool:
    """Whether a constant index out of range of its dim is refused, as compiled code does."""
    if type(item) is _TileLiteral:
        return frame is not None and not any(_is_short(v) for v in frame.f_locals.values())
    return type(item) is _Literal


def kernel_frame() -> FrameType | None:
    """The eager kernel body's frame running this subscript: its namespace holds
    `_tc_literal` (a kernel of tilecraft's own too, whose file `user_frame` would skip)."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None and "_tc_literal" not in frame.f_globals:
        frame = frame.f_back
    return frame


def _refusal(item: int, dim: int, size: int, frame: FrameType | None) -> ShapeMismatch:
    message = f"index {item} is out of bounds for dim {dim}, which has size {size}"
    if frame is None:
        return ShapeMismatch(message)
    line = linecache.getline(frame.f_code.co_filename, frame.f_lineno)
    return ShapeMismatch(message, SourceLoc(frame.f_code.co_filename, frame.f_lineno, line))


def _is_short(value: Any) -> bool:
    if isinstance(value, tuple):
        return any(_is_short(v) for v in value)
    return isinstance(value, Tile) and len(value) < value.block_size


_INTS = (int, _Literal, _TileLiteral)


def tile_key(key: Any) -> Any:
    """A subscript as compiled code reads it: a list holding tiles as a tuple (Helion's
    `x[[tile_m, tile_n]]`), slices `s : s + tile.block_size` of a tile cut short ending
    where the tile does."""
    if isinstance(key, list) and any(isinstance(k, Tile) for k in key):
        key = tuple(key)
    items = key if isinstance(key, tuple) else (key,)
    if not any(isinstance(i, slice) and isinstance(i.stop, SliceEnd) for i in items):
        return key
    out = tuple(_tile_slice(i) for i in items)
    return out if isinstance(key, tuple) else out[0]


def _tile_slice(item: Any) -> Any:
    if not isinstance(item, slice) or not isinstance(item.stop, SliceEnd):
        return item
    return slice(item.start, int(item.stop) - item.stop.short, item.step)


def computed_ints(key: Any, obj: torch.Tensor) -> Any:
    """Plain ints of an index that fall outside their dim, as 0-d tensors: in a device loop
    they were computed there (`t.begin + 6`), and the bounded read of such an index gives
    0, or its store nothing, as compiled code masks it; a constant (`_Literal`) there is
    refused, as compiled. Ints in range stay ints (no tensor made per access)."""
    items = key if isinstance(key, tuple) else (key,)
    if not any(type(k) in _INTS for k in items):
        return key
    out, dim = [], 0
    for item in items:
        if item is Ellipsis or (isinstance(item, torch.Tensor) and item.dtype == torch.bool):
            return tuple(_as_index(k, obj.device) for k in items)  # dims not counted here
        if type(item) in _INTS and not _in_dim(item, obj, dim):
            frame = kernel_frame() if type(item) is not int else None
            if _refused(item, frame):
                raise _refusal(item, dim, obj.size(dim) if dim < obj.dim() else 0, frame)
            item = _as_index(item, obj.device)
        item = int(item) if type(item) in _INTS else item
        out.append(item)
        dim += len(item) if isinstance(item, tuple) else item is not None  # (tiles: one each)
    return tuple(out) if isinstance(key, tuple) else out[0]


def _in_dim(item: int, obj: torch.Tensor, dim: int) -> bool:
    return dim < obj.dim() and -obj.size(dim) <= item < obj.size(dim)


def _as_index(item: Any, device: torch.device) -> Any:
    return torch.tensor(item, device=device) if type(item) is int else item


def host_int(node: ast.expr, device_names: set[str]) -> bool:
    """Whether an index item is computed from host values and constants only (`9`, `-1`,
    `lane`, `n - 1`, `x.size(1)`): compiled code knows it when it compiles, unlike
    `t.begin + 6` or a load (`y[0]`)."""
    parts = list(ast.walk(node))
    if not all(_host_part(p) for p in parts):
        return False
    return not any(isinstance(p, ast.Name) and p.id in device_names for p in parts)


_SIZES = {"size", "dim", "numel", "stride"}  # a tensor's methods that give its layout


def _host_part(node: ast.AST) -> bool:
    if isinstance(node, ast.Call):
        return isinstance(node.func, ast.Attribute) and node.func.attr in _SIZES
    if isinstance(node, ast.Subscript):  # `x.shape[1]`, not a load
        return isinstance(node.value, ast.Attribute) and node.value.attr == "shape"
    plain = (ast.Name, ast.Constant, ast.BinOp, ast.UnaryOp, ast.Attribute)
    return isinstance(node, (*plain, ast.operator, ast.unaryop, ast.expr_context))


def assigned_names(node: ast.AST) -> set[str]:
    """The names a device loop (or any code) binds: its tiles, its tile values."""
    return {
        n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
    }


def mark_key(obj: ast.expr, key: ast.expr, device_names: set[str]) -> ast.expr:
    """`key` of `obj[key]` with its items known before the loop wrapped in
    `_tc_literal(item, obj is a host tensor)` (a tile value's dims may be cut short)."""
    if not isinstance(obj, ast.Name):
        return key
    host = ast.Constant(obj.id not in device_names)
    items = key.elts if isinstance(key, ast.Tuple) else [key]
    call = ast.Name("_tc_literal", ast.Load())
    marked = [ast.Call(call, [i, host], []) if host_int(i, device_names) else i for i in items]
    return ast.Tuple(marked, ast.Load()) if isinstance(key, ast.Tuple) else marked[0]


# -- gathers: index tiles ----------------------------------------------------------------
def taken_lanes_only(args: tuple, at: int) -> tuple:
    """A gather inside an `if` on a tile with index 0 where the arm is not taken: compiled
    code gathers on every lane and keeps the arm's, so an index out of range there (the
    `if` may be what keeps it out) must not raise (its lanes are never stored)."""
    mask, index = eager_context("gather").branch_mask(), args[at]
    if mask is None or not isinstance(index, torch.Tensor):
        return args
    if torch.broadcast_shapes(mask.shape, index.shape) != index.shape:
        return args
    safe = torch.where(mask, index, torch.zeros_like(index))
    return (*args[:at], safe, *args[at + 1 :])


def gathers_in_range(args: tuple, at: int, kwargs: dict) -> None:
    """Raise, as PyTorch's CPU gather does, for an index out of range on a GPU, where
    PyTorch's kernel asserts on the device instead (the process's CUDA context dies)."""
    x, index = args[0], args[at]
    if not isinstance(index, torch.Tensor) or not index.is_cuda or index.numel() == 0:
        return
    dim = args[1] if at == 2 else (args[2] if len(args) > 2 else kwargs.get("dim"))
    size = x.numel() if dim is None else x.size(dim)
    if bool(((index < -size if at == 1 else index < 0) | (index >= size)).any()):
        raise RuntimeError(f"index out of bounds: a gather's index past a dim of {size}")
