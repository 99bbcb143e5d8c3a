"""Attention's forward for Hopper (sm_90), warp-specialized, in Triton's Gluon dialect.

Imported only where `attention_sm90.py` finds an sm_90 GPU and a Triton that ships Gluon's
Hopper ops. A tile is `CONSUMERS * BLOCK_M` query rows of one (batch, head); a program runs
one tile or, persistent, one after another (pid, pid + programs, ..., or whichever no
program has taken yet). It forks: a 1-warp loader takes the tiles and streams each one's
query rows (into one or two buffers per consumer, each as soon as the consumer is done with
it) and its key and value tiles through rings of shared memory by TMA, and two or three
4-warp consumer warpgroups (BLOCK_M rows each, registers moved to them with `setmaxnreg`)
run the online softmax. Each consumer issues this key tile's scores and the previous tile's
`P @ V` back to back on the tensor cores, then computes its softmax while `P @ V` is still
in flight; with PINGPONG the consumers issue their products in turn, so that one's softmax
runs while the tensor cores run another's. Plain Triton (`tl`) cannot express that schedule
on Hopper; it is FlashAttention-3's.

The numerics are the `tl` forward's (`attention.py`), bit for bit where the products are
the same: scores scaled by `scale * log2(e)` (no FMA contraction: the launch turns it off),
base-2 exponentials, a row's maximum shifted by 0 while it is -inf, rows that saw no key
stored as 0 with statistics (0, log2(1)). The saved statistics feed the `tl` backward.

Tensors are seen as 3-D (`attention_sm90._heads_view`): heads in the first dim
`[batch * heads, seq, head_dim]`, or side by side in the last `[batch, seq, heads *
head_dim]` (a model's fused projection). TMA zero-fills reads past a sequence's end and
clips stores there, so the last key tile is masked (`cols < seq_k`) and nothing else is.
"""

from __future__ import annotations

import inspect

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)

if "default_args" in inspect.signature(gl.warp_specialize).parameters:  # (`_gluon` catches it)
    raise ImportError("Gluon's warp_specialize takes (partition, arguments) pairs from Triton 3.6")
# Triton 3.7 renamed the TMA copies and the barrier; 3.5 and 3.6 have only the old names
tma_load = getattr(tma, "async_load", None) or tma.async_copy_global_to_shared
tma_store = getattr(tma, "async_store", None) or tma.async_copy_shared_to_global
thread_barrier = getattr(gl, "barrier", None) or gl.thread_barrier
LOADER_REGS = gl.constexpr(24)  # the loader only issues TMA copies


@gluon.jit
def _tiles(dims, ROWS: gl.constexpr):
    """The grid's tiles: `ROWS` query rows of one (batch, head) each."""
    batch, heads, _, seq_q, _ = dims
    return batch * heads * gl.cdiv(seq_q, ROWS)


@gluon.jit
def _tile(t, dims, ROWS: gl.constexpr, CAUSAL: gl.constexpr):
    """Tile t's batch, head and first query row. Tiles run head by head (a head's keys
    stay in L2), a head's longest first when causal (the grid's tail is short)."""
    _, heads, _, seq_q, _ = dims
    per_head = gl.cdiv(seq_q, ROWS)
    bh, m = t // per_head, t % per_head
    if CAUSAL:
        m = per_head - 1 - m
    return bh // heads, bh % heads, m * ROWS


@gluon.jit
def _load_tile(desc, where, row, bar, dest, HEADS_IN_ROWS: gl.constexpr):
    """TMA one `[1, rows, head_dim]` tile of a head (`where`: batch, head, heads) into
    `dest`, arriving on `bar`."""
    mbarrier.expect(bar, desc.block_type.nbytes)
    _copy_tile(desc, where, row, bar, dest, HEADS_IN_ROWS)


@gluon.jit
def _copy_tile(desc, where, row, bar, dest, HEADS_IN_ROWS: gl.constexpr):
    """`_load_tile`'s copy, the bytes expected on `bar` by the caller."""
    batch, head, heads = where
    if HEADS_IN_ROWS:
        tma_load(desc, [batch * heads + head, row, 0], bar, dest)
    else:
        tma_load(desc, [batch, row, head * desc.block_type.shape[2]], bar, dest)


@gluon.jit
def _key_tiles(q_end, seq_k, BLOCK_N: gl.constexpr, CAUSAL: gl.constexpr):
    """Key tiles the queries below `q_end` see: up to the diagonal when causal."""
    if CAUSAL:
        return gl.cdiv(gl.minimum(q_end, seq_k), BLOCK_N)
    else:
        return gl.cdiv(seq_k, BLOCK_N)


@gluon.jit
def _loader(descs, smem, bars, dims, counter, DYNAMIC: gl.constexpr, CAUSAL: gl.constexpr,
            Q_ROWS: gl.constexpr, KV_ROWS: gl.constexpr):  # fmt: skip
    """One warp: for each of this program's tiles, its number and the consumers' query
    tiles (once each consumer is done with the buffer's last), then every key and value
    tile through the rings; at the end a number past the last tile, which stops the
    consumers. With two query buffers a tile's queries load while the last tile runs."""
    q_bars, q_empty = bars[0], bars[1]
    heads, group = dims[1], dims[2]
    BLOCK_N: gl.constexpr = smem[2].shape[2]
    CONSUMERS: gl.constexpr = smem[1].shape[0]
    ROWS: gl.constexpr = CONSUMERS * smem[0].shape[2]
    it = 0  # key tiles loaded so far: the rings' position
    k = 0  # tiles taken so far (their query buffers and barriers' phases)
    t = gl.program_id(0)
    while t < _tiles(dims, ROWS):
        after = _next_tile(t, counter, DYNAMIC)  # first: its latency hides behind the loads
        batch, head, q_cta = _tile(t, dims, ROWS, CAUSAL)
        _load_queries(descs[0], smem, bars, (batch, head, heads, q_cta), t, k, Q_ROWS)
        n = _key_tiles(q_cta + ROWS, dims[4], BLOCK_N, CAUSAL)
        it = _load_keys(descs, smem, bars, (batch, head // group, heads // group), it, n, KV_ROWS)
        k += 1
        t = after
    for c in gl.static_range(CONSUMERS):
        slot, phase = _query_slot(k, c, smem)
        mbarrier.wait(q_empty.index(slot), phase ^ 1)
        _announce(smem[4], slot, t)
        mbarrier.arrive(q_bars.index(slot))


@gluon.jit
def _query_slot(k, c, smem):
    """Consumer c's query buffer for its program's k-th tile (buffers taken in turn), and
    the phase of that buffer's barriers."""
    CONSUMERS: gl.constexpr = smem[1].shape[0]
    BUFFERS: gl.constexpr = smem[0].shape[0] // CONSUMERS
    return (k % BUFFERS) * CONSUMERS + c, (k // BUFFERS) & 1


@gluon.jit
def _next_tile(t, counter, DYNAMIC: gl.constexpr):
    """The tile after t: the next one no program has taken (dynamic: programs that drew
    short tiles take more), or t + programs (one per program, or a static turn)."""
    after = t + gl.num_programs(0)
    if DYNAMIC:
        after = gl.num_programs(0) + gl.atomic_add(counter, 1, sem="relaxed")
    return after


@gluon.jit
def _load_queries(q_desc, smem, bars, at, t, k, Q_ROWS: gl.constexpr):
    """Each consumer's query rows of tile t, the program's k-th (`at`: batch, head, heads,
    first row), and the tile's number, once the consumer is done with the buffer."""
    q_smem = smem[0]
    q_bars, q_empty = bars[0], bars[1]
    batch, head, heads, q_cta = at
    CONSUMERS: gl.constexpr = smem[1].shape[0]
    for c in gl.static_range(CONSUMERS):
        slot, phase = _query_slot(k, c, smem)
        mbarrier.wait(q_empty.index(slot), phase ^ 1)  # a fresh barrier passes parity 1
        _announce(smem[4], slot, t)
        row = q_cta + c * q_smem.shape[2]
        _load_tile(q_desc, (batch, head, heads), row, q_bars.index(slot), q_smem.index(slot),
                   Q_ROWS)  # fmt: skip


@gluon.jit
def _announce(numbers, slot, t):
    """Tile number t beside query buffer `slot`, in shared memory (the query barrier's
    arrival, next, publishes it)."""
    layout: gl.constexpr = gl.BlockedLayout([1], [32], [1], [0])
    numbers.index(slot).store(gl.full([1], t, gl.int32, layout))


@gluon.jit
def _announced(smem, q_bars, c, k):
    """The number of consumer c's k-th tile and its query buffer, once its query rows (or
    the end) arrived."""
    slot, phase = _query_slot(k, c, smem)
    mbarrier.wait(q_bars.index(slot), phase)
    layout: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
    return gl.max(smem[4].index(slot).load(layout), axis=0), slot


@gluon.jit
def _load_keys(descs, smem, bars, kv, it, n, KV_ROWS: gl.constexpr):
    """Key and value tiles 0..n of head `kv` into the rings, from ring position `it`, each
    slot once every consumer freed it; the position after them."""
    k_smem, v_smem = smem[2], smem[3]
    k_ready, k_empty, v_ready, v_empty = bars[2], bars[3], bars[4], bars[5]
    STAGES: gl.constexpr = k_smem.shape[0]
    BLOCK_N: gl.constexpr = k_smem.shape[2]
    for j in range(n):
        slot, phase = (it + j) % STAGES, ((it + j) // STAGES) & 1
        mbarrier.wait(k_empty.index(slot), phase ^ 1)
        _load_tile(descs[1], kv, j * BLOCK_N, k_ready.index(slot), k_smem.index(slot), KV_ROWS)
        mbarrier.wait(v_empty.index(slot), phase ^ 1)
        _load_tile(descs[2], kv, j * BLOCK_N, v_ready.index(slot), v_smem.index(slot), KV_ROWS)
    return it + n


@gluon.jit
def _mask(s, j, q_start, seq_k, CAUSAL: gl.constexpr):
    """-inf for keys past the sequence (TMA read zeros there) and, causal, after the row."""
    rows = q_start + gl.arange(0, s.shape[0], layout=gl.SliceLayout(1, s.type.layout))
    cols = j * s.shape[1] + gl.arange(0, s.shape[1], layout=gl.SliceLayout(0, s.type.layout))
    keep = (cols < seq_k)[None, :]
    if CAUSAL:
        keep = keep & (cols[None, :] <= rows[:, None])
    return gl.where(keep, s, float("-inf"))


@gluon.jit
def _softmax_step(s, state, j, where, CAUSAL: gl.constexpr, p_layout: gl.constexpr,
                  dtype: gl.constexpr):  # fmt: skip
    """Fold score tile j into the running row maximum and denominator; return the tile's
    probabilities (the A operand of `P @ V`), the accumulator's rescale and the state.
    `where`: the first tile to mask, the first query row, the keys, the scores' scale."""
    m_i, l_i = state
    n_full, q_start, seq_k, qk_scale = where
    if j >= n_full:
        s = _mask(s, j, q_start, seq_k, CAUSAL)
    # max(s) * c is max(s * c) for c > 0: one multiply per row instead of per score
    m_new = gl.maximum(m_i, gl.max(s, axis=1) * qk_scale)
    shift = gl.where(m_new == float("-inf"), 0.0, m_new)  # exp2(-inf - -inf) would be NaN
    alpha = gl.exp2(m_i - shift)
    p = gl.exp2(s * qk_scale - shift[:, None])
    l_i = l_i * alpha + gl.sum(p, axis=1)
    return gl.convert_layout(p.to(dtype), p_layout), alpha, (m_new, l_i)


@gluon.jit
def _finish(acc, state, descs, o_buf, dims, stats, rows_at):
    """Normalize and store this warpgroup's output rows (`rows_at`: batch, head, first
    row) by TMA through `o_buf`, once its last store has left it, and their statistics
    (the maximum, base-2 log of the denominator)."""
    batches, heads, _, seq_q, _ = dims
    batch, head, q_start = rows_at
    m_i, l_i = state
    unseen = l_i == 0.0  # a row no key reached: 0, as SDPA's safe softmax gives
    m_i = gl.where(unseen, 0.0, m_i)
    l_i = gl.where(unseen, 1.0, l_i)
    o = acc / gl.convert_layout(l_i, gl.SliceLayout(1, acc.type.layout))[:, None]
    head_dim: gl.constexpr = acc.shape[1]
    tma.store_wait(0)  # the previous tile's output has been read out of o_buf
    thread_barrier()  # (by the thread that issued its store: the others wait for it)
    o_buf.reshape(o.shape).store(o.to(o_buf.dtype))
    fence_async_shared()
    tma_store(descs[3], [batch, q_start, head * head_dim], o_buf)
    rows = q_start + gl.arange(0, acc.shape[0], layout=m_i.type.layout)
    at = stats + (batch * heads + head) * seq_q + rows
    gl.store(at, m_i, mask=rows < seq_q)
    gl.store(at + batches * heads * seq_q, gl.log2(l_i), mask=rows < seq_q)


@gluon.jit
def _consumer(descs, smem, bars, dims, stats, qk_scale, CAUSAL: gl.constexpr,
              CONSUMER: gl.constexpr, PINGPONG: gl.constexpr):  # fmt: skip
    """One warpgroup: its BLOCK_M query rows of each tile the loader announces."""
    CONSUMERS: gl.constexpr = smem[1].shape[0]
    ROWS: gl.constexpr = CONSUMERS * smem[0].shape[2]
    at = (0, 0)  # key tiles consumed so far (the rings' position); turns at the tensor cores
    k = 0  # tiles taken so far (their query buffers and barriers' phases)
    if PINGPONG and CONSUMER == CONSUMERS - 1:
        mbarrier.arrive(bars[6].index(0))  # the first turn is consumer 0's
    t, slot = _announced(smem, bars[0], CONSUMER, k)
    while t < _tiles(dims, ROWS):
        batch, head, q_cta = _tile(t, dims, ROWS, CAUSAL)
        at = _attend((batch, head, q_cta, slot), at, descs, smem, bars, dims, stats, qk_scale,
                     CAUSAL, (CONSUMER, PINGPONG))  # fmt: skip
        k += 1
        t, slot = _announced(smem, bars[0], CONSUMER, k)
    tma.store_wait(0)


@gluon.jit
def _my_turn(bars, turn, WHO: gl.constexpr):
    """Ping-pong (`WHO`: this consumer, whether to): wait until the consumer before this
    one issued its products of `turn`, so that the tensor cores run one consumer's while
    another computes its softmax."""
    if WHO[1]:
        mbarrier.wait(bars[6].index(WHO[0]), turn & 1)


@gluon.jit
def _pass_turn(bars, WHO: gl.constexpr):
    """Ping-pong: this consumer's products are issued; the next consumer's turn."""
    if WHO[1]:
        mbarrier.arrive(bars[6].index((WHO[0] + 1) % bars[6].shape[0]))


@gluon.jit
def _attend(tile, at, descs, smem, bars, dims, stats, qk_scale, CAUSAL: gl.constexpr,
            WHO: gl.constexpr):  # fmt: skip
    """This warpgroup's BLOCK_M rows of `tile` (batch, head, first row, the query buffer;
    its query rows landed): S = Q K^T, the online softmax, O += P V. `at`: the rings'
    position at the tile's first key tile and the consumer's turns so far (`WHO`: the
    consumer, whether it takes turns); returns them after the tile's last."""
    q_smem, k_smem = smem[0], smem[2]
    STAGES: gl.constexpr = k_smem.shape[0]
    BLOCK_M: gl.constexpr = q_smem.shape[2]
    BLOCK_N: gl.constexpr = k_smem.shape[2]
    HEAD_D: gl.constexpr = q_smem.shape[3]
    # wgmma accumulators: 4 warps stacked along the rows, one instruction the whole width
    s_layout: gl.constexpr = gl.NVMMADistributedLayout([3, 0], [4, 1], [16, BLOCK_N, 16])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout([3, 0], [4, 1], [16, HEAD_D, 16])
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    CONSUMER: gl.constexpr = WHO[0]
    batch, head, q_cta, slot = tile
    it, turn = at
    seq_k = dims[4]
    q_start = q_cta + CONSUMER * BLOCK_M
    n_own = _key_tiles(q_start + BLOCK_M, seq_k, BLOCK_N, CAUSAL)
    n_full = seq_k // BLOCK_N  # tiles before it need no mask (all keys real, under the diagonal)
    if CAUSAL:
        n_full = gl.minimum(n_full, q_start // BLOCK_N)
    where = (n_full, q_start, seq_k, qk_scale)
    query = q_smem.index(slot).reshape([BLOCK_M, HEAD_D])
    _my_turn(bars, turn, WHO)
    p, alpha, state = _first_tile(query, it, smem, bars, where, CAUSAL, s_layout, p_layout, WHO)
    acc = gl.zeros([BLOCK_M, HEAD_D], gl.float32, o_layout)
    for j in range(1, n_own):
        _my_turn(bars, turn + j, WHO)
        acc, p, alpha, state = _step(query, (acc, p, alpha, state), it, j, smem, bars, where,
                                     CAUSAL, (s_layout, p_layout, WHO))  # fmt: skip
    mbarrier.arrive(bars[1].index(slot))  # no product reads Q any more: load the next
    _my_turn(bars, turn + n_own, WHO)
    acc = _last_product(acc, alpha, p, smem, bars, it + n_own - 1, WHO)
    _finish(acc, state, descs, smem[1].index(CONSUMER), dims, stats, (batch, head, q_start))
    n_cta = _key_tiles(q_cta + smem[1].shape[0] * BLOCK_M, seq_k, BLOCK_N, CAUSAL)
    _release(it + n_own, it + n_cta, bars, STAGES)
    return it + n_cta, turn + n_own + 1


@gluon.jit
def _step(query, carried, it, j, smem, bars, where, CAUSAL: gl.constexpr,
          layouts: gl.constexpr):  # fmt: skip
    """Key tile j (ring position it + j): issue S_j and O += P_{j-1} V_{j-1}, wait for S_j
    only, and run S_j's softmax while the product with V is in flight. `layouts`: the
    scores' and the probabilities' (the A operand of `P @ V`), and who runs it."""
    acc, p, alpha, state = carried
    s_layout: gl.constexpr = layouts[0]
    k_smem, v_smem = smem[2], smem[3]
    k_ready, k_empty, v_ready, v_empty = bars[2], bars[3], bars[4], bars[5]
    STAGES: gl.constexpr = k_smem.shape[0]
    BLOCK_N: gl.constexpr = k_smem.shape[2]
    HEAD_D: gl.constexpr = k_smem.shape[3]
    BLOCK_M: gl.constexpr = query.shape[0]
    at = it + j
    slot, prev = at % STAGES, (at - 1) % STAGES
    mbarrier.wait(k_ready.index(slot), (at // STAGES) & 1)
    k_t = k_smem.index(slot).reshape([BLOCK_N, HEAD_D]).permute((1, 0))
    s_zero = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, s_layout)
    s = warpgroup_mma(query, k_t, s_zero, use_acc=False, is_async=True)
    acc = _rescale(acc, alpha)
    mbarrier.wait(v_ready.index(prev), ((at - 1) // STAGES) & 1)
    acc = warpgroup_mma(p, v_smem.index(prev).reshape([BLOCK_N, HEAD_D]), acc, is_async=True)
    _pass_turn(bars, layouts[2])
    s = warpgroup_mma_wait(1, deps=(s,))  # groups retire in order: S_j is done
    mbarrier.arrive(k_empty.index(slot))
    p_next, alpha, state = _softmax_step(s, state, j, where, CAUSAL, layouts[1], query.dtype)
    acc, p = warpgroup_mma_wait(0, deps=(acc, p))
    mbarrier.arrive(v_empty.index(prev))
    return acc, p_next, alpha, state


@gluon.jit
def _rescale(acc, alpha):
    """The accumulator's rows times their softmax rescale."""
    return acc * gl.convert_layout(alpha, gl.SliceLayout(1, acc.type.layout))[:, None]


@gluon.jit
def _first_tile(query, it, smem, bars, where, CAUSAL: gl.constexpr, s_layout: gl.constexpr,
                p_layout: gl.constexpr, WHO: gl.constexpr):  # fmt: skip
    """The first key tile's scores (ring position `it`) and softmax (nothing to overlap
    them with yet)."""
    k_smem = smem[2]
    k_ready, k_empty = bars[2], bars[3]
    STAGES: gl.constexpr = k_smem.shape[0]
    BLOCK_M: gl.constexpr = query.shape[0]
    BLOCK_N: gl.constexpr = k_smem.shape[2]
    HEAD_D: gl.constexpr = query.shape[1]
    slot = it % STAGES
    mbarrier.wait(k_ready.index(slot), (it // STAGES) & 1)
    k_t = k_smem.index(slot).reshape([BLOCK_N, HEAD_D]).permute((1, 0))
    s_zero = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, s_layout)
    s = warpgroup_mma(query, k_t, s_zero, use_acc=False, is_async=True)
    _pass_turn(bars, WHO)
    s = warpgroup_mma_wait(0, deps=(s,))
    mbarrier.arrive(k_empty.index(slot))
    rows: gl.constexpr = gl.SliceLayout(1, s_layout)
    state = (
        gl.full([BLOCK_M], float("-inf"), gl.float32, rows),
        gl.zeros([BLOCK_M], gl.float32, rows),
    )
    return _softmax_step(s, state, 0, where, CAUSAL, p_layout, query.dtype)


@gluon.jit
def _last_product(acc, alpha, p, smem, bars, last, WHO: gl.constexpr):
    """O += P V for the last key tile (ring position `last`), and its value slot freed."""
    v_smem = smem[3]
    v_ready, v_empty = bars[4], bars[5]
    STAGES: gl.constexpr = v_smem.shape[0]
    BLOCK_N: gl.constexpr = v_smem.shape[2]
    HEAD_D: gl.constexpr = v_smem.shape[3]
    slot = last % STAGES
    acc = _rescale(acc, alpha)
    mbarrier.wait(v_ready.index(slot), (last // STAGES) & 1)
    value = v_smem.index(slot).reshape([BLOCK_N, HEAD_D])
    acc = warpgroup_mma(p, value, acc, is_async=True)
    _pass_turn(bars, WHO)
    acc, p = warpgroup_mma_wait(0, deps=(acc, p))
    mbarrier.arrive(v_empty.index(slot))
    return acc


@gluon.jit
def _release(first, end, bars, STAGES: gl.constexpr):
    """Causal only: an early consumer may need fewer key tiles than the program loads;
    it still frees each (ring positions first..end, once filled, so each arrival lands in
    its phase), or the loader waits forever."""
    k_ready, k_empty, v_ready, v_empty = bars[2], bars[3], bars[4], bars[5]
    for i in range(first, end):
        slot, phase = i % STAGES, (i // STAGES) & 1
        mbarrier.wait(k_ready.index(slot), phase)
        mbarrier.arrive(k_empty.index(slot))
        mbarrier.wait(v_ready.index(slot), phase)
        mbarrier.arrive(v_empty.index(slot))


@gluon.jit
def _barriers(count: gl.constexpr, arrivals: gl.constexpr):
    """`count` mbarriers, each completing a phase after `arrivals` arrivals."""
    bars = gl.allocate_shared_memory(gl.int64, [count, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(count):
        mbarrier.init(bars.index(i), count=arrivals)
    return bars


@gluon.jit
def _buffers(desc, count: gl.constexpr):
    """`count` shared-memory tiles of `desc`'s block."""
    return gl.allocate_shared_memory(desc.dtype, [count] + desc.block_type.shape, desc.layout)


@gluon.jit
def attention_forward_sm90(q_desc, k_desc, v_desc, o_desc, stats, counter, qk_scale, batches,
                           heads, group, seq_q, seq_k, STAGES: gl.constexpr,
                           CAUSAL: gl.constexpr, Q_ROWS: gl.constexpr, KV_ROWS: gl.constexpr,
                           CONSUMERS: gl.constexpr, REGS: gl.constexpr,
                           DYNAMIC: gl.constexpr, PINGPONG: gl.constexpr,
                           Q_BUFFERS: gl.constexpr):  # fmt: skip
    """Allocate the query and output tiles, the key and value rings, the tile numbers and
    the barriers; fork into the consumers and the loader. Block shapes come from the
    descriptors. A program runs tile pid, then (persistent) tiles pid + programs, ... or
    (DYNAMIC) the next that no program has taken, counted by `counter` (zeroed). Each
    consumer has Q_BUFFERS query buffers, taken in turn by a program's tiles."""
    numbers: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [0])
    Q_SLOTS: gl.constexpr = Q_BUFFERS * CONSUMERS
    smem = (_buffers(q_desc, Q_SLOTS), _buffers(o_desc, CONSUMERS), _buffers(k_desc, STAGES),
            _buffers(v_desc, STAGES),
            gl.allocate_shared_memory(gl.int32, [Q_SLOTS, 1], numbers))  # fmt: skip
    bars = (
        _barriers(Q_SLOTS, 1),  # a query tile (or the end) landed
        _barriers(Q_SLOTS, 1),  # a query tile is read no more
        _barriers(STAGES, 1),  # key tile ready
        _barriers(STAGES, CONSUMERS),  # key slot free: every consumer is done with it
        _barriers(STAGES, 1),  # value tile ready
        _barriers(STAGES, CONSUMERS),  # value slot free
        _barriers(CONSUMERS, 1),  # ping-pong: a consumer's turn to issue its products
    )
    fence_async_shared()  # the initialized barriers, visible to the TMA (async) proxy
    descs = (q_desc, k_desc, v_desc, o_desc)
    dims = (batches, heads, group, seq_q, seq_k)
    # (the loader's arguments written out: a tuple held in a variable turns its constexprs
    # into tensors, and their `if`s into branches at run time)
    # REGS: registers per thread of each consumer (setmaxnreg); the launch picks them
    if CONSUMERS == 3:
        gl.warp_specialize(
            [(_consumer, (descs, smem, bars, dims, stats, qk_scale, CAUSAL, 0, PINGPONG)),
             (_consumer, (descs, smem, bars, dims, stats, qk_scale, CAUSAL, 1, PINGPONG)),
             (_consumer, (descs, smem, bars, dims, stats, qk_scale, CAUSAL, 2, PINGPONG)),
             (_loader, (descs, smem, bars, dims, counter, DYNAMIC, CAUSAL, Q_ROWS, KV_ROWS))],
            [4, 4, 1], [REGS, REGS, LOADER_REGS])  # fmt: skip
    else:
        gl.warp_specialize(
            [(_consumer, (descs, smem, bars, dims, stats, qk_scale, CAUSAL, 0, PINGPONG)),
             (_consumer, (descs, smem, bars, dims, stats, qk_scale, CAUSAL, 1, PINGPONG)),
             (_loader, (descs, smem, bars, dims, counter, DYNAMIC, CAUSAL, Q_ROWS, KV_ROWS))],
            [4, 1], [REGS, LOADER_REGS])  # fmt: skip
