"""Differential fuzzing of matrix products inside `tc.tile` loops: random kernels that
multiply tiles (`@`, `torch.mm`, `torch.matmul`, `addmm` with scales, `tc.dot`, an mm with an
output dtype, `bmm`, `baddbmm`), accumulate them over tiles of the inner dim or take the
whole of it, from operands loaded as they are or transposed, scaled or computed first, in
float32, bfloat16 and float16, run eagerly and under Triton's interpreter, against PyTorch
on the whole tensors.

Inputs are small integers (halves in float32 and float64; int8 products wrap as PyTorch's)
so that every partial sum is exact in each
dtype: any order of summation then gives PyTorch's answer, and the modes must agree on the
last bit. A twentieth of the elements are NaN or infinities (a product's NaN and infinities
do not depend on the order either). Sizes hold 0 and 1 and sizes that are not multiples of
the blocks (Triton's products need blocks of 16 or more). Where PyTorch refuses a product
(mixed operand dtypes), the compiled kernel must refuse by name.

Left out: the sign of a zero sum (`+ 0.0`): PyTorch's CPU products give -0.0 where every
term is -0.0 (`relu(a) @ -b`, one row), a sum started from +0.0 gives +0.0, as Triton's do;
and `addmm(..., alpha=0)`, where PyTorch's CPU kernels drop the product (float32 addmm) or
keep its NaN (bfloat16 addmm, baddbmm). A `beta` of 0 drops the accumulator, as documented.
"""

from __future__ import annotations

import random
from typing import Any

import pytest
import torch
from conftest import DEVICE
from fuzzing import load_kernels
from torch.overrides import TorchFunctionMode

import tilecraft as tc
from tilecraft.autotune.space import space_of
from tilecraft.exc import TilecraftError
from tilecraft.testing import check_modes, run_mode

SEED = 513
KERNELS = 200
SIZES = [0, 1, 2, 5, 16, 17, 33, 40]
HALVES = [torch.bfloat16, torch.float16]
DTYPES = [torch.float32, torch.float32, *HALVES, torch.float64, torch.int8]
# a step of the inner loop: the kernel's and the whole tensors' (A, B, acc0); "f" marks the
# steps that accumulate 16-bit operands in float32 (tilecraft's addmm and tc.dot do: PyTorch
# refuses a float32 accumulator with 16-bit operands, so the reference widens them)
STEPS = [
    ("acc + a @ b", "acc0 + A @ B"),
    ("acc + torch.mm(a, b)", "acc0 + torch.mm(A, B)"),
    ("acc + torch.matmul(a, b)", "acc0 + torch.matmul(A, B)"),
    ("torch.addmm(acc, a, b)", "torch.addmm(acc0, A.f, B.f)"),
    ("tc.dot(a, b, acc=acc)", "acc0 + A.f @ B.f"),
    ("acc + torch.mm(a, b, torch.float32)", "acc0 + A.f @ B.f"),
    ("acc + (a @ b).float()", "acc0 + (A @ B).float()"),
]
# the whole inner dim at once: c is a loaded [tm, tn] tile of the operands' dtype
WHOLE = [
    ("a @ b", "A @ B"),
    ("torch.addmm(c, a, b, beta={beta}, alpha={alpha})",
     "torch.addmm(C, A, B, beta={beta}, alpha={alpha})"),
    ("torch.relu(a) @ (b * 2)", "torch.relu(A) @ (B * 2)"),
    ("torch.mm(a, b, torch.float32) - c", "A.f @ B.f - C"),
]  # fmt: skip
BATCHED = [
    ("acc + torch.bmm(a, b)", "acc0 + torch.bmm(A, B)"),
    ("torch.baddbmm(acc, a, b)", "torch.baddbmm(acc0, A.f, B.f)"),
    ("acc + a @ b", "acc0 + A @ B"),
]
PRE = [("a", "A"), ("a * 2", "A * 2"), ("-a", "-A"), ("a.abs()", "A.abs()")]
SCALES = [1, 2, -1, 0.5, 0]  # beta only: an alpha of 0 is PyTorch's choice (see above)
ALPHAS = [1, 2, -1, 0.5]


def draw(rng: random.Random) -> dict:
    dtype = rng.choice(DTYPES)
    # int8 products wrap to int8 (PyTorch's): tile by tile, that is not the whole row's
    kind = "whole" if dtype == torch.int8 else rng.choice(["loop", "loop", "whole", "batched"])
    step = rng.choice({"loop": STEPS, "whole": WHOLE, "batched": BATCHED}[kind])
    scales = {"beta": rng.choice(SCALES), "alpha": rng.choice(ALPHAS)}
    pre = rng.choice(PRE)
    acc = torch.float32 if rng.random() < 0.7 or "float()" in step[0] else dtype
    if "acc0 + A.f" in step[1] or "A.f, B.f" in step[1]:
        acc = torch.float32  # (tc.dot and the widening steps take a float32 accumulator)
    mixed = rng.random() < 0.1 and ".f" not in step[1]  # PyTorch refuses: so must we
    flat = kind != "batched"
    return {
        "kind": kind,
        "dtype": dtype,
        "b_dtype": rng.choice(DTYPES) if mixed else dtype,
        "step": (step[0].format(**scales), step[1].format(**scales)),
        "pre": pre,
        "acc": acc,
        "a_transposed": flat and rng.random() < 0.3,
        "b_transposed": flat and rng.random() < 0.3,
        "sizes": [rng.choice(SIZES) for _ in range(3)],  # m, k, n
        "batch": rng.choice([1, 2, 3]),
    }


def operands(case: dict) -> tuple[str, str]:
    """The loads of a and b: a transposed operand is stored as its transpose and read back
    with `.T` (a [tk, tm] tile of an (k, m) tensor)."""
    k = "tk" if case["kind"] != "whole" else ":"
    a = f"x[{k}, tm].T" if case["a_transposed"] else f"x[tm, {k}]"
    b = f"y[tn, {k}].T" if case["b_transposed"] else f"y[{k}, tn]"
    if case["kind"] == "batched":
        a, b = f"x[tb, tm, {k}]", f"y[tb, {k}, tn]"
    return a, b


def kernel_source(i: int, case: dict) -> str:
    a, b = operands(case)
    pre, (step, whole_step) = case["pre"][0], case["step"]
    acc = str(case["acc"])
    if case["kind"] == "whole":
        body = f"""    for tm, tn in tc.tile([m, n]):
        a = {a}
        b = {b}
        c = z[tm, tn]
        a = {pre}
        out[tm, tn] = ({step}) + 0.0"""
    elif case["kind"] == "loop":
        body = f"""    for tm, tn in tc.tile([m, n]):
        acc = tc.zeros([tm, tn], dtype={acc})
        for tk in tc.tile(k):
            a = {a}
            b = {b}
            a = {pre}
            acc = {step}
        out[tm, tn] = acc + 0.0"""
    else:
        body = f"""    for tb, tm, tn in tc.tile([x.size(0), m, n]):
        acc = tc.zeros([tb, tm, tn], dtype={acc})
        for tk in tc.tile(k):
            a = {a}
            b = {b}
            a = {pre}
            acc = {step}
        out[tb, tm, tn] = acc + 0.0"""
    return f"""
@tc.kernel
def k{i}(
    x: torch.Tensor, y: torch.Tensor, z: torch.Tensor, out: torch.Tensor, m: int, k: int, n: int
) -> None:
{body}


def r{i}(A, B, C, acc0):
    A = {case["pre"][1]}
    return ({whole_step}) + 0.0
"""


def cases() -> list[dict]:
    rng = random.Random(SEED)
    return [draw(rng) for _ in range(KERNELS)]


@pytest.fixture(scope="module")
def module(tmp_path_factory: pytest.TempPathFactory):
    source = "".join(kernel_source(i, c) for i, c in enumerate(cases()))
    return load_kernels(tmp_path_factory, "fuzzed_products", source)


PRODUCTS = {torch.mm, torch.matmul, torch.bmm, torch.addmm, torch.baddbmm}
PRODUCTS |= {torch.Tensor.__matmul__, torch.Tensor.mm, torch.Tensor.matmul, torch.Tensor.bmm}


class ExactProducts(TorchFunctionMode):
    """The reference's products of 16-bit tensors computed in float32 and rounded once, as
    PyTorch's CUDA kernels and tilecraft's compute them: its CPU bfloat16 `mm` gave NaN
    for a row and column whose products were 1 * inf and inf * inf (seed 11, kernel 101).
    Operands of different dtypes are refused as PyTorch refuses them."""

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: Any = None):
        kwargs = kwargs or {}
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        half = [t.dtype for t in tensors if t.dtype in HALVES]
        if func not in PRODUCTS or not half:
            return func(*args, **kwargs)
        if len({t.dtype for t in tensors}) > 1:
            raise RuntimeError(f"{func.__name__}: operands of different dtypes")
        wide = [a.float() if isinstance(a, torch.Tensor) else a for a in args]
        return func(*wide, **kwargs).to(half[0])


class Widening(torch.Tensor):
    """A reference operand whose `.f` is its float32 copy (the steps that widen)."""

    @property
    def f(self) -> torch.Tensor:
        return self.float()


def values(shape: list[int], dtype: torch.dtype, g: torch.Generator) -> torch.Tensor:
    """Small integers (halves in float32; -1, 0 and 1 in 16 bits, where doubled operands'
    sums of 40 products stay within bfloat16's exact integers), a twentieth NaN or
    infinities."""
    if dtype == torch.int8:
        return torch.randint(-100, 101, shape, generator=g).to(dtype)
    if dtype in (torch.float32, torch.float64):
        x = torch.randint(-8, 9, shape, generator=g) / 2
    else:
        x = torch.randint(-1, 2, shape, generator=g).float()
    special = torch.tensor([float("nan"), float("inf"), -float("inf")])
    pick = torch.randint(0, 3, shape, generator=g)
    return torch.where(torch.rand(shape, generator=g) < 0.05, special[pick], x).to(dtype)


def inputs(i: int, case: dict) -> tuple:
    """The kernel's x, y, z (transposed operands stored transposed: views of contiguous
    tensors) and the reference's A, B, C as PyTorch multiplies them."""
    g = torch.Generator().manual_seed(i)
    m, k, n = case["sizes"]
    lead = [case["batch"]] if case["kind"] == "batched" else []
    a = values([*lead, m, k], case["dtype"], g)
    b = values([*lead, k, n], case["b_dtype"], g)
    c = values([m, n], case["dtype"], g)
    x = a.T.contiguous() if case["a_transposed"] else a  # the kernel reads x[tk, tm].T
    y = b.T.contiguous() if case["b_transposed"] else b  # and y[tn, tk].T
    return tuple(t.to(DEVICE) for t in (x, y, c, a, b))


def reference_of(module, i: int, case: dict):  # type: ignore[no-untyped-def]
    def reference(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        """On the CPU (PyTorch's CUDA kernels have no integer products), then moved."""
        m, _, n = case["sizes"]
        lead = [case["batch"]] if case["kind"] == "batched" else []
        acc0 = torch.zeros([*lead, m, n], dtype=case["acc"])
        wide = [t.cpu().as_subclass(Widening) for t in (a, b)]
        with ExactProducts():
            result = getattr(module, f"r{i}")(*wide, c.cpu(), acc0)
        return result.as_subclass(torch.Tensor).to(a.device)

    return reference


def prepared(module, i: int):  # type: ignore[no-untyped-def]
    """The kernel, its arguments (the output made as the reference's), the reference (None
    where PyTorch refuses) and a check for check_modes."""
    case = cases()[i]
    x, y, c, a, b = inputs(i, case)
    reference = reference_of(module, i, case)
    m, k, n = case["sizes"]
    try:
        expected = reference(a, b, c)
    except RuntimeError:
        expected = None
    shape, dtype = (expected.shape, expected.dtype) if expected is not None else ((0,), a.dtype)
    args = (x, y, c, torch.empty(shape, dtype=dtype, device=DEVICE), m, k, n)
    check = lambda x, y, c, out, m, k, n: (x, y, c, reference(a, b, c))  # noqa: E731
    return getattr(module, f"k{i}"), args, expected, check


@pytest.mark.parametrize("i", range(KERNELS), ids=[f"k{i}" for i in range(KERNELS)])
def test_random_product_agrees_in_both_modes(module, i: int) -> None:
    kernel, args, expected, check = prepared(module, i)
    if expected is None:  # PyTorch refuses: so must we
        with pytest.raises(TilecraftError):
            run_mode(kernel, args, "triton")
        return
    check_modes(kernel, args, check, expected.dtype)


@pytest.mark.parametrize("i", range(0, KERNELS, 4), ids=[f"k{i}" for i in range(0, KERNELS, 4)])
def test_random_product_at_a_random_config(module, i: int) -> None:
    """A quarter of the kernels again at a config drawn from their space (block sizes,
    stages, warps, orders): the same answers in both modes."""
    kernel, args, expected, check = prepared(module, i)
    if expected is None:
        pytest.skip("PyTorch refuses it (checked at the default config)")
    config = space_of(kernel.bind(args), on_gpu=False).random(random.Random(SEED + i))
    check_modes(kernel, args, check, expected.dtype, config=config)


@tc.kernel
def scaled_addmm(c: torch.Tensor, x: torch.Tensor, y: torch.Tensor, beta: float) -> torch.Tensor:
    out = torch.empty_like(c)
    for tm, tn in tc.tile(c.size()):
        out[tm, tn] = torch.addmm(c[tm, tn], x[tm, :], y[:, tn], beta=beta)
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("beta", [0, 1])
def test_addmm_rounds_once_and_a_beta_of_0_drops_the_accumulator(dtype, beta) -> None:
    """`addmm(c, a, b, beta=0)` ignores c, NaN included, as PyTorch documents (both modes
    multiplied it by 0: NaN); a bfloat16 c is added to the float32 product in float32 and
    rounded once (Triton's interpreter added the rounded product to c as their bits:
    -0.0 + 1.0 gave -1.0)."""
    c = torch.tensor([[float("nan"), -0.0], [-1.0, 3.0]], device=DEVICE).to(dtype)
    x = torch.tensor([[1.0], [1.0]], device=DEVICE).to(dtype)
    y = torch.tensor([[1.0, 257.0]], device=DEVICE).to(dtype)
    kept = c.float().nan_to_num(0.0 if beta == 0 else float("nan"))
    expected = beta * kept + x.float() @ y.float()
    check_modes(scaled_addmm, (c, x, y, beta), lambda c, x, y, beta: expected.to(dtype))


def test_integer_addmm_truncates_its_scales_as_pytorch() -> None:
    """PyTorch's int8 addmm takes `beta=0.5` as 0 and `alpha=1.5` as 1; both modes scaled
    in floats and truncated the result (products fuzzer, seed 11)."""
    c = torch.tensor([[10, -7], [3, 100]], dtype=torch.int8, device=DEVICE)
    x = torch.tensor([[3], [-5]], dtype=torch.int8, device=DEVICE)
    y = torch.tensor([[5, 7]], dtype=torch.int8, device=DEVICE)
    pytorch = lambda c, x, y, beta: torch.addmm(c.cpu(), x.cpu(), y.cpu(), beta=beta).to(DEVICE)  # noqa: E731
    for beta in (0.5, 1.5, -1.5):
        check_modes(scaled_addmm, (c, x, y, beta), pytorch)
