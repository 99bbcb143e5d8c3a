"""Tile lowerings of PyTorch operations: a table of handlers keyed by op name.

Each handler takes the Builder and the call's arguments (tile Values or Python
constants) and returns what the call evaluates to, usually a new Value. Composite
ops (softmax, var, gelu, ...) are expanded here into primitive ones.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F

from tilecraft import language as lang
from tilecraft.exc import DtypeError, ShapeMismatch, UnsupportedOperation
from tilecraft.frontend.builder import (
    LOW_PRECISION,
    Builder,
    Operand,
    category,
    compute_dtype,
    converted,
    promote,
)
from tilecraft.ir.nodes import Value
from tilecraft.ir.ops import OPDEFS, OpDef, Result, is_elementwise

Handler = Callable[..., Any]
OPS: dict[str, Handler] = {}


def op(*names: str) -> Callable[[Handler], Handler]:
    def register(fn: Handler) -> Handler:
        for name in names:
            OPS[name] = fn
        return fn

    return register


BOOL_REFUSED = {
    "abs": "abs of a bool tile",
    "neg": "negation (`-`) of a bool tile: use `~x` or torch.logical_not",
}
WIDE_ONLY = {"erfcx", "ndtri"}  # PyTorch has no 16-bit kernel of these


def refuse_16_bits(b: Builder, name: str, dtype: torch.dtype) -> None:
    """A DtypeError for a function PyTorch has no 16-bit kernel of, on a 16-bit tile."""
    if dtype in LOW_PRECISION:
        raise DtypeError(f"{name} of a {dtype} tile: cast it to float32 first (PyTorch has "
                         "no kernel for it)", b.loc)  # fmt: skip


def _elementwise(opdef: OpDef) -> Handler:
    """The handler of an elementwise entry of the op table, by its result rule."""

    def handler(b: Builder, *args: Operand) -> Value:
        if len(args) != opdef.arity:
            raise UnsupportedOperation(f"{opdef.name} takes {opdef.arity} operand(s)", b.loc)
        dtype = promote(*args)
        if opdef.result is Result.FLOAT and not dtype.is_floating_point:
            args = tuple(b.cast(a, torch.float32) for a in args)
            dtype = torch.float32
        if opdef.name in WIDE_ONLY:
            refuse_16_bits(b, opdef.name, dtype)
        if opdef.name in BOOL_REFUSED and dtype == torch.bool:
            raise DtypeError(f"{BOOL_REFUSED[opdef.name]} (PyTorch refuses it too)", b.loc)
        if opdef.result is Result.INT and dtype.is_floating_point:
            raise DtypeError(f"{opdef.name} needs integer or bool tiles, not {dtype}", b.loc)
        return b.elementwise(
            opdef.name, *args, dtype=torch.bool if opdef.result is Result.BOOL else dtype
        )

    return handler


for _def in OPDEFS.values():
    if is_elementwise(_def) and _def.name != "where" and not _def.internal:
        for _name in (_def.name, *_def.torch_names):
            OPS[_name] = _elementwise(_def)
ALIASES = {
    "remainder": "mod",
    "floor_divide": "floordiv",
    "bitwise_and": "and",
    "bitwise_or": "or",
    "bitwise_xor": "xor",
    "bitwise_not": "invert",
    "bitwise_left_shift": "lshift",
    "bitwise_right_shift": "rshift",
    "logical_not": "not",
    "negative": "neg",
    "fix": "trunc",
    "greater": "gt",
    "less": "lt",
    "greater_equal": "ge",
    "less_equal": "le",
    "not_equal": "ne",
    "multiply": "mul",
    "subtract": "sub",
    "absolute": "abs",
    "sgn": "sign",  # (of real tiles)
}
for _alias, _name in ALIASES.items():
    OPS[_alias] = OPS[_name]


@op("relu")
def _relu(b: Builder, x: Value) -> Value:
    return b.elementwise("clamp_min", x, 0)


@op("square")
def _square(b: Builder, x: Value) -> Value:
    return b.elementwise("mul", x, x)


def _logical_op(name: str) -> Handler:
    def handler(b: Builder, x: Operand, y: Operand) -> Value:
        return b.elementwise(name, b.cast(x, torch.bool), b.cast(y, torch.bool), dtype=torch.bool)

    return handler


for _name, _ir in (("logical_and", "and"), ("logical_or", "or"), ("logical_xor", "xor")):
    OPS[_name] = _logical_op(_ir)


@op("/")
def _divided(b: Builder, x: Operand, y: Operand) -> Value:
    """`x / y`. `2.0 / tile` is PyTorch's Tensor.__rtruediv__: tile.reciprocal() * 2.0,
    rounded twice (an ulp from the quotient for a third of float32 values; more in float16),
    where `torch.div(2.0, tile)` divides."""
    if _host_scalar(x) and isinstance(y, Value) and not y.weak:
        return b.elementwise("mul", OPS["reciprocal"](b, y), x)
    if _host_scalar(x) and _host_scalar(y) and not promote(x, y).is_floating_point:
        # Python's int / int (`int(v) / 3`): a float in double precision, as eager mode's
        # number (it was float32: 2/3 rounded to 0.6666667 met a float64 tile)
        return b.elementwise("truediv", x, y, dtype=torch.float64, compute=torch.float64)
    return _true_divide(b, x, y)


@op("true_divide")
def _true_divide(b: Builder, x: Operand, y: Operand) -> Value:
    if promote(x, y).is_floating_point:
        if isinstance(x, Value) and not x.weak and _host_scalar(y):
            return b.elementwise("scalar_div", x, float(y) if isinstance(y, int) else y)
        return b.elementwise("truediv", x, y)
    return b.elementwise("truediv", x, y, dtype=torch.float32, compute=torch.float32)


def _host_scalar(y: Operand) -> bool:
    """A Python number, or arithmetic on the host's: PyTorch's "CPU scalar" operand."""
    return (
        isinstance(y, (int, float)) and not isinstance(y, bool) or (isinstance(y, Value) and y.weak)
    )


ROUNDING_MODES = (None, "trunc", "floor")


@op("div", "divide")
def _div(b: Builder, x: Operand, y: Operand, *, rounding_mode: str | None = None) -> Value:
    """`torch.div`: true division, or its quotient rounded toward zero ("trunc") or down
    ("floor", which is `x // y`), integers staying integers."""
    if rounding_mode not in ROUNDING_MODES:
        raise UnsupportedOperation(
            f"div(rounding_mode={rounding_mode!r}): PyTorch takes 'trunc', 'floor' or None", b.loc
        )
    if rounding_mode is None:
        return _true_divide(b, x, y)
    if promote(x, y) == torch.bool:
        raise DtypeError(
            f"div(rounding_mode={rounding_mode!r}) of bools (PyTorch refuses too)", b.loc
        )
    if rounding_mode == "floor":
        return OPS["floordiv"](b, x, y)  # type: ignore[no-any-return]
    if promote(x, y) in LOW_PRECISION and not _host_scalar(y):
        # by a 16-bit tile: its quotient rounded to 16 bits, then truncated; by a host
        # number, PyTorch's CPU and CUDA kernels truncate the float32 quotient
        return OPS["trunc"](b, _true_divide(b, x, y))  # type: ignore[no-any-return]
    return OPS["truncdiv"](b, x, y)  # type: ignore[no-any-return]


@op("where")
def _where(b: Builder, condition: Value, input: Operand, other: Operand) -> Value:  # noqa: A002
    cond, x, y = condition, input, other  # (PyTorch's names: its keywords)
    if not isinstance(cond, Value) or cond.type.dtype != torch.bool:
        raise DtypeError("torch.where needs a boolean tile as its condition", b.loc)
    tiles = [o for o in (x, y) if isinstance(o, Value) and not o.weak]
    dtype = promote(x, y) if tiles else _scalars_dtype(x, y)
    cond, x, y = b.fit_ones((cond, x, y))  # type: ignore[assignment]
    dims = b.broadcast(cond, x, y)
    return b.op("where", (cond, x, y), dtype, dims, compute=compute_dtype(dtype))


def _scalars_dtype(*operands: Operand) -> torch.dtype:
    """The dtype PyTorch gives a where of Python numbers (host floats too): float32 (the
    default) for a float, int64 for an int, bool for bools only (was float32 for ints,
    whose products then lost int64's wraparound)."""
    top = max(category(o) for o in operands)
    return (torch.bool, torch.int64, torch.float32)[top]


def _bound(side: str) -> Handler:
    """`clamp_min` / `clamp_max`: of two zeros, PyTorch's CPU kernels keep `x` for a number
    bound and take the bound for a tensor one (as maximum does)."""
    tiles = "maximum" if side == "min" else "minimum"

    def handler(b: Builder, x: Value, bound: Operand) -> Value:
        if type(bound) in (int, float):  # (converted as PyTorch converts it: overflow refused)
            converted(b, bound, promote(x, bound))  # type: ignore[arg-type]
        return b.elementwise(f"clamp_{side}" if _host_scalar(bound) else tiles, x, bound)

    return handler


OPS["clamp_min"], OPS["clamp_max"] = _bound("min"), _bound("max")


@op("clamp", "clip")
def _clamp(b: Builder, x: Value, min: Operand | None = None, max: Operand | None = None) -> Value:
    if min is None and max is None:  # as PyTorch refuses it
        raise UnsupportedOperation("clamp needs `min` or `max` (or both)", b.loc)
    out = x
    if min is not None:
        out = OPS["clamp_min"](b, out, min)
    if max is not None:
        out = OPS["clamp_max"](b, out, max)
    return out


# methods whose function takes the method's first argument before the tensor
SECOND = {"where", "polygamma"}  # x.where(c, y): torch.where(c, x, y); x.polygamma(n)


def method_operands(name: str, obj: Any, args: list[Any]) -> list[Any]:
    """The operands of method `name` of `obj` in the order of its function's handler."""
    if name in SECOND and args:
        return [args[0], obj, *args[1:]]
    return [obj, *args]


@op("type_as")
def _type_as(b: Builder, x: Value, other: Any) -> Value:
    """`x.type_as(other)`: `x` cast to the dtype of a tile or of a tensor argument."""
    meta = getattr(other, "meta", None)
    dtype = other.type.dtype if isinstance(other, Value) else getattr(meta, "dtype", None)
    if not isinstance(dtype, torch.dtype):
        raise DtypeError(f"type_as needs a tile or a tensor, got {type(other).__name__}", b.loc)
    return b.cast(x, dtype)  # type: ignore[return-value]


@op("to", "type")
def _to(b: Builder, x: Value, dtype: torch.dtype | None = None, *_: Any, **kw: Any) -> Value:
    dtype = kw.get("dtype", dtype)
    if not isinstance(dtype, torch.dtype):
        raise DtypeError(f".to() needs a torch dtype, got {dtype!r}", b.loc)
    return b.cast(x, dtype)  # type: ignore[return-value]


for _meth, _dt in (
    ("float", torch.float32),
    ("half", torch.float16),
    ("bfloat16", torch.bfloat16),
    ("int", torch.int32),
    ("long", torch.int64),
    ("bool", torch.bool),
    ("double", torch.float64),
):
    OPS[_meth] = lambda b, x, _d=_dt: b.cast(x, _d)


def _axis(b: Builder, x: Value, dim: int | None) -> int:
    rank = x.type.rank
    if dim is None:
        if rank != 1:
            raise UnsupportedOperation("reduce over all dims of a multi-dim tile: give dim=", b.loc)
        return 0
    if not -rank <= dim < rank:
        raise ShapeMismatch(f"dim={dim} is out of range for a tile of rank {rank}", b.loc)
    return dim % rank


def reduce(b: Builder, kind: str, x: Value, dim: int | None, keepdim: bool) -> Value:
    """A reduction along one dim (`kind` in sum, max, min, argmax, argmin)."""
    axis = _axis(b, x, dim)
    if jagged.is_jagged(b, x, axis):  # positions past a lane's length take no part
        x = jagged.masked(b, x, axis, jagged.reduce_identity(kind, x.type.dtype), "a reduction")
    dims = list(x.type.dims)
    block = dims[axis]
    dims[axis] = None
    if not keepdim:
        del dims[axis]
    dtype = x.type.dtype
    if kind in ("argmax", "argmin") or (kind in ("sum", "prod") and not dtype.is_floating_point):
        dtype = torch.int64
    return b.op(
        "reduce",
        (x,),
        dtype,
        tuple(dims),
        hint=kind,
        kind=kind,
        axis=axis,
        block=block,
        compute=compute_dtype(x.type.dtype),
    )


def axes_of(b: Builder, x: Value, dim: Any) -> list[int]:
    """The dims a reduction removes, last first: `dim=None` is all of them."""
    if dim is None:
        return list(range(x.type.rank))[::-1]
    items = dim if isinstance(dim, (list, tuple)) else [dim]
    axes = [_axis(b, x, d) for d in items]
    for axis in {a for a in axes if axes.count(a) > 1}:  # PyTorch refuses it too
        raise ShapeMismatch(f"dim {axis} appears more than once in the dims {tuple(items)}", b.loc)
    return sorted(axes, reverse=True)


def reduce_dims(b: Builder, kind: str, x: Value, dim: Any, keepdim: bool) -> Value:
    """A reduction over several dims (a tuple, or None for all), one dim at a time."""
    axes = axes_of(b, x, dim)
    if kind.startswith("arg") and len(axes) > 1:
        raise UnsupportedOperation(f"{kind} over several dims: give one dim=", b.loc)
    if not axes:  # a scalar: the reduction of one element, in the result's dtype
        return reduce(b, kind, view(b, x, ("None",)), 0, keepdim)
    for axis in axes:
        x = reduce(b, kind, x, axis, keepdim)
    return x


def _reducer(kind: str) -> Handler:
    def handler(
        b: Builder, x: Value, dim: Any = None, keepdim: bool = False, *, dtype: Any = None
    ) -> Any:
        if dtype is not None:
            x = b.cast(x, dtype)  # type: ignore[assignment]
        if kind.startswith("arg") and x.type.dtype == torch.bool:
            raise DtypeError(f"{kind} of a bool tile (PyTorch refuses it too): use .int()", b.loc)
        for axis in axes_of(b, x, dim):
            _check_not_empty(b, kind, x, axis)
        return reduce_dims(b, kind, x, dim, keepdim)

    return handler


def _check_not_empty(b: Builder, kind: str, x: Value, dim: int | None) -> None:
    """max/min and their arg* have no identity: over a 0-length dim PyTorch raises, so do we."""
    if kind in ("sum", "prod"):
        return
    block = x.type.dims[_axis(b, x, dim)]
    if block is not None and b.blocks[block].kind == "reduction" and b.blocks[block].extent == 0:
        name = {"max": "amax", "min": "amin"}.get(kind, kind)
        raise ShapeMismatch(
            f"{name} over a dimension of length 0: the result is undefined (PyTorch raises too)",
            b.loc,
        )


OPS["sum"] = _reducer("sum")
OPS["amax"] = _reducer("max")
OPS["amin"] = _reducer("min")
OPS["argmax"] = _reducer("argmax")
OPS["argmin"] = _reducer("argmin")


class ValuesIndices(NamedTuple):
    """What `torch.max(x, dim)` returns: `.values` and `.indices`, or unpack it."""

    values: Value
    indices: Value


def _max_or_min(kind: str) -> Handler:
    def handler(
        b: Builder, x: Value, other: Any = None, keepdim: bool = False, dim: int | None = None
    ) -> Any:
        if isinstance(other, Value):
            return b.elementwise("maximum" if kind == "max" else "minimum", x, other)
        dim = other if other is not None else dim
        if dim is None:
            return _reducer(kind)(b, x)
        _check_not_empty(b, kind, x, dim)
        values = reduce(b, kind, x, dim, keepdim)
        return ValuesIndices(values, reduce(b, "arg" + kind, x, dim, keepdim))

    return handler


OPS["max"] = _max_or_min("max")
OPS["min"] = _max_or_min("min")


def _softmax_parts(b: Builder, x: Value, dim: int | None, dtype: torch.dtype | None) -> tuple:
    if dim is None:  # PyTorch's torch.softmax needs it; F.softmax's guess is deprecated
        raise UnsupportedOperation("softmax needs its `dim`: softmax(x, dim=-1)", b.loc)
    xf = b.cast(x, compute_dtype(dtype or x.type.dtype))
    shifted = b.elementwise("sub", xf, reduce(b, "max", xf, dim, True))  # type: ignore[arg-type]
    exp = OPS["exp"](b, shifted)
    return shifted, exp, reduce(b, "sum", exp, dim, True)


@op("softmax")
def _softmax(
    b: Builder,
    x: Value,
    dim: int | None = None,
    dtype: torch.dtype | None = None,
    *,
    _stacklevel: int = 3,
) -> Value:
    _, exp, total = _softmax_parts(b, x, dim, dtype)
    out = b.elementwise("div_approx", exp, total)  # see its entry in ir/ops.py
    return b.cast(out, dtype or x.type.dtype)  # type: ignore[return-value]


@op("log_softmax")
def _log_softmax(
    b: Builder,
    x: Value,
    dim: int | None = None,
    dtype: torch.dtype | None = None,
    *,
    _stacklevel: int = 3,
) -> Value:
    shifted, _, total = _softmax_parts(b, x, dim, dtype)
    out = b.elementwise("sub", shifted, OPS["log"](b, total))
    return b.cast(out, dtype or x.type.dtype)  # type: ignore[return-value]


def view(b: Builder, x: Value, index: tuple[str, ...]) -> Value:
    """`x[:, None]`-style views: each item is ":" (keep a dim) or "None" (a new one)."""
    kept = iter(x.type.dims)
    dims = tuple(None if i == "None" else next(kept) for i in index)
    return b.op("index_view", (x,), x.type.dtype, dims, index=index)


@op("unsqueeze")
def _unsqueeze(b: Builder, x: Value, dim: int) -> Value:
    rank = x.type.rank + 1
    if not isinstance(dim, int) or isinstance(dim, bool) or not -rank <= dim < rank:
        raise ShapeMismatch(f"unsqueeze(dim={dim!r}) of a tile of rank {rank - 1}", b.loc)
    index = [":"] * x.type.rank
    index.insert(dim % rank, "None")
    return view(b, x, tuple(index))


# the other handler modules register their handlers in OPS (before the names below)
from tilecraft.frontend import (  # noqa: E402, F401
    activations,
    compound,
    creation,
    floatbits,
    gathers,
    jagged,
    joins,
    norms,
    piecewise,
    powers,
    products,
    reductions,
    reshapes,
    scans,
    sorting,
    special,
    views,
)


def _torch_names() -> dict[int, str]:
    pairs: dict[int, str] = {}
    for name in [*OPS, "abs", "neg", "negative"]:
        for module in (torch, torch.Tensor, torch.special, F):
            fn = getattr(module, name, None)
            if fn is not None and name not in ("type", "float", "int", "bool"):
                pairs.setdefault(id(fn), "neg" if name == "negative" else name)
    pairs[id(torch.special.expit)] = "sigmoid"
    pairs[id(lang.dot)] = "dot"
    pairs[id(lang.join)] = "join"
    pairs[id(lang.split)] = "split_pair"
    pairs[id(torch.nn.functional.softmax)] = "softmax"
    pairs[id(torch.linalg.vector_norm)] = "vector_norm"
    return pairs


TORCH_FUNCTIONS = _torch_names()


def lookup(fn: object) -> Handler | None:
    """The handler for a PyTorch function object, or None."""
    name = TORCH_FUNCTIONS.get(id(fn))
    return OPS.get(name) if name else None
