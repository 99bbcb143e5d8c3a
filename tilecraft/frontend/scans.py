"""Scans (cumsum, cumprod, cummax, cummin, logcumsumexp, `hl.associative_scan`), `hl.reduce` with a
user's combine function, sort/topk, and `hl.rand`/`hl.randint`.

A user's combine function is traced on 0-d values of the inputs' compute dtypes into a
`Combine` (straight-line IR) that the code generator writes as a `@triton.jit` helper.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import torch

from tilecraft import language as lang
from tilecraft.exc import DtypeError, ShapeMismatch, UnsupportedOperation
from tilecraft.frontend import jagged
from tilecraft.frontend.builder import Builder, compute_dtype
from tilecraft.frontend.ops import OPS, ValuesIndices, _axis, view
from tilecraft.ir.combine import Combine
from tilecraft.ir.nodes import Op, Value
from tilecraft.ir.ops import writes
from tilecraft.ir.types import Dim, TileType
from tilecraft.language.scans import plain_function, takes_pairs

if TYPE_CHECKING:
    from tilecraft.frontend.device import DeviceCompiler


def scan(b: Builder, kind: str, x: Value, dim: int, dtype: torch.dtype, **attrs: Any) -> Value:
    axis = _axis(b, x, dim)
    if attrs.get("reverse"):  # a forward scan never reads past a lane's length
        jagged.refuse(b, x, axis, "a reverse scan", "flip the data and scan forward")
    return b.op(
        "scan",
        (x,),
        dtype,
        x.type.dims,
        hint=f"cum{kind}",
        kind=kind,
        axis=axis,
        block=x.type.dims[axis],
        **attrs,
    )


def _cumulative(kind: str) -> Any:
    def handler(
        b: Builder, x: Value, dim: int, dtype: torch.dtype | None = None, reverse: bool = False
    ) -> Value:
        if dtype is not None:
            x = b.cast(x, dtype)  # type: ignore[assignment]
        out = x.type.dtype if x.type.dtype.is_floating_point else torch.int64
        return scan(b, kind, x, dim, out, compute=compute_dtype(out), reverse=bool(reverse))

    return handler


OPS["cumsum"] = _cumulative("sum")
OPS["cumprod"] = _cumulative("prod")


def _cum_best(kind: str) -> Any:
    def handler(b: Builder, x: Value, dim: int) -> ValuesIndices:
        compute = compute_dtype(x.type.dtype)
        attrs = {"compute": compute}
        values = scan(b, kind, x, dim, x.type.dtype, component=0, **attrs)
        indices = scan(b, kind, x, dim, torch.int64, component=1, **attrs)
        return ValuesIndices(values, indices)

    return handler


OPS["cummax"] = _cum_best("max")
OPS["cummin"] = _cum_best("min")


def _logcumsumexp(b: Builder, x: Value, dim: int) -> Value:
    """log(cumsum(exp(x))) by a stable combine (no shift by one max, which would lose the
    early elements of a row that grows), NaN and infinities as PyTorch's."""
    if not x.type.dtype.is_floating_point:  # PyTorch has no integer kernel for it
        raise DtypeError(f"logcumsumexp of a {x.type.dtype} tile: cast it with .float()", b.loc)
    compute = compute_dtype(x.type.dtype)
    return scan(b, "logsumexp", x, dim, x.type.dtype, compute=compute, computes=(compute,))


OPS["logcumsumexp"] = _logcumsumexp


# -- tc.associative_scan / tc.reduce / tc.rand / tc.randint ---------------------------------
def language_call(c: DeviceCompiler, fn: Any, args: list[Any], kwargs: dict[str, Any]) -> Any:
    """The tc.* calls compiled here, or NotImplemented."""
    if fn in (lang.cumsum, lang.cumprod):
        name = "cumsum" if fn is lang.cumsum else "cumprod"
        args = [c.operand(a) for a in args]
        return OPS[name](c.b, *args, **kwargs)
    if fn is lang.associative_scan:
        return _user_scan(c, *args, **kwargs)
    if fn is lang.reduce:
        return _user_reduce(c, *args, **kwargs)
    if fn is lang.rand:
        return _rand(c, *args, **kwargs)
    if fn is lang.randint:
        return _randint(c, *args, **kwargs)
    return NotImplemented


def _inputs(c: DeviceCompiler, input: Any, what: str) -> list[Value]:
    items = list(input) if isinstance(input, (tuple, list)) else [input]
    values = [c.operand(i) for i in items]
    if not all(isinstance(v, Value) and v.type.rank for v in values):
        raise UnsupportedOperation(f"{what} needs tiles as its input", c.b.loc)
    if len({v.type.dims for v in values}) != 1:
        raise ShapeMismatch(f"the tiles given to {what} must have the same shape", c.b.loc)
    return values


def trace_combine(c: DeviceCompiler, fn: Any, computes: list[torch.dtype], what: str) -> Combine:
    """`fn` compiled on 0-d values: (left..., right...) -> results, one per input."""
    b, fn = c.b, plain_function(fn)
    params = [
        Value(TileType(d, ()), b.fresh(f"{side}{i}"))
        for side in "lr"
        for i, d in enumerate(computes)
    ]
    b.bodies.append([])
    try:
        n = len(computes)
        pairs = n > 1 and takes_pairs(getattr(fn, "fn", fn))  # Helion's tuple format
        args = [tuple(params[:n]), tuple(params[n:])] if pairs else list(params)
        result = c.call(fn, args, {})
        results = list(result) if isinstance(result, (tuple, list)) else [result]
        if len(results) != len(computes):
            raise UnsupportedOperation(
                f"the combine function of {what} returns {len(results)} values for "
                f"{len(computes)} inputs",
                b.loc,
            )
        results = [_as_value(b, r, d) for r, d in zip(results, computes, strict=True)]
    finally:
        body = b.bodies.pop()
    _check_closed(b, body, params, what)
    return Combine(tuple(params), tuple(body), tuple(results))  # type: ignore[arg-type]


def _as_value(b: Builder, r: Any, dtype: torch.dtype) -> Value:
    if isinstance(r, Value):
        return b.cast(r, dtype)  # type: ignore[return-value]
    if isinstance(r, (bool, int, float)):
        return b.op("full", (), dtype, (), value=r)
    raise UnsupportedOperation("a combine function must return tiles or numbers", b.loc)


def _check_closed(b: Builder, body: list[Any], params: list[Value], what: str) -> None:
    """The combine function becomes a separate Triton function: it may use only its
    arguments, numbers and arithmetic (no loads, loops, or tiles of the kernel)."""
    known = {id(p) for p in params}
    for node in body:
        if not isinstance(node, Op) or node.name == "load" or writes(node.name):
            raise UnsupportedOperation(
                f"the combine function of {what} may only compute with its arguments", node.loc
            )
        if any(id(v) not in known for v in node.inputs()) or (node.out and node.out.type.dims):
            raise UnsupportedOperation(
                f"the combine function of {what} may only use its arguments and numbers",
                node.loc,
            )
        if node.out is not None:
            known.add(id(node.out))


def _user_scan(
    c: DeviceCompiler, combine_fn: Any, input: Any, dim: int, reverse: bool = False
) -> Any:
    values, combine, axis = _user_combine(c, combine_fn, input, dim, "tc.associative_scan")
    if reverse:
        jagged.refuse(c.b, values[0], axis, "a reverse scan", "flip the data and scan forward")
    dims, block = values[0].type.dims, values[0].type.dims[axis]
    outs = _per_component(c, "scan", values, combine, dims, axis=axis, block=block,
                          reverse=bool(reverse))  # fmt: skip
    return tuple(outs) if isinstance(input, (tuple, list)) else outs[0]


def _user_reduce(
    c: DeviceCompiler,
    combine_fn: Any,
    input: Any,
    dim: int | None = None,
    other: Any = 0,
    keep_dims: bool = False,
) -> Any:
    values, combine, axis = _user_combine(c, combine_fn, input, dim, "tc.reduce")
    jagged.refuse(c.b, values[0], axis, "tc.reduce", "use sum/amax/amin/prod, which skip them")
    dims: list[Dim] = list(values[0].type.dims)
    block, dims[axis] = dims[axis], None
    if block is not None and c.b.blocks[block].kind == "reduction" and not c.b.blocks[block].extent:
        raise ShapeMismatch("tc.reduce over a dimension of length 0 has no result", c.b.loc)
    if not keep_dims:
        del dims[axis]
    outs = _per_component(c, "reduce", values, combine, tuple(dims), axis=axis, block=block)
    return tuple(outs) if isinstance(input, (tuple, list)) else outs[0]


def _user_combine(
    c: DeviceCompiler, combine_fn: Any, input: Any, dim: int | None, what: str
) -> tuple[list[Value], Combine, int]:
    """The inputs of a scan or reduction with a user combine function, the traced
    function, and the axis it runs along."""
    values = _inputs(c, input, what)
    computes = [compute_dtype(v.type.dtype) for v in values]
    return values, trace_combine(c, combine_fn, computes, what), _axis(c.b, values[0], dim)


def _per_component(
    c: DeviceCompiler,
    name: str,
    values: list[Value],
    combine: Combine,
    dims: tuple[Dim, ...],
    **attrs: Any,
) -> list[Value]:
    """One `name` op per component of a (tuple) scan or reduction, all over every input."""
    computes = tuple(compute_dtype(v.type.dtype) for v in values)
    hint = "scan" if name == "scan" else "reduced"
    return [
        c.b.op(
            name,
            tuple(values),
            v.type.dtype,
            dims,
            hint=hint,
            kind="custom",
            combine=combine,
            component=i,
            compute=computes[i],
            computes=computes,
            **attrs,
        )  # fmt: skip
        for i, v in enumerate(values)
    ]


def _offsets(c: DeviceCompiler, dims: tuple[Dim, ...]) -> Value:
    """Each element's row-major position in the full extents of the shape's dims (global
    indices, so the numbers do not depend on block sizes)."""
    b = c.b
    extents = []
    for d in dims:
        info = b.blocks[d] if d is not None else None
        if info is not None and info.dynamic:
            raise UnsupportedOperation("tc.rand over a tile with bounds read on the device", b.loc)
        extents.append(info.extent if info is not None else 1)
    dtype = torch.int32 if math.prod(extents) < 2**31 else torch.int64
    total: Any = None
    stride = 1
    for i in reversed(range(len(dims))):
        d = dims[i]
        if d is not None:
            index = b.cast(b.op("tile_index", (d,), torch.int32, (d,), hint="index"), dtype)
            items = tuple(":" if j == i else "None" for j in range(len(dims)))
            term = b.elementwise("mul", view(b, index, items), stride)  # type: ignore[arg-type]
            total = term if total is None else b.elementwise("add", total, term)
        stride *= extents[i]
    if total is None:
        return b.op("full", (), dtype, dims, value=0)
    return total  # type: ignore[no-any-return]


def _seed(c: DeviceCompiler, seed: Any) -> Any:
    seed = c.operand(seed)
    if isinstance(seed, Value) and (seed.type.rank or seed.type.dtype.is_floating_point):
        raise DtypeError(
            "the seed of tc.rand must be an integer (a number or a 0-d tensor)", c.b.loc
        )
    if isinstance(seed, (float, bool)):
        raise DtypeError("the seed of tc.rand must be an integer", c.b.loc)
    return seed


def _random_bits(c: DeviceCompiler, shape: Any, seed: Any, kind: str) -> Value:
    dims = c.mem._shape_dims(shape)
    offsets = _offsets(c, dims)
    dtype = torch.float32 if kind == "uniform" else torch.int32
    return c.b.op("rand", (_seed(c, seed), offsets), dtype, dims, hint="rand", kind=kind)


def _rand(c: DeviceCompiler, shape: Any, seed: Any, device: Any = None) -> Value:
    return _random_bits(c, shape, seed, "uniform")


def _randint(
    c: DeviceCompiler, shape: Any, low: int, high: int, seed: Any, device: Any = None
) -> Value:
    if not isinstance(low, int) or not isinstance(high, int) or low >= high:
        raise UnsupportedOperation(f"tc.randint needs ints low < high, got {low}, {high}", c.b.loc)
    b = c.b
    bits = b.cast(_random_bits(c, shape, seed, "bits"), torch.int64)
    magnitude = OPS["abs"](b, bits)
    out = b.elementwise("add", b.elementwise("mod", magnitude, high - low), low)
    return b.cast(out, torch.int32)  # type: ignore[return-value]
