"""What an op with no tile lowering says: what to write instead where we know it, else
the nearest name tiles have (`sigmod`: did you mean `sigmoid`?)."""

from __future__ import annotations

import difflib

from tilecraft.frontend.ops import OPS

_SEEDED = "tc.rand([tile, ...], seed) (counter-based: the same numbers in both modes)"
INSTEAD = {
    "einsum": "`@` / torch.matmul on tiles",
    "nonzero": "a mask with torch.where (shapes must not depend on data)",
    "masked_select": "torch.where(mask, x, 0) (shapes must not depend on data)",
    "tolist": "the tile itself",
    "numpy": "the tile itself",
    "contiguous": "the tile itself (tiles have no strides)",
    "clone": "the tile itself (tiles are values)",
    "copy_": "a store: `out[tile] = value`",
    "zero_": "tc.zeros([...]) or torch.zeros_like(x)",
    "fill_": "tc.full([...], value)",
    "add_": "`x = x + y` (tiles are values)",
    "mul_": "`x = x * y` (tiles are values)",
    "rand_like": _SEEDED,
    "randn_like": _SEEDED,
    "randint_like": "tc.randint([...], low, high, seed) (the same numbers in both modes)",
}


QUERIES = ("size", "dim", "ndimension")  # shape queries: no op a misspelt one could mean


def unsupported(name: str) -> str:
    """The message for an op with no tile lowering: what to use instead, if we know."""
    message = f"`{name}` is not supported on tiles"
    if name in INSTEAD:
        return f"{message}: use {INSTEAD[name]}"
    if name.endswith("_") and name[:-1] in OPS:  # an in-place method
        return f"{message}: use `x = x.{name[:-1]}(...)` (tiles are values)"
    names = [n for n in OPS if n.isidentifier() and n not in QUERIES]
    close = difflib.get_close_matches(name, names, n=1)
    return f"{message}; did you mean `{close[0]}`?" if close else message
