"""The Gluon forward's exponentials on the FMA units (`attention_exp2._exp2_asm`): its PTX,
run instruction by instruction in float32 by numpy, against 2^x in float64."""

from __future__ import annotations

import re

import numpy as np
import pytest

attention_exp2 = pytest.importorskip("tilecraft.nn.attention_exp2")

F32 = np.float32


def _bits(v: np.ndarray) -> np.ndarray:
    return v.astype(F32).view(np.uint32)


def _float(v: np.ndarray) -> np.ndarray:
    return v.astype(np.uint32).view(F32)


def _operand(regs: dict, token: str) -> np.ndarray:
    """A register's value or a PTX constant (`0fXXXXXXXX`, an integer) as uint32 bits."""
    if token.startswith("0f"):
        return np.uint32(int(token[2:], 16))
    if token in regs:
        return regs[token]
    return np.uint32(int(token))


def _fma(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """One rounding, as the hardware's: float64 holds a float32 product exactly."""
    exact = _float(a).astype(np.float64) * _float(b).astype(np.float64)
    return _bits((exact + _float(c).astype(np.float64)).astype(F32))


OPS = {
    "add.rn.f32": lambda a, b: _bits(_float(a) + _float(b)),
    "sub.rn.f32": lambda a, b: _bits(_float(a) - _float(b)),
    "fma.rn.ftz.f32": _fma,
    "shl.b32": lambda a, b: (a.astype(np.uint64) << np.uint64(b)).astype(np.uint32),
    "add.s32": lambda a, b: (a.astype(np.uint64) + b).astype(np.uint32),
    "setp.lt.f32": lambda a, b: _float(a) < _float(b),
    "selp.b32": lambda a, b, p: np.where(p, a, b).astype(np.uint32),
    "ex2.approx.ftz.f32": lambda a: _bits(np.exp2(_float(a).astype(np.float64))),
}


def run_ptx(asm: str, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """Run the straight-line PTX of `inline_asm_elementwise` (`$0..` outputs, then inputs)."""
    n = len(inputs)
    regs = {f"${n + i}": _bits(x) for i, x in enumerate(inputs)}
    with np.errstate(invalid="ignore"):  # inf - inf: NaN, as on the GPU
        for line in asm.split("\n"):
            _step(regs, line, len(inputs[0]))
    return [_float(regs[f"${i}"]) for i in range(n)]


def _step(regs: dict, line: str, size: int) -> None:
    """One instruction of the PTX (declarations and braces skipped)."""
    found = re.fullmatch(r"([a-z0-9.]+) (.+);", line.strip())
    if not found or line.startswith("."):
        return
    op, args = found[1], [a.strip() for a in found[2].split(",")]
    regs[args[0]] = np.broadcast_to(OPS[op](*(_operand(regs, a) for a in args[1:])), (size,))


@pytest.mark.parametrize("pack", [2, 4])
def test_the_fma_units_exponential_is_as_close_as_the_special_units(pack: int) -> None:
    """Within 1.7e-7 of 2^x relative on [-125, 0] (the unit's `ex2.approx` is within
    2^-22, 2.4e-7); exact at integers; 0 below -125 and for -inf; NaN kept."""
    rng = np.random.default_rng(0)
    x = np.concatenate([np.linspace(-125, 0, 400_001), -rng.random(100_000) * 8]).astype(F32)
    *first, last = run_ptx(attention_exp2._exp2_asm(pack), [x] * pack)
    assert all(np.array_equal(v, np.exp2(x.astype(np.float64)).astype(F32)) for v in first)
    assert np.abs(last / np.exp2(x.astype(np.float64)) - 1).max() < 1.7e-7
    special = np.array([0.0, -0.0, -1.0, -7.0, -125.0, -125.5, -1e30, -np.inf, np.nan], F32)
    got = run_ptx(attention_exp2._exp2_asm(pack), [special] * pack)[-1]
    want = [1.0, 1.0, 0.5, 2.0**-7, 2.0**-125, 0.0, 0.0, 0.0]
    assert got[:-1].tolist() == want and np.isnan(got[-1])
