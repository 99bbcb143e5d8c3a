"""Differential fuzzing of dtype promotion and integer semantics: random expressions over
tiles of two drawn dtypes (float32 to bool, uint8 included), a broadcast row and host
scalars, run eagerly and under Triton's interpreter, against PyTorch.

A fuzzer like this found uint8 tiles compared with negative constants (Triton refused
them; PyTorch wraps the constant into the dtype), True + True == 2, and a where of int
constants whose cast to float was lost. Integer inputs are odd, so no division by zero
(which PyTorch raises on and a kernel cannot)."""

from __future__ import annotations

import random

import pytest
import torch
from conftest import DEVICE
from fuzzing import OneElementAtATime, load_kernels

from tilecraft.exc import DtypeError, UnsupportedOperation
from tilecraft.testing import check_modes

SEED = 7
KERNELS = 200
DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.int32, torch.int64, torch.int16]
DTYPES += [torch.int8, torch.uint8, torch.bool]
UNARY = [
    "torch.abs({})", "-{}", "({}).to(torch.float32)", "({}).to(torch.int32)",
    "({}).to(torch.float16)", "({}).to(torch.int8)", "({}).to(torch.uint8)", "({}).bool()",
    "(~{})", "torch.sign({})", "torch.square({})", "({} * 2)", "({} + 1)", "({} - 300)",
    "({} // 3)", "({} % 5)", "({} / 2)", "torch.clamp({}, -3, 100)", "({} >> 1)", "({} << 2)",
    "({}).long()", "torch.relu({})", "({}).half()", "torch.logical_not({})", "({} ** 2)",
    "(7 / {})", "torch.full_like({}, s)", "torch.clamp({}, min=s)", "({} % s)", "(s // {})",
    "torch.div(s, {})", "torch.div({}, s, rounding_mode='trunc')",
]  # fmt: skip
BINARY = [
    "({} + {})", "({} - {})", "({} * {})", "({} / {})", "({} // {})", "({} % {})",
    "(torch.maximum({}, {}) + 0)", "(torch.minimum({}, {}) + 0)", "({} & {})", "({} | {})",
    "({} ^ {})", "torch.where({} > {}, {}, {})", "({} == {})", "({} < {})",
    "torch.fmod({}, {})", "torch.logical_and({}, {})",
    "torch.div({}, {}, rounding_mode='trunc')", "torch.div({}, {}, rounding_mode='floor')",
    "torch.fmax({}, {})", "torch.div({}, {})",
]  # fmt: skip
LEAVES = ["a", "b", "c", "s", "n", "7", "-2", "0.5", "True"]
SHAPES = [(1, 1), (3, 5), (7, 33), (0, 4), (17, 9)]


def expression(rng: random.Random, depth: int) -> str:
    if depth == 0 or rng.random() < 0.3:
        return rng.choice(LEAVES)
    if rng.random() < 0.45:
        return rng.choice(UNARY).format(expression(rng, depth - 1))
    template = rng.choice(BINARY)
    return template.format(*(expression(rng, depth - 1) for _ in range(template.count("{}"))))


def values(g: torch.Generator, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """Random values of `dtype`: floats with a NaN or an infinity here and there, odd
    integers in the dtype's range, bools."""
    v = torch.randn(shape, generator=g) * 50
    if dtype.is_floating_point:
        special = torch.rand(shape, generator=g) < 0.1
        return torch.where(special, torch.tensor(float("inf")) * v.sign(), v).to(dtype)
    if dtype == torch.bool:
        return v > 0
    low, high = (0, 255) if dtype == torch.uint8 else (-127, 127)
    return (v.round().clamp(low, high).to(torch.int64) | 1).to(dtype)


def draw(i: int, rng: random.Random) -> tuple[str, list[torch.dtype], tuple[int, int]]:
    """An expression PyTorch takes at dtypes it computes in (not float64), its dtypes and
    a shape."""
    while True:
        expr, dtypes = expression(rng, rng.randint(1, 3)), [rng.choice(DTYPES) for _ in range(3)]
        shape = rng.choice(SHAPES)
        if "a" not in expr and "b" not in expr:
            continue
        try:  # (an integer division by a zero the expression made: PyTorch's CPU raises,
            # its CUDA kernels do not, so the draw runs on the CPU wherever the test runs)
            result = reference(expr, *inputs(i, dtypes, shape, "cpu"))
        except (TypeError, RuntimeError, ZeroDivisionError, AttributeError):
            continue
        if result.dtype != torch.float64:
            return expr, dtypes, shape


def reference(expr: str, x: torch.Tensor, y: torch.Tensor, z: torch.Tensor, s: float, n: int):
    scope = {"torch": torch, "a": x, "b": y, "c": z[None, :], "s": s, "n": n}
    with OneElementAtATime():  # (see its docstring)
        result = eval(expr, scope)
    return torch.broadcast_to(torch.as_tensor(result, device=x.device), x.shape)


def inputs(i: int, dtypes: list, shape: tuple[int, int], device: str = DEVICE) -> tuple:
    g = torch.Generator().manual_seed(i)
    x, y = (values(g, shape, d).to(device) for d in dtypes[:2])
    s = [-1.0, -0.5, 0.0, 0.5, 1.0, 0.1, -7.3][i % 7]  # (0.1 and -7.3 round at 16 bits)
    return x, y, values(g, shape[1:], dtypes[2]).to(device), s, i % 7 - 3


def cases() -> list[tuple[int, str, list[torch.dtype], tuple[int, int]]]:
    rng = random.Random(SEED)
    return [(i, *draw(i, rng)) for i in range(KERNELS)]


def kernel_source(i: int, expr: str) -> str:
    return f"""
@tc.kernel
def k{i}(x: torch.Tensor, y: torch.Tensor, z: torch.Tensor, s: float, n: int, out: torch.Tensor):
    for tile_m, tile_n in tc.tile(out.size()):
        a = x[tile_m, tile_n]
        b = y[tile_m, tile_n]
        c = z[tile_n][None, :]
        out[tile_m, tile_n] = {expr}
"""


@pytest.fixture(scope="module")
def module(tmp_path_factory: pytest.TempPathFactory):
    source = "".join(kernel_source(i, expr) for i, expr, _, _ in cases())
    return load_kernels(tmp_path_factory, "fuzzed_dtypes", source)


@pytest.mark.parametrize("i,expr,dtypes,shape", cases(), ids=[f"k{c[0]}" for c in cases()])
def test_random_mixed_dtype_expression_agrees_in_both_modes(module, i, expr, dtypes, shape) -> None:
    args = inputs(i, dtypes, shape)
    expected = reference(expr, *args)
    out = torch.empty(expected.shape, dtype=expected.dtype, device=DEVICE)
    tolerance = expected.dtype if expected.dtype.is_floating_point else None
    try:
        check_modes(
            getattr(module, f"k{i}"),
            (*args, out),
            lambda x, y, z, s, n, out: (x, y, z, reference(expr, x, y, z, s, n).to(out.dtype)),
            tolerance,
        )
    except (UnsupportedOperation, DtypeError) as e:  # a clear refusal, not a wrong answer
        pytest.skip(f"refused: {str(e).splitlines()[0]}")
