"""Probe: can a warp-specialized Gluon flash-attention forward reach >= 0.85x cuDNN on Hopper?

tilecraft's FlashAttention-2 schedule in plain Triton `tl` reaches 0.73-0.82x of cuDNN's forward
on an H200. cuDNN and FlashAttention-3 rely on Hopper warp specialization, which Triton 3.6
exposes only through its lower-level Gluon dialect. This file holds one such kernel (a 1-warp
TMA loader feeding K/V rings, two 4-warp wgmma consumers with an online softmax, optional
ping-pong between them) and times it, over a small config sweep, against SDPA's flash and cuDNN
backends in the same process.

GPU (checks against SDPA, prints a table, writes JSON):
    python benchmarks/attention_gluon_probe.py --out $OUT/attention_gluon.json
CPU (compiles every variant for sm_90 with Triton 3.6, launches nothing):
    PYTHONPATH=/tmp/tri36 /work/main/.venv/bin/python \
        benchmarks/attention_gluon_probe.py --compile-only
"""

import argparse
import json
import math
import os
import re
import subprocess
import tempfile
from dataclasses import asdict, dataclass

import torch
import triton
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

SHAPES = [(4, 16, 4096, 128), (8, 32, 2048, 64), (1, 16, 16384, 128)]
SMEM_LIMIT = 227 * 1024  # opt-in dynamic shared memory per block on H100/H200
# 3 warpgroups (default, consumer, loader padded to 4 warps) x 128 threads x 168 <= 64K registers;
# setmaxnreg then moves registers from the loader (24) to the two consumers (240 each).
MAXNREG = 168
CONSUMER_REGS = gl.constexpr(240)  # setmaxnreg for the second consumer warpgroup
LOADER_REGS = gl.constexpr(24)  # the 1-warp loader only issues TMA copies
TOLERANCE = 2e-2


@dataclass(frozen=True)
class Config:
    """One point of the sweep; BLOCK_M is per consumer warpgroup, so a CTA owns 2 * block_m rows."""

    block_m: int = 64
    block_n: int = 128
    stages: int = 2
    pingpong: bool = False

    def smem_bytes(self, head_dim: int) -> int:
        """Q tiles of both consumers plus the K and V rings, in bf16 (barriers are negligible)."""
        return 2 * (2 * self.block_m * head_dim + 2 * self.stages * self.block_n * head_dim)


def sweep(head_dim: int) -> list[Config]:
    """A few configs that fit shared memory; pingpong on/off at each ring shape."""
    shapes = {64: [(128, 2), (128, 3), (128, 4)], 128: [(128, 2), (128, 3), (64, 3), (64, 4)]}
    configs = [
        Config(block_n=n, stages=s, pingpong=p) for n, s in shapes[head_dim] for p in (False, True)
    ]
    return [c for c in configs if c.smem_bytes(head_dim) <= SMEM_LIMIT]


@gluon.jit
def _cta_origin(seq_len, BLOCK_M: gl.constexpr, CAUSAL: gl.constexpr):
    """Row of this (batch, head) in the flattened tensors, and the first query row of the CTA.

    Causal CTAs run heaviest-first (reversed query blocks) so the tail of the grid is short.
    """
    pid_m = gl.program_id(0)
    if CAUSAL:
        pid_m = gl.num_programs(0) - 1 - pid_m
    return gl.program_id(1) * seq_len, pid_m * 2 * BLOCK_M


@gluon.jit
def _num_key_tiles(q_end, seq_len, BLOCK_N: gl.constexpr, CAUSAL: gl.constexpr):
    """Key tiles needed by queries below q_end: up to the diagonal when causal, all otherwise."""
    if CAUSAL:
        return gl.cdiv(q_end, BLOCK_N)
    else:
        return seq_len // BLOCK_N


@gluon.jit
def _load_partition(q_desc, k_desc, v_desc, smem, bars, seq_len, CAUSAL: gl.constexpr):
    """One warp: TMA the two Q tiles, then stream K and V tiles through the rings.

    K and V have separate ready/empty barriers so S = Q K^T can start before V lands and K slots
    free up as soon as both consumers' S products finish. Empty barriers count two arrivals.
    """
    q_smem, k_smem, v_smem = smem
    q_bars, k_ready, k_empty, v_ready, v_empty, turn = bars
    NUM_STAGES: gl.constexpr = k_smem.shape[0]
    BLOCK_N: gl.constexpr = k_smem.shape[1]
    BLOCK_M: gl.constexpr = q_smem.shape[1]
    row0, q_cta = _cta_origin(seq_len, BLOCK_M, CAUSAL)
    for c in gl.static_range(2):
        mbarrier.expect(q_bars.index(c), q_desc.block_type.nbytes)
        q_row = row0 + q_cta + c * BLOCK_M
        tma.async_copy_global_to_shared(q_desc, [q_row, 0], q_bars.index(c), q_smem.index(c))
    for j in range(_num_key_tiles(q_cta + 2 * BLOCK_M, seq_len, BLOCK_N, CAUSAL)):
        slot = j % NUM_STAGES
        phase = (j // NUM_STAGES) & 1
        kv_row = row0 + j * BLOCK_N
        mbarrier.wait(k_empty.index(slot), phase ^ 1)  # a fresh barrier passes parity 1 at once
        mbarrier.expect(k_ready.index(slot), k_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(
            k_desc, [kv_row, 0], k_ready.index(slot), k_smem.index(slot)
        )
        mbarrier.wait(v_empty.index(slot), phase ^ 1)
        mbarrier.expect(v_ready.index(slot), v_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(
            v_desc, [kv_row, 0], v_ready.index(slot), v_smem.index(slot)
        )


@gluon.jit
def _mask_diagonal(s, j, n_full, q_start):
    """Hide keys after each query in tile j; tiles below n_full lie under the diagonal: skipped."""
    BLOCK_M: gl.constexpr = s.shape[0]
    BLOCK_N: gl.constexpr = s.shape[1]
    if j >= n_full:
        rows = q_start + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, s.type.layout))
        cols = j * BLOCK_N + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s.type.layout))
        s = gl.where(cols[None, :] <= rows[:, None], s, float("-inf"))
    return s


@gluon.jit
def _online_softmax(s, m_i, l_i, qk_scale, j, n_full, q_start, CAUSAL: gl.constexpr, p_layout):
    """Fold score tile j into the running max/sum; return P (bf16 wgmma A operand) and the rescale.

    The softmax scale is folded into log2(e) so exp2 is the only transcendental. Only tiles at or
    past n_full (the ones crossing the diagonal) pay for the causal mask.
    """
    if CAUSAL:
        s = _mask_diagonal(s, j, n_full, q_start)
    m_new = gl.maximum(m_i, gl.max(s, axis=1) * qk_scale)
    alpha = gl.exp2(m_i - m_new)
    p = gl.exp2(s * qk_scale - m_new[:, None])
    l_i = l_i * alpha + gl.sum(p, axis=1)
    return gl.convert_layout(p.to(gl.bfloat16), p_layout), alpha, m_new, l_i


@gluon.jit
def _consumer(o_desc, smem, bars, seq_len, sm_scale,
              CAUSAL: gl.constexpr, PINGPONG: gl.constexpr, CONSUMER: gl.constexpr):  # fmt: skip
    """One warpgroup owning BLOCK_M query rows: S = Q K^T, online softmax, O += P V, then store O.

    Iteration j issues S_j and O += P_{j-1} V_{j-1} back to back, then runs the softmax of S_j
    while P_{j-1} V_{j-1} is still in flight. With PINGPONG the two consumers take turns (one
    mbarrier each) to issue that pair, so one's softmax overlaps the other's tensor-core work.
    """
    q_smem, k_smem, v_smem = smem
    q_bars, k_ready, k_empty, v_ready, v_empty, turn = bars
    NUM_STAGES: gl.constexpr = k_smem.shape[0]
    BLOCK_N: gl.constexpr = k_smem.shape[1]
    BLOCK_M: gl.constexpr = q_smem.shape[1]
    HEAD_D: gl.constexpr = q_smem.shape[2]
    # wgmma accumulators: 4 warps stacked along M, one instruction spanning the whole N.
    s_layout: gl.constexpr = gl.NVMMADistributedLayout([3, 0], [4, 1], [16, BLOCK_N, 16])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout([3, 0], [4, 1], [16, HEAD_D, 16])
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    row_o: gl.constexpr = gl.SliceLayout(1, o_layout)

    row0, q_cta = _cta_origin(seq_len, BLOCK_M, CAUSAL)
    q_start = q_cta + CONSUMER * BLOCK_M
    n_own = _num_key_tiles(q_start + BLOCK_M, seq_len, BLOCK_N, CAUSAL)
    n_full = q_start // BLOCK_N  # tiles entirely below the diagonal (unused unless CAUSAL)
    qk_scale = sm_scale * 1.4426950408889634
    q_buf = q_smem.index(CONSUMER)
    s_zero = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, s_layout)

    mbarrier.wait(q_bars.index(CONSUMER), 0)
    mbarrier.wait(k_ready.index(0), 0)
    s = warpgroup_mma(q_buf, k_smem.index(0).permute((1, 0)), s_zero, use_acc=False, is_async=True)
    s = warpgroup_mma_wait(0, deps=(s,))
    mbarrier.arrive(k_empty.index(0))
    m_i = gl.full([BLOCK_M], float("-inf"), gl.float32, gl.SliceLayout(1, s_layout))
    l_i = gl.zeros([BLOCK_M], gl.float32, gl.SliceLayout(1, s_layout))
    p, alpha, m_i, l_i = _online_softmax(
        s, m_i, l_i, qk_scale, 0, n_full, q_start, CAUSAL, p_layout
    )
    acc = gl.zeros([BLOCK_M, HEAD_D], gl.float32, o_layout)

    for j in range(1, n_own):
        slot = j % NUM_STAGES
        prev = (j - 1) % NUM_STAGES
        if PINGPONG:
            mbarrier.wait(turn.index(CONSUMER), (j - CONSUMER) & 1)
        mbarrier.wait(k_ready.index(slot), (j // NUM_STAGES) & 1)
        k_t = k_smem.index(slot).permute((1, 0))
        s = warpgroup_mma(q_buf, k_t, s_zero, use_acc=False, is_async=True)
        acc = acc * gl.convert_layout(alpha, row_o)[:, None]
        mbarrier.wait(v_ready.index(prev), ((j - 1) // NUM_STAGES) & 1)
        acc = warpgroup_mma(p, v_smem.index(prev), acc, is_async=True)
        if PINGPONG:
            mbarrier.arrive(turn.index(1 - CONSUMER))
        s = warpgroup_mma_wait(1, deps=(s,))  # wgmma groups retire in order: S_j is done
        mbarrier.arrive(k_empty.index(slot))
        p_next, alpha, m_i, l_i = _online_softmax(
            s, m_i, l_i, qk_scale, j, n_full, q_start, CAUSAL, p_layout
        )
        acc, p = warpgroup_mma_wait(0, deps=(acc, p))
        mbarrier.arrive(v_empty.index(prev))
        p = p_next

    last = (n_own - 1) % NUM_STAGES
    acc = acc * gl.convert_layout(alpha, row_o)[:, None]
    mbarrier.wait(v_ready.index(last), ((n_own - 1) // NUM_STAGES) & 1)
    acc = warpgroup_mma(p, v_smem.index(last), acc, is_async=True)
    acc, p = warpgroup_mma_wait(0, deps=(acc, p))
    mbarrier.arrive(v_empty.index(last))

    o = acc / gl.convert_layout(l_i, row_o)[:, None]
    q_buf.store(o.to(gl.bfloat16))  # Q is no longer read: reuse its tile to stage O for TMA
    fence_async_shared()
    tma.async_copy_shared_to_global(o_desc, [row0 + q_start, 0], q_buf)
    n_cta = _num_key_tiles(q_cta + 2 * BLOCK_M, seq_len, BLOCK_N, CAUSAL)
    _release_unused_tiles(n_own, n_cta, bars, NUM_STAGES, PINGPONG, CONSUMER)
    tma.store_wait(0)


@gluon.jit
def _release_unused_tiles(n_own, n_cta, bars, NUM_STAGES: gl.constexpr,
                          PINGPONG: gl.constexpr, CONSUMER: gl.constexpr):  # fmt: skip
    """Causal only: the lower consumer can need fewer key tiles than the CTA loads.

    It still has to release each remaining slot (after it was filled, so each arrival lands in the
    right phase) and keep passing the ping-pong turn, or the loader and the other consumer hang.
    """
    q_bars, k_ready, k_empty, v_ready, v_empty, turn = bars
    for j in range(n_own, n_cta):
        slot = j % NUM_STAGES
        phase = (j // NUM_STAGES) & 1
        mbarrier.wait(k_ready.index(slot), phase)
        mbarrier.arrive(k_empty.index(slot))
        mbarrier.wait(v_ready.index(slot), phase)
        mbarrier.arrive(v_empty.index(slot))
        if PINGPONG:
            mbarrier.wait(turn.index(CONSUMER), (j - CONSUMER) & 1)
            mbarrier.arrive(turn.index(1 - CONSUMER))


@gluon.jit
def _barrier_array(count: gl.constexpr, arrivals: gl.constexpr):
    """`count` mbarriers, each completing a phase after `arrivals` arrivals."""
    bars = gl.allocate_shared_memory(gl.int64, [count, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(count):
        mbarrier.init(bars.index(i), count=arrivals)
    return bars


@gluon.jit
def attention_fwd_kernel(q_desc, k_desc, v_desc, o_desc, sm_scale, seq_len,
                         NUM_STAGES: gl.constexpr, CAUSAL: gl.constexpr,
                         PINGPONG: gl.constexpr):  # fmt: skip
    """Allocate the rings and barriers, then fork: consumer 0 (default), consumer 1, loader.

    Block sizes come from the descriptors: Q/O tiles are BLOCK_M x HEAD_D, K/V tiles BLOCK_N x
    HEAD_D. The CTA owns 2 * BLOCK_M query rows of one (batch, head).
    """
    stages: gl.constexpr = [NUM_STAGES]
    smem = (
        gl.allocate_shared_memory(q_desc.dtype, [2] + q_desc.block_type.shape, q_desc.layout),
        gl.allocate_shared_memory(k_desc.dtype, stages + k_desc.block_type.shape, k_desc.layout),
        gl.allocate_shared_memory(v_desc.dtype, stages + v_desc.block_type.shape, v_desc.layout),
    )
    bars = (
        _barrier_array(2, 1),  # Q tile landed, one per consumer
        _barrier_array(NUM_STAGES, 1),  # K ready
        _barrier_array(NUM_STAGES, 2),  # K empty: both consumers done with it
        _barrier_array(NUM_STAGES, 1),  # V ready
        _barrier_array(NUM_STAGES, 2),  # V empty
        _barrier_array(2, 1),  # ping-pong: consumer c may issue its wgmmas when turn[c] flips
    )
    fence_async_shared()  # make the initialised barriers visible to the TMA (async) proxy
    gl.warp_specialize(
        [
            (_consumer, (o_desc, smem, bars, seq_len, sm_scale, CAUSAL, PINGPONG, 0)),
            (_consumer, (o_desc, smem, bars, seq_len, sm_scale, CAUSAL, PINGPONG, 1)),
            (_load_partition, (q_desc, k_desc, v_desc, smem, bars, seq_len, CAUSAL)),
        ],
        [4, 1],
        [CONSUMER_REGS, LOADER_REGS],
    )


def kernel_args(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor, causal: bool, cfg: Config
):
    """Descriptors, scalars, constexprs, grid and launch options: shared by both modes."""
    batch, heads, seq, head_dim = q.shape
    assert head_dim in (64, 128), "probe supports head_dim 64 and 128"
    assert seq % (2 * cfg.block_m) == 0 and seq % cfg.block_n == 0, "probe needs seq % block == 0"
    q_layout = gl.NVMMASharedLayout.get_default_for([cfg.block_m, head_dim], gl.bfloat16)
    kv_layout = gl.NVMMASharedLayout.get_default_for([cfg.block_n, head_dim], gl.bfloat16)

    def desc(t: torch.Tensor, rows: int, layout) -> TensorDescriptor:
        return TensorDescriptor.from_tensor(t.view(-1, head_dim), [rows, head_dim], layout)

    runtime = [
        desc(q, cfg.block_m, q_layout),
        desc(k, cfg.block_n, kv_layout),
        desc(v, cfg.block_n, kv_layout),
        desc(o, cfg.block_m, q_layout),
        1.0 / math.sqrt(head_dim),
        seq,
    ]
    constexprs = dict(NUM_STAGES=cfg.stages, CAUSAL=causal, PINGPONG=cfg.pingpong)
    grid = (seq // (2 * cfg.block_m), batch * heads)
    return runtime, constexprs, grid, dict(num_warps=4, maxnreg=MAXNREG)


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, cfg: Config):
    """Return (output, launcher): descriptors are built once so timing sees only the launch."""
    o = torch.empty_like(q)
    runtime, constexprs, grid, options = kernel_args(q, k, v, o, causal, cfg)

    def launch() -> None:
        attention_fwd_kernel[grid](*runtime, **constexprs, **options)

    launch()
    return o, launch


def compile_for_sm90(head_dim: int, causal: bool, cfg: Config) -> dict:
    """Compile one variant with Triton's real compiler for sm_90 without a GPU; report resources."""
    seq = max(2 * cfg.block_m, cfg.block_n)
    q = torch.empty(1, 1, seq, head_dim, dtype=torch.bfloat16)
    runtime, constexprs, _, options = kernel_args(q, q, q, q, causal, cfg)
    return compile_kernel(attention_fwd_kernel, runtime, constexprs, options)


def compile_kernel(kernel, runtime: list, constexprs: dict, options: dict) -> dict:  # type: ignore[no-untyped-def]
    """Compile a Gluon kernel for sm_90 as a launch with these arguments would, launching
    nothing; its shared memory, registers, `setmaxnreg` counts, spills and atomics."""
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource
    from triton.runtime.jit import mangle_type

    names = kernel.arg_names
    signature = {name: mangle_type(arg) for name, arg in zip(names, runtime, strict=False)}
    signature.update({name: "constexpr" for name in constexprs})
    src = GluonASTSource(kernel, signature, constexprs)
    compiled = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=options)
    ptx = compiled.asm["ptx"]
    return dict(
        smem=compiled.metadata.shared,
        regs=_cubin_registers(compiled.asm["cubin"]),
        setmaxnreg=sorted(
            set(re.findall(r"setmaxnreg\.(?:inc|dec)\.sync\.aligned\.u32\s+(\d+)", ptx))
        ),
        spills=_ptxas_spills(ptx),
        atomics=sorted(set(re.findall(r"\b(?:red|atom)\.[\w.]+", ptx))),
    )


def _cubin_registers(cubin: bytes) -> int | None:
    """Per-thread register count ptxas assigned (the launch-time cap; setmaxnreg moves it later)."""
    cuobjdump = os.path.join(os.path.dirname(triton.__file__), "backends/nvidia/bin/cuobjdump")
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        out = subprocess.run(
            [cuobjdump, "-res-usage", f.name], capture_output=True, text=True
        ).stdout
    found = re.search(r"REG:(\d+)", out)
    return int(found.group(1)) if found else None


def _ptxas_spills(ptx: str) -> str:
    """Spill stores/loads as `ptxas -v` reports them; res-usage alone hides spills."""
    ptxas = os.path.join(os.path.dirname(triton.__file__), "backends/nvidia/bin/ptxas")
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "k.ptx")
        with open(path, "w") as f:
            f.write(ptx)
        cmd = [ptxas, "-v", "--gpu-name=sm_90a", path, "-o", path + ".o"]
        out = subprocess.run(cmd, capture_output=True, text=True).stderr
    found = re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", out)
    return ",".join(f"{s}/{ld}" for s, ld in found) or "?"


def first_lines(exc: BaseException, n: int = 4) -> str:
    """Compiler errors are long; the head says which op or check failed."""
    return " | ".join(f"{type(exc).__name__}: {exc}".strip().splitlines()[:n])


def compile_only(compile_variant=compile_for_sm90, configs=None) -> None:  # type: ignore[no-untyped-def]
    """Compile every (head_dim, causal, config) for sm_90; print which compiled and their cost."""
    assert "TRITON_INTERPRET" not in os.environ, "unset TRITON_INTERPRET: this needs the compiler"
    failures = 0
    for head_dim in (64, 128):
        for causal in (False, True):
            for cfg in (configs or sweep)(head_dim):
                tag = f"d={head_dim} causal={causal!s:5} {cfg}"
                try:
                    info = compile_variant(head_dim, causal, cfg)
                    print(f"OK    {tag}: " + " ".join(f"{k}={v}" for k, v in info.items()))
                except Exception as exc:  # noqa: BLE001 - a probe reports every failure and moves on
                    failures += 1
                    print(f"FAIL  {tag}: {first_lines(exc)}")
    print(f"{failures} variant(s) failed to compile")


def tflops(shape: tuple[int, int, int, int], causal: bool, ms: float) -> float:
    """Forward FLOPs 4*b*h*s*s*d, halved when causal, per millisecond, as TFLOP/s."""
    b, h, s, d = shape
    return 4 * b * h * s * s * d / (2 if causal else 1) / ms * 1e-9


def bench_sdpa(q, k, v, causal: bool, backend) -> float:
    """Milliseconds of SDPA's forward pinned to one backend."""
    from torch.nn.attention import sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention as sdpa

    with sdpa_kernel(backend):
        return triton.testing.do_bench(lambda: sdpa(q, k, v, is_causal=causal), warmup=25, rep=100)


def bench_case(shape: tuple[int, int, int, int], causal: bool) -> list[dict]:
    """Check and time every sweep config and both SDPA backends on one shape; return the rows."""
    from torch.nn.attention import SDPBackend
    from torch.nn.functional import scaled_dot_product_attention as sdpa

    q, k, v = (torch.randn(shape, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    ref = sdpa(q, k, v, is_causal=causal)
    case = dict(shape=list(shape), causal=causal)
    rows = []
    for name, backend in (
        ("cudnn", SDPBackend.CUDNN_ATTENTION),
        ("flash", SDPBackend.FLASH_ATTENTION),
    ):
        try:
            ms = bench_sdpa(q, k, v, causal, backend)
            rows.append(dict(case, impl=name, ms=ms, tflops=tflops(shape, causal, ms)))
        except Exception as exc:  # noqa: BLE001
            rows.append(dict(case, impl=name, error=first_lines(exc)))
    for cfg in sweep(shape[3]):
        row = dict(case, impl="gluon", config=asdict(cfg))
        try:
            out, launch = attention(q, k, v, causal, cfg)
            torch.cuda.synchronize()
            row["max_abs_err"] = err = (out.float() - ref.float()).abs().max().item()
            row["wrong"] = not err <= TOLERANCE
            row["ms"] = triton.testing.do_bench(launch, warmup=25, rep=100)
            row["tflops"] = tflops(shape, causal, row["ms"])
        except Exception as exc:  # noqa: BLE001
            row["error"] = first_lines(exc)
        rows.append(row)
    return rows


def print_case(rows: list[dict]) -> None:
    """One table per case: TFLOP/s and ratios to cuDNN and flash for every row."""
    peers = {r["impl"]: r.get("tflops") for r in rows if r["impl"] in ("cudnn", "flash")}
    print(f"\nshape={rows[0]['shape']} causal={rows[0]['causal']}")
    for r in rows:
        label = r["impl"]
        if "config" in r:
            c = r["config"]
            label += (
                f" m{c['block_m']} n{c['block_n']} s{c['stages']}{' pp' if c['pingpong'] else ''}"
            )
        if "error" in r:
            print(f"  {label:24} ERROR {r['error']}")
            continue
        ratios = [f"x{n}={r['tflops'] / t:.3f}" for n, t in peers.items() if t]
        if "max_abs_err" in r:
            ratios.append(f"err={r['max_abs_err']:.1e}{' WRONG' if r['wrong'] else ''}")
        print(f"  {label:24} {r['tflops']:6.1f} TFLOP/s  " + "  ".join(ratios))


def main() -> None:
    """Parse flags; compile-only on the CPU, else benchmark every shape, causal and not."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--compile-only", action="store_true", help="sm_90 compile, no launch")
    parser.add_argument("--out", help="write all rows as JSON here")
    args = parser.parse_args()
    if args.compile_only:
        compile_only()
        return
    rows = []
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
