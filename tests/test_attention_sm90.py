"""Attention's Gluon forward for Hopper (`attention_sm90.py`, `attention_gluon.py`).

On the CPU: which calls it covers, the layouts it reads in place, its compile for sm_90
(Triton's real compiler, nothing launched) and the operator's fallback to the `tl`
forward. On an sm_90 GPU: its answers against the `tl` forward and SDPA, ragged shapes,
grouped heads, both layouts, NaN, inf and huge scores, gradients through it.
"""

from __future__ import annotations

import importlib
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from tilecraft.nn import attention

sm90 = importlib.import_module("tilecraft.nn.attention_sm90")
nn_attention = importlib.import_module("tilecraft.nn.attention")

REPO = Path(__file__).resolve().parent.parent
ON_HOPPER = torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)
hopper = pytest.mark.skipif(
    not (ON_HOPPER and sm90._gluon() is not None), reason="needs an sm_90 GPU and Gluon"
)


def _heads(batch: int, heads: int, seq: int, dim: int, in_rows: bool, **kw) -> torch.Tensor:
    """`(batch, heads, seq, dim)` with heads in rows, or side by side (a fused projection)."""
    if in_rows:
        return torch.randn(batch, heads, seq, dim, **kw)
    return torch.randn(batch, seq, heads, dim, **kw).transpose(1, 2)


def test_covers_what_the_kernel_computes() -> None:
    q = torch.zeros(1, 4, 1024, 128, dtype=torch.bfloat16)
    k = torch.zeros(1, 2, 300, 128, dtype=torch.bfloat16)
    assert sm90.covers(q, k, 0.1, 0, False)
    assert sm90.covers(q.half(), k.half(), 0.1, 0, False)
    assert not sm90.covers(q.float(), k.float(), 0.1, 0, False)  # float32: the tl forward
    assert not sm90.covers(q, k, 0.1, 16, False)  # a sliding window
    assert not sm90.covers(q, k, 0.1, 0, True)  # a bias
    assert not sm90.covers(q, k, -0.1, 0, False)  # max(s) * c is max(s * c) only for c > 0
    assert not sm90.covers(q, k[:, :, :0], 0.1, 0, False)  # no keys
    assert not sm90.covers(q[..., :96], k[..., :96], 0.1, 0, False)  # head dim 96
    assert not sm90.covers(q[:, :, :1000], k, 0.1, 0, False)  # few queries: the tl forward
    assert sm90.covers(q[:, :, :1], k, 0.1, 0, False, least=1)
    assert not sm90.wanted(q, k, 0.1, 0, False)  # not on a GPU


def test_heads_are_read_in_place_in_either_layout() -> None:
    rows = _heads(2, 3, 5, 64, True, dtype=torch.bfloat16)
    view, in_rows = sm90.heads_view(rows)
    assert in_rows and view.shape == (6, 5, 64) and view.data_ptr() == rows.data_ptr()
    assert torch.equal(view[4], rows[1, 1])
    side = _heads(2, 3, 5, 64, False, dtype=torch.bfloat16)
    view, in_rows = sm90.heads_view(side)
    assert not in_rows and view.shape == (2, 5, 192)
    assert torch.equal(view[1, :, 128:], side[1, 2])
    assert sm90.heads_view(rows[..., ::2]) is None  # strided head dim: no TMA
    assert sm90.heads_view(rows[:, :, 1:, 1:]) is None  # misaligned start
    assert sm90.heads_view(torch.randn(2, 3, 64, 5).transpose(2, 3)) is None
    one = torch.randn(1, 5, 3, 64).transpose(1, 2)  # batch 1, heads side by side
    assert sm90.heads_view(one)[0].shape == (3, 5, 64)


@pytest.mark.parametrize(
    "dim, causal, q_rows, kv_rows, dtype, consumers, pingpong",
    [
        (64, False, True, False, "bfloat16", 2, False),
        (128, True, False, True, "float16", 2, True),
        (64, True, True, True, "bfloat16", 3, False),
    ],
)
def test_compiles_for_sm90_warp_specialized(dim, causal, q_rows, kv_rows, dtype, consumers,
                                            pingpong):  # fmt: skip
    """Triton's compiler, for sm_90, without a GPU: each consumer gets the registers
    `REGISTERS` gives it (240 of two, 160 of three; one case taking turns, `PINGPONG`) and
    the loader 24 (`setmaxnreg`), and no product is contracted into an FMA (the `tl`
    backward recomputes the scores unfused and needs the same row maxima). In a process
    of its own: under TRITON_INTERPRET Triton's standard functions are not compilable."""
    pytest.importorskip("triton.experimental.gluon.language.nvidia.hopper")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    flags = [str(flag) for flag in (dim, causal, q_rows, kv_rows)]
    argv = [sys.executable, __file__, *flags, dtype, str(consumers), str(pingpong)]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    ptx = done.stdout
    counts = set(re.findall(r"setmaxnreg\.(?:inc|dec)\.sync\.aligned\.u32\s+(\d+)", ptx))
    assert {str(sm90.REGISTERS[consumers][1]), "24"} <= counts
    assert "wgmma.mma_async" in ptx and "cp.async.bulk.tensor" in ptx
    assert not re.search(r"\bfma\.rn\.f32", ptx)


def test_persistent_programs_where_a_head_has_few_query_tiles(monkeypatch) -> None:
    """Dynamic persistent programs (a zeroed int32 counter of the tiles taken) where a head
    has at most `PERSISTENT_UP_TO` query tiles, one program per tile beyond; `SCHEDULE`
    forces one of the three."""
    pytest.importorskip("triton.experimental.gluon.language.nvidia.hopper")

    def launch(seq: int) -> tuple:
        q, k = (torch.zeros(2, h, s, 64, dtype=torch.bfloat16) for h, s in ((4, seq), (2, 300)))
        views = [sm90.heads_view(t) for t in (q, k, k)]
        out, stats = sm90.empty_outputs(q)
        tiles, args, options = sm90.kernel_arguments(views, out, stats, True, 0.125, 2)
        return tiles, args[5], options["DYNAMIC"]

    rows = sm90.CONSUMERS[64, True] * sm90.BLOCK_M
    tiles, counter, dynamic = launch(sm90.PERSISTENT_UP_TO * rows)
    assert tiles == 8 * sm90.PERSISTENT_UP_TO and dynamic
    assert counter.dtype == torch.int32 and counter.tolist() == [0]
    tiles, counter, dynamic = launch(sm90.PERSISTENT_UP_TO * rows + 1)
    assert tiles == 8 * (sm90.PERSISTENT_UP_TO + 1) and not dynamic
    monkeypatch.setattr(sm90, "SCHEDULE", "dynamic")
    assert launch(sm90.PERSISTENT_UP_TO * rows + 1)[2]


def _compile_for_sm90(dim: int, causal: bool, q_rows: bool, kv_rows: bool, dtype: str) -> str:
    """The kernel's PTX for sm_90, compiled as a launch with these inputs would be."""
    kw = dict(dtype=getattr(torch, dtype))
    q = _heads(2, 4, 300, dim, q_rows, **kw)
    k, v = (_heads(2, 2, 257, dim, kv_rows, **kw) for _ in range(2))
    out, stats = sm90.empty_outputs(q)
    views = [sm90.heads_view(t) for t in (q, k, v)]
    _, args, options = sm90.kernel_arguments(views, out, stats, causal, 0.125, 2)
    return ptx_for_sm90(sm90._gluon().attention_forward_sm90, args, options)


def ptx_for_sm90(kernel, args: list, options: dict) -> str:  # type: ignore[no-untyped-def]
    """Compile a Gluon kernel for sm_90 with Triton's real compiler, as a launch with these
    arguments and constexprs-with-options would, launching nothing; its PTX."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource
    from triton.runtime.jit import mangle_type

    options = dict(options)
    constexprs = {n: options.pop(n) for n in list(options) if n in kernel.arg_names}
    signature = {n: mangle_type(a) for n, a in zip(kernel.arg_names, args, strict=False)}
    signature.update(dict.fromkeys(constexprs, "constexpr"))
    source = GluonASTSource(kernel, signature, constexprs)
    return triton.compile(source, target=GPUTarget("cuda", 90, 32), options=options).asm["ptx"]


def test_triton_3_5s_gluon_runs_the_tl_kernels(monkeypatch) -> None:
    """Triton 3.5's Gluon forks warps with another signature (the default partition's
    arguments first), so the Gluon kernels would fail to compile at every call: their module
    refuses to load there and `_gluon` gives None, which runs the `tl` kernels quietly."""
    gl = pytest.importorskip("triton.experimental.gluon.language")
    pytest.importorskip("triton.experimental.gluon.language.nvidia.hopper")

    def old(default_args, default_partition, worker_args, worker_partitions, worker_num_warps,
            worker_num_regs):  # fmt: skip
        raise AssertionError("not called")

    monkeypatch.setattr(gl, "warp_specialize", old)
    monkeypatch.delitem(sys.modules, "tilecraft.nn.attention_gluon", raising=False)
    monkeypatch.delattr(importlib.import_module("tilecraft.nn"), "attention_gluon", raising=False)
    with pytest.raises(ImportError, match="from Triton 3.6"):
        importlib.import_module("tilecraft.nn.attention_gluon")
    assert sm90._gluon.__wrapped__() is None


def test_the_operator_falls_back_to_the_tl_forward(monkeypatch) -> None:
    """Where the Gluon kernel cannot run (here: no GPU), the operator warns once per
    variant and runs the `tl` forward; its answers and gradients are SDPA's."""
    q = torch.randn(1, 2, 5, 64, requires_grad=True)
    k, v = (torch.randn(1, 1, 7, 64, requires_grad=True) for _ in range(2))
    empty = q.new_empty(0)
    monkeypatch.setattr(sm90, "_failed", set())  # this test's failure is its own
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out, stats = nn_attention.attention_sm90_op(q, k, v, empty, True, 0.125, 0, False)
    assert any("Gluon attention forward failed" in str(w.message) for w in caught)
    assert out.stride() == (640, 64, 128, 1) and stats.shape == (2, 1, 2, 5)
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.125, enable_gqa=True)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
    grads = torch.autograd.grad(out.sum(), (q, k, v))
    for got, want in zip(grads, torch.autograd.grad(ref.sum(), (q, k, v)), strict=True):
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)


def _both(q, k, v, causal: bool) -> tuple:
    """The Gluon forward's (output, statistics) and the tl forward's, for the same call."""
    scale = q.size(-1) ** -0.5
    gluon = sm90.forward(q, k, v, causal, scale)
    assert gluon is not None, "the Gluon forward did not run"
    bias = q.new_empty(0)
    tl = nn_attention.attention_forward(q, k, v, bias, causal, scale, 0, False)
    return gluon, tl


SHAPES = [  # batch, heads, kv heads, queries, keys, head dim
    (1, 1, 1, 1, 1, 64),
    (2, 4, 2, 77, 130, 64),
    (1, 2, 1, 300, 257, 128),
    (2, 2, 2, 1100, 1000, 128),
    (1, 3, 1, 129, 1300, 64),
]


@hopper
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("in_rows", [True, False])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("schedule", ["one", "static", "dynamic"])
def test_gluon_forward_matches_the_tl_forward(shape, causal, in_rows, dtype, schedule,
                                              monkeypatch) -> None:  # fmt: skip
    """One program per tile, and persistent: three programs running every tile in turn
    or taking the next one free (the rings' and barriers' phases carried across tiles)."""
    monkeypatch.setattr(sm90, "SCHEDULE", schedule)
    monkeypatch.setattr(sm90, "PROGRAMS", 3)
    _check_forward(shape, causal, in_rows, dtype)


@hopper
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("consumers", [2, 3])
@pytest.mark.parametrize("schedule", ["one", "dynamic"])
@pytest.mark.parametrize("turns", [False, True])
@pytest.mark.parametrize("buffers", [1, 2])
def test_consumers_turns_and_query_buffers_as_the_tl_forward(
    shape, causal, consumers, schedule, turns, buffers, monkeypatch
) -> None:
    """Ping-pong (`PINGPONG`): the consumers issue their products in turn, across tiles
    and programs (three causal consumers see other key tile counts: no turns there); one
    query buffer per consumer or two (`QUERY_BUFFERS`), taken in turn by a program's tiles."""
    key = (shape[-1], causal)
    if consumers == 3 and shape[-1] == 128:
        pytest.skip("three consumers' tiles at head dim 128 overflow shared memory")
    monkeypatch.setattr(sm90, "SCHEDULE", schedule)
    monkeypatch.setattr(sm90, "PROGRAMS", 3)
    monkeypatch.setitem(sm90.QUERY_BUFFERS, key, buffers)
    monkeypatch.setitem(sm90.PINGPONG, key, turns)
    monkeypatch.setitem(sm90.CONSUMERS, key, consumers)
    _check_forward(shape, causal, True, torch.bfloat16)


def _check_forward(shape: tuple, causal: bool, in_rows: bool, dtype: torch.dtype) -> None:
    """The Gluon forward against SDPA in float32 and the tl forward (statistics too)."""
    batch, heads, kv_heads, m, n, dim = shape
    kw = dict(dtype=dtype, device="cuda")
    q = _heads(batch, heads, m, dim, in_rows, **kw)
    k, v = (_heads(batch, kv_heads, n, dim, not in_rows, **kw) for _ in range(2))
    (out, stats), (tl_out, tl_stats) = _both(q, k, v, causal)
    ref = F.scaled_dot_product_attention(
        q.float(), k.float(), v.float(), is_causal=causal, enable_gqa=True
    )
    torch.testing.assert_close(out.float(), ref, atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(out, tl_out, atol=1e-2, rtol=1e-2)
    assert torch.equal(stats[0], tl_stats[0]), "row maxima differ from the tl forward's"
    torch.testing.assert_close(stats[1], tl_stats[1], atol=1e-5, rtol=1e-5)


@hopper
@pytest.mark.parametrize("causal", [False, True])
def test_nan_inf_and_huge_scores_as_the_tl_forward(causal) -> None:
    kw = dict(dtype=torch.bfloat16, device="cuda")
    q, k, v = (torch.randn(1, 2, 300, 64, **kw) for _ in range(3))
    q[0, 0, 5] = float("nan")
    k[0, 1, 7, 3] = float("inf")
    k[0, 0, 200] = 1e30
    v[0, 1, 250, 0] = float("-inf")
    (out, stats), (tl_out, tl_stats) = _both(q, k, v, causal)
    torch.testing.assert_close(out, tl_out, atol=1e-2, rtol=1e-2, equal_nan=True)
    finite = tl_stats.isfinite()
    assert torch.equal(stats.isfinite(), finite)
    assert torch.equal(stats[0][finite[0]], tl_stats[0][finite[0]])


@hopper
@pytest.mark.parametrize("causal", [False, True])
def test_attention_backward_through_the_gluon_forward(causal, monkeypatch) -> None:
    monkeypatch.setenv("TILECRAFT_GLUON_ATTENTION", "always")
    monkeypatch.setattr(sm90, "_failed", set())
    kw = dict(dtype=torch.bfloat16, device="cuda", requires_grad=True)
    q = torch.randn(2, 4, 333, 128, **kw)
    k, v = (torch.randn(2, 2, 400, 128, **kw) for _ in range(2))
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # the Gluon forward must not fall back
        out = attention(q, k, v, causal=causal)
    assert not sm90._failed
    grad = torch.randn_like(out)
    got = torch.autograd.grad(out, (q, k, v), grad)
    leaves = [t.detach().float().requires_grad_() for t in (q, k, v)]
    ref = F.scaled_dot_product_attention(*leaves, is_causal=causal, enable_gqa=True)
    want = torch.autograd.grad(ref, leaves, grad.float())
    torch.testing.assert_close(out.float(), ref, atol=2e-2, rtol=2e-2)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g.float(), w, atol=5e-2, rtol=5e-2)


if __name__ == "__main__":  # the compile test's own process
    dim, causal, q_rows, kv_rows, dtype, consumers, pingpong = sys.argv[1:]
    flags = (flag == "True" for flag in (causal, q_rows, kv_rows))
    sm90.CONSUMERS[int(dim), causal == "True"] = int(consumers)
    sm90.PINGPONG[int(dim), causal == "True"] = pingpong == "True"
    print(_compile_for_sm90(int(dim), *flags, dtype))


def test_the_operator_passes_pytorchs_custom_op_checks(monkeypatch) -> None:
    """`torch.library.opcheck`: its schema, its fake outputs (shapes, dtypes, strides: the
    output laid out as `(batch, queries, heads, head_dim)`) against the real ones, and its
    autograd registration; on the CPU, through the tl forward it falls back to."""
    monkeypatch.setattr(sm90, "_failed", set())
    q = torch.randn(2, 2, 5, 64, requires_grad=True)
    k, v = (torch.randn(2, 1, 7, 64, requires_grad=True) for _ in range(2))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the Gluon forward's fallback
        args = (q, k, v, q.new_empty(0), False, 0.125, 0, False)
        torch.library.opcheck(nn_attention.attention_sm90_op, args)
