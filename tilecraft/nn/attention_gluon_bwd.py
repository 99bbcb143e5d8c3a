"""Attention's backward for Hopper (sm_90), warp-specialized, in Triton's Gluon dialect.

Imported only where `attention_sm90.py` finds an sm_90 GPU and a Triton that ships Gluon's
Hopper ops. A program owns 128 keys of one kv head and walks over the query tiles of every
query head that reads them (FlashAttention-3's layout). It forks: a 1-warp loader streams
each tile's queries and output gradient through rings by TMA; two 4-warp consumer
warpgroups, 64 of the keys each, compute the tile's five products, dK and dV accumulating
in registers; a 1-warp writer adds the tile's dQ into a float32 buffer. Everything is
computed transposed (keys along the rows), so P^T and dS^T are already the register operands
of `dV += P^T dO` and `dK += dS^T Q`. For `dQ = dS K` each consumer stores its dS^T rows into
one shared tile; after a barrier both compute half of dQ's columns over all 128 keys and leave
it in shared memory, from which the writer adds it by one TMA reduction (a bulk add into
global memory), off the tensor-core warps.

The numerics are the `tl` backward's (`attention.py`): the scores scaled by `scale * log2(e)`
(no FMA contraction unless `attention_sm90.BACKWARD_FP_FUSION`), base-2 exponentials against
the forward's row statistics, `delta = rowsum(dO * O)` (both per row, computed first by
`row_terms`, and loaded by TMA with each query tile: 16 addresses a thread held in
registers spilled the consumers at head dim 128), dS scaled by `scale` before its cast to
the inputs' dtype (so dK and dQ come out scaled). Tensors are seen as 3-D as the forward's
(`attention_sm90.heads_view`); TMA zero-fills reads past a sequence's end and clips stores
there, so the keys past the end are masked (program's last 128 keys) and dQ's rows past
the end are not added. dQ is zeroed by `row_terms` and cast after the kernel.
"""

from __future__ import annotations

import triton
import triton.language as tl
from triton._C.libtriton import ir
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language._core import builtin
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)

from tilecraft.nn.attention_gluon import (
    _barriers,
    _buffers,
    _copy_tile,
    _load_tile,
    thread_barrier,
    tma_load,
    tma_store,
)

if hasattr(gl.shared_memory_descriptor, "reinterpret"):  # Triton 3.7 made it public

    @gluon.jit
    def _reinterpret(buf, shape: gl.constexpr, layout: gl.constexpr):
        """`buf` (float32) seen with another shape and layout, over the same bytes."""
        return buf.reinterpret(gl.float32, shape, layout)

else:

    @gluon.jit
    def _reinterpret(buf, shape: gl.constexpr, layout: gl.constexpr):
        """`buf` (float32) seen with another shape and layout, over the same bytes."""
        return buf._reinterpret(gl.float32, shape, layout)


if hasattr(tma, "async_atomic_add"):  # Triton 3.8 made TMA's reductions public
    tma_add = tma.async_atomic_add
else:

    @builtin
    def tma_add(desc, coord, src, _semantic=None):
        """Add the shared tile `src` into `desc`'s block at `coord` (a TMA reduction)."""
        coord = _semantic._convert_to_ir_values(coord, require_i64=False)
        kind = ir.DESCRIPTOR_REDUCE_KIND.ADD
        _semantic.builder.create_async_tma_reduce(kind, desc.handle, coord, src.handle)


KEYS = gl.constexpr(128)  # a program's keys; 64 per consumer warpgroup
HALF = gl.constexpr(64)


@triton.jit
def row_terms(o, do, stats, terms, dq, heads, seq, o_b, o_h, o_s, do_b, do_h, do_s,
              DIM: tl.constexpr, ROWS: tl.constexpr):  # fmt: skip
    """The backward's per-row terms, float32, `[2, batch * heads, padded]` (queries padded
    to whole tiles of `ROWS`, the padding 0): the base-2 log-sum-exp (the forward's
    statistics: row maximum plus the log of the denominator) and delta = rowsum(dO * O),
    O and dO in any layout (strides of batch, head and row; the head dim unit-strided).
    It also zeroes the tile of `dq` (float32, `[batch * heads, padded, DIM]`)."""
    bh, rows = tl.program_id(1), tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    b, h = bh // heads, bh % heads
    padded, planes = tl.num_programs(0) * ROWS, tl.num_programs(1)
    cols = tl.arange(0, DIM)[None, :]
    keep = rows[:, None] < seq
    at_o = b.to(tl.int64) * o_b + h * o_h + rows[:, None] * o_s + cols
    at_do = b.to(tl.int64) * do_b + h * do_h + rows[:, None] * do_s + cols
    total = tl.load(o + at_o, mask=keep, other=0).to(tl.float32)
    total = total * tl.load(do + at_do, mask=keep, other=0).to(tl.float32)
    row_max = tl.load(stats + bh * seq + rows, mask=rows < seq, other=0)
    row_log_sum = tl.load(stats + (planes + bh) * seq + rows, mask=rows < seq, other=0)
    tl.store(terms + bh * padded + rows, row_max + row_log_sum)
    tl.store(terms + (planes + bh) * padded + rows, tl.sum(total, axis=1))
    tl.store(dq + (bh.to(tl.int64) * padded + rows[:, None]) * DIM + cols, tl.zeros_like(total))


@gluon.jit
def _program(dims):
    """The kv head's batch and head, and the program's first key."""
    _, heads, group, _, _ = dims
    bh = gl.program_id(1)
    return bh // (heads // group), bh % (heads // group), gl.program_id(0) * KEYS


@gluon.jit
def _query_tiles(k_cta, seq_q, BLOCK_M: gl.constexpr, CAUSAL: gl.constexpr):
    """A head's first query tile that sees the program's keys, and how many from there."""
    first = k_cta * 0
    if CAUSAL:
        first = k_cta // BLOCK_M
    return first, gl.maximum(gl.cdiv(seq_q, BLOCK_M) - first, 0)


@gluon.jit
def _masked_tiles(k_cta, n, seq_k, BLOCK_M: gl.constexpr, CAUSAL: gl.constexpr):
    """How many of a head's tiles (the first ones) need a mask: all where the keys run past
    the sequence's end; else, when causal, those crossing the diagonal."""
    masked = n
    if k_cta + KEYS <= seq_k:
        masked = n * 0
        if CAUSAL:
            masked = gl.minimum(n, KEYS // BLOCK_M)
    return masked


@gluon.jit
def _loader(descs, smem, bars, dims, CAUSAL: gl.constexpr, Q_ROWS: gl.constexpr,
            DO_ROWS: gl.constexpr, KV_ROWS: gl.constexpr):  # fmt: skip
    """One warp: each consumer's keys and values once, then every query head's tiles of
    queries (with their rows' terms) and output gradient through the rings, a slot once
    both consumers freed it."""
    q_smem, do_smem = smem[2], smem[3]
    q_ready, q_empty, do_ready, do_empty = bars[2], bars[3], bars[4], bars[5]
    STAGES: gl.constexpr = q_smem.shape[0]
    BLOCK_M: gl.constexpr = q_smem.shape[2]
    batch, kv_head, k_cta = _program(dims)
    _, heads, group, seq_q, _ = dims
    kv = (batch, kv_head, heads // group)
    for c in gl.static_range(2):
        row = k_cta + c * HALF
        _load_tile(descs[1], kv, row, bars[0].index(c), smem[0].index(c), KV_ROWS)
        _load_tile(descs[2], kv, row, bars[1].index(c), smem[1].index(c), KV_ROWS)
    first, n = _query_tiles(k_cta, seq_q, BLOCK_M, CAUSAL)
    padded = gl.cdiv(seq_q, BLOCK_M) * BLOCK_M
    for u in range(group * n):
        slot, phase = u % STAGES, (u // STAGES) & 1
        head = kv_head * group + u // n
        row = (first + u % n) * BLOCK_M
        ready = q_ready.index(slot)
        mbarrier.wait(q_empty.index(slot), phase ^ 1)  # a fresh barrier passes parity 1
        mbarrier.expect(ready, descs[0].block_type.nbytes + descs[6].block_type.nbytes)
        _copy_tile(descs[0], (batch, head, heads), row, ready, q_smem.index(slot), Q_ROWS)
        tma_load(descs[6], [0, (batch * heads + head) * padded + row], ready,
                 smem[6].index(slot))  # fmt: skip
        mbarrier.wait(do_empty.index(slot), phase ^ 1)
        _load_tile(descs[3], (batch, head, heads), row, do_ready.index(slot),
                   do_smem.index(slot), DO_ROWS)  # fmt: skip


@gluon.jit
def _writer(descs, smem, bars, dims, CAUSAL: gl.constexpr):
    """One warp: add each tile's dQ (left in shared memory by both consumers) into the
    float32 buffer (`[batch * heads, seq_q, head_dim]`, seq_q padded to a whole tile: rows
    past the end are zero, and no mask is needed) by a TMA reduction."""
    dq_smem = smem[5]
    dq_ready, dq_free = bars[8], bars[9]
    BUFS: gl.constexpr = dq_smem.shape[0]
    BLOCK_M: gl.constexpr = dq_smem.shape[2]
    batch, kv_head, k_cta = _program(dims)
    _, heads, group, seq_q, _ = dims
    first, n = _query_tiles(k_cta, seq_q, BLOCK_M, CAUSAL)
    for u in range(group * n):
        b = u % BUFS
        mbarrier.wait(dq_ready.index(b), (u // BUFS) & 1)
        head = batch * heads + kv_head * group + u // n
        tma_add(descs[7], [head, (first + u % n) * BLOCK_M, 0], dq_smem.index(b))
        tma.store_wait(0)  # the buffer read
        mbarrier.arrive(dq_free.index(b))


@gluon.jit
def _in_bounds(like, at):
    """Where a `[keys, queries]` tile like `like` holds a real key and a real query (`at`:
    the tile's first query, the warpgroup's first key, seq_q, seq_k)."""
    q_start, k_start, seq_q, seq_k = at
    BLOCK_N: gl.constexpr = like.shape[0]
    BLOCK_M: gl.constexpr = like.shape[1]
    keys = k_start + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, like.type.layout))[:, None]
    queries = q_start + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(0, like.type.layout))
    return (keys < seq_k) & (queries[None, :] < seq_q), keys, queries[None, :]


@gluon.jit
def _mask(p_t, at, CAUSAL: gl.constexpr):
    """P^T zeroed outside the sequences and (causal) where the key follows the query."""
    keep, keys, queries = _in_bounds(p_t, at)
    if CAUSAL:
        keep = keep & (queries >= keys)
    return gl.where(keep, p_t, 0.0)


@gluon.jit
def _share_ds(ds_t, smem, bars, u, C: gl.constexpr):
    """This warpgroup's dS^T rows into the shared tile of step u (once both dQ products of
    step u - 2 have read it), announced to the other warpgroup."""
    ds_tile = smem[4].index(u % 2)
    ds_ready, ds_free = bars[6], bars[7]
    mbarrier.wait(ds_free.index(u % 2), ((u // 2) & 1) ^ 1)
    ds_tile.slice(C * HALF, HALF, dim=0).store(ds_t)
    fence_async_shared()  # the stores, visible to the tensor cores (async proxy)
    thread_barrier()  # every thread's rows stored before the arrival
    mbarrier.arrive(ds_ready.index(u % 2))


@gluon.jit
def _query_grad(smem, bars, u, C: gl.constexpr):
    """Issue this warpgroup's half of the tile's dQ columns, dS (both halves) times K."""
    k_smem, ds_tile = smem[0], smem[4].index(u % 2)
    BLOCK_M: gl.constexpr = ds_tile.shape[1]
    HEAD_D: gl.constexpr = k_smem.shape[3]
    DQ_N: gl.constexpr = HEAD_D // 2
    layout: gl.constexpr = gl.NVMMADistributedLayout([3, 0], [4, 1], [16, DQ_N, 16])
    mbarrier.wait(bars[6].index(u % 2), (u // 2) & 1)
    dq = gl.zeros([BLOCK_M, DQ_N], gl.float32, layout)
    for c in gl.static_range(2):
        ds = ds_tile.slice(c * HALF, HALF, dim=0).permute((1, 0))
        keys = k_smem.index(c).reshape([HALF, HEAD_D]).slice(C * DQ_N, DQ_N, dim=1)
        dq = warpgroup_mma(ds, keys, dq, use_acc=c > 0, is_async=True)
    return dq


@gluon.jit
def _hand_over(dq, smem, bars, u, C: gl.constexpr):
    """This warpgroup's dQ columns into the writer's buffer (once it added the last)."""
    dq_smem = smem[5]
    BUFS: gl.constexpr = dq_smem.shape[0]
    b = u % BUFS
    mbarrier.wait(bars[9].index(b), ((u // BUFS) & 1) ^ 1)
    tile = dq_smem.index(b).reshape([dq_smem.shape[2], dq_smem.shape[3]])
    tile.slice(C * dq.shape[1], dq.shape[1], dim=1).store(dq)
    fence_async_shared()  # the stores, visible to the TMA (async proxy)
    thread_barrier()
    mbarrier.arrive(bars[8].index(b))


@gluon.jit
def _step(u, carried, smem, bars, at, scales, mask, CAUSAL: gl.constexpr,
          C: gl.constexpr):  # fmt: skip
    """Query tile u of the program (`at`: its first query, the warpgroup's first key, seq_q,
    seq_k): S^T and dP^T, P^T and dS^T, then dV, dK and the dQ half; returns dK and dV.
    The rows' terms come with the queries, `terms` (`[stages * 2, BLOCK_M]`: each slot's
    log-sum-exps, then its deltas)."""
    dk, dv, terms = carried
    k_smem, v_smem, q_smem, do_smem = smem[0], smem[1], smem[2], smem[3]
    STAGES: gl.constexpr = q_smem.shape[0]
    BLOCK_M: gl.constexpr = q_smem.shape[2]
    HEAD_D: gl.constexpr = q_smem.shape[3]
    s_layout: gl.constexpr = gl.NVMMADistributedLayout([3, 0], [4, 1], [16, BLOCK_M, 16])
    a_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=dk.type.layout,
                                                 k_width=2)  # fmt: skip
    slot, phase = u % STAGES, (u // STAGES) & 1
    query = q_smem.index(slot).reshape([BLOCK_M, HEAD_D])
    d_out = do_smem.index(slot).reshape([BLOCK_M, HEAD_D])
    keys = k_smem.index(C).reshape([HALF, HEAD_D])
    values = v_smem.index(C).reshape([HALF, HEAD_D])
    s_zero = gl.zeros([HALF, BLOCK_M], gl.float32, s_layout)
    per_query: gl.constexpr = gl.SliceLayout(0, s_layout)
    mbarrier.wait(bars[2].index(slot), phase)
    s_t = warpgroup_mma(keys, query.permute((1, 0)), s_zero, use_acc=False, is_async=True)
    lse = terms.index(2 * slot).load(per_query)
    mbarrier.wait(bars[4].index(slot), phase)
    dp_t = warpgroup_mma(values, d_out.permute((1, 0)), s_zero, use_acc=False, is_async=True)
    s_t = warpgroup_mma_wait(1, deps=(s_t,))  # groups retire in order: S^T is done
    row_delta = terms.index(2 * slot + 1).load(per_query)
    p_t = gl.exp2(s_t * scales[0] - lse[None, :])
    if mask:
        p_t = _mask(p_t, at, CAUSAL)
    p_t = p_t.to(query.dtype)
    p_op = gl.convert_layout(p_t, a_layout)
    dv = warpgroup_mma(p_op, d_out, dv, is_async=True)
    dp_t = warpgroup_mma_wait(1, deps=(dp_t,))
    ds_t = p_t.to(gl.float32) * (dp_t - row_delta[None, :]) * scales[1]
    if mask:  # (a causal mask's 0 * inf stays NaN, as the tl backward's; lanes past the
        # sequences' ends are left out there, so they are zeroed here)
        ds_t = gl.where(_in_bounds(ds_t, at)[0], ds_t, 0.0)
    ds_t = ds_t.to(query.dtype)
    _share_ds(ds_t, smem, bars, u, C)
    ds_op = gl.convert_layout(ds_t, a_layout)
    dk = warpgroup_mma(ds_op, query, dk, is_async=True)
    dq = _query_grad(smem, bars, u, C)
    dv, dk, dq, p_op, ds_op = warpgroup_mma_wait(0, deps=(dv, dk, dq, p_op, ds_op))
    mbarrier.arrive(bars[3].index(slot))  # Q, dO and dS^T are read no more
    mbarrier.arrive(bars[5].index(slot))
    mbarrier.arrive(bars[7].index(u % 2))
    _hand_over(dq, smem, bars, u, C)
    return dk, dv


@gluon.jit
def _consumer(descs, smem, bars, dims, scales, CAUSAL: gl.constexpr,
              C: gl.constexpr):  # fmt: skip
    """One warpgroup owning 64 of the program's keys: dK and dV over every query head's
    tiles (masked: the first ones where needed, and a ragged last one), then stored by
    TMA."""
    BLOCK_M: gl.constexpr = smem[2].shape[2]
    HEAD_D: gl.constexpr = smem[2].shape[3]
    d_layout: gl.constexpr = gl.NVMMADistributedLayout([3, 0], [4, 1], [16, HEAD_D, 16])
    batch, kv_head, k_cta = _program(dims)
    _, heads, group, seq_q, seq_k = dims
    first, n = _query_tiles(k_cta, seq_q, BLOCK_M, CAUSAL)
    masked = _masked_tiles(k_cta, n, seq_k, BLOCK_M, CAUSAL)
    plain = n - (seq_q % BLOCK_M != 0).to(gl.int32)  # tiles before a ragged last one
    STAGES: gl.constexpr = smem[2].shape[0]
    plain_layout: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [0])  # (rows: buffers)
    terms = _reinterpret(smem[6], [STAGES * 2, BLOCK_M], plain_layout)
    k_start = k_cta + C * HALF
    dk = gl.zeros([HALF, HEAD_D], gl.float32, d_layout)
    dv = gl.zeros([HALF, HEAD_D], gl.float32, d_layout)
    for c in gl.static_range(2):  # dQ reads both warpgroups' keys
        mbarrier.wait(bars[0].index(c), 0)
    mbarrier.wait(bars[1].index(C), 0)
    for g in range(group):
        for t in range(n):
            at = ((first + t) * BLOCK_M, k_start, seq_q, seq_k)
            mask = (t < masked) | (t >= plain)
            dk, dv = _step(g * n + t, (dk, dv, terms), smem, bars, at, scales, mask,
                           CAUSAL, C)  # fmt: skip
    _store_key_grads(dk, dv, descs, smem, bars, (batch * heads // group + kv_head, k_start),
                     group * n, C)  # fmt: skip


@gluon.jit
def _store_key_grads(dk, dv, descs, smem, bars, where, steps, C: gl.constexpr):
    """dK and dV through this warpgroup's K and V tiles (once the other warpgroup's last
    dQ product has read K) to `[batch * kv_heads, seq_k, head_dim]` buffers."""
    if steps > 0:
        last = steps - 1
        mbarrier.wait(bars[7].index(last % 2), (last // 2) & 1)
    k_buf, v_buf = smem[0].index(C), smem[1].index(C)
    k_buf.reshape(dk.shape).store(dk.to(k_buf.dtype))
    v_buf.reshape(dv.shape).store(dv.to(v_buf.dtype))
    fence_async_shared()
    tma_store(descs[4], [where[0], where[1], 0], k_buf)
    tma_store(descs[5], [where[0], where[1], 0], v_buf)
    tma.store_wait(0)


@gluon.jit
def attention_backward_sm90(q_desc, k_desc, v_desc, do_desc, dk_desc, dv_desc, terms_desc,
                            dq_desc, qk_scale, scale, batches, heads, group, seq_q, seq_k,
                            STAGES: gl.constexpr, CAUSAL: gl.constexpr, Q_ROWS: gl.constexpr,
                            DO_ROWS: gl.constexpr, KV_ROWS: gl.constexpr,
                            DQ_BUFS: gl.constexpr, REGS: gl.constexpr,
                            WORKER_REGS: gl.constexpr):  # fmt: skip
    """Allocate the key, value, query and output-gradient tiles, the shared dS^T and dQ
    tiles and the barriers; fork into the consumers, the loader and the writer. The grid:
    (key tiles of 128, batch * kv_heads); `dq_desc` adds into dQ (float32, zeroed, queries
    padded to whole tiles) by `[1, BLOCK_M, head_dim]` blocks; the consumers get `REGS`
    registers, the loader and writer `WORKER_REGS`; `terms_desc` reads `row_terms`' output
    as `[2, rows]` blocks of `[2, BLOCK_M]` (a tile's log-sum-exps and deltas)."""
    BLOCK_M: gl.constexpr = q_desc.block_type.shape[1]
    ds_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([KEYS, BLOCK_M],
                                                                   q_desc.dtype)  # fmt: skip
    smem = (_buffers(k_desc, 2), _buffers(v_desc, 2), _buffers(q_desc, STAGES),
            _buffers(do_desc, STAGES),
            gl.allocate_shared_memory(q_desc.dtype, [2, KEYS, BLOCK_M], ds_layout),
            _buffers(dq_desc, DQ_BUFS), _buffers(terms_desc, STAGES))  # fmt: skip
    bars = (
        _barriers(2, 1),  # a warpgroup's key tile landed
        _barriers(2, 1),  # a warpgroup's value tile landed
        _barriers(STAGES, 1),  # query tile ready
        _barriers(STAGES, 2),  # query slot free: both warpgroups are done with it
        _barriers(STAGES, 1),  # output-gradient tile ready
        _barriers(STAGES, 2),  # output-gradient slot free
        _barriers(2, 2),  # dS^T tile complete (both halves)
        _barriers(2, 2),  # dS^T tile read by both dQ products
        _barriers(DQ_BUFS, 2),  # dQ tile complete (both halves)
        _barriers(DQ_BUFS, 1),  # dQ tile added
    )
    fence_async_shared()  # the initialized barriers, visible to the TMA (async) proxy
    descs = (q_desc, k_desc, v_desc, do_desc, dk_desc, dv_desc, terms_desc, dq_desc)
    dims = (batches, heads, group, seq_q, seq_k)
    gl.warp_specialize(
        [(_consumer, (descs, smem, bars, dims, (qk_scale, scale), CAUSAL, 0)),
         (_consumer, (descs, smem, bars, dims, (qk_scale, scale), CAUSAL, 1)),
         (_loader, (descs, smem, bars, dims, CAUSAL, Q_ROWS, DO_ROWS, KV_ROWS)),
         (_writer, (descs, smem, bars, dims, CAUSAL))],
        [4, 1, 1], [REGS, WORKER_REGS, WORKER_REGS])  # fmt: skip
