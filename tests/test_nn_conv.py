"""tilecraft.nn.causal_conv1d against F.conv1d and autograd, both CPU modes."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tilecraft.nn import causal_conv1d
from tilecraft.nn.conv import causal_conv1d_backward, causal_conv1d_forward


def _reference(x, weight, bias, silu: bool) -> torch.Tensor:
    width = weight.size(1)
    out = F.conv1d(x, weight[:, None], bias, padding=width - 1, groups=x.size(1))
    out = out[..., : x.size(2)]
    return F.silu(out) if silu else out


@pytest.mark.parametrize("silu", [False, True])
@pytest.mark.parametrize(
    ("shape", "width", "dtype", "with_bias"),
    [
        ((2, 5, 37), 4, torch.float32, True),
        ((1, 3, 2), 4, torch.float32, False),  # shorter than the filter
        ((2, 6, 50), 3, torch.float16, True),
        ((1, 1, 1), 1, torch.float32, True),
    ],
)
def test_causal_conv1d(mode, shape, width, dtype, with_bias: bool, silu: bool) -> None:
    mode(causal_conv1d_forward)
    mode(causal_conv1d_backward)
    x = torch.randn(shape, dtype=dtype, requires_grad=True)
    weight = torch.randn(shape[1], width, dtype=dtype, requires_grad=True)
    bias = torch.randn(shape[1], dtype=dtype, requires_grad=True) if with_bias else None
    out = causal_conv1d(x, weight, bias, activation="silu" if silu else None)
    grad_out = torch.randn_like(out)
    out.backward(grad_out)
    leaves = [x, weight] + ([bias] if bias is not None else [])
    refs = [t.detach().float().requires_grad_() for t in leaves]
    ref = _reference(refs[0], refs[1], refs[2] if with_bias else None, silu)
    ref.backward(grad_out.float())
    tol = {"atol": 1e-5, "rtol": 1e-5} if dtype == torch.float32 else {"atol": 1e-2, "rtol": 1e-2}
    assert out.dtype == dtype and out.shape == x.shape
    torch.testing.assert_close(out.float(), ref, **tol)
    for got, want in zip(leaves, refs, strict=True):
        assert got.grad is not None and want.grad is not None
        torch.testing.assert_close(got.grad.float(), want.grad, **tol)


def test_causal_conv1d_nan_stays_causal(mode) -> None:
    """A NaN at step t reaches only steps t .. t + width - 1 (zeros never multiply it)."""
    mode(causal_conv1d_forward)
    x = torch.randn(1, 2, 10)
    x[0, 0, 4] = float("nan")
    weight = torch.randn(2, 3)
    out = causal_conv1d(x, weight)
    torch.testing.assert_close(out, _reference(x, weight, None, False), equal_nan=True)
    assert out[0, 0, 4:7].isnan().all() and not out[0, 0, :4].isnan().any()


def test_causal_conv1d_checks() -> None:
    with pytest.raises(ValueError, match="activation"):
        causal_conv1d(torch.randn(1, 2, 3), torch.randn(2, 2), activation="gelu")
    with pytest.raises(ValueError, match="channels"):
        causal_conv1d(torch.randn(1, 2, 3), torch.randn(3, 2))
