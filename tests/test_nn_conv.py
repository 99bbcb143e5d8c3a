"""tilecraft.nn's convolutions against F.conv1d / F.conv2d and autograd, both CPU modes."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tilecraft.nn import causal_conv1d, conv2d_nhwc
from tilecraft.nn.conv import (
    causal_conv1d_backward,
    causal_conv1d_forward,
    conv2d_nhwc_backward,
    conv2d_nhwc_forward,
)

pytestmark = pytest.mark.usefixtures("on_test_device")  # a GPU runs these too


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


@pytest.mark.parametrize(
    ("x_shape", "w_shape", "stride", "padding", "dtype"),
    [
        ((2, 9, 7, 3), (3, 3, 3, 5), 2, 1, torch.float32),
        ((1, 5, 6, 2), (3, 2, 2, 3), 1, 0, torch.float16),
        ((1, 4, 4, 3), (1, 1, 3, 2), 1, 2, torch.float32),  # 1x1 with only-padding outputs
        ((1, 1, 1, 1), (1, 1, 1, 1), 1, 0, torch.float32),
    ],
)
def test_conv2d_nhwc(mode, x_shape, w_shape, stride: int, padding: int, dtype) -> None:
    mode(conv2d_nhwc_forward)
    mode(conv2d_nhwc_backward)
    x = torch.randn(x_shape, dtype=dtype, requires_grad=True)
    weight = torch.randn(w_shape, dtype=dtype, requires_grad=True)
    out = conv2d_nhwc(x, weight, stride, padding)
    grad_out = torch.randn_like(out)
    out.backward(grad_out)
    x32, w32 = (t.detach().float().requires_grad_() for t in (x, weight))
    nchw = F.conv2d(
        x32.permute(0, 3, 1, 2), w32.permute(3, 2, 0, 1), stride=stride, padding=padding
    )
    ref = nchw.permute(0, 2, 3, 1)
    ref.backward(grad_out.float())
    tol = {"atol": 1e-5, "rtol": 1e-5} if dtype == torch.float32 else {"atol": 2e-2, "rtol": 1e-2}
    assert out.dtype == dtype and out.shape == ref.shape
    torch.testing.assert_close(out.float(), ref, **tol)
    for got, want in ((x, x32), (weight, w32)):
        assert got.grad is not None and want.grad is not None
        torch.testing.assert_close(got.grad.float(), want.grad, **tol)


def test_conv2d_nhwc_checks() -> None:
    with pytest.raises(ValueError, match="in_ch"):
        conv2d_nhwc(torch.randn(1, 4, 4, 3), torch.randn(3, 3, 2, 2))
    with pytest.raises(ValueError, match="larger"):
        conv2d_nhwc(torch.randn(1, 2, 2, 1), torch.randn(3, 3, 1, 1))
