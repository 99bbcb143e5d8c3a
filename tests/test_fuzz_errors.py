"""Fuzzing bad input: random kernels with one wrong line (shapes that do not broadcast,
products of the wrong dims, dims out of range, ops of the wrong dtype or arity, Python the
DSL does not compile, names that do not exist), placed at a random point of a valid
kernel. Compiling one must raise a TilecraftError that names that line of the user's file,
never a raw Python, AST or Triton exception; where PyTorch refuses the line too, eager mode
must raise as well (it runs the line in PyTorch)."""

from __future__ import annotations

import random
import re

import pytest
import torch
from conftest import DEVICE
from fuzzing import load_kernels

from tilecraft.exc import TilecraftError
from tilecraft.testing import run_mode

SEED = 5
KERNELS = 120
# (the wrong line, whether PyTorch refuses it too: "cpu" on the CPU only, where an integer
# division by 0 raises; CUDA's gives -1); `a` is a [t, 7] float32 tile, `b` a
# [t, 5] int32 tile, `c` a [t] float32 tile. (Eagerly, `a[:, 9]` reads zeros: the tile of 9
# rows is cut short of its block, and eager mode cannot tell a tile's dims from the others.)
WRONG = [
    ("a = a + b", True), ("a = a @ a", True), ("a = torch.mm(a, b)", True),
    ("a = torch.matmul(a, b.T)", True), ("a = torch.sum(a, 5)", True),
    ("a = a.reshape(3, 3)", True), ("a = torch.cat([a, b])", True), ("a = a[:, 9]", False),
    ("a = a << 2", True), ("a = torch.bitwise_and(a, 1)", True), ("a = a + undefined_name", True),
    ("a = float(a)", True), ("b = b + 2 ** 70", True), ("a = a.foo", True),
    ("a = torch.where(a > 0, a)", True), ("a = torch.softmax(a)", True),
    ("a = torch.clamp(a)", True), ("a = a + y", True), ("a = a.expand(3, 7)", True),
    ("a = a.permute(0)", True), ("a = a.transpose(0, 2)", True), ("a = a.unsqueeze(5)", True),
    ("a = a.squeeze(3)", True), ("a = a + b.float().sum(1)", True), ("a = a.sum(dim=(1, 1))", True),
    ("a = torch.stack([a, b])", True), ("a = a[None, :, :, None] @ a", True),
    ("a = a.flip(4)", True), ("a = torch.gather(a, 1, c)", True),
    ("a = a.index_select(1, c)", True),
    ("a = a + torch.fft.fft(a).real", False), ("a = a.numpy()", False),
    ("a = a.to(torch.complex64).real", False), ("a = a + x", False), ("a = a[t]", False),
    ("a = a.tolist()", False), ("with open('/dev/null'):\n    a = a + 1", False),
    ("try:\n    a = a + 1\nexcept ValueError:\n    pass", False),
    ("a = torch.zeros(3, 7) + a", False), ("a = eval('a')", False),
    ("a = a.sum(1).item()", True), ("a = a.expand(-1, 14)", True),
    ("a = torch.where(c > 0, a, b)", True), ("a = a.repeat(2)", True),
    ("a = a.masked_fill(b > 0, 0.0)", True), ("a = a + 'text'", True), ("a = a + None", True),
    ("a = a.argmax(2)", True), ("a = a.topk(9, 1).values", True), ("a = torch.roll(a, 1, 3)", True),
    ("a = x[t, :, None, 0]", True), ("z[t] = a", True), ("b = b // 0", "cpu"), ("b = b % 0", "cpu"),
    ("a = torch.nonzero(a)", False), ("a = a[a > 0]", False), ("a = torch.unique(a)", False),
    ("a = torch.einsum('ij->ji', a)", False), ("a = torch.linalg.inv(a)", False),
    ("a = a[t, :]", False),
    ("while a > 0:\n    a = a - 1", False), ("return a", False), ("break", False),
    ("def f(*v):\n    return v[0]\na = f(a)", False), ("yield a", False),
    ("a, *rest = a", False), ("a = [v * 2 for v in a]", False), ("a = {a: 1}[a]", False),
    ("a = f'{a}'", False), ("a = a if a > 0 else b", True), ("a = (n := a) + n", False),
    ("a = sum(a)", False), ("a = len(a) + a", False),
    ("a = torch.tensor([1.0, 2.0]) + a", False), ("a = x[t, :] + x[t ** 2, :]", False),
    ("a = torch.randn(3)", False), ("import os", False), ("c = x[t, 9]", True),
    ("c = x[t, x.size(1)]", True), ("x[t, -8] = c", True),
]  # fmt: skip
# wrong lines of host code, before the loop (or the loop's own header)
HOST_WRONG = [
    ("m = x.size(5)", True), ("w = x.view(5, 5)", True), ("w = torch.empty(-1)", True),
    ("w = x + y", True), ("w = x @ y", True), ("m = x.size(0) + undefined_name", True),
    ("for t in tc.tile(x.size(0), block_size=3):", False), ("for t in tc.tile(1.5):", False),
    ("for t in tc.tile(x):", False), ("for t in tc.tile(x.size(0), x.size(1), 5, 7):", False),
]  # fmt: skip
VALID = ["a = a * 2", "c = c + 1", "a = a + c[:, None]", "b = b * 3", "a = torch.relu(a)"]
LOOP = "for t in tc.tile(x.size(0)):"
Case = tuple[list[str], int, str, bool | str, str]  # body, wrong line's place, it, refused, host


def body_lines(rng: random.Random) -> Case:
    """The loop body's lines, the wrong line's index among them (-1: the host line is the
    wrong one), its text, whether PyTorch refuses it, and the host line before the loop."""
    valid = rng.sample(VALID, 2)
    if rng.random() < 0.15:
        wrong, refused = rng.choice(HOST_WRONG)
        return valid, -1, wrong, refused, wrong
    wrong, refused = rng.choice(WRONG)
    at = rng.randrange(3)
    return [*valid[:at], wrong, *valid[at:]], at, wrong, refused, "scale = 2.0"


def cases() -> list[Case]:
    """KERNELS random kernels, then each wrong line once (between two valid ones)."""
    rng = random.Random(SEED)
    every = [([VALID[0], w, VALID[1]], 1, w, refused, "scale = 2.0") for w, refused in WRONG]
    every += [(VALID[:2], -1, w, refused, w) for w, refused in HOST_WRONG]
    return [body_lines(rng) for _ in range(KERNELS)] + every


def kernel_source(i: int, case: Case) -> str:
    lines, _, _, _, host = case
    body = "\n".join("        " + row for line in lines for row in line.splitlines())
    head = host if host.startswith("for ") else f"{host}\n    {LOOP}"
    return f"""
@tc.kernel
def e{i}(x: torch.Tensor, y: torch.Tensor, z: torch.Tensor, out: torch.Tensor) -> None:
    {head}
        a, b, c = x[t, :], y[t, :], z[t]
{body}
        out[t, :] = a + b[:, :1] + c[:, None]
"""


@pytest.fixture(scope="module")
def module(tmp_path_factory: pytest.TempPathFactory):
    source = "".join(kernel_source(i, c) for i, c in enumerate(cases()))
    return load_kernels(tmp_path_factory, "fuzzed_errors", source)


def wrong_line(module, i: int) -> int:  # type: ignore[no-untyped-def]
    """The wrong line's number in the generated module: the line after the kernel's `def`
    (host code), or after its host line, loop and loads, and the body lines before it."""
    with open(module.__file__) as f:
        text = f.read().splitlines()
    header = text.index(next(row for row in text if row.startswith(f"def e{i}(")))
    lines, at, _, _, host = cases()[i]
    if at < 0:
        return header + 2
    loop = 1 if host.startswith("for ") else 2
    return header + 1 + loop + 1 + sum(len(line.splitlines()) for line in lines[:at]) + 1


def arguments() -> tuple:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(9, 7, generator=g)
    y = torch.randint(-5, 5, (9, 5), generator=g, dtype=torch.int32)
    z = torch.randn(9, generator=g)
    return tuple(t.to(DEVICE) for t in (x, y, z, torch.empty(9, 7, device=DEVICE)))


@pytest.mark.parametrize("i", range(len(cases())), ids=[f"e{i}" for i in range(len(cases()))])
def test_a_wrong_line_is_refused_at_that_line(module, i: int) -> None:
    _, _, wrong, refused, _ = cases()[i]
    kernel = getattr(module, f"e{i}")
    with pytest.raises(TilecraftError) as info:
        run_mode(kernel, arguments(), "triton")
    error = info.value
    line = wrong_line(module, i)
    assert error.loc is not None and error.loc.lineno == line, (wrong, str(error))
    assert re.search(rf"line {line}\b", str(error)), str(error)
    if refused is True or (refused == "cpu" and torch.device(DEVICE).type == "cpu"):
        with pytest.raises(Exception):  # noqa: B017, PT011 - PyTorch's own error, any
            run_mode(kernel, arguments(), "eager")
