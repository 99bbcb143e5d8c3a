"""Normalizations users call on tiles, as PyTorch computes them: F.layer_norm and
F.rms_norm over the trailing dims (held whole), in float32 for 16-bit tiles (PyTorch's
kernels accumulate there too), the weight and bias applied before the one rounding."""

from __future__ import annotations

from typing import Any

import torch

from tilecraft.exc import ShapeMismatch
from tilecraft.frontend.builder import Builder, Operand
from tilecraft.frontend.ops import OPS, op
from tilecraft.frontend.reductions import _float
from tilecraft.frontend.views import whole_extent
from tilecraft.ir.nodes import Value


@op("layer_norm")
def _layer_norm(
    b: Builder, x: Value, normalized_shape: Any, weight: Any = None, bias: Any = None,
    eps: float = 1e-5,
) -> Value:  # fmt: skip
    """(x - mean) / sqrt(biased variance + eps), times the weight, plus the bias."""
    dims, xf = _trailing(b, x, normalized_shape, "layer_norm"), _float(b, x)
    diff = b.elementwise("sub", xf, OPS["mean"](b, xf, dims, True))
    var = OPS["mean"](b, b.elementwise("mul", diff, diff), dims, True)
    y = b.elementwise("mul", diff, OPS["rsqrt"](b, b.elementwise("add", var, eps)))
    return _affine(b, x, y, weight, bias)


@op("rms_norm")
def _rms_norm(
    b: Builder, x: Value, normalized_shape: Any, weight: Any = None, eps: float | None = None
) -> Value:
    """x / sqrt(mean(x ** 2) + eps) times the weight; eps defaults to the machine epsilon
    of the dtype PyTorch computes in (float32's for 16-bit tiles), as PyTorch's does."""
    dims, xf = _trailing(b, x, normalized_shape, "rms_norm"), _float(b, x)
    eps = torch.finfo(xf.type.dtype).eps if eps is None else eps
    mean = OPS["mean"](b, b.elementwise("mul", xf, xf), dims, True)
    y = b.elementwise("mul", xf, OPS["rsqrt"](b, b.elementwise("add", mean, eps)))
    return _affine(b, x, y, weight, None)


def _trailing(b: Builder, x: Value, shape: Any, name: str) -> tuple[int, ...]:
    """The dims `normalized_shape` names (the last ones), checked against x's."""
    sizes = [shape] if isinstance(shape, int) else list(shape)
    if not x.type.dtype.is_floating_point or not 0 < len(sizes) <= x.type.rank:
        raise ShapeMismatch(f"{name} takes a float tile and its trailing dims' sizes", b.loc)
    axes = tuple(range(x.type.rank - len(sizes), x.type.rank))
    for axis, size in zip(axes, sizes, strict=True):
        extent = whole_extent(b, x, axis, name)
        if extent != size:
            raise ShapeMismatch(
                f"{name} over {sizes}: the tile's dim {axis} has {extent} elements", b.loc
            )
    return axes


def _affine(b: Builder, x: Value, y: Operand, weight: Any, bias: Any) -> Value:
    if weight is not None:
        y = b.elementwise("mul", y, weight)
    if bias is not None:
        y = b.elementwise("add", y, bias)
    return b.cast(y, x.type.dtype)  # type: ignore[return-value]
