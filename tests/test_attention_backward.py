"""The attention backward's single pass (`atomic_dq`): dK and dV's programs add dQ up in
float32 with relaxed atomics (and store dBias), against SDPA and the two-pass backward, in
both CPU modes."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import tilecraft as tc
from tilecraft.nn import attention
from tilecraft.nn.attention import attention_backward, attention_forward

pytestmark = pytest.mark.usefixtures("on_test_device")  # a GPU runs these too


def _backward_args(shape: tuple, causal: bool, window: int, bias: torch.Tensor | None) -> tuple:
    batch, heads, kv_heads, m, n, d = shape
    q = torch.randn(batch, heads, m, d)
    k, v = torch.randn(batch, kv_heads, n, d), torch.randn(batch, kv_heads, n, d)
    full_bias = q.new_empty(0) if bias is None else bias.expand(batch, heads, m, n)
    args = (q, k, v, full_bias, causal, d**-0.5, window, bias is not None)
    out, stats = attention_forward(*args)
    return (torch.randn_like(out), q, k, v, full_bias, out, stats, *args[4:])


def _grads(args: tuple, single: bool, size: int = 16) -> tuple:
    """dQ, dK, dV, dBias with every tile `size` long, in one pass or two."""
    bound = attention_backward.bind(args)
    config = tc.Config(block_sizes=[size] * len(bound.spec.blocks), atomic_dq=single)
    return bound.compile(config)(*args)


def _mask(m: int, n: int, causal: bool, window: int, bias: torch.Tensor | None) -> torch.Tensor:
    rows, cols = torch.arange(m)[:, None], torch.arange(n)[None, :]
    keep = torch.ones(m, n, dtype=torch.bool)
    if causal:
        keep = cols <= rows
    if window:
        keep = keep & (cols > rows - window)
    mask = torch.where(keep, 0.0, float("-inf"))
    return mask if bias is None else mask + bias


CASES = [  # (batch, heads, kv_heads, queries, keys, head_dim), causal, window, bias
    ((2, 2, 2, 37, 50, 16), False, 0, False),
    ((2, 4, 2, 37, 50, 16), True, 0, False),
    ((1, 4, 1, 50, 53, 32), True, 7, False),
    ((2, 2, 2, 33, 29, 16), False, 0, True),
    ((1, 4, 2, 37, 50, 16), True, 0, True),
    ((1, 2, 2, 1, 3, 16), False, 0, False),
    ((1, 2, 2, 2, 1, 16), True, 0, False),
    ((1, 1, 1, 1, 19, 16), False, 0, True),
]


@pytest.mark.parametrize(("shape", "causal", "window", "has_bias"), CASES)
def test_single_pass_as_sdpa_and_the_two_passes(
    mode, shape: tuple, causal: bool, window: int, has_bias: bool
) -> None:
    """Ragged tiles of 16, grouped and multi-query heads, causal with a window, a bias (its
    gradient stored by dK/dV's programs, each query and key tile meeting once), one query
    and one key."""
    mode(attention_forward)
    mode(attention_backward)
    _, heads, _, m, n, _ = shape
    bias = torch.randn(1, heads, m, n) if has_bias else None
    args = _backward_args(shape, causal, window, bias)
    single, two = _grads(args, True), _grads(args, False)
    for a, b in zip(single, two, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    grad_out, q, k, v = args[:4]
    leaves = [t.detach().requires_grad_() for t in (q, k, v)]
    with sdpa_kernel(SDPBackend.MATH):
        ref = F.scaled_dot_product_attention(
            *leaves, attn_mask=_mask(m, n, causal, window, bias), enable_gqa=True
        )
    want = torch.autograd.grad(ref, leaves, grad_out)
    for a, b in zip(single[:3], want, strict=True):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)
    if has_bias:  # dBias: the scores' gradient, per head and row
        torch.testing.assert_close(single[3], two[3], atol=1e-5, rtol=1e-5)
        assert single[3].abs().sum() > 0


def test_single_pass_nan_inf_and_empty(mode) -> None:
    """A NaN query and a key of 1e30 give the two passes' NaN and inf pattern; no queries
    at all give empty gradients, no keys zero ones."""
    mode(attention_forward)
    mode(attention_backward)
    args = list(_backward_args((1, 2, 1, 9, 11, 16), True, 0, None))
    args[1][0, 0, 3, 5] = float("nan")
    args[2][0, 0, 2, :] = 1e30
    args[5:7] = attention_forward(*args[1:4], *args[4:5], *args[7:])
    single, two = _grads(tuple(args), True), _grads(tuple(args), False)
    assert single[0][0, 0, 3].isnan().all() and not single[0][0, 1].isnan().any()
    for a, b in zip(single, two, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5, equal_nan=True)
    for shape in ((1, 2, 1, 0, 5, 16), (1, 2, 1, 5, 0, 16)):
        empty = _backward_args(shape, False, 0, None)
        dq, dk, dv, _ = _grads(empty, True)
        assert dq.shape == empty[1].shape and dk.shape == empty[2].shape
        assert not dq.any() and not dk.any() and not dv.any()


def test_single_pass_modes_agree(monkeypatch: pytest.MonkeyPatch) -> None:
    """Compiled code and eager mode give the same single-pass gradients (dQ's float32 sums
    in the same order: one program per key tile adds, in key order under the interpreter)."""
    bias = torch.randn(1, 4, 21, 33)
    args = _backward_args((1, 4, 2, 21, 33, 32), True, 5, bias)
    results = []
    for interpret in (False, True):
        monkeypatch.setattr(attention_backward.settings, "interpret", interpret)
        results.append(_grads(args, True))
    for a, b in zip(*results, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_single_pass_through_the_operator(monkeypatch: pytest.MonkeyPatch) -> None:
    """`attention()`'s autograd runs the single pass where the backward's config asks."""
    monkeypatch.setattr(attention_backward, "config", tc.Config(atomic_dq=True))
    q, k, v = (torch.randn(1, 2, 19, 16, requires_grad=True) for _ in range(3))
    grad_out = torch.randn(1, 2, 19, 16)
    got = torch.autograd.grad(attention(q, k, v, causal=True), (q, k, v), grad_out)
    with sdpa_kernel(SDPBackend.MATH):
        ref = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    want = torch.autograd.grad(ref, (q, k, v), grad_out)
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)
    stats = torch.empty(2, 1, 2, 19)
    args = (grad_out, q, k, v, q.new_empty(0), q, stats, True, 0.25, 0, False)
    bound = attention_backward.bind(args)
    assert "atomic_add" in bound.to_triton_code(tc.Config(atomic_dq=True))
