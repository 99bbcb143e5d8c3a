"""Probe: can a warp-specialized Gluon flash-attention backward reach >= 0.8x cuDNN on Hopper?

tilecraft's FlashAttention-2 backward in plain Triton `tl` (a dK/dV kernel, a dQ kernel and a
delta preprocess) reaches 0.68-0.75x of cuDNN's backward on an H200. This file holds an FA3-like
backward in Gluon: a CTA owns 2 * BLOCK_N keys of one (batch, head); a 1-warp TMA loader streams
Q and dO tiles through rings to two 4-warp wgmma consumers, each owning BLOCK_N of those keys and
accumulating dK and dV in registers, while dQ is accumulated in a global fp32 buffer with atomic
adds. The forward's log-sum-exp is an input (computed here with torch, not timed); delta =
rowsum(dO * O), the dQ zeroing and its fp32 -> bf16 conversion are timed with the main kernel.

Status (2026-12-05): every variant compiles for sm_90 with Triton 3.6 (head dim 128 spills
80-168 bytes of registers); it has never run on a GPU, so its results and speed are unknown.

GPU (checks against SDPA's autograd, times against SDPA's cuDNN and flash backward, writes JSON):
    python benchmarks/attention_gluon_bwd_probe.py --out $OUT/attention_gluon_bwd.json
    python benchmarks/attention_gluon_bwd_probe.py --smoke   # correctness checks only
CPU (compiles every variant for sm_90 with Triton 3.6, launches nothing):
    PYTHONPATH=/tmp/tri36 /work/main/.venv/bin/python \
        benchmarks/attention_gluon_bwd_probe.py --compile-only
"""

import argparse
import json
import math
from dataclasses import asdict, dataclass

import torch
import triton
import triton.language as tl
from attention_gluon_probe import (  # (benchmarks/: run as a script, its folder on the path)
    CONSUMER_REGS,
    LOADER_REGS,
    MAXNREG,
    SHAPES,
    SMEM_LIMIT,
    _barrier_array,
    compile_kernel,
    compile_only,
    first_lines,
)
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

CHECK_SHAPE = (2, 3, 512)  # batch, heads, seq of the correctness check
# Registers: 3 warpgroups (two consumers, loader padded to 4 warps) x 128 threads x 168 <= 64K;
# setmaxnreg then moves the loader's to the consumers (24 and 240). Per consumer thread with
# BLOCK_N = 64 keys and BLOCK_M query rows: dK + dV hold 2 * 64 * D / 128 = D fp32 registers
# (128 at D = 128), S^T and dP^T BLOCK_M / 2 each, the dQ tile BLOCK_M * D / 128 (64 at
# BLOCK_M = 64, D = 128; halved by computing it in 64-column chunks): one 64-key tile per
# warpgroup. ptxas still reports small spills at D = 128 (see --compile-only).
LOG2E = gl.constexpr(1.4426950408889634)
TOLERANCE = 5e-2  # max abs error relative to the reference gradient's max abs


@dataclass(frozen=True)
class Config:
    """One point of the sweep; BLOCK_N is per consumer warpgroup, so a CTA owns 2 * block_n keys."""

    block_m: int = 64
    block_n: int = 64
    stages: int = 2

    def smem_bytes(self, head_dim: int) -> int:
        """K and V of both consumers, the Q and dO rings, and both dS^T tiles, in bf16."""
        kv = 2 * 2 * self.block_n * head_dim
        rings = 2 * self.stages * self.block_m * head_dim
        return 2 * (kv + rings + 2 * self.block_n * self.block_m)


def sweep(head_dim: int) -> list[Config]:
    """Ring depths that fit shared memory at BLOCK_M = 64 (BLOCK_M = 128 spills heavily)."""
    shapes = {64: [(64, 2), (64, 4)], 128: [(64, 2), (64, 3), (64, 4)]}
    configs = [Config(block_m=m, stages=s) for m, s in shapes[head_dim]]
    return [c for c in configs if c.smem_bytes(head_dim) <= SMEM_LIMIT]


@triton.jit
def _delta_kernel(o_ptr, do_ptr, delta_ptr, HEAD_D: tl.constexpr, ROWS: tl.constexpr):
    """delta = rowsum(dO * O) in fp32: one read of O and dO, no fp32 copies as torch would make."""
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    offs = rows[:, None] * HEAD_D + tl.arange(0, HEAD_D)[None, :]
    o = tl.load(o_ptr + offs).to(tl.float32)
    do = tl.load(do_ptr + offs).to(tl.float32)
    tl.store(delta_ptr + rows, tl.sum(o * do, axis=1))


@gluon.jit
def _key_origin(seq_len, BLOCK_N: gl.constexpr):
    """Row of this (batch, head) in the flattened tensors, and the first key row of the CTA.

    Key tile 0 has the most work when causal; it comes first in the grid, so the tail is short.
    """
    return gl.program_id(1) * seq_len, gl.program_id(0) * 2 * BLOCK_N


@gluon.jit
def _first_query_tile(k_start, BLOCK_M: gl.constexpr, CAUSAL: gl.constexpr):
    """Causal: query tiles that end before k_start attend to none of the keys from k_start on."""
    if CAUSAL:
        return k_start // BLOCK_M
    else:
        return 0


@gluon.jit
def _load_partition(descs, smem, bars, seq_len, CAUSAL: gl.constexpr):
    """One warp: TMA both consumers' K and V tiles once, then stream Q and dO through the rings.

    Q and dO have separate ready/empty barriers so S^T = K Q^T can start before dO lands. Empty
    barriers count two arrivals: both consumers read every tile of the ring.
    """
    q_desc, k_desc, v_desc, do_desc = descs
    k_smem, v_smem, q_smem, do_smem, ds_smem = smem
    kv_ready, q_ready, q_empty, do_ready, do_empty = bars
    NUM_STAGES: gl.constexpr = q_smem.shape[0]
    BLOCK_M: gl.constexpr = q_smem.shape[1]
    BLOCK_N: gl.constexpr = k_smem.shape[1]
    row0, k_cta = _key_origin(seq_len, BLOCK_N)
    for c in gl.static_range(2):
        kv_row = row0 + k_cta + c * BLOCK_N
        mbarrier.expect(kv_ready.index(c), 2 * k_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(k_desc, [kv_row, 0], kv_ready.index(c), k_smem.index(c))
        tma.async_copy_global_to_shared(v_desc, [kv_row, 0], kv_ready.index(c), v_smem.index(c))
    first = _first_query_tile(k_cta, BLOCK_M, CAUSAL)
    for t in range(seq_len // BLOCK_M - first):
        slot = t % NUM_STAGES
        phase = (t // NUM_STAGES) & 1
        q_row = row0 + (first + t) * BLOCK_M
        mbarrier.wait(q_empty.index(slot), phase ^ 1)  # a fresh barrier passes parity 1 at once
        mbarrier.expect(q_ready.index(slot), q_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(q_desc, [q_row, 0], q_ready.index(slot), q_smem.index(slot))
        mbarrier.wait(do_empty.index(slot), phase ^ 1)
        mbarrier.expect(do_ready.index(slot), do_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(
            do_desc, [q_row, 0], do_ready.index(slot), do_smem.index(slot)
        )


@gluon.jit
def _skip_tiles(n_skip, bars, NUM_STAGES: gl.constexpr):
    """Causal only: consumer 1 needs fewer query tiles than the CTA loads (they precede its keys).

    It still has to release each of those slots after it was filled, or the loader hangs.
    """
    kv_ready, q_ready, q_empty, do_ready, do_empty = bars
    for t in range(n_skip):
        slot = t % NUM_STAGES
        phase = (t // NUM_STAGES) & 1
        mbarrier.wait(q_ready.index(slot), phase)
        mbarrier.arrive(q_empty.index(slot))
        mbarrier.wait(do_ready.index(slot), phase)
        mbarrier.arrive(do_empty.index(slot))


@gluon.jit
def _mask_above_diagonal(p_t, k_start, q_start):
    """Zero P^T where the query precedes the key; only tiles crossing the diagonal pay for it."""
    BLOCK_N: gl.constexpr = p_t.shape[0]
    BLOCK_M: gl.constexpr = p_t.shape[1]
    if q_start < k_start + BLOCK_N:
        keys = k_start + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, p_t.type.layout))
        queries = q_start + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(0, p_t.type.layout))
        p_t = gl.where(queries[None, :] >= keys[:, None], p_t, 0.0)
    return p_t


@gluon.jit
def _consumer(descs, smem, bars, lse_ptr, delta_ptr, dq_ptr, seq_len, sm_scale,
              CAUSAL: gl.constexpr, CONSUMER: gl.constexpr):  # fmt: skip
    """One warpgroup owning BLOCK_N keys: per query tile, the five wgmmas of the backward.

    Everything is computed transposed (keys along M) so P^T and dS^T are already the register A
    operands of dV += P^T dO and dK += dS^T Q. dQ = dS K needs dS as an A operand with queries
    along M: dS^T goes through shared memory and is read back as a permuted view. The S^T and
    dP^T products are issued back to back; the exponentials overlap dP^T, the dS^T math overlaps
    dV. dQ = dS K then runs in 64-column chunks (K sliced along D), each added to the global
    fp32 buffer with relaxed atomics, so at most 32 dQ registers per thread are live.
    """
    dk_desc, dv_desc = descs
    k_smem, v_smem, q_smem, do_smem, ds_smem = smem
    kv_ready, q_ready, q_empty, do_ready, do_empty = bars
    NUM_STAGES: gl.constexpr = q_smem.shape[0]
    BLOCK_M: gl.constexpr = q_smem.shape[1]
    HEAD_D: gl.constexpr = q_smem.shape[2]
    BLOCK_N: gl.constexpr = k_smem.shape[1]
    # wgmma accumulators: 4 warps stacked along M, one instruction spanning the whole N.
    s_layout: gl.constexpr = gl.NVMMADistributedLayout([3, 0], [4, 1], [16, BLOCK_M, 16])
    d_layout: gl.constexpr = gl.NVMMADistributedLayout([3, 0], [4, 1], [16, HEAD_D, 16])
    a_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=d_layout, k_width=2)
    per_query: gl.constexpr = gl.SliceLayout(0, s_layout)

    row0, k_cta = _key_origin(seq_len, BLOCK_N)
    k_start = k_cta + CONSUMER * BLOCK_N
    first_cta = _first_query_tile(k_cta, BLOCK_M, CAUSAL)
    first = _first_query_tile(k_start, BLOCK_M, CAUSAL)
    qk_scale = sm_scale * LOG2E
    k_buf = k_smem.index(CONSUMER)
    v_buf = v_smem.index(CONSUMER)
    ds_buf = ds_smem.index(CONSUMER)
    s_zero = gl.zeros([BLOCK_N, BLOCK_M], gl.float32, s_layout)
    DQ_N: gl.constexpr = 64  # dQ in 64-column chunks: half the registers of a full tile at D=128
    dq_layout: gl.constexpr = gl.NVMMADistributedLayout([3, 0], [4, 1], [16, DQ_N, 16])
    dq_zero = gl.zeros([BLOCK_M, DQ_N], gl.float32, dq_layout)
    dk = gl.zeros([BLOCK_N, HEAD_D], gl.float32, d_layout)
    dv = gl.zeros([BLOCK_N, HEAD_D], gl.float32, d_layout)
    query_offs = gl.arange(0, BLOCK_M, layout=per_query)
    dq_rows = gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, dq_layout))
    dq_cols = gl.arange(0, DQ_N, layout=gl.SliceLayout(0, dq_layout))
    dq_offs = dq_rows[:, None] * HEAD_D + dq_cols[None, :]

    _skip_tiles(first - first_cta, bars, NUM_STAGES)
    mbarrier.wait(kv_ready.index(CONSUMER), 0)
    for t in range(first - first_cta, seq_len // BLOCK_M - first_cta):
        slot = t % NUM_STAGES
        phase = (t // NUM_STAGES) & 1
        q_start = (first_cta + t) * BLOCK_M
        q_buf = q_smem.index(slot)
        do_buf = do_smem.index(slot)
        lse = gl.load(lse_ptr + row0 + q_start + query_offs)  # latency hidden by S^T
        mbarrier.wait(q_ready.index(slot), phase)
        s_t = warpgroup_mma(k_buf, q_buf.permute((1, 0)), s_zero, use_acc=False, is_async=True)
        mbarrier.wait(do_ready.index(slot), phase)
        dp_t = warpgroup_mma(v_buf, do_buf.permute((1, 0)), s_zero, use_acc=False, is_async=True)
        s_t = warpgroup_mma_wait(1, deps=(s_t,))  # wgmma groups retire in order: S^T is done
        delta = gl.load(delta_ptr + row0 + q_start + query_offs)  # latency hidden by exp2
        p_t = gl.exp2(s_t * qk_scale - lse[None, :] * LOG2E)
        if CAUSAL:
            p_t = _mask_above_diagonal(p_t, k_start, q_start)
        p_t = p_t.to(gl.bfloat16)  # one copy of P^T, 16 registers, serves dV and dS^T
        p_op = gl.convert_layout(p_t, a_layout)
        dv = warpgroup_mma(p_op, do_buf, dv, is_async=True)
        dp_t = warpgroup_mma_wait(1, deps=(dp_t,))
        ds_t = (p_t.to(gl.float32) * (dp_t - delta[None, :])).to(gl.bfloat16)
        ds_buf.store(ds_t)
        fence_async_shared()  # make the dS^T stores visible to the wgmma (async proxy)
        ds_op = gl.convert_layout(ds_t, a_layout)
        dk = warpgroup_mma(ds_op, q_buf, dk, is_async=True)
        dv, dk, p_op, ds_op = warpgroup_mma_wait(0, deps=(dv, dk, p_op, ds_op))
        mbarrier.arrive(q_empty.index(slot))  # dQ reads only dS^T and K: release Q and dO now
        mbarrier.arrive(do_empty.index(slot))
        for c in gl.static_range(HEAD_D // DQ_N):
            k_cols = k_buf.slice(c * DQ_N, DQ_N, dim=1)
            dq = warpgroup_mma(
                ds_buf.permute((1, 0)), k_cols, dq_zero, use_acc=False, is_async=True
            )
            dq = warpgroup_mma_wait(0, deps=(dq,))
            dq_base = dq_ptr + (row0 + q_start) * HEAD_D + c * DQ_N
            gl.atomic_add(dq_base + dq_offs, dq, sem="relaxed")

    k_buf.store((dk * sm_scale).to(gl.bfloat16))  # K and V are no longer read: stage dK, dV
    v_buf.store(dv.to(gl.bfloat16))
    fence_async_shared()
    tma.async_copy_shared_to_global(dk_desc, [row0 + k_start, 0], k_buf)
    tma.async_copy_shared_to_global(dv_desc, [row0 + k_start, 0], v_buf)
    tma.store_wait(0)


@gluon.jit
def attention_bwd_kernel(q_desc, k_desc, v_desc, do_desc, dk_desc, dv_desc,
                         lse_ptr, delta_ptr, dq_ptr, sm_scale, seq_len,
                         NUM_STAGES: gl.constexpr, CAUSAL: gl.constexpr):  # fmt: skip
    """Allocate tiles and barriers, then fork: consumer 0 (default), consumer 1, loader.

    Block sizes come from the descriptors: Q/dO tiles are BLOCK_M x HEAD_D, K/V/dK/dV tiles
    BLOCK_N x HEAD_D. lse is the forward's natural log-sum-exp per query row, delta the rowsum
    of dO * O, dq an fp32 buffer of q's shape that must start zeroed.
    """
    BLOCK_M: gl.constexpr = q_desc.block_type.shape[0]
    BLOCK_N: gl.constexpr = k_desc.block_type.shape[0]
    ds_layout: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16)
    stages: gl.constexpr = [NUM_STAGES]
    smem = (
        gl.allocate_shared_memory(k_desc.dtype, [2] + k_desc.block_type.shape, k_desc.layout),
        gl.allocate_shared_memory(v_desc.dtype, [2] + v_desc.block_type.shape, v_desc.layout),
        gl.allocate_shared_memory(q_desc.dtype, stages + q_desc.block_type.shape, q_desc.layout),
        gl.allocate_shared_memory(do_desc.dtype, stages + do_desc.block_type.shape, do_desc.layout),
        gl.allocate_shared_memory(gl.bfloat16, [2, BLOCK_N, BLOCK_M], ds_layout),
    )
    bars = (
        _barrier_array(2, 1),  # K and V of consumer c landed
        _barrier_array(NUM_STAGES, 1),  # Q ready
        _barrier_array(NUM_STAGES, 2),  # Q empty: both consumers done with it
        _barrier_array(NUM_STAGES, 1),  # dO ready
        _barrier_array(NUM_STAGES, 2),  # dO empty
    )
    fence_async_shared()  # make the initialised barriers visible to the TMA (async) proxy
    out = (dk_desc, dv_desc)
    gl.warp_specialize(
        [
            (
                _consumer,
                (out, smem, bars, lse_ptr, delta_ptr, dq_ptr, seq_len, sm_scale, CAUSAL, 0),
            ),
            (
                _consumer,
                (out, smem, bars, lse_ptr, delta_ptr, dq_ptr, seq_len, sm_scale, CAUSAL, 1),
            ),
            (_load_partition, ((q_desc, k_desc, v_desc, do_desc), smem, bars, seq_len, CAUSAL)),
        ],
        [4, 1],
        [CONSUMER_REGS, LOADER_REGS],
    )


def kernel_args(q, k, v, do, dk, dv, lse, delta, dq_acc, causal: bool, cfg: Config):
    """Descriptors, pointers, scalars, constexprs, grid and launch options: shared by both modes."""
    batch, heads, seq, head_dim = q.shape
    assert head_dim in (64, 128), "probe supports head_dim 64 and 128"
    assert seq % cfg.block_m == 0 and seq % (2 * cfg.block_n) == 0, "probe needs seq % block == 0"
    q_layout = gl.NVMMASharedLayout.get_default_for([cfg.block_m, head_dim], gl.bfloat16)
    kv_layout = gl.NVMMASharedLayout.get_default_for([cfg.block_n, head_dim], gl.bfloat16)

    def desc(t: torch.Tensor, rows: int, layout) -> TensorDescriptor:
        return TensorDescriptor.from_tensor(t.view(-1, head_dim), [rows, head_dim], layout)

    runtime = [
        desc(q, cfg.block_m, q_layout),
        desc(k, cfg.block_n, kv_layout),
        desc(v, cfg.block_n, kv_layout),
        desc(do, cfg.block_m, q_layout),
        desc(dk, cfg.block_n, kv_layout),
        desc(dv, cfg.block_n, kv_layout),
        lse,
        delta,
        dq_acc,
        1.0 / math.sqrt(head_dim),
        seq,
    ]
    constexprs = dict(NUM_STAGES=cfg.stages, CAUSAL=causal)
    grid = (seq // (2 * cfg.block_n), batch * heads)
    return runtime, constexprs, grid, dict(num_warps=4, maxnreg=MAXNREG)


def attention_bwd(q, k, v, o, do, lse, causal: bool, cfg: Config):
    """Return ((dq, dk, dv), launcher): the launcher runs the whole timed backward.

    That is delta, zeroing the fp32 dQ buffer, the main kernel, and dQ's scale and bf16 cast;
    descriptors are built once so timing sees only those steps.
    """
    head_dim = q.shape[-1]
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    delta = torch.empty(q.shape[:-1], device=q.device, dtype=torch.float32)
    dq_acc = torch.empty(q.shape, device=q.device, dtype=torch.float32)
    runtime, constexprs, grid, options = kernel_args(
        q, k, v, do, dk, dv, lse, delta, dq_acc, causal, cfg
    )
    rows = 64
    assert delta.numel() % rows == 0

    def launch() -> None:
        _delta_kernel[(delta.numel() // rows,)](o, do, delta, HEAD_D=head_dim, ROWS=rows)
        dq_acc.zero_()
        attention_bwd_kernel[grid](*runtime, **constexprs, **options)
        torch.mul(dq_acc, 1.0 / math.sqrt(head_dim), out=dq_acc)
        dq.copy_(dq_acc)

    launch()
    return (dq, dk, dv), launch


def compile_for_sm90(head_dim: int, causal: bool, cfg: Config) -> dict:
    """Compile one variant with Triton's real compiler for sm_90 without a GPU; report resources."""
    seq = max(cfg.block_m, 2 * cfg.block_n)
    t = torch.empty(1, 1, seq, head_dim, dtype=torch.bfloat16)
    f = torch.empty(1, 1, seq, head_dim, dtype=torch.float32)
    runtime, constexprs, _, options = kernel_args(t, t, t, t, t, t, f, f, f, causal, cfg)
    return compile_kernel(attention_bwd_kernel, runtime, constexprs, options)


def logsumexp_rows(q: torch.Tensor, k: torch.Tensor, causal: bool, chunk: int = 4096):
    """The forward's natural log-sum-exp per query row, fp32, in chunks to bound memory."""
    batch, heads, seq, head_dim = q.shape
    qf, kf = q.reshape(-1, seq, head_dim), k.reshape(-1, seq, head_dim)
    lse = torch.empty(qf.shape[:2], device=q.device, dtype=torch.float32)
    keys = torch.arange(seq, device=q.device)
    for bh in range(qf.shape[0]):
        for start in range(0, seq, chunk):
            s = qf[bh, start : start + chunk].float() @ kf[bh].float().T / math.sqrt(head_dim)
            if causal:
                queries = torch.arange(start, start + s.shape[0], device=q.device)
                s.masked_fill_(keys[None, :] > queries[:, None], float("-inf"))
            lse[bh, start : start + chunk] = torch.logsumexp(s, -1)
    return lse.view(batch, heads, seq)


def sdpa_grads(q, k, v, do, causal: bool, backend=None):
    """SDPA's output and a closure returning its (dq, dk, dv); the backend is fixed at forward."""
    from torch.nn.attention import sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention as sdpa

    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
    if backend is None:
        out = sdpa(q, k, v, is_causal=causal)
    else:
        with sdpa_kernel(backend):
            out = sdpa(q, k, v, is_causal=causal)
    return out.detach(), lambda: torch.autograd.grad(out, (q, k, v), do, retain_graph=True)


def inputs(shape: tuple[int, int, int, int], causal: bool):
    """Random q, k, v, dO plus the reference output and the log-sum-exp the backward needs."""
    q, k, v, do = (torch.randn(shape, device="cuda", dtype=torch.bfloat16) for _ in range(4))
    return q, k, v, do, logsumexp_rows(q, k, causal)


def check(head_dim: int, causal: bool) -> list[dict]:
    """Every sweep config's dq, dk, dv against SDPA's autograd on a small shape."""
    shape = (*CHECK_SHAPE, head_dim)
    q, k, v, do, lse = inputs(shape, causal)
    out, grads = sdpa_grads(q, k, v, do, causal)
    refs = grads()
    rows = []
    for cfg in sweep(head_dim):
        row = dict(shape=list(shape), causal=causal, impl="gluon", config=asdict(cfg))
        try:
            got, _ = attention_bwd(q, k, v, out, do, lse, causal, cfg)
            torch.cuda.synchronize()
            for name, g, r in zip(("dq", "dk", "dv"), got, refs, strict=True):
                err = (g.float() - r.float()).abs().max().item()
                row[name] = rel = err / r.float().abs().max().item()
                row["wrong"] = row.get("wrong", False) or not rel <= TOLERANCE
        except Exception as exc:  # noqa: BLE001 - a probe reports every failure and moves on
            row["error"] = first_lines(exc)
        rows.append(row)
        errs = " ".join(f"{n}={row[n]:.1e}" for n in ("dq", "dk", "dv") if n in row)
        verdict = row.get("error") or ("WRONG" if row["wrong"] else "ok")
        print(f"check d={head_dim} causal={causal!s:5} {_label(row)}: {errs} {verdict}")
    return rows


def tflops(shape: tuple[int, int, int, int], causal: bool, ms: float) -> float:
    """Backward FLOPs 10*b*h*s*s*d (2.5x the forward's), halved when causal, as TFLOP/s."""
    b, h, s, d = shape
    return 10 * b * h * s * s * d / (2 if causal else 1) / ms * 1e-9


def bench_case(shape: tuple[int, int, int, int], causal: bool) -> list[dict]:
    """Time both SDPA backends' backward and every sweep config on one shape; return the rows."""
    from torch.nn.attention import SDPBackend

    q, k, v, do, lse = inputs(shape, causal)
    case = dict(shape=list(shape), causal=causal)
    rows = []
    out = None
    for name, backend in (
        ("cudnn", SDPBackend.CUDNN_ATTENTION),
        ("flash", SDPBackend.FLASH_ATTENTION),
    ):
        try:
            out, grads = sdpa_grads(q, k, v, do, causal, backend)
            ms = triton.testing.do_bench(grads, warmup=25, rep=100)
            rows.append(dict(case, impl=name, ms=ms, tflops=tflops(shape, causal, ms)))
        except Exception as exc:  # noqa: BLE001
            rows.append(dict(case, impl=name, error=first_lines(exc)))
    if out is None:
        out, _ = sdpa_grads(q, k, v, do, causal)
    for cfg in sweep(shape[3]):
        row = dict(case, impl="gluon", config=asdict(cfg))
        try:
            _, launch = attention_bwd(q, k, v, out, do, lse, causal, cfg)
            row["ms"] = triton.testing.do_bench(launch, warmup=25, rep=100)
            row["tflops"] = tflops(shape, causal, row["ms"])
        except Exception as exc:  # noqa: BLE001
            row["error"] = first_lines(exc)
        rows.append(row)
    return rows


def _label(row: dict) -> str:
    """Short name of a row: the impl, plus the config for Gluon rows."""
    if "config" not in row:
        return row["impl"]
    c = row["config"]
    return f"{row['impl']} m{c['block_m']} n{c['block_n']} s{c['stages']}"


def print_case(rows: list[dict]) -> None:
    """One table per case: TFLOP/s and ratios to cuDNN and flash for every row."""
    peers = {r["impl"]: r.get("tflops") for r in rows if r["impl"] in ("cudnn", "flash")}
    print(f"\nshape={rows[0]['shape']} causal={rows[0]['causal']}")
    for r in rows:
        if "error" in r:
            print(f"  {_label(r):24} ERROR {r['error']}")
            continue
        ratios = [f"x{n}={r['tflops'] / t:.3f}" for n, t in peers.items() if t]
        print(f"  {_label(r):24} {r['tflops']:6.1f} TFLOP/s  " + "  ".join(ratios))


def main() -> None:
    """Parse flags; compile-only on the CPU, else check every variant, then benchmark."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--compile-only", action="store_true", help="sm_90 compile, no launch")
    parser.add_argument("--smoke", action="store_true", help="correctness checks only")
    parser.add_argument("--out", help="write all rows as JSON here")
    args = parser.parse_args()
    if args.compile_only:
        compile_only(compile_for_sm90, sweep)
        return
    rows = [r for d in (64, 128) for causal in (False, True) for r in check(d, causal)]
    if not args.smoke:
        for shape in SHAPES:
            for causal in (False, True):
                case_rows = bench_case(shape, causal)
                print_case(case_rows)
                rows += case_rows
    if args.out:
        with open(args.out, "w") as f:
            meta = dict(device=torch.cuda.get_device_name(), triton=triton.__version__)
            json.dump(dict(meta, rows=rows), f, indent=1)


if __name__ == "__main__":
    main()
