"""Reductions beyond sum/max/min: prod, any/all, logsumexp, mean/var/std (and std_mean),
norm, aminmax, count_nonzero, nansum, nanmean.

Each is the `reduce` IR op or an expansion onto it, over one dim, several (a tuple) or
all of them (`dim=None`). Means over a tile's dim divide by the tile's valid length
(`tile.end - tile.begin`), which is what eager mode's ragged edge tiles hold.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import torch

from tilecraft.exc import DtypeError, UnsupportedOperation
from tilecraft.frontend.builder import Builder, Operand, compute_dtype
from tilecraft.frontend.ops import (
    OPS,
    _check_not_empty,
    _reducer,
    axes_of,
    op,
    reduce_dims,
    view,
)
from tilecraft.frontend.views import bitcast
from tilecraft.ir.nodes import Value
from tilecraft.runtime.cpu import interpreter_set as interpreted

OPS["prod"] = _reducer("prod")


def _float(b: Builder, x: Value, dtype: torch.dtype | None = None) -> Value:
    """`x` in the dtype a float reduction computes in (integers become float32)."""
    target = dtype or x.type.dtype
    if not target.is_floating_point:
        target = torch.float32
    return b.cast(x, compute_dtype(target))  # type: ignore[return-value]


def _result_dtype(x: Value, dtype: torch.dtype | None) -> torch.dtype:
    target = dtype or x.type.dtype
    return target if target.is_floating_point else torch.float32


def _any_or_all(kind: str) -> Any:
    def handler(b: Builder, x: Value, dim: Any = None, keepdim: bool = False) -> Value:
        test = OPS["ne" if kind == "any" else "eq"](b, x, 0)
        count = reduce_dims(b, "sum", b.cast(test, torch.int32), dim, keepdim)  # type: ignore[arg-type]
        out = b.elementwise("gt" if kind == "any" else "eq", count, 0, dtype=torch.bool)
        # PyTorch keeps uint8 for uint8 inputs, gives bool otherwise
        return b.cast(out, torch.uint8) if x.type.dtype == torch.uint8 else out  # type: ignore[return-value]

    return handler


OPS["any"] = _any_or_all("any")
OPS["all"] = _any_or_all("all")


def _unsqueezed(b: Builder, reduced: Value, rank: int, axes: list[int]) -> Value:
    """A value reduced over `axes` (without keepdim), viewed back to broadcast at rank."""
    index = ["None" if i in axes else ":" for i in range(rank)]
    return view(b, reduced, tuple(index))


@op("logsumexp")
def _logsumexp(b: Builder, x: Value, dim: Any = None, keepdim: bool = False) -> Value:
    """log(sum(exp(x))) shifted by the max; rows of -inf give -inf, as PyTorch."""
    xf = _float(b, x)
    axes = axes_of(b, xf, dim)
    top = reduce_dims(b, "max", xf, dim, False)
    inf = OPS["isinf"](b, top)
    shift = OPS["where"](b, inf, 0.0, top)
    shift_b = _unsqueezed(b, shift, xf.type.rank, axes)
    exp = OPS["exp"](b, b.elementwise("sub", xf, shift_b))
    total = reduce_dims(b, "sum", exp, dim, keepdim)
    out = b.elementwise("add", OPS["log"](b, total), shift_b if keepdim else shift)
    return b.cast(out, _result_dtype(x, None))  # type: ignore[return-value]


def count(b: Builder, x: Value, axes: list[int]) -> Operand:
    """How many elements a reduction over `axes` takes: extents, or a tile's valid length
    (a Value: the last tile of a ragged dim is shorter)."""
    total: Operand = 1
    for axis in axes:
        block = x.type.dims[axis]
        if block is None:
            continue
        info = b.blocks[block]
        if block in b.jagged:  # Helion refuses it too: each lane has its own count
            raise UnsupportedOperation(
                "a mean (or var/std) over a jagged tile's dim has a different count per lane:"
                " sum over it and divide by the lengths",
                b.loc,
            )
        if info.kind == "reduction":
            n: Operand = info.extent
        else:
            end = b.op("tile_end", (block,), torch.int32, (), hint="end")
            begin = b.op("tile_begin", (block,), torch.int32, (), hint="begin")
            n = b.elementwise("sub", end, begin)
        if isinstance(total, int) and isinstance(n, int):
            total *= n
        else:
            total = b.elementwise("mul", total, n)
    return total


def _divide(b: Builder, total: Value, n: Operand) -> Value:
    if isinstance(n, Value):
        return b.elementwise("truediv", total, b.cast(n, total.type.dtype))
    return b.elementwise("truediv", total, float(n))


def _averaged(b: Builder, name: str, x: Value, dtype: torch.dtype | None) -> Value:
    """`x` in the dtype a mean computes in; PyTorch's means refuse integer tiles."""
    if not (dtype or x.type.dtype).is_floating_point:
        raise UnsupportedOperation(
            f"{name} of a {x.type.dtype} tile: give dtype= or cast it with .float()", b.loc
        )
    return _float(b, x, dtype)


def _floating_only(b: Builder, name: str, x: Value) -> None:
    """var, std and norm refuse integer and bool tiles, dtype= or not, as PyTorch's do."""
    if not x.type.dtype.is_floating_point:
        raise DtypeError(f"{name} of a {x.type.dtype} tile: cast it with .float() first", b.loc)


@op("mean")
def _mean(
    b: Builder, x: Value, dim: Any = None, keepdim: bool = False, *, dtype: Any = None
) -> Value:
    xf = _averaged(b, "mean", x, dtype)
    total = reduce_dims(b, "sum", xf, dim, keepdim)
    mean = _divide(b, total, count(b, xf, axes_of(b, xf, dim)))
    return b.cast(mean, _result_dtype(x, dtype))  # type: ignore[return-value]


def _correction(unbiased: bool | None, correction: float | None) -> float:
    if correction is not None:
        return float(correction)
    return 0.0 if unbiased is False else 1.0


@op("var")
def _var(
    b: Builder,
    x: Value,
    dim: Any = None,
    unbiased: bool | None = None,
    keepdim: bool = False,
    correction: float | None = None,
) -> Value:
    """Two passes (mean, then squared deviations), divided by `n - correction` clamped at
    0 (0/0 gives NaN for a single element, as PyTorch)."""
    if isinstance(unbiased, int) and not isinstance(unbiased, bool):  # var(x, 1): a dim
        dim, unbiased = unbiased, None
    _floating_only(b, "var", x)
    return b.cast(_spread(b, x, dim, unbiased, keepdim, correction, False), _result_dtype(x, None))  # type: ignore[return-value]


@op("std")
def _std(
    b: Builder,
    x: Value,
    dim: Any = None,
    unbiased: bool | None = None,
    keepdim: bool = False,
    correction: float | None = None,
) -> Value:
    _floating_only(b, "std", x)
    return b.cast(_spread(b, x, dim, unbiased, keepdim, correction, True), _result_dtype(x, None))  # type: ignore[return-value]


def _spread(b: Builder, x: Value, dim: Any, unbiased: bool | None, keepdim: bool,
            correction: float | None, root: bool) -> Value:  # fmt: skip
    """The variance (`root`: its square root) in the compute dtype.

    On the CPU, float32 deviations are scaled by a power of two near the largest of them
    before they are squared, and the result scaled back: PyTorch's CPU kernels square in
    float64, where deviations past 1.8e19 or below 1e-19 would overflow or vanish in
    float32 (`std` of values near 1e20 was inf, near 1e-30 was 0). Scaling by a power of
    two is exact, so results in range are the unscaled ones bit for bit. PyTorch's CUDA
    kernels square in float32 (inf and 0 there too), and so does compiled code on a GPU,
    where the extra reduction would cost the norms."""
    xf = _float(b, x)
    n = count(b, xf, axes_of(b, xf, dim))
    diff = b.elementwise("sub", xf, _divide(b, reduce_dims(b, "sum", xf, dim, True), n))
    scale: Operand = 1.0
    if xf.type.dtype == torch.float32 and interpreted():
        scale = _power_of_two_near(b, reduce_dims(b, "max", OPS["abs"](b, diff), dim, True))
        diff = b.elementwise("mul", diff, b.elementwise("truediv", 1.0, scale))
        if not keepdim:
            scale = reduce_dims(b, "max", scale, dim, False)  # (its reduced dims are 1)
    total = reduce_dims(b, "sum", b.elementwise("mul", diff, diff), dim, keepdim)
    corr = _correction(unbiased, correction)
    if isinstance(n, Value):
        dof: Operand = b.elementwise(
            "maximum", b.elementwise("sub", b.cast(n, xf.type.dtype), corr), 0.0
        )
    else:
        dof = max(n - corr, 0.0)
    out = _divide(b, total, dof)
    if root:
        return b.elementwise("mul", OPS["sqrt"](b, out), scale)
    return b.elementwise("mul", b.elementwise("mul", out, scale), scale)


def _power_of_two_near(b: Builder, top: Value) -> Value:
    """2 ** floor(log2(top)) for a positive float32 `top` (its exponent bits alone), at
    least 2 ** -126 (zero and denormals); 1 where `top` is inf or NaN (nothing to scale:
    the result is inf or NaN anyway)."""
    bits = b.elementwise("and", bitcast(b, top, torch.int32), 0x7F800000)
    power = b.elementwise("maximum", bitcast(b, bits, torch.float32), 2.0**-126)
    return b.elementwise("where", OPS["isinf"](b, power), 1.0, power)


@op("norm", "vector_norm")
def _norm(
    b: Builder,
    x: Value,
    p: Any = 2,
    dim: Any = None,
    keepdim: bool = False,
    dtype: torch.dtype | None = None,
    ord: Any = None,
) -> Value:
    """The vector p-norm: p = 2 ("fro"), 1, inf, -inf, 0 or any other number."""
    p = ord if ord is not None else p
    p = 2 if p in ("fro", None) else p
    if not isinstance(p, (int, float)):
        raise UnsupportedOperation(f"norm(p={p!r}): only vector norms (numbers, 'fro')", b.loc)
    _floating_only(b, "norm", x)
    if p < 0 or p == math.inf:  # no identity: PyTorch raises over a dim of length 0
        for axis in axes_of(b, x, dim):
            _check_not_empty(b, f"the {p} norm", x, axis)
    xf = _float(b, x, dtype)
    mag = OPS["abs"](b, xf)
    if p == math.inf or p == -math.inf:
        out = reduce_dims(b, "max" if p > 0 else "min", mag, dim, keepdim)
    elif p == 0:
        out = reduce_dims(b, "sum", b.cast(OPS["ne"](b, xf, 0), xf.type.dtype), dim, keepdim)  # type: ignore[arg-type]
    elif p == 1:
        out = reduce_dims(b, "sum", mag, dim, keepdim)
    elif p == 2:
        out = OPS["sqrt"](b, reduce_dims(b, "sum", b.elementwise("mul", xf, xf), dim, keepdim))
    else:
        total = reduce_dims(b, "sum", OPS["pow"](b, mag, float(p)), dim, keepdim)
        out = OPS["pow"](b, total, 1.0 / p)
    return b.cast(out, _result_dtype(x, dtype))  # type: ignore[return-value]


def _and_mean(spread: Any) -> Any:
    """torch.var_mean / std_mean: `(spread, mean)`, the mean in the spread's dtype."""

    def handler(
        b: Builder,
        x: Value,
        dim: Any = None,
        unbiased: bool | None = None,
        keepdim: bool = False,
        correction: float | None = None,
    ) -> tuple[Value, Value]:
        if isinstance(unbiased, int) and not isinstance(unbiased, bool):  # var_mean(x, 1)
            dim, unbiased = unbiased, None
        out = spread(b, x, dim, unbiased, keepdim, correction)
        mean = _mean(b, _float(b, x), dim, keepdim)
        return out, b.cast(mean, out.type.dtype)  # type: ignore[return-value]

    return handler


OPS["var_mean"], OPS["std_mean"] = _and_mean(_var), _and_mean(_std)


class MinMax(NamedTuple):
    """What torch.aminmax returns: `.min` and `.max`, or unpack it."""

    min: Value
    max: Value


@op("aminmax")
def _aminmax(b: Builder, x: Value, *, dim: Any = None, keepdim: bool = False) -> MinMax:
    return MinMax(OPS["amin"](b, x, dim, keepdim), OPS["amax"](b, x, dim, keepdim))


@op("count_nonzero")
def _count_nonzero(b: Builder, x: Value, dim: Any = None) -> Value:
    """How many elements are not 0 (NaN counts), as int64."""
    nonzero = b.cast(OPS["ne"](b, x, 0), torch.int64)
    return reduce_dims(b, "sum", nonzero, dim, False)  # type: ignore[arg-type]


def _without_nan(b: Builder, x: Value) -> Value:
    if not x.type.dtype.is_floating_point:
        return x
    return b.elementwise("where", OPS["isnan"](b, x), 0.0, x)


@op("nansum")
def _nansum(
    b: Builder, x: Value, dim: Any = None, keepdim: bool = False, *, dtype: Any = None
) -> Value:
    """The sum of the elements that are not NaN (0 where all are)."""
    return OPS["sum"](b, _without_nan(b, x), dim, keepdim, dtype=dtype)  # type: ignore[no-any-return]


@op("nanmean")
def _nanmean(
    b: Builder, x: Value, dim: Any = None, keepdim: bool = False, *, dtype: Any = None
) -> Value:
    """The mean of the elements that are not NaN (NaN where all are), as torch.nanmean."""
    xf = _averaged(b, "nanmean", x, dtype)
    kept = b.cast(OPS["not"](b, OPS["isnan"](b, xf)), xf.type.dtype)
    total = reduce_dims(b, "sum", _without_nan(b, xf), dim, keepdim)
    mean = b.elementwise("truediv", total, reduce_dims(b, "sum", kept, dim, keepdim))  # type: ignore[arg-type]
    return b.cast(mean, _result_dtype(x, dtype))  # type: ignore[return-value]
