"""tilecraft.nn.attention against scaled_dot_product_attention and autograd, both CPU modes."""

from __future__ import annotations

import random
import sys
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import tilecraft as tc
from tilecraft.nn import attention, attention_varlen
from tilecraft.nn.attention import attention_backward, attention_forward
from tilecraft.nn.varlen import attention_varlen_backward, attention_varlen_forward

pytestmark = pytest.mark.usefixtures("on_test_device")  # a GPU runs these too


KERNELS = (attention_forward, attention_backward)


def _kernels(mode) -> None:
    for kernel in KERNELS:
        mode(kernel)


def _inputs(shape: tuple, dtype: torch.dtype) -> tuple:
    batch, heads, kv_heads, m, n, d = shape
    q = torch.randn(batch, heads, m, d, dtype=dtype)
    k = torch.randn(batch, kv_heads, n, d, dtype=dtype)
    v = torch.randn(batch, kv_heads, n, d, dtype=dtype)
    return tuple(t.requires_grad_() for t in (q, k, v))


def _check(
    shape: tuple,
    dtype: torch.dtype,
    causal: bool,
    scale: float | None = None,
    window: int | None = None,
) -> None:
    q, k, v = _inputs(shape, dtype)
    out = attention(q, k, v, causal=causal, scale=scale, window=window)
    grad_out = torch.randn_like(out)
    out.backward(grad_out)
    # the reference in float32 from PyTorch, with GQA heads expanded by SDPA
    q32, k32, v32 = (t.detach().float().requires_grad_() for t in (q, k, v))
    if window is None:
        ref = F.scaled_dot_product_attention(
            q32, k32, v32, is_causal=causal, scale=scale, enable_gqa=True
        )
    else:  # causal and within the window, as a boolean mask
        rows = torch.arange(shape[3])[:, None]
        cols = torch.arange(shape[4])[None, :]
        keep = (cols <= rows) & (cols > rows - window)
        ref = F.scaled_dot_product_attention(
            q32, k32, v32, attn_mask=keep, scale=scale, enable_gqa=True
        )
    ref.backward(grad_out.float())
    tol = {"atol": 1e-4, "rtol": 1e-4} if dtype == torch.float32 else {"atol": 1e-2, "rtol": 1e-2}
    assert out.dtype == dtype
    torch.testing.assert_close(out.float(), ref, **tol)
    for got, want in zip((q, k, v), (q32, k32, v32), strict=True):
        assert got.grad is not None and want.grad is not None
        torch.testing.assert_close(got.grad.float(), want.grad, **tol)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_attention_gqa_ragged(mode, dtype: torch.dtype, causal: bool) -> None:
    """Batch 2, 4 query heads on 2 kv heads, 37 queries and 50 keys (no block divides them)."""
    _kernels(mode)
    _check((2, 4, 2, 37, 50, 64), dtype, causal)


@pytest.mark.parametrize(
    "shape",
    [
        (1, 2, 1, 50, 37, 128),  # multi-query, more queries than keys (causal rows end early)
        (1, 1, 1, 1, 1, 16),  # one query, one key
        (1, 2, 2, 19, 19, 256),
        (1, 2, 1, 19, 23, 80),  # a head dim that is not a power of two
    ],
)
def test_attention_shapes(mode, shape: tuple) -> None:
    _kernels(mode)
    _check(shape, torch.float32, causal=True, scale=0.3)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("kv_heads", [3, 1])
def test_attention_reads_heads_in_place(mode, causal: bool, kv_heads: int) -> None:
    """q, k and v as a model's fused projection lays them out ((batch, seq, heads, dim)
    buffers seen as (batch, heads, seq, dim)): read in place, the output's heads side by
    side (its transpose back is a view), and the gradients those of SDPA."""
    _kernels(mode)
    batch, heads, seq, dim = 2, 3, 37, 16
    fused = torch.randn(batch, seq, heads + 2 * kv_heads, dim, requires_grad=True)
    q, k, v = fused.split([heads, kv_heads, kv_heads], dim=2)
    q, k, v = (t.transpose(1, 2) for t in (q, k, v))
    assert not q.is_contiguous()
    out = attention(q, k, v, causal=causal)
    assert out.transpose(1, 2).is_contiguous()
    grad_out = torch.randn(batch, seq, heads, dim).transpose(1, 2)  # as the transpose's grad
    out.backward(grad_out)
    ref_in = fused.detach().clone().requires_grad_()
    rq, rk, rv = (t.transpose(1, 2) for t in ref_in.split([heads, kv_heads, kv_heads], dim=2))
    ref = F.scaled_dot_product_attention(rq, rk, rv, is_causal=causal, enable_gqa=True)
    ref.backward(grad_out)
    torch.testing.assert_close(out, ref, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(fused.grad, ref_in.grad, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("window", [1, 7, 40])
def test_attention_sliding_window(mode, window: int) -> None:
    """Windows shorter than a tile, across tiles, and wider than the sequence."""
    _kernels(mode)
    _check((1, 2, 1, 37, 50, 32), torch.float32, causal=True, window=window)


def _tiles_of(size: int, shape: tuple, causal: bool, window: int | None, **config) -> tuple:
    """Configs of both kernels with every tile `size` long, for inputs of `shape` (the block
    count depends on it: a causal loop splits in two, a kv head's query loop runs per head
    of its group)."""
    q, k, v = (t.detach() for t in _inputs(shape, torch.float32))
    args = (q, k, v, q.new_empty(0), causal, 0.5, window or 0, False)
    count = len(attention_forward.bind(args).spec.blocks)
    forward = tc.Config(block_sizes=[size] * count, **config)
    # binding needs only the shapes: running the kernel here would fix its launcher (the
    # default config's) for these shapes before the test sets `forward`
    out, stats = torch.empty_like(q), torch.empty(2, *q.shape[:3])
    count = len(attention_backward.bind((out, *args[:4], out, stats, *args[4:])).spec.blocks)
    return forward, tc.Config(block_sizes=[size] * count, **config)


@pytest.mark.parametrize("window", [None, 7, 32, 40])
def test_attention_small_tiles(mode, monkeypatch: pytest.MonkeyPatch, window: int | None) -> None:
    """16x16 tiles: causal and windowed key loops start and stop inside the sequence, the
    causal loops split into the tiles off the diagonal (unmasked) and on it; a window's
    forward also into its lower edge (masked) and the keys every query of a tile sees
    (unmasked: proven aligned when the window is a multiple of the tiles)."""
    _kernels(mode)
    shape = (1, 2, 1, 50, 53, 16)  # a full query tile past the window's first 16 keys
    forward, backward = _tiles_of(16, shape, True, window)
    assert len(forward.to_dict()["block_sizes"]) == (3 if window is None else 4)
    monkeypatch.setattr(attention_forward, "config", forward)
    monkeypatch.setattr(attention_backward, "config", backward)
    _check(shape, torch.float32, causal=True, window=window)
    q, k = torch.randn(1, 2, 50, 16), torch.randn(1, 1, 53, 16)
    args = (q, k, k, q.new_empty(0), True, 0.5, window or 0, False)
    kernel = attention_forward.bind(args).analyze(forward).kernels[0]
    aligned = [b.aligned for b in kernel.blocks.values() if b.dynamic]
    # (the window's edge,) the keys before the tile, the diagonal (ending at the ragged 50)
    assert aligned == {None: [True, False], 32: [False, True, False]}.get(window, [False] * 3)


def test_attention_window_with_key_tiles_smaller_than_query_tiles(
    mode, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Query tiles of 32 over key tiles of 16 with a window of 3: a program's first key
    tile holds no key some of its queries see (their running maximum is still -inf)."""
    _kernels(mode)
    monkeypatch.setattr(attention_forward, "config", tc.Config(block_sizes=[32, 16, 16, 16]))
    backward = tc.Config(block_sizes=[32, 16, 16, 16, 16, 32, 32, 32])
    monkeypatch.setattr(attention_backward, "config", backward)
    _check((1, 1, 1, 50, 50, 16), torch.float32, causal=True, window=3)


@pytest.mark.parametrize("causal", [False, True])
def test_attention_bias(mode, causal: bool) -> None:
    """An additive bias broadcast over the batch, and its gradient (summed over the batch)."""
    _kernels(mode)
    q, k, v = _inputs((2, 2, 1, 37, 50, 16), torch.float32)
    bias = torch.randn(1, 2, 37, 50, requires_grad=True)
    out = attention(q, k, v, causal=causal, bias=bias)
    grad_out = torch.randn_like(out)
    out.backward(grad_out)
    leaves = (q, k, v, bias)
    refs = [t.detach().requires_grad_() for t in leaves]
    mask = refs[3]
    if causal:
        mask = mask.masked_fill(torch.ones(37, 50, dtype=torch.bool).triu(1), float("-inf"))
    ref = F.scaled_dot_product_attention(*refs[:3], attn_mask=mask, enable_gqa=True)
    ref.backward(grad_out)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
    for got, want in zip(leaves, refs, strict=True):
        assert got.grad is not None and want.grad is not None
        torch.testing.assert_close(got.grad, want.grad, atol=1e-5, rtol=1e-5)


def test_attention_modes_agree(monkeypatch: pytest.MonkeyPatch) -> None:
    """The forward and both backward passes (dK/dV on the scores transposed) give the same
    numbers compiled and in eager mode: grouped heads, a bias, causal with a window, tiles
    that stop short of the sequence."""
    q, k, v = (t.detach() for t in _inputs((1, 4, 2, 21, 33, 32), torch.float32))
    bias = torch.randn(1, 4, 21, 33)
    args = (q, k, v, bias, True, 0.25, 5, True)
    forward, backward = _tiles_of(16, (1, 4, 2, 21, 33, 32), True, 5)
    monkeypatch.setattr(attention_forward, "config", forward)
    monkeypatch.setattr(attention_backward, "config", backward)
    results, grad_out = [], torch.randn(1, 4, 21, 32)
    for interpret in (False, True):
        for kernel in KERNELS:
            monkeypatch.setattr(kernel.settings, "interpret", interpret)
        out, stats = attention_forward(*args)
        grads = attention_backward(grad_out, q, k, v, bias, out, stats, *args[4:])
        results.append((out, stats, *grads))
    for i, (a, b) in enumerate(zip(*results, strict=True)):
        tol = 1e-6 if i < 2 else 1e-5  # the gradients' float32 sums, in another order
        torch.testing.assert_close(a, b, atol=tol, rtol=tol)


def test_attention_empty(mode) -> None:
    _kernels(mode)
    q, k = torch.randn(1, 2, 0, 8), torch.randn(1, 1, 5, 8)
    assert attention(q, k, k, causal=True).shape == (1, 2, 0, 8)


def test_attention_checks_heads() -> None:
    q = torch.randn(1, 3, 4, 8)
    k = torch.randn(1, 2, 4, 8)
    with pytest.raises(ValueError, match="multiple"):
        attention(q, k, k)
    with pytest.raises(ValueError, match="float"):
        attention(k, k, k, bias=torch.ones(4, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match="window"):
        attention(k, k, k, window=4)


def _packed(lens: list[int], heads: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows of sequences of `lens` packed together, and their offsets."""
    offsets = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()])
    return torch.randn(sum(lens), heads, 16, dtype=dtype), offsets


def _per_sequence(q, k, v, cu_q, cu_k, causal: bool, grad_out=None) -> list:
    """SDPA (and autograd) on each sequence alone, in float32: [(rows, keys, out, dq, dk,
    dv)] with the rows and keys of the packed tensors each covers."""
    found = []
    for b in range(len(cu_q) - 1):
        rows, keys = slice(cu_q[b], cu_q[b + 1]), slice(cu_k[b], cu_k[b + 1])
        one = [
            t.detach()[s].float().transpose(0, 1)[None]
            for t, s in ((q, rows), (k, keys), (v, keys))
        ]
        one = [t.requires_grad_() for t in one]
        ref = F.scaled_dot_product_attention(*one, is_causal=causal, enable_gqa=True)
        grads = [None] * 3
        if grad_out is not None:
            ref.backward(grad_out[rows].float().transpose(0, 1)[None])
            grads = [t.grad[0].transpose(0, 1) for t in one]
        found.append((rows, keys, ref.detach()[0].transpose(0, 1), *grads))
    return found


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_attention_varlen(mode, dtype: torch.dtype, causal: bool) -> None:
    """Packed sequences of 5, 0, 37 and 1 queries on 9, 3, 50 and 1 keys, GQA heads."""
    mode(attention_varlen_forward)
    (q, cu_q), (k, cu_k) = _packed([5, 0, 37, 1], 4, dtype), _packed([9, 3, 50, 1], 2, dtype)
    v = torch.randn_like(k)
    out = attention_varlen(q, k, v, cu_q, cu_k, 37, causal=causal)
    assert out.shape == q.shape and out.dtype == dtype
    tol = {"atol": 1e-5, "rtol": 1e-5} if dtype == torch.float32 else {"atol": 1e-2, "rtol": 1e-2}
    for rows, _, ref, *_ in _per_sequence(q, k, v, cu_q, cu_k, causal):
        torch.testing.assert_close(out[rows].float(), ref, **tol)


@pytest.mark.parametrize(
    ("causal", "max_k"),
    [(False, 50), (True, 50), (True, None)],  # None: the backward bounds keys by total_k
)
def test_attention_varlen_backward(mode, causal: bool, max_k: int | None) -> None:
    """Gradients of packed sequences of 5, 1, 37, 0, 3 and 1 queries on 3 (fewer keys than
    queries: causal rows past the keys see them all), 1, 50, 4, 0 (an output of 0, as SDPA
    gives without keys) and 1 keys, MQA and GQA heads, against autograd through SDPA on
    each sequence alone; rows of `q` past the last sequence get zero gradients."""
    mode(attention_varlen_forward)
    mode(attention_varlen_backward)
    (q, cu_q), (k, cu_k) = (
        _packed([5, 1, 37, 0, 3, 1, 2], 4, torch.float32),
        _packed([3, 1, 50, 4, 0, 1], 2, torch.float32),
    )
    cu_q = cu_q[:-1]  # two rows of `q` belong to no sequence
    v = torch.randn_like(k)
    for t in (q, k, v):
        t.requires_grad_()
    out = attention_varlen(q, k, v, cu_q, cu_k, 37, causal=causal, max_seqlen_k=max_k)
    grad_out = torch.randn_like(out)
    out.backward(grad_out)
    for rows, keys, ref, dq, dk, dv in _per_sequence(q, k, v, cu_q, cu_k, causal, grad_out):
        torch.testing.assert_close(out[rows], ref, atol=1e-5, rtol=1e-5)
        for got, want in ((q.grad[rows], dq), (k.grad[keys], dk), (v.grad[keys], dv)):
            torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    assert not q.grad[-2:].any()


@pytest.mark.parametrize("causal", [False, True])
def test_attention_without_keys_is_zero_as_sdpa(mode, causal: bool) -> None:
    """No keys at all: SDPA's output is an empty sum, 0 (not 0 / 0), and so are the
    query's gradients."""
    _kernels(mode)
    q, k, v = _inputs((1, 2, 1, 5, 0, 16), torch.float32)
    out = attention(q, k, v, causal=causal)
    (dq,) = torch.autograd.grad(out, (q,), torch.randn_like(out))
    with sdpa_kernel(SDPBackend.MATH):
        ref = F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
    torch.testing.assert_close(out, ref)
    assert not ref.any() and not dq.any()


def test_rows_that_see_no_key_are_zero_as_sdpa(mode) -> None:
    """Rows whose every key is masked (a sliding window past the last key, a bias of -inf
    over a whole row) get 0 and zero gradients, as SDPA's safe softmax gives them; with a
    mask of -inf over a row, 0 / 0 was NaN."""
    _kernels(mode)
    q, k, v = _inputs((2, 2, 1, 17, 5, 16), torch.float32)
    rows, cols = torch.arange(17)[:, None], torch.arange(5)[None, :]
    window = torch.where((cols <= rows) & (cols > rows - 3), 0.0, float("-inf"))
    bias = torch.randn(2, 2, 17, 5)
    bias[:, :, 2] = float("-inf")
    grad_out = torch.randn(2, 2, 17, 16)
    out = attention(q, k, v, causal=True, window=3, bias=bias)
    got = torch.autograd.grad(out, (q, k, v), grad_out)
    with sdpa_kernel(SDPBackend.MATH):
        ref = F.scaled_dot_product_attention(q, k, v, attn_mask=window + bias, enable_gqa=True)
    want = torch.autograd.grad(ref, (q, k, v), grad_out)
    assert not ref[:, :, 2].any() and not ref[:, :, 7:].any()
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-4)
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)


def test_attention_varlen_float16_backward_and_one_kv_head(mode) -> None:
    """Half-precision gradients with every query head on one kv head (multi-query)."""
    mode(attention_varlen_forward)
    mode(attention_varlen_backward)
    (q, cu_q), (k, cu_k) = _packed([1, 19], 2, torch.float16), _packed([7, 19], 1, torch.float16)
    v = torch.randn_like(k)
    for t in (q, k, v):
        t.requires_grad_()
    out = attention_varlen(q, k, v, cu_q, cu_k, 19, causal=True, max_seqlen_k=19)
    grad_out = torch.randn_like(out)
    out.backward(grad_out)
    for rows, keys, ref, dq, dk, dv in _per_sequence(q, k, v, cu_q, cu_k, True, grad_out):
        torch.testing.assert_close(out[rows].float(), ref, atol=1e-2, rtol=1e-2)
        for got, want in ((q.grad[rows], dq), (k.grad[keys], dk), (v.grad[keys], dv)):
            torch.testing.assert_close(got.float(), want, atol=2e-2, rtol=2e-2)


@pytest.mark.parametrize("causal", [False, True])
def test_attention_nan_and_inf_rows_as_sdpa(mode, causal: bool) -> None:
    """A NaN in a query spoils only its own row (as SDPA's math backend says; its CPU flash
    kernel returns 0 there); a huge (inf) key score gives that key all the weight (on a GPU
    too: the kernels are compiled without FMA contraction, which left the rounding error of
    the scaled maximum in its exponent)."""
    _kernels(mode)
    q, k, v = (t.detach() for t in _inputs((1, 2, 1, 9, 11, 16), torch.float32))
    q[0, 0, 3, 5] = float("nan")
    k[0, 0, 2, :] = 1e30  # scores of +inf (or -inf) against key 2
    out = attention(q, k, v, causal=causal)
    with sdpa_kernel(SDPBackend.MATH):
        ref = F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
    assert out[0, 0, 3].isnan().all() and not out[0, 1].isnan().any()
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-4, equal_nan=True)
    code = attention_forward.bind(
        (q, k, v, q.new_empty(0), causal, 0.25, 0, False)
    ).to_triton_code()
    assert "enable_fp_fusion=False" in code
    others = (attention_backward, attention_varlen_forward, attention_varlen_backward)
    assert not any(kernel.settings.fp_fusion for kernel in others)  # they round as it does


@pytest.mark.parametrize("fill", [-1e9, torch.finfo(torch.float32).min])
def test_attention_rows_masked_by_a_huge_bias_as_sdpa(mode, fill: float) -> None:
    """A query row whose every key is biased by -1e9 or `finfo.min` (a padded query under
    an additive mask, as Hugging Face models build them) attends uniformly, as in SDPA,
    forward and backward: its scores are all alike, so their differences from the row's
    maximum must be exactly 0, the bias must not overflow to -inf in base 2, and the
    backward's probabilities must keep the log of the row's sum (1/11 each, not 1)."""
    _kernels(mode)
    q, k, v = _inputs((1, 2, 2, 9, 11, 16), torch.float32)
    bias = torch.zeros(1, 2, 9, 11)
    bias[:, :, 4:] = fill
    bias[:, :, :4, 7:] = fill  # and some keys of the other rows
    grad_out = torch.randn(1, 2, 9, 16)
    out = attention(q, k, v, bias=bias)
    got = torch.autograd.grad(out, (q, k, v), grad_out)
    with sdpa_kernel(SDPBackend.MATH):
        ref = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
    want = torch.autograd.grad(ref, (q, k, v), grad_out)
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-4)
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)


def test_launchers_never_sync_with_the_device() -> None:
    """Host code that read a device value (a sequence bound) would stall every call and
    break CUDA graph capture of the training step."""
    q, k, v = (t.detach() for t in _inputs((1, 2, 1, 9, 11, 16), torch.float32))
    out, lse = attention_forward(q, k, v, q.new_empty(0), True, 0.25, 0, False)
    dense = [
        attention_forward.bind((q, k, v, q.new_empty(0), True, 0.25, 0, False)),
        attention_backward.bind((out, q, k, v, q.new_empty(0), out, lse, True, 0.25, 0, False)),
    ]
    (qp, cu), (kp, _) = _packed([3, 6], 2, torch.float32), _packed([3, 6], 1, torch.float32)
    packed = (qp, kp, kp, cu, cu, 8, 8, True, 0.25)
    out, lse = attention_varlen_forward(*packed)
    varlen = [
        attention_varlen_forward.bind(packed),
        attention_varlen_backward.bind((out, qp, kp, kp, cu, cu, out, lse, 8, 8, True, 0.25)),
    ]
    for bound in dense + varlen:
        code = bound.to_triton_code()
        assert not [s for s in (".item()", "synchronize", ".cpu()", ".tolist()") if s in code]


@pytest.mark.parametrize("causal", [False, True])
def test_attention_reads_through_tensor_descriptors(
    mode, monkeypatch: pytest.MonkeyPatch, causal: bool
) -> None:
    """A program's row tiles are plain block reads, so the `indexing` knob turns them into
    tensor descriptors (TMA loads on Hopper) in the forward and both backward passes; the
    causal keys before the query tile too (that loop's bounds, computed on the device, are
    proven multiples of its tile), those on its diagonal (ending at the ragged 37) not."""
    _kernels(mode)
    forward, backward = _tiles_of(
        16, (1, 2, 2, 37, 50, 32), causal, None, indexing="tensor_descriptor"
    )
    monkeypatch.setattr(attention_forward, "config", forward)
    monkeypatch.setattr(attention_backward, "config", backward)
    _check((1, 2, 2, 37, 50, 32), torch.float32, causal=causal)
    q, k, v = (t.detach() for t in _inputs((1, 2, 2, 37, 50, 32), torch.float32))
    args = (q, k, v, q.new_empty(0), causal, 0.2, 0, False)
    code = attention_forward.bind(args).to_triton_code(forward)
    assert "q_rows_desc" in code and "k_rows_desc" in code
    assert ("k_rows + " in code) == causal  # the diagonal's key reads: pointers
    out, lse = attention_forward(*args)
    code = attention_backward.bind((out, *args[:4], out, lse, *args[4:])).to_triton_code(backward)
    assert "k_rows_desc" in code and "dq_desc" in code


def test_config_space_holds_what_fast_attention_tunes() -> None:
    """Query and key tiles (tl.dot sizes), warps, stages (whole kernel and per key loop),
    tensor-descriptor reads, persistent programs; the generated forward multiplies the
    scores once by the folded scale, exponentiates in base 2 and ends a causal program's key
    loop at its last query."""
    from tilecraft.autotune.space import ConfigSpace

    q, k, v = (t.detach() for t in _inputs((1, 2, 2, 300, 300, 64), torch.float32))
    bound = attention_forward.bind((q, k, v, q.new_empty(0), True, 0.125, 0, False))
    knobs = {knob.name: knob for knob in ConfigSpace(bound.spec, bound.default_config).knobs}
    assert {128, 16} <= set(knobs["block_sizes[0]"].choices) and 8 not in knobs[
        "block_sizes[0]"
    ].choices
    assert {64, 256} <= set(knobs["block_sizes[1]"].choices)
    assert {4, 8} <= set(knobs["num_warps"].choices) and {2, 3, 4} <= set(
        knobs["num_stages"].choices
    )
    assert "range_num_stages[0]" in knobs
    assert "tensor_descriptor" in knobs["indexing[0]"].choices
    assert "persistent_interleaved" in knobs["pid_type"].choices
    code = bound.to_triton_code()
    assert "tl.exp2(" in code and "tl.exp(" not in code
    assert "* qk_scale" in code and "tl.minimum(offset_1 + _BLOCK_SIZE_1, 300)" in code


@pytest.mark.parametrize("fused", [False, True])
def test_attention_random_configs_agree_with_the_default(fused: bool) -> None:
    """Configs the tuner may try (random points of both kernels' spaces) compile and give
    the default config's answers, for flat heads and for a fused projection's strided
    heads (grouped, causal, windowed): the block structure does not depend on the config."""
    from tilecraft.autotune.space import ConfigSpace
    from tilecraft.exc import InvalidConfig

    batch, heads, kv_heads, seq, dim = 1, 4, 2, 37, 16
    if fused:
        buffer = torch.randn(batch, seq, heads + 2 * kv_heads, dim)
        q, k, v = (t.transpose(1, 2) for t in buffer.split([heads, kv_heads, kv_heads], 2))
    else:
        q, k, v = _inputs((batch, heads, kv_heads, seq, seq, dim), torch.float32)
        q, k, v = q.detach(), k.detach(), v.detach()
    args = (q, k, v, q.new_empty(0), True, 0.25, 20, False)
    rng = random.Random(0)

    def agree(kernel: tc.Kernel, args: tuple) -> tuple:
        bound = kernel.bind(args)
        space = ConfigSpace(bound.spec, bound.default_config)
        expected = bound.compile(bound.default_config)(*args)
        for _ in range(4):
            config = space.random(rng)
            try:
                got = bound.compile(config)(*args)
            except InvalidConfig:
                continue  # the tuner skips these too
            torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5, msg=str(config))
        return expected

    out, lse = agree(attention_forward, args)
    agree(attention_backward, (torch.randn_like(out), q, k, v, args[3], out, lse, *args[4:]))


def _on_gpu(t: torch.Tensor) -> SimpleNamespace:
    """What `_forward_default` and `_backward_default` read of a tensor, as if it lived on
    a GPU."""
    return SimpleNamespace(device=SimpleNamespace(type="cuda"), size=t.size)


@pytest.mark.parametrize(("causal", "window"), [(False, 0), (True, 0), (True, 9)])
def test_forward_default_on_a_gpu_names_every_block(causal: bool, window: int) -> None:
    """256-query tiles with 8 warps (measured fastest on the H200) for long sequences at
    head dim 128 on a GPU, a 64-key tile for each of the kernel's key loops (a causal one
    splits in two, three with a window; the default was once refused there, meant for the
    unmasked kernel's two blocks), and a head's programs grouped 4 by 4 without a mask;
    at head dim 64 the heuristic tiles, grouped; for short sequences, other head dims and
    on the CPU the heuristic default."""
    module = sys.modules["tilecraft.nn.attention"]
    q = torch.empty(1, 4, 2048, 128, device="cpu")  # (the test device may be a GPU)
    args = (q, q, q, q.new_empty(0), causal, 0.1, window, False)
    bound = attention_forward.bind(args)
    assert module._forward_default(args) is None
    config = module._forward_default((_on_gpu(q), *args[1:]))
    assert config.get("block_sizes") == [256] + [64] * (len(bound.spec.blocks) - 1)
    assert config.get("num_warps") == 8
    assert config.get("l2_groupings") == (None if causal else [4])
    narrow = module._forward_default((_on_gpu(torch.empty(1, 4, 2048, 64)), *args[1:]))
    assert narrow == tc.Config(l2_groupings=[4])
    assert bound.resolve(narrow).get("l2_groupings") == [4]  # the knob this kernel has
    for shape in ((1, 4, 512, 128), (1, 4, 2048, 96)):
        assert module._forward_default((_on_gpu(torch.empty(shape)), *args[1:])) is None


@pytest.mark.parametrize(
    ("causal", "window", "kv_heads", "head_dim"),
    [(False, 0, 4, 128), (True, 0, 2, 64), (True, 9, 1, 64), (False, 0, 1, 128)],
)
def test_backward_default_on_a_gpu_names_every_block(
    causal: bool, window: int, kv_heads: int, head_dim: int
) -> None:
    """The backward's measured GPU default gives every block of the kernel a size (their
    count depends on the mask, the window and the heads per kv head), and the key tiles it
    meant to dK/dV's loop; on the CPU the heuristic default stays."""
    module = sys.modules["tilecraft.nn.attention"]
    q, k = torch.empty(1, 4, 2048, head_dim), torch.empty(1, kv_heads, 2048, head_dim)
    q, k = q.cpu(), k.cpu()  # (the test device may be a GPU)
    stats = torch.empty(2, 1, 4, 2048, device="cpu")
    args = (q, q, k, k, q.new_empty(0), q, stats, causal, 0.1, window, False)
    spec = attention_backward.bind(args).spec
    assert module._backward_default(args) is None
    wide = torch.empty(1, 4, 2048, 256, device="cpu")
    assert module._backward_default((q, _on_gpu(wide), *args[2:])) is None  # not measured
    sizes = module._backward_default((q, _on_gpu(q), *args[2:])).to_dict()["block_sizes"]
    assert len(sizes) == len(spec.blocks)
    grids = [i for i, block in enumerate(spec.blocks) if not block.inner]  # dQ's, dK/dV's
    key_tile, query_tile = (128, 32) if head_dim <= 64 else (64, 64)
    assert [sizes[i] for i in grids] == [64, key_tile]
    assert sizes[: grids[1]] == [64] * grids[1]  # dQ's query tile and key loops
    assert set(sizes[grids[1] + 1 :]) == {query_tile}  # dK/dV's query loops
    config = module._backward_default((q, _on_gpu(q), *args[2:]))
    assert attention_backward.bind(args).resolve(config).get("l2_groupings") == [4, 4]
