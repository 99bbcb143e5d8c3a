"""Attention's Gluon backward for Hopper (`attention_sm90.py`, `attention_gluon_bwd.py`).

On the CPU: its compile for sm_90 (Triton's real compiler, nothing launched) and its
operator's fallback to the `tl` backward. On an sm_90 GPU: its gradients against the `tl`
backward's (fed the same statistics) and SDPA's, on ragged shapes, grouped heads, every
layout of q, k, v and the output's gradient, both dtypes, NaN and inf.
"""

from __future__ import annotations

import importlib
import os
import re
import subprocess
import sys
import warnings

import pytest
import torch
import torch.nn.functional as F
from test_attention_sm90 import REPO, _heads, hopper, ptx_for_sm90

sm90 = importlib.import_module("tilecraft.nn.attention_sm90")
nn_attention = importlib.import_module("tilecraft.nn.attention")


@pytest.mark.parametrize(
    "dim, causal, rows",
    [(64, False, (True, True, True)), (128, True, (False, False, False)),
     (128, False, (True, False, False)), (64, True, (False, True, False))],
)  # fmt: skip
def test_compiles_for_sm90_warp_specialized(dim, causal, rows) -> None:
    """Triton's compiler, for sm_90, without a GPU: the consumers get 240 registers and the
    loader and writer 24 (`setmaxnreg`), the products are wgmma, the tiles come by TMA, dQ
    is added by TMA reductions (no atomics), and no product is contracted into an FMA unless
    `BACKWARD_FP_FUSION` asks for it (the scores recomputed as the forward computed them).
    In a process of its own: under TRITON_INTERPRET Triton's standard functions are not
    compilable."""
    pytest.importorskip("triton.experimental.gluon.language.nvidia.hopper")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    argv = [sys.executable, __file__, str(dim), str(causal), *map(str, rows)]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    ptx = done.stdout
    counts = set(re.findall(r"setmaxnreg\.(?:inc|dec)\.sync\.aligned\.u32\s+(\d+)", ptx))
    assert {"240", "24"} <= counts
    assert "wgmma.mma_async" in ptx and "cp.async.bulk.tensor" in ptx
    assert "cp.reduce.async.bulk.tensor.3d.global.shared::cta.add" in ptx  # dQ's adds
    assert not re.search(r"\b(?:atom|red)\.global", ptx)
    assert sm90.BACKWARD_FP_FUSION or not re.search(r"\bfma\.rn\.f32", ptx)


def _compile_for_sm90(dim: int, causal: bool, q_rows: bool, kv_rows: bool, do_rows: bool) -> str:
    """The backward kernel's PTX for sm_90, compiled as a launch with these inputs would be."""
    q, grad_out = (_heads(2, 4, 300, dim, r, dtype=torch.bfloat16) for r in (q_rows, do_rows))
    k, v = (_heads(2, 2, 257, dim, kv_rows, dtype=torch.bfloat16) for _ in range(2))
    views = [sm90.heads_view(t) for t in (q, k, v, grad_out)]
    grads = (torch.zeros(2, 4, 320, dim), *(torch.zeros(k.shape, dtype=k.dtype) for _ in range(2)))
    terms = torch.zeros(2, 2 * 4, 320)
    args, options = sm90.backward_arguments(views, terms, grads, causal, 0.125)
    return ptx_for_sm90(sm90._gluon_backward().attention_backward_sm90, args, options)


def _tl_backward(grad_out, q, k, v, out, stats, causal: bool) -> tuple:
    """The `tl` backward's dQ, dK, dV from the same forward output and statistics."""
    bias, scale = q.new_empty(0), q.size(-1) ** -0.5
    grads = nn_attention.attention_backward(grad_out, q, k, v, bias, out, stats, causal, scale,
                                            0, False)  # fmt: skip
    return grads[:3]


@pytest.mark.parametrize("seq, rows", [(1, 16), (37, 16), (64, 32)])
def test_row_terms_and_the_zeroed_scratch(seq: int, rows: int) -> None:
    """`row_terms` (a `tl` kernel, so it runs under the interpreter): each row's base-2
    log-sum-exp and delta = rowsum(dO * O), 0 on the padding past the last query; and it
    zeroes the float32 dQ it is given (padding included)."""
    if os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("runs under Triton's interpreter")
    pytest.importorskip("triton.experimental.gluon.language.nvidia.hopper")
    batch, heads, dim = 2, 3, 16
    padded = -(-seq // rows) * rows
    out, grad_out = (torch.randn(batch, seq, heads, dim).transpose(1, 2) for _ in range(2))
    stats = torch.randn(2, batch, heads, seq)
    terms = torch.full((2, batch * heads, padded), float("nan"))
    dq = torch.full((batch * heads, padded, dim), float("nan"))
    strides = (*out.stride()[:3], *grad_out.stride()[:3])
    sm90._gluon_backward().row_terms[(padded // rows, batch * heads)](
        out, grad_out, stats, terms, dq, heads, seq, *strides, DIM=dim, ROWS=rows
    )
    want = torch.zeros(2, batch * heads, padded)
    want[0, :, :seq] = (stats[0] + stats[1]).reshape(batch * heads, seq)
    want[1, :, :seq] = (out * grad_out).sum(-1).reshape(batch * heads, seq)
    torch.testing.assert_close(terms, want)
    assert not dq.any()


def test_the_backward_operator_falls_back_to_the_tl_backward() -> None:
    """Off the GPU (and wherever the kernel cannot run) the operator computes the `tl`
    backward's gradients, and passes PyTorch's custom-op checks (schema, fake outputs'
    shapes, dtypes and strides against the real ones)."""
    q = torch.randn(2, 2, 5, 64)
    k, v = (torch.randn(2, 1, 7, 64) for _ in range(2))
    bias = q.new_empty(0)
    out, stats = nn_attention.attention_forward(q, k, v, bias, True, 0.125, 0, False)
    grad_out = torch.randn_like(out)
    args = (grad_out, q, k, v, bias, out, stats, True, 0.125, 0, False)
    got = nn_attention.attention_backward_sm90_op(*args)
    want = nn_attention.attention_backward_op(*args)
    for g, w in zip(got, want, strict=True):
        assert torch.equal(g, w)
    torch.library.opcheck(nn_attention.attention_backward_sm90_op, args)


SHAPES = [  # batch, heads, kv heads, queries, keys, head dim
    (1, 1, 1, 1, 1, 64),
    (2, 4, 2, 77, 130, 64),
    (1, 2, 1, 300, 257, 128),
    (2, 2, 2, 1100, 1000, 128),
    (1, 3, 1, 129, 1300, 64),
    (1, 4, 1, 256, 256, 128),
]


def _gluon_and_tl(q, k, v, grad_out, causal: bool) -> tuple:
    """The Gluon backward's gradients and the tl backward's, from the tl forward."""
    scale = q.size(-1) ** -0.5
    out, stats = nn_attention.attention_forward(q, k, v, q.new_empty(0), causal, scale, 0, False)
    gluon = sm90.backward(grad_out, q, k, v, out, stats, causal, scale)
    assert gluon is not None, "the Gluon backward did not run"
    return gluon, _tl_backward(grad_out, q, k, v, out, stats, causal)


@hopper
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("rows", [(True, True, True), (False, False, False), (True, False, False),
                                  (False, True, True)])  # fmt: skip
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_gluon_backward_matches_the_tl_backward_and_sdpa(shape, causal, rows, dtype,
                                                         monkeypatch) -> None:  # fmt: skip
    """`rows`: q's, k's and v's, and the output gradient's layouts (heads in rows or not)."""
    monkeypatch.setattr(sm90, "_failed", set())
    batch, heads, kv_heads, m, n, dim = shape
    kw = dict(dtype=dtype, device="cuda")
    q = _heads(batch, heads, m, dim, rows[0], **kw)
    k, v = (_heads(batch, kv_heads, n, dim, rows[1], **kw) for _ in range(2))
    grad_out = _heads(batch, heads, m, dim, rows[2], **kw)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # the Gluon backward must not fall back
        got, tl = _gluon_and_tl(q, k, v, grad_out, causal)
    leaves = [t.detach().float().requires_grad_() for t in (q, k, v)]
    ref = F.scaled_dot_product_attention(*leaves, is_causal=causal, enable_gqa=True)
    want = torch.autograd.grad(ref, leaves, grad_out.float())
    for g, t, w in zip(got, tl, want, strict=True):
        assert g.shape == w.shape and g.dtype == dtype and g.is_contiguous()
        torch.testing.assert_close(g.float(), w, atol=5e-2, rtol=5e-2)
        torch.testing.assert_close(g, t, atol=2e-2, rtol=2e-2)


@hopper
@pytest.mark.parametrize("causal", [False, True])
def test_nan_and_inf_as_the_tl_backward(causal) -> None:
    """Unmasked: the tl backward's NaN and inf, and its values elsewhere. Causal, a masked
    pair's zero probability meets a non-finite term (a NaN row's statistics, an inf value)
    only in the tiles a kernel visits, and the two kernels' tiles differ, so there: the rows
    of dQ whose query or output gradient is NaN are NaN in both, and the entries both
    compute finite agree. Either way the other rows of dQ in that head are finite."""
    kw = dict(dtype=torch.bfloat16, device="cuda")
    q, k, v, grad_out = (torch.randn(1, 2, 300, 64, **kw) for _ in range(4))
    q[0, 0, 5] = float("nan")
    k[0, 1, 7, 3] = float("inf")
    v[0, 1, 250, 0] = float("-inf")
    grad_out[0, 0, 100, 1] = float("nan")
    got, tl = _gluon_and_tl(q, k, v, grad_out, causal)
    for g, t in zip(got, tl, strict=True):
        if not causal:
            assert torch.equal(g.isnan(), t.isnan()) and torch.equal(g.isinf(), t.isinf())
        both = g.isfinite() & t.isfinite()
        torch.testing.assert_close(g[both], t[both], atol=2e-2, rtol=2e-2)
    for row in (5, 100):
        assert got[0][0, 0, row].isnan().all() and tl[0][0, 0, row].isnan().all()
    clean = [r for r in range(300) if r not in (5, 100)]  # head 0's other rows of dQ
    assert got[0][0, 0, clean].isfinite().all() and tl[0][0, 0, clean].isfinite().all()


@hopper
def test_an_expanded_gradient_and_deterministic_mode(monkeypatch) -> None:
    """`out.sum()`'s gradient (expanded, stride 0) is copied for TMA, not refused; with
    deterministic algorithms asked for, the tl backward (no atomics) runs."""
    monkeypatch.setenv("TILECRAFT_GLUON_ATTENTION", "always")
    monkeypatch.setattr(sm90, "_failed", set())
    monkeypatch.setattr(sm90, "BACKWARD", True)
    kw = dict(dtype=torch.bfloat16, device="cuda", requires_grad=True)
    q, k, v = (torch.randn(1, 2, 200, 64, **kw) for _ in range(3))
    calls = []
    real = sm90.backward
    monkeypatch.setattr(sm90, "backward", lambda *a: calls.append(real(*a)) or calls[-1])
    got = torch.autograd.grad(nn_attention.attention(q, k, v, causal=True).sum(), (q, k, v))
    assert calls and calls[-1] is not None and not sm90._failed
    leaves = [t.detach().float().requires_grad_() for t in (q, k, v)]
    ref = F.scaled_dot_product_attention(*leaves, is_causal=True)
    want = torch.autograd.grad(ref.sum(), leaves)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g.float(), w, atol=5e-2, rtol=5e-2)
    monkeypatch.setattr(torch, "are_deterministic_algorithms_enabled", lambda: True)
    again = torch.autograd.grad(nn_attention.attention(q, k, v, causal=True).sum(), (q, k, v))
    assert calls[-1] is None
    for g, w in zip(again, want, strict=True):
        torch.testing.assert_close(g.float(), w, atol=5e-2, rtol=5e-2)


if __name__ == "__main__":  # the compile test's own process
    dim, *flags = sys.argv[1:]
    print(_compile_for_sm90(int(dim), *(flag == "True" for flag in flags)))
