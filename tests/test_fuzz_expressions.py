"""Differential fuzzing: random expressions of PyTorch ops on tiles, compiled into kernels,
run eagerly and under Triton's interpreter, against PyTorch on the whole tensors.

The expressions are drawn from a fixed seed (so the run is repeatable) over ops, dtypes
and shapes; the inputs hold NaN, infinities and signed zeros. A fuzzer like this found
missing ops (atan2, lerp, leaky_relu, ...), log10 rounded twice, int constants that did
not wrap into uint8 tiles, True + True == 2, and a where of int constants stored as int
bits, and `2.0 / x` divided once where PyTorch multiplies by x's reciprocal. Ops whose
PyTorch CPU results depend on a tensor's length or are left open (gelu at inf,
softshrink's zeros, the sign of a tie of zeros in min and max, a NaN's sign bit in
copysign, a 16-bit -inf ** 0.5, nan_to_num's extremes, whose sums overflow or not by
the order of addition) are left out or made to give +0.0 (`+ 0.0`), and so are floor and
round of functions that libraries round an ulp apart (seed 411, kernel 371); see
test_mode_agreement.py for where PyTorch's kernels disagree.
"""

from __future__ import annotations

import random
import re

import pytest
import torch
from conftest import DEVICE
from fuzzing import OneElementAtATime, load_kernels

from tilecraft.exc import DtypeError, UnsupportedOperation
from tilecraft.testing import check_modes, run_mode

SEED = 2026
KERNELS = 400
UNARY = [
    "torch.exp({})", "torch.log({})", "torch.sqrt({})", "torch.abs({})", "-{}",
    "torch.sigmoid({})", "torch.tanh({})", "torch.relu({})", "torch.sin({})", "torch.floor({})",
    "torch.round({})", "torch.rsqrt({})", "torch.log1p({})", "torch.expm1({})", "torch.erf({})",
    "torch.reciprocal({})", "torch.sign({})", "({} ** 2)", "torch.square({})",
    "torch.nn.functional.silu({})", "torch.clamp({}, -2.0, 3.0)",
    "({}).to(torch.float16).to(torch.float32)", "torch.atan({})", "torch.log2({})",
    "torch.nn.functional.leaky_relu({}, 0.1)", "torch.nn.functional.elu({})", "torch.asinh({})",
    "torch.nn.functional.hardswish({})", "torch.log10({})", "torch.nn.functional.softplus({})",
    "torch.sinh({})", "torch.cosh({})", "torch.nn.functional.gelu({})", "torch.erfc({})",
    "torch.lgamma({})", "torch.digamma({})", "torch.erfinv(0.5 * torch.tanh({}))", "torch.i0({})",
    "torch.special.i1e({})", "torch.special.i0e({})", "torch.special.entr({})",
]  # fmt: skip
BINARY = [
    "({} + {})", "({} - {})", "({} * {})", "({} / {})", "(torch.maximum({}, {}) + 0.0)",
    "(torch.minimum({}, {}) + 0.0)", "torch.where({} > {}, {}, {})", "torch.atan2({}, {})",
    "torch.hypot({}, {})", "torch.lerp({}, {}, 0.3)", "torch.fmod({}, {})", "({} % {})",
    "torch.logaddexp({}, {})", "torch.xlogy({}, {})", "torch.special.xlog1py({}, {})",
]  # fmt: skip
CONSTANTS = ["2.0", "0.5", "-1.5", "3"]
# steps (floor, round) of a function that libraries round differently (an ulp apart: torch's
# CPU erf(3.858) is 1.0, the correctly rounded 0.99999994 the interpreter's; floor made it 1
# against 0) are not drawn, nor remainders of one (`fmod(cosh(b), 0.25)` of a cosh near
# 4000 an ulp apart differed by 2.4e-4: seed 2026, kernel 372), nor lgamma or digamma of
# one, whose poles turn an ulp into units (`lgamma(erf(b))` near -1: seed 579, kernel 189;
# PyTorch's own `lgamma(gelu(a))` differed from itself: gelu's far tail has few bits)
STEPS = {"torch.floor({})", "torch.round({})", "torch.lgamma({})", "torch.digamma({})"}
REMAINDERS = {"torch.fmod({}, {})", "({} % {})"}
INEXACT = re.compile(
    r"torch\.(exp|log|sigmoid|tanh|sin|cosh|rsqrt|expm1|erf|atan|asinh|hypot|lerp|xlogy|"
    r"lgamma|digamma|i0)|functional|special"
)
REDUCTIONS = [
    None,
    None,
    "({}).sum(-1)",
    "({}).amax(-1) + 0.0",  # (+ 0.0: of tied zeros PyTorch's CPU max picks either sign)
    "({}).mean(-1)",
    "torch.logsumexp({}, -1)",
]
SHAPES = [(1, 1), (3, 5), (7, 33), (0, 4), (17, 9)]
SPECIAL = [float("nan"), float("inf"), -float("inf"), 0.0, -0.0, 1.0, -2.0]


def expression(rng: random.Random, depth: int) -> str:
    """A random expression of the tiles `a` and `b` (and constants)."""
    if depth == 0 or rng.random() < 0.25:
        return rng.choice(["a", "b", "a", "b", *CONSTANTS])
    if rng.random() < 0.5:
        template, inner = rng.choice(UNARY), expression(rng, depth - 1)
        while template in STEPS and INEXACT.search(inner):  # (see the module's docstring)
            inner = expression(rng, depth - 1)
        return template.format(inner)
    template = rng.choice(BINARY)
    parts = [expression(rng, depth - 1) for _ in range(template.count("{}"))]
    while template in REMAINDERS and any(INEXACT.search(p) for p in parts):
        parts = [expression(rng, depth - 1) for _ in range(template.count("{}"))]
    if all(p in CONSTANTS for p in parts):
        parts[0] = "a"
    return template.format(*parts)


def kernel_source(i: int, expr: str, reduction: str | None) -> str:
    """Kernel `k{i}` (elementwise over 2-D tiles, or reducing each row) and its reference."""
    if reduction is None:
        loop = "for tile_m, tile_n in tc.tile(out.size()):"
        a, b, stored, value = "x[tile_m, tile_n]", "y[tile_m, tile_n]", "out[tile_m, tile_n]", expr
        whole = f"torch.broadcast_to(torch.as_tensor({expr}), x.shape)"
    else:
        loop = "for tile_m in tc.tile(x.size(0)):"
        a, b, stored, value = "x[tile_m, :]", "y[tile_m, :]", "out[tile_m]", reduction.format(expr)
        whole = reduction.format(f"torch.broadcast_to(torch.as_tensor({expr}), x.shape)")
    return f"""
@tc.kernel
def k{i}(x: torch.Tensor, y: torch.Tensor, out: torch.Tensor) -> None:
    {loop}
        a = {a}
        b = {b}
        {stored} = {value}


def r{i}(x, y):
    a, b = x, y
    return {whole}
"""


def valid(expr: str, reduction: str | None) -> bool:
    """Whether PyTorch takes `expr` (torch.exp(2.0) it does not) and gives a float32 tile."""
    if not re.search(r"\b[ab]\b", expr):  # a tile must be in it: constants stay numbers
        return False
    t = torch.ones(2, 3)
    try:
        value = torch.broadcast_to(
            torch.as_tensor(eval(expr, {"torch": torch, "a": t, "b": t})), t.shape
        )
        value = eval(reduction.format("v"), {"torch": torch, "v": value}) if reduction else value
    except (TypeError, RuntimeError, AttributeError):
        return False
    return value.dtype == torch.float32


def cases() -> list[tuple[int, str, str | None, tuple[int, int], torch.dtype]]:
    rng = random.Random(SEED)
    drawn = []
    for i in range(KERNELS):
        expr, reduction = expression(rng, rng.randint(1, 3)), rng.choice(REDUCTIONS)
        while not valid(expr, reduction):
            expr = expression(rng, rng.randint(1, 3))
        dtype = rng.choice([torch.float32, torch.float32, torch.float16, torch.bfloat16])
        shape = rng.choice(SHAPES)
        if reduction is not None and shape[1] == 0:
            shape = (shape[0], 3)
        drawn.append((i, expr, reduction, shape, dtype))
    return drawn


@pytest.fixture(scope="module")
def module(tmp_path_factory: pytest.TempPathFactory):
    source = "".join(kernel_source(i, e, r) for i, e, r, _, _ in cases())
    return load_kernels(tmp_path_factory, "fuzzed_expressions", source)


def inputs(i: int, shape: tuple[int, int], dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
    """Random values with a fifth of special ones."""
    g = torch.Generator().manual_seed(i)
    out = []
    for _ in range(2):
        x = torch.randn(shape, generator=g) * 3
        pick = torch.randint(0, len(SPECIAL), shape, generator=g)
        special = torch.rand(shape, generator=g) < 0.2
        out.append(torch.where(special, torch.tensor(SPECIAL)[pick], x).to(dtype).to(DEVICE))
    return tuple(out)


def _tolerance(inputs: torch.dtype, result: torch.dtype) -> torch.dtype:
    """The result's dtype, or the inputs' where they are 16-bit: every op rounds to them, so
    an ulp of float32 in a function (tanh, atan) can move a result by one of theirs, which
    a cast to float32 at the end does not shrink (seed 532, kernel 258: a bfloat16 tanh)."""
    return inputs if inputs in (torch.float16, torch.bfloat16) else result


@pytest.mark.parametrize("i,expr,reduction,shape,dtype", cases(), ids=[f"k{c[0]}" for c in cases()])
def test_random_expression_agrees_in_both_modes(module, i, expr, reduction, shape, dtype) -> None:
    x, y = inputs(i, shape, dtype)

    def reference(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        with OneElementAtATime():  # (see its docstring)
            return getattr(module, f"r{i}")(x, y)  # type: ignore[no-any-return]

    try:
        expected = reference(x, y)
    except RuntimeError:  # PyTorch refuses this dtype (a lerp of float16 and float32): so must we
        with pytest.raises((UnsupportedOperation, DtypeError)):
            out = torch.empty(shape if reduction is None else shape[:1], device=DEVICE)
            run_mode(getattr(module, f"k{i}"), (x, y, out), "triton")
        return
    out = torch.empty(expected.shape, dtype=expected.dtype, device=DEVICE)
    try:
        check_modes(
            getattr(module, f"k{i}"),
            (x, y, out),
            lambda x, y, out: (x, y, reference(x, y).to(out.dtype)),
            _tolerance(dtype, expected.dtype),
        )
    except (UnsupportedOperation, DtypeError) as e:  # a clear refusal, not a wrong answer
        pytest.skip(f"refused: {str(e).splitlines()[0]}")
