"""Products and sums round as PyTorch's ops round them: once where PyTorch's own kernel
fuses a multiply and an add (addcmul, lerp), twice everywhere else (no FMA contraction)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from conftest import DEVICE

import tilecraft as tc
from tilecraft.testing import MODES, run_mode


@tc.kernel
def fused_ops(x: torch.Tensor, y: torch.Tensor, w: torch.Tensor, out: torch.Tensor) -> None:
    for t in tc.tile(x.size(0)):
        out[0, t] = torch.lerp(x[t], y[t], 0.3)
        out[1, t] = torch.lerp(x[t], y[t], 0.7)
        out[2, t] = torch.lerp(x[t], y[t], w[t])
        out[3, t] = torch.addcmul(x[t], y[t], w[t], value=0.1)
        out[4, t] = torch.addcmul(x[t], y[t], w[t])
        out[5, t] = torch.addcdiv(x[t], y[t], w[t], value=0.1)
        out[6, t] = torch.addcdiv(x[t], y[t], w[t])


def _fused_reference(x, y, w, out):  # type: ignore[no-untyped-def]
    rows = [
        torch.lerp(x, y, 0.3),
        torch.lerp(x, y, 0.7),
        torch.lerp(x, y, w),
        torch.addcmul(x, y, w, value=0.1),
        torch.addcmul(x, y, w),
        torch.addcdiv(x, y, w, value=0.1),
        torch.addcdiv(x, y, w),
    ]
    return torch.stack(rows)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("n", [1000, 1, 0])
def test_lerp_and_addcmul_round_once_as_pytorch(dtype: torch.dtype, n: int) -> None:
    """Rounded twice (a product, then a sum), lerp differed from PyTorch in a quarter of
    float32 values and addcmul in 5%: PyTorch's kernels fuse them (its CPU vector code
    calls fmadd; its CUDA kernels call fma, as value * (t1 * t2) + x unless value is 1).
    Bit for bit, in both modes, with infinities and NaN among the inputs; addcdiv too."""
    gen = torch.Generator().manual_seed(1)
    x, y = (torch.randn(n, generator=gen).to(dtype) for _ in range(2))
    w = torch.rand(n, generator=gen).to(dtype) * 1.4 - 0.2  # both of lerp's branches
    if n > 4:
        x[:4] = torch.tensor([float("inf"), float("nan"), -0.0, 3e38]).to(dtype)
        y[2] = float("-inf")
    args = [t.to(DEVICE) for t in (x, y, w)]
    expected = _fused_reference(*args, None)
    for mode in MODES:
        out = torch.empty(7, n, dtype=dtype, device=DEVICE)
        got = run_mode(fused_ops, (*args, out), mode)
        got = got[-1] if isinstance(got, tuple) else got  # the tensors it wrote: out
        assert torch.equal(got.isnan(), expected.isnan()), mode
        same = (got == expected) | got.isnan()
        assert bool(same.all()), f"{mode}: {(~same).sum(1).tolist()} values differ by row"


def test_kernels_compile_without_fma_contraction_unless_asked() -> None:
    """Fused by the compiler, `1 - 7 * (1 / x)` at x = 7 is -6e-8 on a GPU where PyTorch's
    separate ops give 0 (then 0 / 0 was -inf, not NaN: the dtype fuzzer's find on an
    H100). Kernels are compiled unfused unless they ask."""

    def body(x: torch.Tensor, out: torch.Tensor) -> None:
        for t in tc.tile(x.size(0)):
            out[t] = 1 - 7 / x[t]

    x, out = torch.full((3,), 7.0), torch.empty(3)
    for fuse, present in ((None, True), (True, False)):
        kernel = tc.kernel(body) if fuse is None else tc.kernel(fp_fusion=fuse)(body)
        code = Path(kernel.bind((x, out)).code_file()[0]).read_text()
        assert ("enable_fp_fusion=False" in code) is present
