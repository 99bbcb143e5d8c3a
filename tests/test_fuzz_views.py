"""Differential fuzzing of views and shape ops on tiles: random chains of reshape/view,
flatten/unflatten, permute/transpose/mT/movedim, unsqueeze/squeeze/None, expand/
broadcast_to, cat/stack/split/chunk/unbind, repeat/torch.tile, narrow, slices a:b:c,
integer indexing, flip/roll, casts, elementwise ops and reductions over the new dims,
compiled into kernels and run eagerly and under Triton's interpreter, against the same
chain applied by PyTorch to the whole tensor.

Each kernel loads a tile of rows of constant widths (1, 2, 3, 6, 8, 12, 33, and 0) from
2-D and 3-D inputs (the tile's dim first, last or in the middle; one or two tile loops),
in float32, float16, int32 and bool; inputs are plain, transposed, sliced with a step or
expanded with stride 0, and outputs are written through permuted or stepped views, with
tile counts of 0, 1, 5 and 37 under several block sizes. The chain and the inputs are
drawn from a fixed seed. A fuzzer like this found reshapes that split or merge padded
dims ([tile, 12] -> [tile, 2, 6]), flatten, unflatten, repeat, torch.tile and narrow
refused, reshapes of no elements refused, and refusals under chunked reduction loops
that blamed the shapes.

Left out where PyTorch's CPU results are not one answer: the sign of a max or min of
tied zeros (`+ 0` gives +0.0), and casts of NaN and infinities to ints (clamped first
with nan_to_num); and float16 sums of `v - softmax(v)`, which cancel to rounding noise
that depends on the order of addition.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import pytest
import torch
from conftest import DEVICE
from fuzzing import load_kernels

import tilecraft as tc
from tilecraft.exc import (
    DtypeError,
    InvalidConfig,
    LoweringError,
    ShapeMismatch,
    UnsupportedOperation,
)
from tilecraft.testing import check_modes

SEED = 2027
KERNELS = 260
TILES = {"T": ("tile_m", "M"), "U": ("tile_n", "N")}  # a tile's dim: kernel and reference
FLOATS = ("float32", "float16")
SPECIAL = [float("nan"), float("inf"), -float("inf"), 0.0, -0.0, 1.0, -2.0]
Dims = list  # of ints (static sizes) and "T"/"U" (tiles' dims)
Drawn = tuple[tuple[str, str], Dims, str]  # (kernel text, reference text), dims, dtype


def both(text: str) -> tuple[str, str]:
    return text, text


def sized(dims: Dims, which: int, infer: int | None = None) -> str:
    """`dims` as reshape arguments: the kernel's tiles (which=0) or the sizes (which=1)."""
    return ", ".join(
        "-1" if k == infer else str(d) if isinstance(d, int) else TILES[d][which]
        for k, d in enumerate(dims)
    )


def statics(dims: Dims, least: int = 0) -> list[int]:
    return [k for k, d in enumerate(dims) if isinstance(d, int) and d >= least]


def replaced(dims: Dims, k: int, *new: object) -> Dims:
    return [*dims[:k], *new, *dims[k + 1 :]]


# -- the ops: each draws one step for `v` of `dims` and `dtype`, or None where it cannot --
def elementwise(rng: random.Random, dims: Dims, dtype: str) -> Drawn:
    if dtype == "bool":
        text = rng.choice(["~v", "v ^ v.logical_not()", "v | False"])
    elif dtype in ("int32", "int64"):
        text = rng.choice(["v * 3 - 1", "torch.abs(v)", "torch.where(v > 0, v, -v)", "v // 2"])
    else:
        text = rng.choice(["v * 2 - 1", "torch.where(v > 0, v, -v)", "torch.abs(v) + 0.5"])
    return both(text), dims, dtype


def cast(rng: random.Random, dims: Dims, dtype: str) -> Drawn | None:
    to = rng.choice(["float32", "float16", "int32", "bool"])
    if to == dtype:
        return None
    if dtype in FLOATS and to == "int32":
        return both(f"torch.nan_to_num(v, 0.0, 9.0, -9.0).to(torch.{to})"), dims, to
    return both(f"v.to(torch.{to})"), dims, to


def reshape_text(rng: random.Random, dims: Dims) -> tuple[str, str]:
    """`v.reshape(...)` or `v.view(...)` to `dims` (sizes listed or in a list, one maybe -1)."""
    infer = rng.choice([None, None, rng.randrange(len(dims))]) if dims else None
    method = rng.choice(["reshape", "view"])
    listed = "[{}]" if rng.random() < 0.3 else "{}"
    k, r = (listed.format(sized(dims, which, infer)) for which in (0, 1))
    return f"v.{method}({k})", f"v.{method}({r})"


def split_dim(rng: random.Random, dims: Dims, dtype: str) -> Drawn | None:
    pairs = [(k, p) for k in statics(dims) for p in range(2, dims[k]) if dims[k] % p == 0]
    if not pairs:
        return None
    k, p = rng.choice(pairs)
    new = replaced(dims, k, p, dims[k] // p)
    if rng.random() < 0.3:
        return both(f"v.unflatten({k}, ({p}, {dims[k] // p}))"), new, dtype
    return reshape_text(rng, new), new, dtype


def merge_dims(rng: random.Random, dims: Dims, dtype: str) -> Drawn | None:
    runs = [k for k in statics(dims) if k + 1 in statics(dims)]
    if not runs:
        return None
    k = rng.choice(runs)
    new = [*dims[:k], dims[k] * dims[k + 1], *dims[k + 2 :]]
    if rng.random() < 0.3:
        return both(f"v.flatten({k}, {k + 1})"), new, dtype
    return reshape_text(rng, new), new, dtype


def unsqueeze(rng: random.Random, dims: Dims, dtype: str) -> Drawn:
    k = rng.randrange(len(dims) + 1)
    new = [*dims[:k], 1, *dims[k:]]
    if rng.random() < 0.5:
        return both(f"v[{', '.join([':'] * k + ['None'])}]"), new, dtype
    at = k - len(dims) - 1 if rng.random() < 0.3 else k
    return both(f"v.unsqueeze({at})"), new, dtype


def squeeze(rng: random.Random, dims: Dims, dtype: str) -> Drawn | None:
    ones = [k for k, d in enumerate(dims) if d == 1]
    if not ones:
        return None
    k = rng.choice(ones)
    return both(f"v.squeeze({k})"), replaced(dims, k), dtype


def permute(rng: random.Random, dims: Dims, dtype: str) -> Drawn | None:
    n = len(dims)
    if n < 2:
        return None
    kind = rng.choice(["permute", "transpose", "mT", "movedim", "T"])
    if kind == "permute":
        perm = rng.sample(range(n), n)
        return both(f"v.permute({', '.join(map(str, perm))})"), [dims[p] for p in perm], dtype
    if kind == "mT" or (kind == "T" and n != 2):
        return both("v.mT"), [*dims[:-2], dims[-1], dims[-2]], dtype
    if kind == "T":
        return both("v.T"), dims[::-1], dtype
    a, c = rng.randrange(n), rng.randrange(n)
    if kind == "transpose":
        new = list(dims)
        new[a], new[c] = new[c], new[a]
        return both(f"v.transpose({a}, {c})"), new, dtype
    new = replaced(dims, a)
    return both(f"torch.movedim(v, {a}, {c})"), [*new[:c], dims[a], *new[c:]], dtype


def expand(rng: random.Random, dims: Dims, dtype: str) -> Drawn | None:
    ones = [k for k, d in enumerate(dims) if d == 1]
    if not ones:
        return None
    k, n = rng.choice(ones), rng.choice([2, 3, 5])
    new = replaced(dims, k, n)
    if rng.random() < 0.5:
        sizes = ", ".join(str(n) if j == k else "-1" for j in range(len(dims)))
        return both(f"v.expand({sizes})"), new, dtype
    return (
        (f"v.broadcast_to(({sized(new, 0)},))", f"v.broadcast_to(({sized(new, 1)},))"),
        new,
        dtype,
    )


def other(dtype: str) -> str:
    return "~v" if dtype == "bool" else "v * 2"


def cat(rng: random.Random, dims: Dims, dtype: str) -> Drawn | None:
    if not statics(dims):
        return None
    k = rng.choice(statics(dims))
    at = k - len(dims) if rng.random() < 0.3 else k
    return both(f"torch.cat([v, {other(dtype)}], {at})"), replaced(dims, k, dims[k] * 2), dtype


def stack(rng: random.Random, dims: Dims, dtype: str) -> Drawn:
    k, n = rng.randrange(len(dims) + 1), rng.choice([2, 3])
    parts = ", ".join(["v", other(dtype), "v"][:n])
    return both(f"torch.stack([{parts}], {k})"), [*dims[:k], n, *dims[k:]], dtype


def cut(rng: random.Random, dims: Dims, dtype: str) -> Drawn | None:
    """split, chunk and unbind, their pieces joined again or one of them taken."""
    if not statics(dims, 1):
        return None
    k = rng.choice(statics(dims, 1))
    n = dims[k]
    kind = rng.choice(["split", "sections", "chunk", "unbind", "unbind_one"])
    if kind == "split":
        return both(f"torch.cat(v.split({rng.randint(1, n)}, {k})[::-1], {k})"), dims, dtype
    if kind == "sections":
        a = rng.randint(0, n)
        return both(f"v.split([{a}, {n - a}], {k})[1]"), replaced(dims, k, n - a), dtype
    if kind == "chunk":
        chunks = rng.randint(1, n)
        size = -(-n // chunks)
        pieces = [min(size, n - s) for s in range(0, n, size)]
        p = rng.randrange(len(pieces))
        return both(f"v.chunk({chunks}, {k})[{p}]"), replaced(dims, k, pieces[p]), dtype
    if kind == "unbind":
        return both(f"torch.stack(v.unbind({k})[::-1], {k})"), dims, dtype
    return both(f"v.unbind({k})[{rng.randrange(n)}]"), replaced(dims, k), dtype


def repeat(rng: random.Random, dims: Dims, dtype: str) -> Drawn | None:
    if not statics(dims):
        return None
    counts = [rng.choice([1, 2, 3]) if isinstance(d, int) else 1 for d in dims]
    new = [d * c if isinstance(d, int) else d for d, c in zip(dims, counts, strict=True)]
    if rng.random() < 0.3:
        counts, new = [2, *counts], [2, *new]
    text = ", ".join(map(str, counts))
    if rng.random() < 0.5:
        return both(f"v.repeat({text})"), new, dtype
    return both(f"torch.tile(v, ({text},))"), new, dtype


def narrow(rng: random.Random, dims: Dims, dtype: str) -> Drawn | None:
    if not statics(dims, 1):
        return None
    k = rng.choice(statics(dims, 1))
    start = rng.randint(-dims[k], dims[k] - 1)
    length = rng.randint(0, dims[k] - start % dims[k])
    return both(f"v.narrow({k}, {start}, {length})"), replaced(dims, k, length), dtype


def rearrange(rng: random.Random, dims: Dims, dtype: str) -> Drawn | None:
    if not statics(dims):
        return None
    k = rng.choice(statics(dims))
    if rng.random() < 0.5:
        return both(f"v.flip({k})"), dims, dtype
    return both(f"torch.roll(v, {rng.randint(-4, 4)}, {k})"), dims, dtype


def part(rng: random.Random, dims: Dims, dtype: str) -> Drawn | None:
    """A slice a:b:c, or an integer index."""
    if not statics(dims, 1):
        return None
    k = rng.choice(statics(dims, 1))
    n = dims[k]
    if rng.random() < 0.3:
        return (
            both(f"v[{', '.join([':'] * k + [str(rng.randrange(-n, n))])}]"),
            replaced(dims, k),
            dtype,
        )
    bounds = (rng.choice([None, 0, 1, 2, -2]), rng.choice([None, n - 1, 1, 5, -1]))
    step = rng.choice([None, 1, 2, 3])
    text = ":".join("" if b is None else str(b) for b in (*bounds, step))
    size = len(range(*slice(*bounds, step).indices(n)))
    return both(f"v[{', '.join([':'] * k + [text])}]"), replaced(dims, k, size), dtype


def reduce(rng: random.Random, dims: Dims, dtype: str) -> Drawn | None:
    if not statics(dims):
        return None
    k = rng.choice(statics(dims))
    keep = rng.random() < 0.3
    new = replaced(dims, k, 1) if keep else replaced(dims, k)
    args = f"{k}, keepdim=True" if keep else f"{k}"
    if dtype == "bool":
        return both(f"v.{rng.choice(['any', 'all'])}({args})"), new, dtype
    name = rng.choice(["sum", "amax", "amin"]) if dims[k] else "sum"
    if name == "sum":
        return both(f"v.sum({args})"), new, "int64" if dtype.startswith("int") else dtype
    return both(f"(v.{name}({args}) + 0)"), new, dtype


def combine(rng: random.Random, dims: Dims, dtype: str) -> Drawn | None:
    """`v` with a view of itself of its shape (or one that broadcasts to it)."""
    views = []
    if statics(dims, 2):
        k = rng.choice(statics(dims, 2))
        views += [f"v.flip({k})", f"torch.roll(v, 1, {k})"]
        if dtype == "float32":  # (in float16, sums of v - softmax(v) cancel to noise)
            views += [f"torch.softmax(v, {k})", f"v.mean({k}, keepdim=True)"]
    square = [(a, c) for a in statics(dims) for c in statics(dims) if a < c and dims[a] == dims[c]]
    if square:
        views.append("v.transpose({}, {})".format(*rng.choice(square)))
    if not views:
        return None
    w = rng.choice(views)
    if "softmax" in w or "mean" in w:
        return both(f"v - {w}"), dims, dtype
    if dtype == "bool":
        return both(f"v ^ {w}"), dims, dtype
    return both(f"(torch.maximum(v, {w}) + 0)"), dims, dtype


OPS = {
    elementwise: 2, cast: 1, split_dim: 4, merge_dims: 4, unsqueeze: 2, squeeze: 2,
    permute: 4, expand: 2, cat: 2, stack: 2, cut: 3, repeat: 2, narrow: 1, rearrange: 2,
    part: 3, reduce: 2, combine: 3,
}  # fmt: skip


def chain(rng: random.Random, dims: Dims, dtype: str, length: int) -> tuple[list, list, Dims]:
    """Lines of kernel and reference code applying `length` ops to `v`, and its dims."""
    kernel, reference = [], []
    for _ in range(length):
        for _ in range(20):
            drawn = rng.choices(list(OPS), list(OPS.values()))[0](rng, dims, dtype)
            if drawn is not None and len(drawn[1]) <= 4 and small(drawn[1]):
                (k, r), dims, dtype = drawn
                kernel.append(f"v = {k}")
                reference.append(f"v = {r}")
                break
    return kernel, reference, dims


def small(dims: Dims) -> bool:
    total = 1
    for d in dims:
        total *= max(d, 1) if isinstance(d, int) else 1
    return total <= 256


# -- kernels and inputs ------------------------------------------------------------------
def setup(rng: random.Random) -> tuple[tuple, Dims, str, str]:
    """(the input's shape, the loaded tile's dims, the load, the loop)."""
    kind = rng.choice(["row", "row", "cube", "col", "mid", "two", "two_apart"])
    one, two = "tile_m in tc.tile(M)", "tile_m, tile_n in tc.tile([M, N])"
    if kind == "row":
        w = rng.choice([1, 2, 3, 6, 8, 12, 33, 0])
        return ("M", w), ["T", w], "x[tile_m, :]", one
    if kind == "cube":
        a, c = rng.choice([1, 2, 3, 4, 5, 6]), rng.choice([1, 2, 3, 4, 6])
        return ("M", a, c), ["T", a, c], "x[tile_m, :, :]", one
    if kind == "col":
        a = rng.choice([1, 3, 4, 6, 12])
        return (a, "M"), [a, "T"], "x[:, tile_m]", one
    if kind == "mid":
        a, c = rng.choice([1, 3, 4, 5]), rng.choice([1, 2, 3, 12])
        return (a, "M", c), [a, "T", c], "x[:, tile_m, :]", one
    w = rng.choice([1, 3, 4, 6])
    if kind == "two":
        return ("M", "N", w), ["T", "U", w], "x[tile_m, tile_n, :]", two
    return ("M", w, "N"), ["T", w, "U"], "x[tile_m, :, tile_n]", two


def kernel_source(i: int, rng: random.Random) -> tuple[str, str, tuple, str]:
    """(kernel k{i}, its reference r{i}, the input's shape, its dtype)."""
    shape, dims, load, loop = setup(rng)
    dtype = rng.choice(["float32", "float32", "float16", "int32", "bool"])
    kernel, reference, dims = chain(rng, dims, dtype, rng.randint(1, 5))
    stored = ", ".join(TILES[d][0] if isinstance(d, str) else ":" for d in dims)
    n = shape.index("N") if "N" in shape else 0
    sizes = f"M = x.size({shape.index('M')})\n    N = x.size({n})"
    body = "".join(f"\n        {line}" for line in kernel)
    whole = "".join(f"\n    {line}" for line in reference)
    return (
        f"""
@tc.kernel
def k{i}(x: torch.Tensor, out: torch.Tensor) -> None:
    {sizes}
    for {loop}:
        v = {load}{body}
        out[{stored}] = v
""",
        f"""
def r{i}(x):
    {sizes}
    v = x{whole}
    return v
""",
        shape,
        dtype,
    )


@dataclass
class Case:
    i: int
    kernel: str
    reference: str
    shape: tuple  # of ints and "M"/"N"
    dtype: str
    sizes: dict[str, int]  # M and N
    layout: str  # of the input
    out_layout: str
    block_sizes: list[int] | None


def cases() -> list[Case]:
    rng = random.Random(SEED)
    drawn: list[Case] = []
    while len(drawn) < KERNELS:
        kernel, reference, shape, dtype = kernel_source(len(drawn), rng)
        sizes = {"M": rng.choice([0, 1, 5, 37]), "N": rng.choice([3, 9])}
        layout = rng.choice(["plain", "plain", "transposed", "stepped", "expanded"])
        out_layout = rng.choice(["plain", "plain", "permuted", "stepped"])
        tiles = 2 if "N" in shape else 1
        choices = [1, 2, 4, 16] if tiles == 2 else [1, 2, 4, 16, 64]
        blocks = [rng.choice(choices) for _ in range(tiles)] if rng.random() < 0.5 else None
        case = Case(len(drawn), kernel, reference, shape, dtype, sizes, layout, out_layout, blocks)
        if expected(case) is not None:  # not a -1 of no elements, which PyTorch cannot infer
            drawn.append(case)
    return drawn


def expected(case: Case) -> torch.Tensor | None:
    """The reference's result on the case's input (None where PyTorch refuses it)."""
    scope: dict = {"torch": torch}
    exec(case.reference, scope)
    try:
        return scope[f"r{case.i}"](make_input(case))
    except RuntimeError:
        return None


def make_input(case: Case) -> torch.Tensor:
    """Random values (a fifth special ones for floats) laid out as `case.layout` says."""
    g = torch.Generator().manual_seed(case.i)
    shape = tuple(case.sizes.get(d, d) for d in case.shape)

    def values(size: tuple) -> torch.Tensor:
        if case.dtype == "bool":
            return torch.rand(size, generator=g) < 0.5
        if case.dtype == "int32":
            return torch.randint(-6, 7, size, generator=g, dtype=torch.int32)
        x = torch.randn(size, generator=g) * 3
        pick = torch.randint(0, len(SPECIAL), size, generator=g)
        special = torch.rand(size, generator=g) < 0.2
        return torch.where(special, torch.tensor(SPECIAL)[pick], x).to(getattr(torch, case.dtype))

    if case.layout == "transposed":
        return values(shape[::-1]).permute(*reversed(range(len(shape))))
    if case.layout == "stepped":
        return values((*shape[:-1], shape[-1] * 2 + 1))[..., 1::2]
    if case.layout == "expanded" and 0 not in shape:  # the last dim read with stride 0
        return values((*shape[:-1], 1)).expand(*shape)
    return values(shape)


def output(case: Case, like: torch.Tensor) -> torch.Tensor:
    """An output for `like`, written through a permuted or stepped view."""
    if case.out_layout == "permuted" and like.dim() >= 2:
        flipped = torch.empty(like.shape[::-1], dtype=like.dtype)
        return flipped.permute(*reversed(range(like.dim())))
    if case.out_layout == "stepped" and like.dim() >= 1:
        wide = torch.empty(*like.shape[:-1], like.shape[-1] * 3 + 2, dtype=like.dtype)
        return wide[..., 2::3]
    return torch.empty_like(like)


def config(case: Case) -> tc.Config | None:
    return None if case.block_sizes is None else tc.Config(block_sizes=case.block_sizes)


CASES = cases()
# clear refusals, not wrong answers; InvalidConfig: a drawn block size whose regroup would
# need a one-hot product past Triton's largest tensor (seed 532, kernel 152: 64 rows for 1)
REFUSALS = (UnsupportedOperation, ShapeMismatch, DtypeError, InvalidConfig)


@pytest.fixture(scope="module")
def module(tmp_path_factory: pytest.TempPathFactory):
    source = "".join(c.kernel + c.reference for c in CASES)
    return load_kernels(tmp_path_factory, "fuzzed_views", source)


@pytest.mark.parametrize("case", CASES, ids=[f"k{c.i}" for c in CASES])
def test_random_view_chain_agrees_in_both_modes(module, case: Case) -> None:
    x = make_input(case).to(DEVICE)
    reference = getattr(module, f"r{case.i}")
    out = output(case, reference(x).cpu()).to(DEVICE)
    try:
        check_modes(
            getattr(module, f"k{case.i}"),
            (x, out),
            lambda x, out: (x, reference(x)),
            config=config(case),
        )
    except REFUSALS as e:  # a clear refusal
        pytest.skip(f"refused: {str(e).splitlines()[0]}")
    except LoweringError as e:  # on a GPU, tiles past its shared memory (seed 777, kernel
        if "OutOfResources" not in str(e):  # 185: [6, 16, 32, 16] float32 tiles need 2 MB)
            raise
        pytest.skip(f"too large for this GPU: {str(e).splitlines()[0]}")


def test_few_view_chains_are_refused(module) -> None:
    """The fuzzer covers what it means to: views of static dims, split or merged padded
    ones too, compile (a refusal is a skip above, which alone could never fail)."""
    refused = []
    for case in CASES[::5]:
        try:
            args = (make_input(case), output(case, expected(case)))
            getattr(module, f"k{case.i}").bind(args).compile(config(case))
        except REFUSALS as e:
            refused.append(f"k{case.i}: {str(e).splitlines()[0]}")
    assert len(refused) <= len(CASES[::5]) // 20, refused
