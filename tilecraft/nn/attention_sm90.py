"""Attention on Hopper: when `attention()` runs the Gluon kernels, and their launches.

On an sm_90 GPU (H100, H200) `tilecraft.nn.attention` runs its forward and backward as the
warp-specialized kernels of `attention_gluon.py` and `attention_gluon_bwd.py` where they
cover the call: float16 or bfloat16, head dim 64 or 128, no bias and no sliding window, a
positive scale, at least `MIN_QUERIES` queries, and q, k, v (and the output's gradient)
each laid out with heads in rows or side by side (TMA reads them in place; others are
copied for the backward). Everywhere else, wherever Triton lacks Gluon's Hopper ops or a
kernel fails to compile, and (the backward) under deterministic algorithms, the `tl`
kernels run; both backwards take either forward's statistics.

`TILECRAFT_GLUON_ATTENTION=0` turns the Gluon kernels off; `=always` takes them at any
number of queries (the GPU tests use that to reach small and ragged shapes).
"""

from __future__ import annotations

import functools
import os
import warnings
from typing import Any

import torch

from tilecraft.nn.attention_tiles import LOG2E

MIN_QUERIES = 1024  # below this the launch's host work (descriptors) is a visible share
BLOCK_M, BLOCK_N = 64, 128  # rows per consumer warpgroup, keys per tile
# ring depth by head dim, and consumer warpgroups by head dim and causality: an H100's
# sweep (benchmarks/RESULTS.md, seventeenth session) found 2-deep rings 1.0-1.14x 3-deep
# ones at head dim 128, and three consumers 1.06x two at head dim 64 without a mask, 0.9x
# with the causal one
STAGES = {64: 2, 128: 2}
CONSUMERS = {(64, False): 3, (64, True): 2, (128, False): 2, (128, True): 2}
# registers per thread by the number of consumers: at launch, then each consumer's after
# `setmaxnreg` (the loader's warpgroup keeps 24); warpgroups x 128 x registers <= 64K
REGISTERS = {2: (168, 240), 3: (128, 160)}
# ping-pong, by head dim and causality: the consumers take turns issuing their products
# (FlashAttention-3's schedule), so that the tensor cores run one's while another computes
# its softmax; causal only where each consumer of a tile sees as many key tiles (CONSUMERS *
# BLOCK_M == BLOCK_N). Query buffers per consumer: with two, a program's next tile's queries
# load while its consumers finish this one. An H100 (twenty-fourth session, four sweeps):
# turns 1.02x the median at head dim 64 unmasked (three consumers; 3 of 4 sweeps higher),
# two buffers 1.01-1.03x at 64 causal (every sweep); neither more than noise at 128
PINGPONG = {(64, False): True, (64, True): False, (128, False): False, (128, True): False}
QUERY_BUFFERS = {(64, False): 1, (64, True): 2, (128, False): 1, (128, True): 1}
# how programs take tiles (CONSUMERS * BLOCK_M query rows of a head): "one" program per
# tile; "static", one per SM taking tiles pid, pid + programs, ...; "dynamic", one per SM
# taking the next tile no program has (causal tiles differ in work). A persistent program
# loads a tile's queries and keys while its consumers finish the last, which pays where
# tiles are short: on an H100 (nineteenth session) dynamic ran 1.04-1.05x one at head dim
# 64 without a mask, 1.11-1.12x causal (16 tiles a head), 1.04-1.09x causal at head dim 128
# and 4096 queries (32), but 0.93-0.97x at 16384 (128) and 0.98-1.01x unmasked at 128
PERSISTENT_UP_TO = 32  # a head's query tiles up to this many: dynamic; beyond, one per tile
SCHEDULE: str | None = None  # one of the three for every call (the tests, the sweeps)
PROGRAMS: int | None = None  # a persistent launch's programs; None: one per SM
_failed: set[tuple] = set()  # kernel variants that failed to compile: the tl kernels run
# the backward: query tiles of 64 rows, 2-deep rings of them, and two dQ buffers for the
# writer (an H100, twenty-third session: with dQ added by TMA, two ran 1.00-1.04x one at
# head dim 128); the consumers' registers, and the loader's and writer's
BACKWARD_STAGES, BACKWARD_ROWS, DQ_BUFFERS = 2, 64, 2
BACKWARD_REGS = (240, 24)
# the Gluon backward where it covers the call (an H100, twentieth session: 1.05-1.18x the tl
# backward, 0.75-0.86x cuDNN's, on the six benchmarked shapes); the tests compare the two
BACKWARD = True
BACKWARD_FP_FUSION = False  # contract products into FMAs (the tl backward does not)


def wanted(q: torch.Tensor, k: torch.Tensor, scale: float, window: int, has_bias: bool) -> bool:
    """Whether `attention()` should run its forward through the Gluon kernel: on an sm_90
    GPU whose Triton has Gluon's Hopper ops, for a call the kernel `covers`."""
    if not q.is_cuda:  # (first: every CPU call asks)
        return False
    mode = os.environ.get("TILECRAFT_GLUON_ATTENTION", "1")
    least = 1 if mode == "always" else MIN_QUERIES
    if mode == "0" or not covers(q, k, scale, window, has_bias, least):
        return False
    return _hopper(q.device.index) and _gluon() is not None


def covers(q: torch.Tensor, k: torch.Tensor, scale: float, window: int, has_bias: bool,
           least: int = MIN_QUERIES) -> bool:  # fmt: skip
    """Whether the kernel computes this call: its dtype, head dim and options, at least
    `least` queries and some keys (layouts and alignment are checked at launch)."""
    if has_bias or window or not scale > 0 or q.numel() == 0 or k.size(2) == 0:
        return False
    return q.dtype in (torch.float16, torch.bfloat16) and q.size(3) in STAGES and q.size(2) >= least


@functools.cache
def _hopper(index: int | None) -> bool:
    return torch.cuda.get_device_capability(index) == (9, 0)


@functools.cache
def _gluon_backward() -> Any:
    """The backward kernel's module (imported once `_gluon` found Gluon's Hopper ops)."""
    from tilecraft.nn import attention_gluon_bwd

    return attention_gluon_bwd


@functools.cache
def _gluon() -> Any:
    """The kernel module, or None where this Triton lacks Gluon's Hopper ops."""
    try:
        from tilecraft.nn import attention_gluon
    except Exception:  # noqa: BLE001 - an older (3.5) or newer Triton: the tl kernels run
        return None
    return attention_gluon


def define_op(fallback: Any, backward: Any, setup_context: Any) -> Any:
    """The operator `tilecraft_nn::attention_sm90`: `attention_op`'s signature, outputs
    and backward, with this forward where it applies and `fallback` (the `tl` forward)
    where it does not."""

    @torch.library.custom_op("tilecraft_nn::attention_sm90", mutates_args=())
    def attention_sm90(
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        bias: torch.Tensor,
        causal: bool,
        scale: float,
        window: int,
        has_bias: bool,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        found = forward(q, k, v, causal, scale)
        if found is not None:
            return found
        out, stats = fallback(q, k, v, bias, causal, scale, window, has_bias)
        return out.clone(memory_format=torch.preserve_format), stats  # no view out of an op

    attention_sm90.register_fake(lambda q, *_: empty_outputs(q))
    attention_sm90.register_autograd(backward, setup_context=setup_context)
    return attention_sm90


def define_backward_op(fallback: Any) -> Any:
    """The operator `tilecraft_nn::attention_backward_sm90`: `attention_backward`'s
    signature and outputs, computed by the Gluon backward where it applies and by
    `fallback` (the `tl` backward's operator) where it does not."""

    @torch.library.custom_op("tilecraft_nn::attention_backward_sm90", mutates_args=())
    def attention_backward_sm90(
        grad_out: torch.Tensor,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        bias: torch.Tensor,
        out: torch.Tensor,
        stats: torch.Tensor,
        causal: bool,
        scale: float,
        window: int,
        has_bias: bool,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        found = (
            None if has_bias or window else backward(grad_out, q, k, v, out, stats, causal, scale)
        )
        if found is not None:
            return (*found, q.new_empty(0, dtype=torch.float32))
        grads = fallback(grad_out, q, k, v, bias, out, stats, causal, scale, window, has_bias)
        return tuple(t.clone() for t in grads)  # (no view out of an op)

    def fake(grad_out: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
             bias: torch.Tensor, *flags: Any) -> tuple:  # fmt: skip
        """Contiguous gradients; dBias (float32) the bias's shape, or empty without one."""
        grads = [torch.empty(t.shape, dtype=t.dtype, device=t.device) for t in (q, k, v)]
        grad_bias = torch.empty(bias.shape if flags[-1] else [0], device=q.device)
        return (*grads, grad_bias.float())

    attention_backward_sm90.register_fake(fake)
    return attention_backward_sm90


def backward(grad_out: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
             out: torch.Tensor, stats: torch.Tensor, causal: bool,
             scale: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:  # fmt: skip
    """dQ, dK and dV (contiguous) from the Gluon backward, or None where this Triton does
    not allow it or the caller asked for deterministic algorithms (dQ's sums come in no
    fixed order). Tensors TMA cannot read in place (an expanded gradient, say) are copied."""
    if not q.is_cuda or torch.are_deterministic_algorithms_enabled():
        return None
    q, k, v, grad_out = (t if heads_view(t) else t.contiguous() for t in (q, k, v, grad_out))
    if heads_view(k)[1] != heads_view(v)[1]:  # type: ignore[index]
        k, v = k.contiguous(), v.contiguous()
    views = [heads_view(t) for t in (q, k, v, grad_out)]
    out = out if out.stride(-1) == 1 else out.contiguous()
    flags = tuple(view[1] for view in views)  # type: ignore[index]
    key = ("backward", q.device.index, q.dtype, q.size(3), causal, *flags)
    if key in _failed:
        return None
    batch, heads, seq_q, dim = q.shape
    padded = -(-seq_q // BACKWARD_ROWS) * BACKWARD_ROWS  # the writer adds whole tiles
    dq = torch.empty(batch, heads, padded, dim, dtype=torch.float32, device=q.device)
    dk, dv = (torch.empty(k.shape, dtype=k.dtype, device=k.device) for _ in range(2))
    grads = (dq, dk, dv)
    launch = functools.partial(
        _launch_backward, views, (grad_out, out, stats), grads, causal, scale
    )
    if not _attempt(key, "backward", launch):
        return None
    # (cast here: the last program to add a tile casting it in the kernel ran 0.60-0.80x
    # cuDNN against 0.78-0.94x on an H100, twenty-second session: its writer warp reads the
    # sums back at a load's latency per chunk while the consumers wait for its buffer)
    return dq[:, :, :seq_q].to(q.dtype, memory_format=torch.contiguous_format), dk, dv


def _launch_backward(views: list, ins: tuple, grads: tuple, causal: bool, scale: float) -> None:
    """`row_terms`, then the backward kernel over (key tiles of 128, batch * kv_heads)."""
    grad_out, out, stats = ins
    dq, dk = grads[0], grads[1]
    batch, heads, seq_q, dim = grad_out.shape
    padded = dq.size(2)
    terms = torch.empty(2, batch * heads, padded, dtype=torch.float32, device=dk.device)
    args, options = backward_arguments(views, terms, grads, causal, scale)
    module = _gluon_backward()
    with torch.cuda.device(dk.device):  # Triton launches on the current device
        strides = (*out.stride()[:3], *grad_out.stride()[:3])
        pre_pass = (out, grad_out, stats, terms, dq, heads, seq_q, *strides)
        module.row_terms[(padded // BACKWARD_ROWS, batch * heads)](
            *pre_pass, DIM=dim, ROWS=BACKWARD_ROWS
        )
        grid = (-(-dk.size(2) // 128), batch * dk.size(1))
        module.attention_backward_sm90[grid](*args, **options)


def backward_arguments(views: list, terms: torch.Tensor, grads: tuple, causal: bool,
                       scale: float) -> tuple[list, dict]:  # fmt: skip
    """The backward kernel's arguments, and its constexprs with options (the tests compile
    these for sm_90 on a CPU): `grads` are dQ (float32, its queries padded to whole tiles),
    dK and dV."""
    dq, dk, dv = grads
    batch, heads, _, dim = dq.shape
    kv_heads, seq_k = dk.size(1), dk.size(2)
    (q, q_rows), (k, kv_rows), (v, _), (grad_out, do_rows) = views
    key_rows = [t.view(batch * kv_heads, seq_k, dim) for t in (dk, dv)]
    rows = ((q, BACKWARD_ROWS), (k, 64), (v, 64), (grad_out, BACKWARD_ROWS))
    descs = [_descriptor(t, n, dim) for t, n in (*rows, *((t, 64) for t in key_rows))]
    dq_desc = _descriptor(dq.view(batch * heads, -1, dim), BACKWARD_ROWS, dim)
    args = [*descs, _terms_descriptor(terms), dq_desc, scale * LOG2E, scale, batch, heads]
    args += [heads // kv_heads, grad_out.size(1), seq_k]
    options = dict(STAGES=BACKWARD_STAGES, CAUSAL=causal, Q_ROWS=q_rows, DO_ROWS=do_rows,
                   KV_ROWS=kv_rows, DQ_BUFS=DQ_BUFFERS, num_warps=4,
                   REGS=BACKWARD_REGS[0], WORKER_REGS=BACKWARD_REGS[1],
                   maxnreg=168, enable_fp_fusion=BACKWARD_FP_FUSION)  # fmt: skip
    return args, options


def empty_outputs(q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The output, laid out `(batch, queries, heads, head_dim)` as the `tl` forward's, and
    the statistics `(2, batch, heads, queries)`, uninitialized."""
    batch, heads, seq_q, dim = q.shape
    strides = (seq_q * heads * dim, dim, heads * dim, 1)
    out = torch.empty_strided(q.shape, strides, dtype=q.dtype, device=q.device)
    return out, q.new_empty([2, batch, heads, seq_q], dtype=torch.float32)


def heads_view(t: torch.Tensor) -> tuple[torch.Tensor, bool] | None:
    """`t` `(batch, heads, seq, head_dim)` seen as 3-D for TMA: heads in the first dim
    (`[batch * heads, seq, head_dim]`, True) or side by side in the last (`[batch, seq,
    heads * head_dim]`, False); None for other layouts or strides TMA cannot take."""
    batch, heads, seq, dim = t.shape
    sb, sh, ss, sd = t.stride()
    if sd != 1 or t.data_ptr() % 16:
        return None
    if sb == heads * sh or batch == 1:  # heads in rows
        view, in_rows = t.as_strided([batch * heads, seq, dim], [sh, ss, 1]), True
    elif sh == dim or heads == 1:  # heads side by side
        view, in_rows = t.as_strided([batch, seq, heads * dim], [sb, ss, 1]), False
    else:
        return None
    if any(s * t.element_size() % 16 for s in view.stride()[:2]):
        return None
    return view, in_rows


def forward(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: float
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The output `(batch, heads, queries, head_dim)` (laid out `(batch, queries, heads,
    head_dim)`) and statistics `(2, batch, heads, queries)`, as `attention_forward`
    returns them; None where the layouts or this Triton do not allow the kernel."""
    views = [heads_view(t) for t in (q, k, v)]
    if None in views or views[1][1] != views[2][1]:  # type: ignore[index]
        return None
    key = (q.device.index, q.dtype, q.size(3), causal, views[0][1], views[1][1])  # type: ignore[index]
    if key in _failed:
        return None
    out, stats = empty_outputs(q)
    launch = functools.partial(_launch, views, out, stats, causal, scale, k.size(1))
    return (out, stats) if _attempt(key, "forward", launch) else None


def _attempt(key: tuple, what: str, launch: Any) -> bool:
    """Run `launch`; where it fails (a Triton whose Gluon differs), remember the variant
    `key`, warn once and return False, so that the `tl` kernel runs instead."""
    try:
        launch()
    except Exception as exc:  # noqa: BLE001 - any compile or launch failure: the tl kernel
        if isinstance(exc, torch.cuda.OutOfMemoryError):
            raise
        _failed.add(key)
        warnings.warn(f"tilecraft: the Gluon attention {what} failed ({exc!s:.200}); "
                      "running the Triton one", RuntimeWarning, stacklevel=4)  # fmt: skip
        return False
    return True


def _launch(views: list, out: torch.Tensor, stats: torch.Tensor, causal: bool,
            scale: float, kv_heads: int) -> None:  # fmt: skip
    tiles, args, options = kernel_arguments(views, out, stats, causal, scale, kv_heads)
    grid = tiles
    if options["DYNAMIC"] or SCHEDULE == "static":
        sms = torch.cuda.get_device_properties(out.device).multi_processor_count
        grid = min(tiles, PROGRAMS or sms)
    with torch.cuda.device(out.device):  # Triton launches on the current device
        _gluon().attention_forward_sm90[(grid,)](*args, **options)


def kernel_arguments(views: list, out: torch.Tensor, stats: torch.Tensor, causal: bool,
                     scale: float, kv_heads: int) -> tuple[int, list, dict]:  # fmt: skip
    """The launch's tiles (of `CONSUMERS * BLOCK_M` query rows of a head), arguments and
    constexprs with options (the tests compile these for sm_90 on a CPU)."""
    batch, heads, seq_q, dim = out.shape
    out_view = out.as_strided([batch, seq_q, heads * dim], [seq_q * heads * dim, heads * dim, 1])
    (q, q_rows), (k, kv_rows), (v, _) = views
    descs = [
        _descriptor(t, rows, dim)
        for t, rows in ((q, BLOCK_M), (k, BLOCK_N), (v, BLOCK_N), (out_view, BLOCK_M))
    ]
    consumers = CONSUMERS[dim, causal]
    per_head = -(-seq_q // (consumers * BLOCK_M))
    dynamic = (SCHEDULE or ("dynamic" if per_head <= PERSISTENT_UP_TO else "one")) == "dynamic"
    # the tiles' counter, zeroed (unread unless dynamic: the statistics stand in)
    counter = torch.zeros(1, dtype=torch.int32, device=out.device) if dynamic else stats
    args = [*descs, stats, counter, scale * LOG2E, batch, heads, heads // kv_heads, seq_q]
    args.append(k.size(1))
    maxnreg, regs = REGISTERS[consumers]
    pingpong = PINGPONG[dim, causal] and (not causal or consumers * BLOCK_M == BLOCK_N)
    options = dict(STAGES=STAGES[dim], CAUSAL=causal, Q_ROWS=q_rows, KV_ROWS=kv_rows,
                   CONSUMERS=consumers, REGS=regs, DYNAMIC=dynamic, PINGPONG=pingpong,
                   Q_BUFFERS=QUERY_BUFFERS[dim, causal],
                   num_warps=4, maxnreg=maxnreg, enable_fp_fusion=False)  # fmt: skip
    return per_head * batch * heads, args, options


def _terms_descriptor(terms: torch.Tensor) -> Any:
    """A TMA descriptor reading a query tile's row terms (`[2, batch * heads, padded]`,
    float32: log-sum-exps, deltas) as one `[2, BACKWARD_ROWS]` block, unswizzled."""
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    layout = gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=32, rank=2)
    return TensorDescriptor.from_tensor(terms.view(2, -1), [2, BACKWARD_ROWS], layout)


def _descriptor(t: torch.Tensor, rows: int, dim: int) -> Any:
    """A TMA descriptor reading `[1, rows, dim]` blocks of the 3-D view `t`."""
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    dtype = {torch.bfloat16: gl.bfloat16, torch.float32: gl.float32}.get(t.dtype, gl.float16)
    layout = gl.NVMMASharedLayout.get_default_for([1, rows, dim], dtype)
    return TensorDescriptor.from_tensor(t, [1, rows, dim], layout)
