"""Ops on tiles against PyTorch: elementwise math, dtype promotion and reductions."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from conftest import DEVICE

import tilecraft as tc
from tilecraft.testing import assert_close

SHAPES = [(37, 19), (1, 300), (16, 64)]  # ragged, a single row, divisible
FLOATS = [torch.float32, torch.bfloat16]


def randn(shape: tuple[int, ...], dtype: torch.dtype = torch.float32, scale: float = 1.0):
    return (torch.randn(shape, device=DEVICE) * scale).to(dtype)


def nonzero(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """Values of both signs, away from zero, so `/ // %` are defined and exercise signs."""
    x = torch.randn(shape, device=DEVICE) * 4
    return torch.where(x.abs() < 1, torch.full_like(x, 1.5), x).to(dtype)


def dtype_id(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def shape_id(shape: tuple[int, ...]) -> str:
    return "x".join(map(str, shape))


# -- elementwise ---------------------------------------------------------------------------


@tc.kernel
def binary(x: torch.Tensor, y: torch.Tensor, op: str) -> torch.Tensor:
    out = torch.empty(x.shape, dtype=torch.promote_types(x.dtype, y.dtype), device=x.device)
    for tile in tc.tile(out.size()):
        a, b = x[tile], y[tile]
        if op == "+":
            r = a + b
        elif op == "-":
            r = a - b
        elif op == "*":
            r = a * b
        elif op == "/":
            r = a / b
        elif op == "//":
            r = a // b
        elif op == "%":
            r = a % b
        out[tile] = r
    return out


ARITHMETIC = {
    "+": lambda a, b: a + b,
    "-": lambda a, b: a - b,
    "*": lambda a, b: a * b,
    "/": lambda a, b: a / b,
    "//": lambda a, b: a // b,
    "%": lambda a, b: a % b,
}


# int / int is a float, but `binary` stores in the input dtype
ARITHMETIC_CASES = [
    (op, dtype)
    for op in ARITHMETIC
    for dtype in [*FLOATS, torch.int32]
    if dtype.is_floating_point or op != "/"
]


@pytest.mark.parametrize("shape", SHAPES[:2], ids=shape_id)
@pytest.mark.parametrize(
    ("op", "dtype"), ARITHMETIC_CASES, ids=[f"{o}-{dtype_id(d)}" for o, d in ARITHMETIC_CASES]
)
def test_arithmetic(op, dtype, shape, mode) -> None:
    x, y = nonzero(shape, dtype), nonzero(shape, dtype)
    assert_close(mode(binary)(x, y, op), ARITHMETIC[op](x, y), dtype)


@tc.kernel
def compare(x: torch.Tensor, y: torch.Tensor, op: str) -> tuple[torch.Tensor, torch.Tensor]:
    mask = torch.empty(x.shape, dtype=torch.bool, device=x.device)
    chosen = torch.empty_like(x)
    for tile in tc.tile(x.size()):
        a, b = x[tile], y[tile]
        if op == "<":
            c = a < b
        elif op == "<=":
            c = a <= b
        elif op == ">":
            c = a > b
        elif op == ">=":
            c = a >= b
        elif op == "==":
            c = a == b
        elif op == "!=":
            c = a != b
        mask[tile] = c
        chosen[tile] = torch.where(c, a, b)
    return mask, chosen


COMPARISONS = {
    "<": torch.lt,
    "<=": torch.le,
    ">": torch.gt,
    ">=": torch.ge,
    "==": torch.eq,
    "!=": torch.ne,
}


@pytest.mark.parametrize("shape", [(37, 19), (1, 1)], ids=shape_id)
@pytest.mark.parametrize("dtype", FLOATS, ids=dtype_id)
@pytest.mark.parametrize("op", COMPARISONS)
def test_comparison_and_where(op, dtype, shape, mode) -> None:
    x, y = randn(shape, dtype), randn(shape, dtype)
    y[::3] = x[::3]  # some ties, for == and <=
    expected = COMPARISONS[op](x, y)
    mask, chosen = mode(compare)(x, y, op)
    assert torch.equal(mask, expected)
    assert torch.equal(chosen, torch.where(expected, x, y))


def unary_kernel(fn) -> tc.Kernel:
    @tc.kernel
    def unary(x: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        for tile_m, tile_n in tc.tile(x.size()):
            out[tile_m, tile_n] = fn(x[tile_m, tile_n])
        return out

    return unary


UNARY = {
    "exp": torch.exp,
    "log": torch.log,
    "sqrt": torch.sqrt,
    "rsqrt": torch.rsqrt,
    "sigmoid": torch.sigmoid,
    "tanh": torch.tanh,
    "relu": torch.relu,
    "F.relu": F.relu,
    "gelu": F.gelu,
    "silu": F.silu,
    "abs": torch.abs,
    "neg": torch.neg,
}
UNARY_KERNELS = {name: unary_kernel(fn) for name, fn in UNARY.items()}
POSITIVE_ONLY = {"log", "sqrt", "rsqrt"}


@pytest.mark.parametrize("shape", SHAPES, ids=shape_id)
@pytest.mark.parametrize("dtype", [*FLOATS, torch.float16], ids=dtype_id)
@pytest.mark.parametrize("name", UNARY)
def test_unary(name, dtype, shape, mode) -> None:
    x = randn(shape, dtype, scale=2.0)
    if name in POSITIVE_ONLY:
        x = x.abs() + 0.1
    expected = UNARY[name](x.float()).to(dtype)
    assert_close(mode(UNARY_KERNELS[name])(x), expected, dtype)


@tc.kernel
def with_args(x: torch.Tensor, y: torch.Tensor, op: str) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in tc.tile(x.size()):
        a, b = x[tile], y[tile]
        if op == "gelu_tanh":
            r = F.gelu(a, approximate="tanh")
        elif op == "gelu_none":
            r = F.gelu(a, approximate="none")
        elif op == "maximum":
            r = torch.maximum(a, b)
        elif op == "minimum":
            r = torch.minimum(a, b)
        elif op == "pow2":
            r = a**2
        elif op == "pow3":
            r = torch.pow(a, 3)
        elif op == "pow0.5":
            r = a**0.5
        elif op == "pow1.7":
            r = a.pow(1.7)
        elif op == "clamp":
            r = torch.clamp(a, min=-0.5, max=0.5)
        elif op == "clamp_min":
            r = a.clamp(min=0.1)
        elif op == "rsub":
            r = 1.0 - a
        elif op == "rdiv":
            r = 1.0 / a
        out[tile] = r
    return out


WITH_ARGS = {
    "gelu_tanh": lambda a, b: F.gelu(a, approximate="tanh"),
    "gelu_none": lambda a, b: F.gelu(a),
    "maximum": torch.maximum,
    "minimum": torch.minimum,
    "pow2": lambda a, b: a**2,
    "pow3": lambda a, b: a**3,
    "pow0.5": lambda a, b: a**0.5,
    "pow1.7": lambda a, b: a**1.7,
    "clamp": lambda a, b: a.clamp(-0.5, 0.5),
    "clamp_min": lambda a, b: a.clamp(min=0.1),
    "rsub": lambda a, b: 1.0 - a,
    "rdiv": lambda a, b: 1.0 / a,
}


@pytest.mark.parametrize("shape", SHAPES[:2], ids=shape_id)
@pytest.mark.parametrize("dtype", [*FLOATS, torch.float16], ids=dtype_id)
@pytest.mark.parametrize("op", WITH_ARGS)
def test_ops_with_arguments(op, dtype, shape, mode) -> None:
    x, y = randn(shape, dtype), randn(shape, dtype)
    if op.startswith("pow") or op == "rdiv":
        x = x.abs() + 0.1
    expected = WITH_ARGS[op](x.float(), y.float()).to(dtype)
    assert_close(mode(with_args)(x, y, op), expected, dtype)


# -- dtypes --------------------------------------------------------------------------------


@tc.kernel
def promote(x: torch.Tensor, y: torch.Tensor, expected: torch.dtype, op: str) -> torch.Tensor:
    out = torch.empty(x.shape, dtype=expected, device=x.device)
    for tile in tc.tile(x.size()):
        r = 2.5 * x[tile] if op == "scalar*" else x[tile] + y[tile]
        assert r.dtype == expected  # the tile's own dtype, checked while compiling
        out[tile] = r
    return out


PROMOTIONS = [
    (torch.int32, torch.float32, "+"),
    (torch.bfloat16, torch.float32, "+"),
    (torch.float16, torch.bfloat16, "+"),
    (torch.int64, torch.int32, "+"),
    (torch.bfloat16, None, "scalar*"),
    (torch.float16, None, "scalar*"),
    (torch.int32, None, "scalar*"),
]


@pytest.mark.parametrize(("x_dtype", "y_dtype", "op"), PROMOTIONS, ids=str)
def test_dtype_promotion(x_dtype, y_dtype, op, mode) -> None:
    x = randn((37, 19), x_dtype, scale=5.0)
    y = randn((37, 19), y_dtype or x_dtype, scale=5.0)
    expected = 2.5 * x if op == "scalar*" else x + y
    out = mode(promote)(x, y, expected.dtype, op)
    assert out.dtype == expected.dtype
    assert_close(out, expected)


@tc.kernel
def cast(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    out = torch.empty(x.shape, dtype=dtype, device=x.device)
    for tile in tc.tile(x.size(0)):
        r = x[tile].to(dtype)
        assert r.dtype == dtype
        out[tile] = r
    return out


CASTS = [
    (torch.float32, torch.bfloat16),
    (torch.float32, torch.float16),
    (torch.float32, torch.int32),
    (torch.bfloat16, torch.float32),
    (torch.int32, torch.float32),
    (torch.int32, torch.bfloat16),
    (torch.bool, torch.float32),
    (torch.bool, torch.bfloat16),
    (torch.float32, torch.uint8),  # through int64, as PyTorch: -1.5 is 255, 300.7 is 44
    (torch.float16, torch.uint8),
    (torch.bfloat16, torch.uint8),
    (torch.float32, torch.int8),  # through int32, as PyTorch: 255.9 is -1, 300.7 is 44
    (torch.bfloat16, torch.int8),
    (torch.float16, torch.int16),
    (torch.float32, torch.int16),
]


@pytest.mark.parametrize(("src", "dst"), CASTS, ids=str)
def test_cast(src, dst, mode) -> None:
    x = randn((37,), scale=5.0)
    x[:6] = torch.tensor([-1.5, 255.9, 256.0, 300.7, -200.0, 1e4])
    x = x > 0 if src == torch.bool else x.to(src)
    # the interpreter rounds float32 -> bfloat16 toward zero: compare with a tolerance
    assert_close(mode(cast)(x, dst), x.to(dst), dst)
    for n in (0, 1):  # an empty tensor, and one element past the range (300.7 to int8: 44)
        assert_close(mode(cast)(x[3 : 3 + n], dst), x[3 : 3 + n].to(dst), dst)


# -- reductions ----------------------------------------------------------------------------


@tc.kernel
def row_reduce(x: torch.Tensor, op: str) -> torch.Tensor:
    m, n = x.size()
    out = torch.empty(m, dtype=torch.float32, device=x.device)
    for tile_m in tc.tile(m):
        row = x[tile_m, :]
        if op == "sum":
            r = row.sum(dim=1)
        elif op == "mean":
            r = torch.mean(row.to(torch.float32), dim=-1)
        elif op == "amax":
            r = torch.amax(row, dim=1)
        elif op == "amin":
            r = row.amin(dim=-1)
        elif op == "var":
            r = torch.var(row.to(torch.float32), dim=-1)
        elif op == "var_biased":
            r = row.to(torch.float32).var(dim=1, unbiased=False)
        elif op == "argmax":
            r = torch.argmax(row, dim=1)
        elif op == "argmin":
            r = row.argmin(dim=-1)
        elif op == "max_values":
            r = torch.max(row, dim=1)[0]
        elif op == "max_indices":
            values, indices = torch.max(row, 1)
            r = indices
        elif op == "min_values":
            r, _ = torch.min(row, dim=1)
        out[tile_m] = r.to(torch.float32)
    return out


ROW_REDUCTIONS = {
    "sum": lambda r: r.sum(1),
    "mean": lambda r: r.float().mean(-1),
    "amax": lambda r: r.amax(1),
    "amin": lambda r: r.amin(1),
    "var": lambda r: r.float().var(-1),
    "var_biased": lambda r: r.float().var(-1, unbiased=False),
    "argmax": lambda r: r.argmax(1),
    "argmin": lambda r: r.argmin(1),
    "max_values": lambda r: r.max(1)[0],
    "max_indices": lambda r: r.max(1)[1],
    "min_values": lambda r: r.min(1)[0],
}
ROW_SHAPES = [(37, 129), (1, 7), (16, 64)]


@pytest.mark.parametrize("shape", ROW_SHAPES, ids=shape_id)
@pytest.mark.parametrize("dtype", FLOATS, ids=dtype_id)
@pytest.mark.parametrize("op", ROW_REDUCTIONS)
def test_row_reduction(op, dtype, shape, mode) -> None:
    x = randn(shape, dtype)
    assert_close(mode(row_reduce)(x, op), ROW_REDUCTIONS[op](x).float(), dtype)


@tc.kernel
def row_map(x: torch.Tensor, op: str) -> torch.Tensor:
    m, n = x.size()
    out = torch.empty_like(x)
    for tile_m in tc.tile(m):
        row = x[tile_m, :]
        if op == "softmax":
            r = torch.softmax(row, dim=-1)
        elif op == "F.softmax":
            r = F.softmax(row, dim=1)
        elif op == "softmax_float32":
            r = torch.softmax(row, dim=-1, dtype=torch.float32)
        elif op == "log_softmax":
            r = torch.log_softmax(row, dim=1)
        elif op == "F.log_softmax":
            r = F.log_softmax(row.to(torch.float32), dim=-1)
        elif op == "var_keepdim":
            r = row - torch.var(row, dim=1, keepdim=True)
        elif op == "var_correction0":
            r = row - torch.var(row, dim=1, keepdim=True, correction=0)
        elif op == "mean_keepdim":
            r = row - row.mean(dim=-1, keepdim=True)
        elif op == "amax_keepdim":
            r = row - row.amax(1, keepdim=True)
        elif op == "sum_broadcast":
            r = row - row.sum(dim=1)[:, None]
        out[tile_m, :] = r.to(out.dtype)
    return out


ROW_MAPS = {
    "softmax": lambda r: torch.softmax(r, -1),
    "F.softmax": lambda r: F.softmax(r, 1),
    "softmax_float32": lambda r: torch.softmax(r, -1, dtype=torch.float32),
    "log_softmax": lambda r: torch.log_softmax(r, 1),
    "F.log_softmax": lambda r: F.log_softmax(r, -1),
    "var_keepdim": lambda r: r - r.var(1, keepdim=True),
    "var_correction0": lambda r: r - r.var(1, keepdim=True, correction=0),
    "mean_keepdim": lambda r: r - r.mean(-1, keepdim=True),
    "amax_keepdim": lambda r: r - r.amax(1, keepdim=True),
    "sum_broadcast": lambda r: r - r.sum(1)[:, None],
}


@pytest.mark.parametrize("shape", ROW_SHAPES, ids=shape_id)
@pytest.mark.parametrize("dtype", FLOATS, ids=dtype_id)
@pytest.mark.parametrize("op", ROW_MAPS)
def test_row_map(op, dtype, shape, mode) -> None:
    x = randn(shape, dtype)
    assert_close(mode(row_map)(x, op), ROW_MAPS[op](x.float()).to(dtype), dtype)


@tc.kernel
def row_max_named(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    m, n = x.size()
    values = torch.empty(m, dtype=x.dtype, device=x.device)
    indices = torch.empty(m, dtype=torch.int64, device=x.device)
    for tile_m in tc.tile(m):
        values[tile_m] = torch.max(x[tile_m, :], dim=1).values
        indices[tile_m] = torch.max(x[tile_m, :], dim=1).indices
    return values, indices


def test_max_named_fields(mode) -> None:
    x = randn((37, 129))
    assert_close(mode(row_max_named)(x), tuple(x.max(1)))


LOOPED = [(row_reduce, op, ROW_REDUCTIONS[op]) for op in ("sum", "amax", "argmax", "var", "mean")]
LOOPED += [(row_map, op, ROW_MAPS[op]) for op in ("softmax", "log_softmax", "var_keepdim")]


@pytest.mark.parametrize("chunk", [16, 64])
@pytest.mark.parametrize("shape", [(37, 129), (3, 300)], ids=shape_id)
@pytest.mark.parametrize("dtype", FLOATS, ids=dtype_id)
@pytest.mark.parametrize(("kernel", "op", "reference"), LOOPED, ids=[op for _, op, _ in LOOPED])
def test_reduction_loops_agree(kernel, op, reference, dtype, shape, chunk) -> None:
    """A row reduced in one block and in a loop over chunks gives the same result (Triton)."""
    x = randn(shape, dtype)
    whole = tc.kernel(kernel.fn, config=tc.Config(reduction_loops=[None]))(x, op)
    looped = tc.kernel(kernel.fn, config=tc.Config(reduction_loops=[chunk]))(x, op)
    assert_close(looped, whole, dtype)
    assert_close(whole, reference(x.float()).to(whole.dtype), dtype)


# -- matrix products -----------------------------------------------------------------------


@tc.kernel
def product(x: torch.Tensor, y: torch.Tensor, op: str) -> torch.Tensor:
    m, k = x.size()
    _, n = y.size()
    out = torch.empty([m, n], dtype=torch.float32, device=x.device)
    for tile_m, tile_n in tc.tile([m, n]):
        acc = tc.zeros([tile_m, tile_n], dtype=torch.float32)
        for tile_k in tc.tile(k):
            a, b = x[tile_m, tile_k], y[tile_k, tile_n]
            if op == "@":
                acc = acc + a @ b
            elif op == "matmul":
                acc = acc + torch.matmul(a, b)
            elif op == "mm":
                acc = acc + torch.mm(a, b)
            elif op == "addmm":
                acc = torch.addmm(acc, a, b)
            elif op == "tc.dot":
                acc = tc.dot(a, b, acc=acc)
        out[tile_m, tile_n] = acc
    return out


# `a @ b` of half-precision tiles is half precision (as in PyTorch), so only addmm and
# tc.dot accumulate low-precision inputs in float32
PRODUCTS = [(op, torch.float32) for op in ("@", "matmul", "mm", "addmm", "tc.dot")]
PRODUCTS += [(op, dtype) for op in ("addmm", "tc.dot") for dtype in (torch.bfloat16, torch.float16)]


@pytest.mark.parametrize("mkn", [(37, 19, 23), (1, 1, 1), (16, 64, 32)], ids=shape_id)
@pytest.mark.parametrize(("op", "dtype"), PRODUCTS, ids=[f"{o}-{dtype_id(d)}" for o, d in PRODUCTS])
def test_matrix_product(op, dtype, mkn, mode) -> None:
    m, k, n = mkn
    x, y = randn((m, k), dtype), randn((k, n), dtype)
    assert_close(mode(product)(x, y, op), x.float() @ y.float(), dtype)
