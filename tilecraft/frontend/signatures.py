"""Checking a call of a PyTorch op on tiles against its handler's signature, before the
handler runs: an argument the lowering does not take (a keyword PyTorch has and tilecraft
does not, an extra operand, a number where the handler takes a tile) is the user's
mistake or a gap in tilecraft, reported with the op and the argument at the user's line,
not as a Python error inside the compiler."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

from tilecraft.exc import UnsupportedOperation
from tilecraft.ir.nodes import Value

HIDDEN = "b"  # the builder, every handler's first parameter, which no user passes
KEYWORD_ONLY = inspect.Parameter.KEYWORD_ONLY


@functools.cache
def _signature(handler: Callable[..., Any]) -> inspect.Signature:
    return inspect.signature(handler)


def check_arguments(
    name: str, handler: Callable[..., Any], args: list[Any], kwargs: dict[str, Any]
) -> None:
    """Raise UnsupportedOperation when `handler` cannot take `args` and `kwargs`."""
    signature = _signature(handler)
    params = signature.parameters
    open_keywords = any(p.kind is p.VAR_KEYWORD for p in params.values())
    for key in kwargs:
        if not _takes(params, key, open_keywords):
            raise UnsupportedOperation(
                f"`{name}` on tiles does not take the keyword argument `{key}=`{_taken(signature)}"
            )
    try:
        bound = signature.bind(None, *args, **kwargs)
    except TypeError as e:
        raise UnsupportedOperation(f"`{name}` on tiles cannot take these arguments: {e}") from None
    if "inplace" in bound.arguments:  # given by position: F.elu(x, 1.0, True)
        _refuse_in_place(name, bound.arguments["inplace"])
    for key, value in bound.arguments.items():
        if params[key].annotation == "Value" and not isinstance(value, Value):
            raise UnsupportedOperation(
                f"`{name}` takes a tile as its `{key}`, not {type(value).__name__} {value!r}"
                " (PyTorch wants a tensor there too)"
            )


def without_inplace(name: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    """`kwargs` less PyTorch's `inplace=False` (what a value computes anyway); `inplace=True`
    is refused: a tile is a value, and writing it in place would change every name bound
    to it (eager mode's tensors too)."""
    if "inplace" not in kwargs:
        return kwargs
    _refuse_in_place(name, kwargs["inplace"])
    return {k: v for k, v in kwargs.items() if k != "inplace"}


def _refuse_in_place(name: str, inplace: object) -> None:
    if inplace is not False:
        raise UnsupportedOperation(
            f"`{name}(..., inplace=True)` on a tile: tiles are values; write `x = {name}(x)`"
        )


def _takes(params: Any, key: str, open_keywords: bool) -> bool:
    """Whether a handler takes keyword `key`: not its builder nor a bound default (`_d`),
    though it may take a private keyword of PyTorch's (softmax's `_stacklevel=`)."""
    if key not in params:
        return open_keywords
    hidden = key == HIDDEN or (key.startswith("_") and params[key].kind is not KEYWORD_ONLY)
    return not hidden


def _taken(signature: inspect.Signature) -> str:
    """The keywords the handler takes, for the message (none: nothing to add)."""
    keywords = [
        p.name
        for p in signature.parameters.values()
        if p.kind is p.KEYWORD_ONLY and not p.name.startswith("_")
    ]
    return f" (it takes {', '.join(f'`{k}=`' for k in keywords)})" if keywords else ""
