"""Probe: a FlashAttention-3-style Gluon backward for Hopper, sharing dS across warpgroups.

The first probe (`attention_gluon_bwd_probe.py`, 0.52-0.65x cuDNN on an H100) gave each of its
two consumer warpgroups 64 keys of its own and had each add its own dQ partial for every query
tile into the global fp32 buffer with atomics, waiting for the dQ product in between. Here the
two warpgroups own the CTA's 128 keys together as FlashAttention-3 does: each writes its dS^T
rows into one shared tile, and after a barrier both compute dQ = dS K over all 128 keys, each
for half of dQ (head-dim columns, or query rows at 128-row query tiles), so a CTA adds one dQ
tile per query tile instead of two. The dQ adds are issued by a 1-warp writer that takes
dQ through shared memory, off the tensor-core warps (adding from the consumers' registers
was 1.14-1.27x slower; that variant is gone). dS is scaled before its bf16 cast, so dQ and
dK come out scaled; `lse` is in base 2.

GPU:  python benchmarks/attention_gluon_bwd_fa3.py --out $OUT/fa3.json   [--smoke]
CPU:  env -u TRITON_INTERPRET PYTHONPATH=/tmp/tri36 /work/main/.venv/bin/python \
          benchmarks/attention_gluon_bwd_fa3.py --compile-only
"""

import argparse
import json
import math
from dataclasses import asdict, dataclass

import torch
import triton
from attention_gluon_bwd_probe import (  # (benchmarks/: run as a script, its folder on the path)
    CHECK_SHAPE,
    TOLERANCE,
    _delta_kernel,
    logsumexp_rows,
    sdpa_grads,
    tflops,
)
from attention_gluon_probe import SHAPES, _barrier_array, compile_kernel, compile_only, first_lines
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

KEYS = 128  # keys per CTA, 64 per consumer warpgroup
LOADER_REGS = gl.constexpr(24)
MAXNREG = 168


@dataclass(frozen=True)
class Config:
    block_m: int = 64
    stages: int = 2
    dq_bufs: int = 1

    def smem_bytes(self, d: int) -> int:
        tiles = 2 * KEYS * d + 2 * self.stages * self.block_m * d + 2 * KEYS * self.block_m
        return 2 * tiles + 4 * self.dq_bufs * self.block_m * d


def sweep(d: int) -> list[Config]:
    m = 64 if d == 128 else 128
    out = [Config(m, 2, 1), Config(m, 2, 2)]
    if d == 64:
        out += [Config(64, 2, 2)]
    return [c for c in out if c.smem_bytes(d) <= 227 * 1024]


@gluon.jit
def _origin(seq_len):
    """Row of this (batch, head) in the flattened tensors, and the CTA's first key."""
    return gl.program_id(1) * seq_len, gl.program_id(0) * 128


@gluon.jit
def _first_tile(k_cta, BLOCK_M: gl.constexpr, CAUSAL: gl.constexpr):
    if CAUSAL:
        return k_cta // BLOCK_M
    else:
        return 0


@gluon.jit
def _loader(q_desc, k_desc, v_desc, do_desc, smem, bars, seq_len, CAUSAL: gl.constexpr):
    k_smem, v_smem, q_smem, do_smem, ds_smem, dq_smem = smem
    kv_ready, q_ready, q_empty, do_ready, do_empty = bars[0], bars[1], bars[2], bars[3], bars[4]
    STAGES: gl.constexpr = q_smem.shape[0]
    BLOCK_M: gl.constexpr = q_smem.shape[1]
    row0, k_cta = _origin(seq_len)
    mbarrier.expect(kv_ready.index(0), 2 * k_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(k_desc, [row0 + k_cta, 0], kv_ready.index(0), k_smem)
    tma.async_copy_global_to_shared(v_desc, [row0 + k_cta, 0], kv_ready.index(0), v_smem)
    first = _first_tile(k_cta, BLOCK_M, CAUSAL)
    for t in range(seq_len // BLOCK_M - first):
        slot = t % STAGES
        phase = (t // STAGES) & 1
        q_row = row0 + (first + t) * BLOCK_M
        mbarrier.wait(q_empty.index(slot), phase ^ 1)
        mbarrier.expect(q_ready.index(slot), q_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(q_desc, [q_row, 0], q_ready.index(slot), q_smem.index(slot))
        mbarrier.wait(do_empty.index(slot), phase ^ 1)
        mbarrier.expect(do_ready.index(slot), do_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(
            do_desc, [q_row, 0], do_ready.index(slot), do_smem.index(slot)
        )


@gluon.jit
def _writer(smem, bars, dq_ptr, seq_len, CAUSAL: gl.constexpr):
    """One warp: add each query tile's dQ (left in shared memory by both consumers) to the
    global fp32 buffer, four rows at a time, then free the buffer."""
    k_smem, v_smem, q_smem, do_smem, ds_smem, dq_smem = smem
    dq_ready, dq_free = bars[7], bars[8]
    BUFS: gl.constexpr = dq_smem.shape[0]
    BLOCK_M: gl.constexpr = dq_smem.shape[1]
    HEAD_D: gl.constexpr = dq_smem.shape[2]
    ROWS: gl.constexpr = 4
    layout: gl.constexpr = gl.BlockedLayout([1, 4], [128 // HEAD_D, HEAD_D // 4], [1, 1], [1, 0])
    rows = gl.arange(0, ROWS, layout=gl.SliceLayout(1, layout))
    cols = gl.arange(0, HEAD_D, layout=gl.SliceLayout(0, layout))
    offs = rows[:, None] * HEAD_D + cols[None, :]
    row0, k_cta = _origin(seq_len)
    first = _first_tile(k_cta, BLOCK_M, CAUSAL)
    for t in range(seq_len // BLOCK_M - first):
        b = t % BUFS
        mbarrier.wait(dq_ready.index(b), (t // BUFS) & 1)
        base = dq_ptr + (row0 + (first + t) * BLOCK_M) * HEAD_D
        for r in gl.static_range(BLOCK_M // ROWS):
            part = dq_smem.index(b).slice(r * ROWS, ROWS, dim=0).load(layout)
            gl.atomic_add(base + r * ROWS * HEAD_D + offs, part, sem="relaxed")
        mbarrier.arrive(dq_free.index(b))


@gluon.jit
def _mask(p_t, k_start, q_start):
    BLOCK_N: gl.constexpr = p_t.shape[0]
    BLOCK_M: gl.constexpr = p_t.shape[1]
    if q_start < k_start + BLOCK_N:
        keys = k_start + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, p_t.type.layout))
        queries = q_start + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(0, p_t.type.layout))
        p_t = gl.where(queries[None, :] >= keys[:, None], p_t, 0.0)
    return p_t


@gluon.jit
def _step(t, first, dk, dv, smem, bars, lse_ptr, delta_ptr, row0, k_start, qk_scale,
          sm_scale, C: gl.constexpr, MASK: gl.constexpr):  # fmt: skip
    """One query tile: the five products, dS^T shared with the other warpgroup, dQ added."""
    k_smem, v_smem, q_smem, do_smem, ds_smem, dq_smem = smem
    q_ready, q_empty, do_ready, do_empty = bars[1], bars[2], bars[3], bars[4]
    ds_ready, ds_free, dq_ready, dq_free = bars[5], bars[6], bars[7], bars[8]
    STAGES: gl.constexpr = q_smem.shape[0]
    BLOCK_M: gl.constexpr = q_smem.shape[1]
    HEAD_D: gl.constexpr = q_smem.shape[2]
    BLOCK_N: gl.constexpr = 64
    SPLIT_ROWS: gl.constexpr = BLOCK_M == 128  # dQ halves: query rows, else head-dim columns
    DQ_M: gl.constexpr = 64
    DQ_N: gl.constexpr = HEAD_D if SPLIT_ROWS else HEAD_D // 2
    s_layout: gl.constexpr = gl.NVMMADistributedLayout([3, 0], [4, 1], [16, BLOCK_M, 16])
    d_layout: gl.constexpr = gl.NVMMADistributedLayout([3, 0], [4, 1], [16, HEAD_D, 16])
    dq_layout: gl.constexpr = gl.NVMMADistributedLayout([3, 0], [4, 1], [16, DQ_N, 16])
    a_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=d_layout, k_width=2)
    per_query: gl.constexpr = gl.SliceLayout(0, s_layout)
    k_buf = k_smem.slice(C * BLOCK_N, BLOCK_N, dim=0)
    v_buf = v_smem.slice(C * BLOCK_N, BLOCK_N, dim=0)
    if SPLIT_ROWS:
        k_half = k_smem
        dq_row0: gl.constexpr = C * DQ_M
        dq_col0: gl.constexpr = 0
    else:
        k_half = k_smem.slice(C * DQ_N, DQ_N, dim=1)
        dq_row0: gl.constexpr = 0
        dq_col0: gl.constexpr = C * DQ_N
    s_zero = gl.zeros([BLOCK_N, BLOCK_M], gl.float32, s_layout)
    dq_zero = gl.zeros([DQ_M, DQ_N], gl.float32, dq_layout)
    query_offs = gl.arange(0, BLOCK_M, layout=per_query)
    slot = t % STAGES
    phase = (t // STAGES) & 1
    b = t % 2
    q_start = (first + t) * BLOCK_M
    q_buf = q_smem.index(slot)
    do_buf = do_smem.index(slot)
    lse = gl.load(lse_ptr + row0 + q_start + query_offs)
    mbarrier.wait(q_ready.index(slot), phase)
    s_t = warpgroup_mma(k_buf, q_buf.permute((1, 0)), s_zero, use_acc=False, is_async=True)
    mbarrier.wait(do_ready.index(slot), phase)
    dp_t = warpgroup_mma(v_buf, do_buf.permute((1, 0)), s_zero, use_acc=False, is_async=True)
    s_t = warpgroup_mma_wait(1, deps=(s_t,))
    delta = gl.load(delta_ptr + row0 + q_start + query_offs)
    p_t = gl.exp2(s_t * qk_scale - lse[None, :])
    if MASK:
        p_t = _mask(p_t, k_start, q_start)
    p_t = p_t.to(gl.bfloat16)
    p_op = gl.convert_layout(p_t, a_layout)
    dv = warpgroup_mma(p_op, do_buf, dv, is_async=True)
    dp_t = warpgroup_mma_wait(1, deps=(dp_t,))
    ds_t = (p_t.to(gl.float32) * (dp_t - delta[None, :]) * sm_scale).to(gl.bfloat16)
    ds_tile = ds_smem.index(b)
    mbarrier.wait(ds_free.index(b), ((t // 2) & 1) ^ 1)
    ds_tile.slice(C * BLOCK_N, BLOCK_N, dim=0).store(ds_t)
    fence_async_shared()
    gl.thread_barrier()  # every thread's dS^T rows stored before the arrival
    mbarrier.arrive(ds_ready.index(b))
    ds_op = gl.convert_layout(ds_t, a_layout)
    dk = warpgroup_mma(ds_op, q_buf, dk, is_async=True)
    mbarrier.wait(ds_ready.index(b), (t // 2) & 1)
    if SPLIT_ROWS:
        ds_a = ds_tile.slice(C * DQ_M, DQ_M, dim=1).permute((1, 0))
    else:
        ds_a = ds_tile.permute((1, 0))
    dq = warpgroup_mma(ds_a, k_half, dq_zero, use_acc=False, is_async=True)
    dv, dk, dq, p_op, ds_op = warpgroup_mma_wait(0, deps=(dv, dk, dq, p_op, ds_op))
    mbarrier.arrive(q_empty.index(slot))
    mbarrier.arrive(do_empty.index(slot))
    mbarrier.arrive(ds_free.index(b))
    BUFS: gl.constexpr = dq_smem.shape[0]
    bq = t % BUFS
    mbarrier.wait(dq_free.index(bq), ((t // BUFS) & 1) ^ 1)
    dq_smem.index(bq).slice(dq_row0, DQ_M, dim=0).slice(dq_col0, DQ_N, dim=1).store(dq)
    gl.thread_barrier()
    mbarrier.arrive(dq_ready.index(bq))
    return dk, dv


@gluon.jit
def _consumer(dk_desc, dv_desc, smem, bars, lse_ptr, delta_ptr, seq_len, qk_scale,
              sm_scale, CAUSAL: gl.constexpr, C: gl.constexpr):  # fmt: skip
    """One warpgroup owning 64 of the CTA's keys: dK and dV in registers over the query tiles
    (those crossing the diagonal masked, when causal), then stored by TMA."""
    k_smem, v_smem, q_smem = smem[0], smem[1], smem[2]
    kv_ready = bars[0]
    BLOCK_M: gl.constexpr = q_smem.shape[1]
    HEAD_D: gl.constexpr = q_smem.shape[2]
    BLOCK_N: gl.constexpr = 64
    d_layout: gl.constexpr = gl.NVMMADistributedLayout([3, 0], [4, 1], [16, HEAD_D, 16])
    row0, k_cta = _origin(seq_len)
    k_start = k_cta + C * BLOCK_N
    first = _first_tile(k_cta, BLOCK_M, CAUSAL)
    k_buf = k_smem.slice(C * BLOCK_N, BLOCK_N, dim=0)
    v_buf = v_smem.slice(C * BLOCK_N, BLOCK_N, dim=0)
    dk = gl.zeros([BLOCK_N, HEAD_D], gl.float32, d_layout)
    dv = gl.zeros([BLOCK_N, HEAD_D], gl.float32, d_layout)
    mbarrier.wait(kv_ready.index(0), 0)
    n = seq_len // BLOCK_M - first
    n_masked = 0
    if CAUSAL:
        n_masked = gl.minimum(n, 128 // BLOCK_M)  # the tiles crossing the CTA's diagonal
    for t in range(n_masked):
        dk, dv = _step(t, first, dk, dv, smem, bars, lse_ptr, delta_ptr, row0, k_start,
                       qk_scale, sm_scale, C, True)  # fmt: skip
    for t in range(n_masked, n):
        dk, dv = _step(t, first, dk, dv, smem, bars, lse_ptr, delta_ptr, row0, k_start,
                       qk_scale, sm_scale, C, False)  # fmt: skip

    k_buf.store(dk.to(gl.bfloat16))  # dK came scaled with dS; K and V are read no more
    v_buf.store(dv.to(gl.bfloat16))
    fence_async_shared()
    tma.async_copy_shared_to_global(dk_desc, [row0 + k_start, 0], k_buf)
    tma.async_copy_shared_to_global(dv_desc, [row0 + k_start, 0], v_buf)
    tma.store_wait(0)


@gluon.jit
def attention_bwd_fa3(q_desc, k_desc, v_desc, do_desc, dk_desc, dv_desc, lse_ptr, delta_ptr,
                      dq_ptr, qk_scale, sm_scale, seq_len, STAGES: gl.constexpr,
                      CAUSAL: gl.constexpr, DQ_BUFS: gl.constexpr):  # fmt: skip
    BLOCK_M: gl.constexpr = q_desc.block_type.shape[0]
    HEAD_D: gl.constexpr = q_desc.block_type.shape[1]
    ds_layout: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16)
    dq_layout: gl.constexpr = gl.SwizzledSharedLayout(8, 1, 4, [1, 0])
    stages: gl.constexpr = [STAGES]
    smem = (
        gl.allocate_shared_memory(k_desc.dtype, k_desc.block_type.shape, k_desc.layout),
        gl.allocate_shared_memory(v_desc.dtype, v_desc.block_type.shape, v_desc.layout),
        gl.allocate_shared_memory(q_desc.dtype, stages + q_desc.block_type.shape, q_desc.layout),
        gl.allocate_shared_memory(do_desc.dtype, stages + do_desc.block_type.shape, do_desc.layout),
        gl.allocate_shared_memory(gl.bfloat16, [2, 128, BLOCK_M], ds_layout),
        gl.allocate_shared_memory(gl.float32, [DQ_BUFS, BLOCK_M, HEAD_D], dq_layout),
    )
    bars = (
        _barrier_array(1, 1),  # K and V landed
        _barrier_array(STAGES, 1),  # Q ready
        _barrier_array(STAGES, 2),  # Q empty
        _barrier_array(STAGES, 1),  # dO ready
        _barrier_array(STAGES, 2),  # dO empty
        _barrier_array(2, 2),  # dS^T tile complete (both halves)
        _barrier_array(2, 2),  # dS^T tile read by both dQ products
        _barrier_array(DQ_BUFS, 2),  # dQ tile complete
        _barrier_array(DQ_BUFS, 1),  # dQ tile added
    )
    fence_async_shared()
    gl.warp_specialize(
        [(_consumer, (dk_desc, dv_desc, smem, bars, lse_ptr, delta_ptr, seq_len, qk_scale,
                      sm_scale, CAUSAL, 0)),
         (_consumer, (dk_desc, dv_desc, smem, bars, lse_ptr, delta_ptr, seq_len, qk_scale,
                      sm_scale, CAUSAL, 1)),
         (_loader, (q_desc, k_desc, v_desc, do_desc, smem, bars, seq_len, CAUSAL)),
         (_writer, (smem, bars, dq_ptr, seq_len, CAUSAL))],
        [4, 1, 1], [240, LOADER_REGS, LOADER_REGS])  # fmt: skip


def kernel_args(q, k, v, do, dk, dv, lse2, delta, dq_acc, causal: bool, cfg: Config):
    batch, heads, seq, d = q.shape
    assert seq % cfg.block_m == 0 and seq % KEYS == 0, "probe needs seq % block == 0"
    q_layout = gl.NVMMASharedLayout.get_default_for([cfg.block_m, d], gl.bfloat16)
    kv_layout = gl.NVMMASharedLayout.get_default_for([KEYS, d], gl.bfloat16)
    half_layout = gl.NVMMASharedLayout.get_default_for([64, d], gl.bfloat16)

    def desc(t, rows, layout):
        return TensorDescriptor.from_tensor(t.view(-1, d), [rows, d], layout)

    scale = 1.0 / math.sqrt(d)
    runtime = [desc(q, cfg.block_m, q_layout), desc(k, KEYS, kv_layout), desc(v, KEYS, kv_layout),
               desc(do, cfg.block_m, q_layout), desc(dk, 64, half_layout),
               desc(dv, 64, half_layout), lse2, delta, dq_acc, scale * math.log2(math.e),
               scale, seq]  # fmt: skip
    constexprs = dict(STAGES=cfg.stages, CAUSAL=causal, DQ_BUFS=cfg.dq_bufs)
    grid = (seq // KEYS, batch * heads)
    return runtime, constexprs, grid, dict(num_warps=4, maxnreg=MAXNREG)


def attention_bwd(q, k, v, o, do, lse, causal: bool, cfg: Config):
    """((dq, dk, dv), launcher): delta, dQ's zeroing, the kernel and dQ's bf16 cast."""
    d = q.shape[-1]
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    delta = torch.empty(q.shape[:-1], device=q.device, dtype=torch.float32)
    dq_acc = torch.empty(q.shape, device=q.device, dtype=torch.float32)
    lse2 = (lse * math.log2(math.e)).contiguous()
    runtime, constexprs, grid, options = kernel_args(
        q, k, v, do, dk, dv, lse2, delta, dq_acc, causal, cfg
    )

    def launch() -> None:
        _delta_kernel[(delta.numel() // 64,)](o, do, delta, HEAD_D=d, ROWS=64)
        dq_acc.zero_()
        attention_bwd_fa3[grid](*runtime, **constexprs, **options)
        dq.copy_(dq_acc)

    launch()
    return (dq, dk, dv), launch


def compile_for_sm90(d: int, causal: bool, cfg: Config) -> dict:
    seq = max(cfg.block_m, KEYS)
    t = torch.empty(1, 1, seq, d, dtype=torch.bfloat16)
    f = torch.empty(1, 1, seq, d, dtype=torch.float32)
    runtime, constexprs, _, options = kernel_args(t, t, t, t, t, t, f, f, f, causal, cfg)
    return compile_kernel(attention_bwd_fa3, runtime, constexprs, options)


def check(d: int, causal: bool) -> list[dict]:
    shape = (*CHECK_SHAPE, d)
    q, k, v, do = (torch.randn(shape, device="cuda", dtype=torch.bfloat16) for _ in range(4))
    lse = logsumexp_rows(q, k, causal)
    out, grads = sdpa_grads(q, k, v, do, causal)
    refs = grads()
    rows = []
    for cfg in sweep(d):
        row = dict(shape=list(shape), causal=causal, impl="fa3", config=asdict(cfg))
        try:
            got, _ = attention_bwd(q, k, v, out, do, lse, causal, cfg)
            torch.cuda.synchronize()
            for name, g, r in zip(("dq", "dk", "dv"), got, refs, strict=True):
                err = (g.float() - r.float()).abs().max().item()
                row[name] = err / r.float().abs().max().item()
                row["wrong"] = row.get("wrong", False) or not row[name] <= TOLERANCE
        except Exception as exc:  # noqa: BLE001 - a probe reports every failure and moves on
            row["error"] = first_lines(exc)
        rows.append(row)
        errs = " ".join(f"{n}={row[n]:.1e}" for n in ("dq", "dk", "dv") if n in row)
        print(f"check d={d} causal={causal} {cfg}: {errs} "
              f"{row.get('error') or ('WRONG' if row['wrong'] else 'ok')}", flush=True)  # fmt: skip
    return rows


def bench_case(shape, causal: bool) -> list[dict]:
    from torch.nn.attention import SDPBackend

    q, k, v, do = (torch.randn(shape, device="cuda", dtype=torch.bfloat16) for _ in range(4))
    lse = logsumexp_rows(q, k, causal)
    case = dict(shape=list(shape), causal=causal)
    rows = []
    for name, backend in (
        ("cudnn", SDPBackend.CUDNN_ATTENTION),
        ("flash", SDPBackend.FLASH_ATTENTION),
    ):
        out, grads = sdpa_grads(q, k, v, do, causal, backend)
        ms = triton.testing.do_bench(grads, warmup=25, rep=100)
        rows.append(dict(case, impl=name, ms=ms, tflops=tflops(shape, causal, ms)))
    for cfg in sweep(shape[3]):
        row = dict(case, impl="fa3", config=asdict(cfg))
        try:
            _, launch = attention_bwd(q, k, v, out, do, lse, causal, cfg)
            row["ms"] = triton.testing.do_bench(launch, warmup=25, rep=100)
            row["tflops"] = tflops(shape, causal, row["ms"])
        except Exception as exc:  # noqa: BLE001
            row["error"] = first_lines(exc)
        rows.append(row)
    return rows


def _print_case(rows: list[dict]) -> None:
    peers = {r["impl"]: r["tflops"] for r in rows if r["impl"] in ("cudnn", "flash")}
    print(f"\nshape={rows[0]['shape']} causal={rows[0]['causal']}", flush=True)
    for r in rows:
        c = r.get("config")
        label = r["impl"] + (f" m{c['block_m']} s{c['stages']} b{c['dq_bufs']}" if c else "")
        if "error" in r:
            print(f"  {label:24} ERROR {r['error']}", flush=True)
            continue
        if "share" in r:  # a part of another row's time
            print(f"  {label:24} {r['ms'] * 1e3:6.1f} us  ({r['share']:.1%})", flush=True)
            continue
        ratios = "  ".join(f"x{n}={r['tflops'] / t:.3f}" for n, t in peers.items())
        tail = f"  err={r['err']:.1e}" if "err" in r else ""
        print(f"  {label:24} {r['tflops']:6.1f} TFLOP/s  {ratios}{tail}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--compile-only", action="store_true")
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--out")
    args = parser.parse_args()
    if args.compile_only:
        compile_only(compile_for_sm90, sweep)
        return
    rows = [r for d in (64, 128) for c in (False, True) for r in check(d, c)]
    for shape, causal in [] if args.smoke else [(s, c) for s in SHAPES for c in (False, True)]:
        case_rows = bench_case(shape, causal)
        _print_case(case_rows)
        rows += case_rows
    _dump(args.out, rows)


def _dump(path: str | None, rows: list[dict]) -> None:
    if path:
        with open(path, "w") as f:
            meta = dict(device=torch.cuda.get_device_name(), triton=triton.__version__)
            json.dump(dict(meta, rows=rows), f, indent=1)


if __name__ == "__main__":
    main()
