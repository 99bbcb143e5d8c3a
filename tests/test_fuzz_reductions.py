"""Differential fuzzing of reductions, scans and sorting inside `tc.tile` loops: random
kernels that load 2-D and 3-D tiles, tile one dim and reduce, scan or sort along another
(dims 0, 1, 2, -1, -2, tuples of two, keepdim either way), run eagerly and under Triton's
interpreter, against PyTorch on the whole tensors.

Inputs hold NaN, infinities, signed zeros and ties; shapes hold 0 and 1 and sizes that
are not multiples of the block sizes; integer and bool tiles check PyTorch's promotions
(sum/prod/cumsum of int8, uint8, bool give int64). Where PyTorch raises (amax over an
empty dim, var of an int tile, argmax of a bool tile), the compiled kernel must refuse by
name. A fuzzer like this found var/std/norm computing over int tiles, the inf norm of an
empty dim giving 0, argmax of bool tiles and topk(k=1) refusing a keepdim store.

Left out, where PyTorch's CPU kernels are self-inconsistent: the sign of a tie of zeros
in max/min/sort values (made +0.0 by `+ 0.0`), indices of ties in topk and unstable
sorts (those kernels get rows of distinct values), and the mean from var_mean/std_mean
of a row holding an infinity (PyTorch's Welford update gives inf when the infinity comes
last, NaN otherwise; torch.mean gives inf). That mean's zero sign is left out too (made
+0.0): Welford's running mean can end at -0.0 where torch.mean of the same row, a sum
from +0.0, gives +0.0 (seed 201, kernel 19: var_mean of a float16 column).
"""

from __future__ import annotations

import math
import random
from typing import Any

import pytest
import torch
from conftest import DEVICE
from fuzzing import load_kernels

import tilecraft as tc
from tilecraft.autotune.space import space_of
from tilecraft.exc import TilecraftError
from tilecraft.testing import check_modes, run_mode

SEED = 7
KERNELS = 260
REDUCTIONS = [
    "{a}.sum({d}, keepdim={k})", "torch.sum({a}, {d})", "{a}.sum({d}, dtype=torch.float32)",
    "{a}.mean({d}, keepdim={k})", "{a}.prod({d}, keepdim={k})", "{a}.amax({d}, keepdim={k})",
    "torch.amin({a}, {d}, {k})", "torch.logsumexp({a}, {d}, keepdim={k})",
    "{a}.var({d}, correction={c}, keepdim={k})", "torch.std({a}, dim={d}, correction={c})",
    "{a}.any({d}, keepdim={k})", "torch.all({a}, {d})", "torch.norm({a}, dim={d}, keepdim={k})",
    "torch.linalg.vector_norm({a}, ord=float('inf'), dim={d})", "{a}.norm(1, dim={d})",
    "{a}.nansum({d})", "torch.nanmean({a}, {d})", "torch.count_nonzero({a}, {d})",
    "torch.var_mean({a}, {d})[1]", "torch.std_mean({a}, {d}, correction={c})[0]",
]  # fmt: skip
ONE_DIM = [  # one dim only
    "{a}.max({d}, keepdim={k}).values", "{a}.max({d}, keepdim={k}).indices",
    "torch.min({a}, dim={d}, keepdim={k})[0]", "{a}.min({d}).indices",
    "{a}.argmax({d}, keepdim={k})", "torch.argmin({a}, {d})",
    "torch.cumsum({a}, {d})", "{a}.cumprod({d})", "torch.cummax({a}, {d}).values",
    "torch.cummax({a}, {d}).indices", "torch.cummin({a}, dim={d})[0]", "{a}.cummin({d})[1]",
    "torch.logcumsumexp({a}, {d})",
]  # fmt: skip
SORTS = [  # along the last dim
    "torch.sort({a}, {d}).values", "torch.sort({a}, dim={d}, stable=True).indices",
    "torch.sort({a}, dim={d}, descending=True, stable=True)[1]",
    "torch.topk({a}, {n}, {d}).values", "torch.topk({a}, {n}, dim={d}, largest=False)[0]",
    "torch.topk({a}, {n}, {d})[1]",
]  # fmt: skip
BY_INDEX = ("indices", "[1]", "argm")
DTYPES = [torch.float32, torch.float32, torch.float16, torch.bfloat16, torch.int32, torch.int8,
          torch.uint8, torch.int64, torch.bool]  # fmt: skip
PRE = ["a", "a", "a", "(a * 2)", "(-a)", "a.float()"]
SIZES = [0, 1, 2, 3, 5, 7, 17, 33]


def dims_and_tiled(rng: random.Random, rank: int, template: str) -> tuple[object, int]:
    """The dim(s) `template` works along and the dim the loop tiles (never one of them)."""
    if template in SORTS:
        return rng.choice([-1, rank - 1]), rng.randrange(rank - 1)
    dim = rng.randrange(rank)
    tiled = rng.choice([t for t in range(rank) if t != dim])
    several = rank == 3 and template in REDUCTIONS and rng.random() < 0.3
    if several and ".prod(" not in template:  # (PyTorch's prod takes one dim)
        return tuple(d - rng.choice([0, rank]) for d in range(rank) if d != tiled), tiled
    return dim - rng.choice([0, rank]), tiled


def draw(rng: random.Random) -> dict:
    """One kernel's expression, shape, tiled dim and dtype."""
    template = rng.choice(REDUCTIONS + ONE_DIM + SORTS)
    rank = rng.choice([2, 2, 3])
    dim, tiled = dims_and_tiled(rng, rank, template)
    dtype = rng.choice(DTYPES)
    pre = rng.choice(PRE if template not in SORTS else ["a", "(a * 2)", "a.float()"])
    if dtype == torch.bool and pre == "(-a)":  # PyTorch refuses it (an elementwise matter)
        pre = "a"
    expr = template.format(
        a=pre, d=dim, k=rng.random() < 0.5, c=rng.choice([0, 1, 2]), n=rng.choice([1, 2, 3])
    )
    valued = "max" in expr or "min" in expr or template in SORTS
    valued = valued and not any(w in expr for w in BY_INDEX) or "_mean(" in expr
    if dtype.is_floating_point and valued:
        expr = f"({expr}) + 0.0"  # of tied zeros PyTorch's CPU kernels pick either sign
    shape = [rng.choice(SIZES) for _ in range(rank)]
    distinct = template in SORTS and any(w in expr for w in BY_INDEX)
    if distinct and dtype == torch.bool:  # (a row of bools cannot be distinct: seed 37's
        dtype = torch.int32  # topk indices of tied values were PyTorch's choice)
    return {"expr": expr, "shape": shape, "tiled": tiled, "dtype": dtype, "distinct": distinct}


def stored_at(expr: str, rank: int, tiled: int) -> str | None:
    """The subscript that stores the result: the tiled dim's place in it, found by running
    `expr` on a tensor whose tiled dim alone has length 97."""
    shape = [4] * rank
    shape[tiled] = 97
    result = eval(expr, {"torch": torch, "a": torch.zeros(shape)})
    places = [i for i, n in enumerate(result.shape) if n == 97]
    return ", ".join("t" if i == places[0] else ":" for i in range(result.dim()))


def kernel_source(i: int, case: dict) -> str:
    rank, tiled, expr = len(case["shape"]), case["tiled"], case["expr"]
    load = ", ".join("t" if j == tiled else ":" for j in range(rank))
    return f"""
@tc.kernel
def k{i}(x: torch.Tensor, out: torch.Tensor) -> None:
    for t in tc.tile(x.size({tiled})):
        a = x[{load}]
        out[{stored_at(expr, rank, tiled)}] = {expr}


def r{i}(x):
    a = x
    return {expr}
"""


def cases() -> list[dict]:
    rng = random.Random(SEED)
    return [draw(rng) for _ in range(KERNELS)]


@pytest.fixture(scope="module")
def module(tmp_path_factory: pytest.TempPathFactory):
    source = "".join(kernel_source(i, c) for i, c in enumerate(cases()))
    return load_kernels(tmp_path_factory, "fuzzed_reductions", source)


def inputs(i: int, case: dict) -> torch.Tensor:
    """Values with ties and a sixth of NaN, infinities and signed zeros; small integers;
    rows of distinct values (one NaN and one inf in half of them) for sorts' indices."""
    g = torch.Generator().manual_seed(i)
    shape, dtype = case["shape"], case["dtype"]
    if dtype == torch.bool:
        return (torch.rand(shape, generator=g) < 0.6).to(DEVICE)
    if case["distinct"]:
        x = torch.argsort(torch.rand(shape, generator=g), dim=-1).float()
        if dtype.is_floating_point and shape[-1] > 3:
            x[..., 0], x[..., -2] = float("inf"), float("nan")
        return x.to(dtype).to(DEVICE)
    if not dtype.is_floating_point:
        return (
            torch.randint(0 if dtype == torch.uint8 else -3, 4, shape, generator=g)
            .to(dtype)
            .to(DEVICE)
        )
    x = (torch.randn(shape, generator=g) * 2).round() / 2
    # (a leading -0.0's logcumsumexp: PyTorch's CPU kernel gives +0.0, its CUDA kernel
    # -0.0 on a column's slice and +0.0 on the whole tensor)
    if "logcumsumexp" in case["expr"]:
        x = x + 0.0  # (rounding made -0.0s too)
    special = [float("nan"), 0.0] + ([] if "logcumsumexp" in case["expr"] else [-0.0])
    if "_mean(" not in case["expr"]:
        special += [float("inf"), -float("inf")]
    pick = torch.randint(0, len(special), shape, generator=g)
    chosen = torch.rand(shape, generator=g) < 0.16
    return torch.where(chosen, torch.tensor(special)[pick], x).to(dtype).to(DEVICE)


def _reference(reference: Any, x: torch.Tensor, expr: str) -> torch.Tensor:
    """PyTorch's answer on the test device, but for two of its CUDA kernels' departures
    from its CPU ones and its documentation, taken on the CPU: a stable sort of a few
    elements put a NaN first on an H100 (torch 2.11), and an empty int64 tensor's
    logcumsumexp passes there (every non-empty one is refused)."""
    if x.device.type != "cpu" and ("sort" in expr or x.numel() == 0):
        return reference(x.cpu()).to(x.device)
    return reference(x)


@pytest.mark.parametrize("i", range(KERNELS), ids=[f"k{i}" for i in range(KERNELS)])
def test_random_reduction_agrees_in_both_modes(module, i: int) -> None:
    case = cases()[i]
    kernel, reference = getattr(module, f"k{i}"), getattr(module, f"r{i}")
    x = inputs(i, case)
    try:
        expected = _reference(reference, x, case["expr"])
    except (RuntimeError, IndexError, NotImplementedError):  # PyTorch refuses: so must we
        with pytest.raises(TilecraftError):
            run_mode(kernel, (x, torch.empty(0, device=DEVICE)), "triton")
        return
    out = torch.empty(expected.shape, dtype=expected.dtype, device=DEVICE)
    check = lambda x, out: (x, _reference(reference, x, case["expr"]))  # noqa: E731
    check_modes(kernel, (x, out), check, expected.dtype)


@pytest.mark.parametrize("i", range(0, KERNELS, 4), ids=[f"k{i}" for i in range(0, KERNELS, 4)])
def test_random_reduction_at_a_random_config(module, i: int) -> None:
    """A quarter of the kernels again at a config drawn from their space (block sizes,
    reduction loops, orders): eager mode tiles as the config does (without reduction
    loops, which it does not model), compiled code must give the same answers."""
    case = cases()[i]
    kernel, reference = getattr(module, f"k{i}"), getattr(module, f"r{i}")
    x = inputs(i, case)
    try:
        expected = _reference(reference, x, case["expr"])
    except (RuntimeError, IndexError, NotImplementedError):
        pytest.skip("PyTorch refuses it (checked at the default config)")
    out = torch.empty(expected.shape, dtype=expected.dtype, device=DEVICE)
    config = space_of(kernel.bind((x, out)), on_gpu=False).random(random.Random(SEED + i))
    modes = ["triton"] if config.reduction_loops else ["eager", "triton"]
    check = lambda x, out: (x, _reference(reference, x, case["expr"]))  # noqa: E731
    check_modes(kernel, (x, out), check, expected.dtype, config=config, modes=modes)


@tc.kernel
def row_reduce(x: torch.Tensor, out: torch.Tensor, name: str) -> None:
    fn = PINNED[name]
    for t in tc.tile(x.size(0)):
        out[t, :] = fn(x[t, :])


PINNED = {
    "var": lambda r: r.var(1, keepdim=True),
    "std": lambda r: torch.std(r, dim=-1, keepdim=True),
    "var_mean": lambda r: torch.var_mean(r, 1, keepdim=True)[0],
    "norm": lambda r: r.norm(dim=1, keepdim=True),
    "norminf": lambda r: torch.linalg.vector_norm(r, ord=float("inf"), dim=1, keepdim=True),
    "norm-1": lambda r: r.norm(-1, dim=1, keepdim=True),
    "argmax": lambda r: r.argmax(1, keepdim=True),
    "top1": lambda r: torch.topk(r, 1, -1).values,
    "top1_index": lambda r: torch.topk(r, 1, -1, largest=False).indices,
}


@pytest.mark.parametrize(
    "name,dtype,width",
    [("var", torch.int32, 5), ("std", torch.int8, 5), ("var_mean", torch.bool, 5),
     ("norm", torch.int64, 5), ("norminf", torch.float32, 0), ("norm-1", torch.float32, 0),
     ("argmax", torch.bool, 5)],
)  # fmt: skip
def test_what_pytorch_refuses_is_refused_by_name(name: str, dtype: torch.dtype, width: int):
    """These computed an answer (var of ints as floats, the inf norm of no elements as 0)."""
    x = torch.ones(3, width, device=DEVICE).to(dtype)
    with pytest.raises(RuntimeError):
        PINNED[name](x)
    with pytest.raises(TilecraftError, match="PyTorch|cast it") as info:
        run_mode(row_reduce, (x, torch.empty(3, 1, device=DEVICE), name), "triton")
    assert "lambda r:" in str(info.value)  # the user's line


@pytest.mark.parametrize("name", ["top1", "top1_index"])
def test_topk_of_one_stores_into_a_dim_of_one(name: str) -> None:
    """topk(k=1) gave a dim of its own that no store of a dim of 1 took."""
    x = torch.tensor([[1.0, float("nan"), 3.0], [2.0, 5.0, 5.0]], device=DEVICE)
    expected = PINNED[name](x)
    out = torch.empty(expected.shape, dtype=expected.dtype, device=DEVICE)
    check_modes(row_reduce, (x, out, name), lambda x, out, n: (x, PINNED[n](x)))


@tc.kernel
def row_logcumsumexp(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for t in tc.tile(x.size(0)):
        out[t, :] = torch.logcumsumexp(x[t, :], -1)
    return out


CHUNKED = tc.Config(block_sizes=[2], reduction_loops=[8])


@pytest.mark.parametrize("config", [tc.Config(block_sizes=[2]), CHUNKED])
def test_logcumsumexp_keeps_small_leading_terms_nan_and_infinities(config) -> None:
    """Not log(cumsum(exp(x - max))): its early terms underflow (log 0 = -inf where PyTorch
    gives 0.0). A leading -0.0 comes out +0.0 as PyTorch's (it starts from -inf)."""
    rows = [[0.0, -1000.0, 1000.0], [-0.0, 1.0, 2.0], [1.0, math.nan, 2.0], [math.inf, 1.0, 3.0],
            [-math.inf, -math.inf, 0.0], [math.inf, -math.inf, 1.0]]  # fmt: skip
    x = torch.tensor(rows, device=DEVICE).repeat(1, 13)  # 39 wide: chunks of 8 and a ragged one
    modes = ["triton"] if config.reduction_loops else ["eager", "triton"]
    check_modes(row_logcumsumexp, (x,), lambda x: torch.logcumsumexp(x, -1), config=config,
                modes=modes)  # fmt: skip


def test_logcumsumexp_of_an_int_tile_is_refused() -> None:
    x = torch.ones(3, 4, dtype=torch.int32, device=DEVICE)
    with pytest.raises(TilecraftError, match="logcumsumexp of a torch.int32 tile"):
        run_mode(row_logcumsumexp, (x,), "triton")


# -- indexing: host views sliced before the loops, gathers through loaded and computed
# index tiles (from memory, and within a loaded tile), negative ints, masked loads; each
# followed by a reduction, scan or sort
HOST_VIEWS = ["x", "x[:, 1:]", "x[..., ::2]", "x[:, -3:]", "x[1:, :]", "x[::2]", "x[:, 1::3]",
              "x[-2:]", "x.T", "x[:, 2:5]", "x.t()[1:]"]  # fmt: skip
LOADS = [  # (the tile `a` over rows t of y, n wide; the same of the whole tensor)
    ("y[t, :]", "y"),
    ("y[rid[t], :]", "y[rid]"),
    ("y[t, cid[:]]", "y[:, cid]"),
    ("y[t, (tc.arange(n) * 3 + 1) % n]", "y[:, (torch.arange(n, device=y.device) * 3 + 1) % n]"),
    ("y[t, n - 1 - tc.arange(n)]", "y[:, n - 1 - torch.arange(n, device=y.device)]"),
    ("y[t, -n][:, None] + y[t, 1 - n :]", "y[:, -n][:, None] + y[:, 1 - n :]"),
    ("y[t, :] * y[t, -1][:, None]", "y * y[:, -1][:, None]"),
    ("y[rid[t][:, None], cid[:][None, :]]", "y[rid][:, cid]"),
    ("tc.load(y, [t, tc.arange(n)], extra_mask=(tc.arange(n) % 2 == 0)[None, :], other=-1.5)",
     "torch.where((torch.arange(n, device=y.device) % 2 == 0)[None, :], y, -1.5)"),
    ("y[t, :][:, cid[:]]", "y[:, cid]"),  # gathers within the loaded tile
    ("torch.index_select(y[t, :], 1, cid[:])", "y[:, cid]"),
    ("torch.gather(y[t, :], 1, y[t, :].argsort(dim=1, stable=True))",
     "torch.gather(y, 1, y.argsort(dim=1, stable=True))"),
]  # fmt: skip
AFTER = ["{a}", "{a}.sum(-1)", "{a}.amax(-1) + 0.0", "torch.cumsum({a}, -1)", "{a}.argmax(-1)",
         "torch.sort({a}, -1)[0] + 0.0", "{a}.mean(-1, keepdim=True)",
         "torch.logcumsumexp({a}, 1)"]  # fmt: skip
INDEXED = 60


def indexed_cases() -> list[tuple[str, tuple[str, str], str, tuple[int, int]]]:
    rng = random.Random(SEED)
    draws = []
    while len(draws) < INDEXED:
        view, load, after = rng.choice(HOST_VIEWS), rng.choice(LOADS), rng.choice(AFTER)
        shape = (rng.choice([1, 2, 5, 9]), rng.choice([2, 6, 11]))
        if min(eval(view, {"x": torch.empty(shape)}).shape):  # no empty views: y[t, -n]
            draws.append((view, load, after, shape))
    return draws


def indexed_source(i: int, view: str, load: tuple[str, str], after: str) -> str:
    rows = "rid.size(0)" if "rid[t]" in load[0] else "y.size(0)"
    whole = after == "{a}" or any(w in after for w in ("keepdim", "cum", "sort"))
    return f"""
@tc.kernel
def g{i}(x: torch.Tensor, rid: torch.Tensor, cid: torch.Tensor, out: torch.Tensor) -> None:
    y = {view}
    n = y.size(1)
    for t in tc.tile({rows}):
        a = {load[0]}
        out[t{", :" if whole else ""}] = {after.format(a="a")}


def q{i}(x, rid, cid):
    y = {view}
    n = y.size(1)
    a = {load[1]}
    return {after.format(a="a")}
"""


@pytest.fixture(scope="module")
def indexed(tmp_path_factory: pytest.TempPathFactory):
    source = "".join(indexed_source(i, *c[:3]) for i, c in enumerate(indexed_cases()))
    return load_kernels(tmp_path_factory, "fuzzed_indexing", source)


@pytest.mark.parametrize("i", range(INDEXED), ids=[f"g{i}" for i in range(INDEXED)])
def test_random_indexing_agrees_in_both_modes(indexed, i: int) -> None:
    view, _, _, shape = indexed_cases()[i]
    g = torch.Generator().manual_seed(i)
    x = torch.randn(shape, generator=g)
    x[torch.rand(shape, generator=g) < 0.1] = math.nan
    y = eval(view, {"x": x})
    rid = torch.randint(0, y.size(0), (1 + i % 7,), generator=g)
    cid = torch.randint(0, y.size(1), (y.size(1),), generator=g)
    x, rid, cid = x.to(DEVICE), rid.to(DEVICE), cid.to(DEVICE)
    reference = getattr(indexed, f"q{i}")
    expected = reference(x, rid, cid)
    out = torch.empty(expected.shape, dtype=expected.dtype, device=DEVICE)
    check_modes(
        getattr(indexed, f"g{i}"),
        (x, rid, cid, out),
        lambda x, rid, cid, out: (x, rid, cid, reference(x, rid, cid)),
        expected.dtype,
    )
