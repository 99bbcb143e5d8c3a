"""Scans and reductions with a user's combine function: `associative_scan`, `reduce`."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import torch

from tilecraft.language.state import eager_context

Tiles = torch.Tensor | tuple[torch.Tensor, ...]


def _as_tuple(x: Any) -> tuple[Any, ...]:
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)


def _computed(t: torch.Tensor) -> torch.Tensor:
    """Half-precision tiles combine in float32, as the compiled kernel does."""
    return t.float() if t.dtype in (torch.float16, torch.bfloat16) else t


def associative_scan(
    combine_fn: Callable[..., Any], input: Tiles, dim: int, reverse: bool = False
) -> Tiles:
    """An inclusive scan of `input` along `dim` with an associative `combine_fn`.

    `combine_fn(left, right)` combines two elements (for a tuple of n tiles it takes 2n
    arguments, the left element's then the right's, or two tuples of n, and returns n
    values); it is applied
    elementwise, so it may use tile arithmetic and `torch.where`. It is compiled into a
    Triton function: it may compute only with its arguments and numbers.

    Example::

        def add(a, b):
            return a + b

        for tile_m in tc.tile(m):
            out[tile_m, :] = tc.associative_scan(add, x[tile_m, :], dim=1)
    """
    eager_context("associative_scan")
    originals = _as_tuple(input)
    inputs = tuple(_computed(t) for t in originals)
    n = inputs[0].shape[dim]
    order = range(n - 1, -1, -1) if reverse else range(n)
    carry: tuple[Any, ...] | None = None
    steps: list[tuple[Any, ...]] = [()] * n
    for i in order:
        item = tuple(t.select(dim, i) for t in inputs)
        carry = item if carry is None else _as_tuple(combined(combine_fn, carry, item))
        steps[i] = tuple(
            torch.as_tensor(c, dtype=t.dtype) for c, t in zip(carry, inputs, strict=True)
        )
    outs = tuple(
        (torch.stack([s[k] for s in steps], dim) if n else t.clone()).to(o.dtype)
        for k, (t, o) in enumerate(zip(inputs, originals, strict=True))
    )
    return outs if isinstance(input, (tuple, list)) else outs[0]


def reduce(
    combine_fn: Callable[..., Any],
    input: Tiles,
    dim: int | None = None,
    other: Any = 0,
    keep_dims: bool = False,
) -> Tiles:
    """Reduce `input` along `dim` with an associative `combine_fn` (see
    `associative_scan` for its form). `other` is accepted for Helion's signature: masked
    lanes never enter the result here.

    Example::

        def biggest(a, b):
            return torch.maximum(a, b)

        for tile_m in tc.tile(m):
            out[tile_m] = tc.reduce(biggest, x[tile_m, :], dim=1)
    """
    eager_context("reduce")
    originals = _as_tuple(input)
    inputs = tuple(_computed(t) for t in originals)
    axis = 0 if dim is None else dim
    n = inputs[0].shape[axis]
    if n == 0:
        raise ValueError("tc.reduce over a dim of length 0 has no result")
    carry = tuple(t.select(axis, 0) for t in inputs)
    for i in range(1, n):
        item = tuple(t.select(axis, i) for t in inputs)
        carry = _as_tuple(combined(combine_fn, carry, item))
    outs = tuple(
        torch.as_tensor(c, dtype=t.dtype).unsqueeze(axis)
        if keep_dims
        else torch.as_tensor(c, dtype=t.dtype)
        for c, t in zip(carry, originals, strict=True)
    )
    return outs if isinstance(input, (tuple, list)) else outs[0]


def cumsum(input: torch.Tensor, dim: int, reverse: bool = False) -> torch.Tensor:
    """The cumulative sum along `dim` (from the end with `reverse=True`), as Helion's
    `hl.cumsum`; `torch.cumsum` works on tiles too.

    Example::

        out[tile_m, :] = tc.cumsum(x[tile_m, :], dim=1, reverse=True)
    """
    eager_context("cumsum")
    return input.flip(dim).cumsum(dim).flip(dim) if reverse else input.cumsum(dim)


def cumprod(input: torch.Tensor, dim: int, reverse: bool = False) -> torch.Tensor:
    """The cumulative product along `dim` (from the end with `reverse=True`).

    Example::

        out[tile_m, :] = tc.cumprod(x[tile_m, :], dim=1)
    """
    eager_context("cumprod")
    return input.flip(dim).cumprod(dim).flip(dim) if reverse else input.cumprod(dim)


def combined(fn: Callable[..., Any], left: tuple, right: tuple) -> Any:
    """`fn` on two elements of a tuple of tiles: `fn(*left, *right)`, or `fn(left, right)`
    where it takes two parameters for several tiles (Helion's tuple format)."""
    fn = plain_function(fn)
    if len(left) > 1 and takes_pairs(fn):
        return fn(tuple(left), tuple(right))
    return fn(*left, *right)


def takes_pairs(fn: Any) -> bool:
    """Whether `fn` takes exactly two positional parameters (no `*args`)."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return False
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    starred = any(p.kind == inspect.Parameter.VAR_POSITIONAL for p in params)
    return not starred and sum(p.kind in kinds for p in params) == 2


def plain_function(fn: Any) -> Any:
    """A combine function decorated as a kernel (as Helion allows) is its function."""
    from tilecraft.runtime.kernel import Kernel  # (imports the compiler, which imports this)

    return fn.fn if isinstance(fn, Kernel) else fn
