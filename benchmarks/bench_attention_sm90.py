"""`tilecraft.nn.attention` on Hopper: the Gluon kernels against the `tl` ones and SDPA.

Times, in one process, the forward as a user's call runs it (`attention(q, k, v)`, default
configs, the Gluon forward, and the backward `attention_sm90.BACKWARD` picks, where they
apply), the same call with them turned off (`TILECRAFT_GLUON_ATTENTION=0`: the `tl`
kernels), and SDPA's cuDNN and flash backends; then its backward alone and one training
step (forward and backward). Inputs bf16, heads in rows, and once more as a fused
projection leaves them (heads side by side, read in place).

    python benchmarks/bench_attention_sm90.py --out $OUT/bench_attention_sm90.json
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import os
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
import triton
from torch.nn.attention import SDPBackend, sdpa_kernel

from tilecraft.nn import attention

SHAPES = [(4, 16, 4096, 128), (8, 32, 2048, 64), (1, 16, 16384, 128)]
PEERS = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION}


def ms(fn: Callable[[], Any]) -> float:
    return float(triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median"))


def tilecraft_call(gluon: bool, causal: bool) -> Callable[..., torch.Tensor]:
    def run(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        os.environ["TILECRAFT_GLUON_ATTENTION"] = "1" if gluon else "0"
        return attention(q, k, v, causal=causal)

    return run


def peer_call(backend: SDPBackend, causal: bool) -> Callable[..., torch.Tensor]:
    def run(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    return run


def measure(call: Callable[..., torch.Tensor], leaves: list, ref: torch.Tensor) -> dict:
    """Forward, backward and training-step milliseconds of one implementation, and its
    error. The backward alone runs on one retained graph, given the output's gradient in
    the output's dtype and layout (as a model's arrives) and, as `backward_bhsd_ms`,
    contiguous in `(batch, heads, seq, dim)` (the tl backward reads either in place)."""
    with torch.no_grad():
        out = call(*leaves)
    grad = torch.ones_like(out)
    row = dict(err=(out.float() - ref).abs().max().item())
    with torch.no_grad():
        row["forward_ms"] = ms(lambda: call(*leaves))

    def step() -> None:
        torch.autograd.grad(call(*leaves), leaves, grad)

    row["step_ms"] = ms(step)
    graph = call(*leaves)
    for name, g in (("backward_ms", grad), ("backward_bhsd_ms", grad.contiguous())):
        row[name] = ms(lambda g=g: torch.autograd.grad(graph, leaves, g, retain_graph=True))
    return row


def inputs(shape: tuple, in_rows: bool) -> list:
    """q, k, v on the GPU in bf16; with `in_rows` False the heads of one fused projection's
    output `(batch, seq, 3 * heads, dim)`, as views (the gradients are taken to them)."""
    b, h, s, d = shape
    kw = dict(device="cuda", dtype=torch.bfloat16, requires_grad=True)
    if in_rows:
        return [torch.randn(b, h, s, d, **kw) for _ in range(3)]
    qkv = torch.randn(b, s, 3 * h, d, **kw)
    return [qkv[:, :, i * h : (i + 1) * h].transpose(1, 2) for i in range(3)]


def run_case(shape: tuple, causal: bool, in_rows: bool) -> list[dict]:
    leaves = inputs(shape, in_rows)
    with torch.no_grad():
        ref = F.scaled_dot_product_attention(*(t.float() for t in leaves), is_causal=causal)
    calls = {"tilecraft_gluon": tilecraft_call(True, causal),
             "tilecraft_tl": tilecraft_call(False, causal)}  # fmt: skip
    calls.update({name: peer_call(backend, causal) for name, backend in PEERS.items()})
    b, h, s, d = shape
    fwd = 4.0 * b * h * s * s * d * (0.5 if causal else 1.0)
    rows = []
    for name, call in calls.items():
        row = dict(shape=list(shape), causal=causal, heads_in_rows=in_rows, impl=name)
        try:
            row.update(measure(call, leaves, ref))
            row["forward_tflops"] = fwd / row["forward_ms"] * 1e-9
            row["step_tflops"] = 3.5 * fwd / row["step_ms"] * 1e-9
            row["backward_tflops"] = 2.5 * fwd / row["backward_ms"] * 1e-9
        except Exception as exc:  # noqa: BLE001 - a peer may lack a backend
            row["error"] = f"{type(exc).__name__}: {exc}"[:200]
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def table(rows: list[dict]) -> str:
    """Markdown: forward, backward and step TFLOP/s per implementation, and the forward's
    and backward's ratios to cuDNN's and flash's."""
    head = "| shape | causal | heads | impl | fwd | bwd | step | fwd vs cuDNN, flash "
    lines = [head + "| bwd vs cuDNN, flash | err |", "|---" * 10 + "|"]
    for r in rows:
        if "error" in r:
            continue
        same = [p for p in rows if p["shape"] == r["shape"] and p["causal"] == r["causal"]
                and p["heads_in_rows"] == r["heads_in_rows"]]  # fmt: skip
        lines.append(
            f"| {tuple(r['shape'])} | {r['causal']} | {'rows' if r['heads_in_rows'] else 'fused'} "
            f"| {r['impl']} | {r['forward_tflops']:.0f} | {r['backward_tflops']:.0f} | "
            f"{r['step_tflops']:.0f} | {_ratios(r, same, 'forward_tflops')} | "
            f"{_ratios(r, same, 'backward_tflops')} | {r['err']:.1e} |"
        )
    return "\n".join(lines)


def _ratios(row: dict, same: list[dict], key: str) -> str:
    """`row[key]` over cuDNN's and flash's, measured on the same case."""
    peer = {p["impl"]: p.get(key) for p in same}
    return ", ".join(f"{row[key] / peer[n]:.2f}x" if peer.get(n) else "-" for n in PEERS)


# (consumer warpgroups, key tile, ring depth, ping-pong, query buffers) the sweep times, by
# head dim
VARIANTS = {
    64: [(c, 128, 2, pp, b) for c in (3, 2) for pp in (False, True) for b in (1, 2)],
    128: [(2, 128, 2, pp, b) for pp in (False, True) for b in (1, 2)] + [(2, 64, 4, False, 1)],
}
SCHEDULES = ("one", "static", "dynamic")


def sweep(out: str | None, schedules: tuple, shapes: list, shipped: bool = False) -> None:
    """Time the Gluon forward at each variant of `VARIANTS` that fits shared memory (or,
    `shipped`, only the launch's own knobs), with each of the launch's `schedules` (one
    program per tile; persistent, static or dynamic; "default": the launch's choice)."""
    sm90 = importlib.import_module("tilecraft.nn.attention_sm90")
    os.environ["TILECRAFT_GLUON_ATTENTION"] = "1"
    rows = []
    for shape in shapes:
        for causal in (False, True):
            leaves = [t.detach() for t in inputs(shape, True)]
            variants = [shipped_variant(sm90, shape[3], causal)] if shipped else VARIANTS[shape[3]]
            for variant in variants:
                for schedule in schedules:
                    row = dict(shape=list(shape), causal=causal, variant=list(variant),
                               schedule=schedule)  # fmt: skip
                    row.update(time_variant(sm90, shape, causal, leaves, (*variant, schedule)))
                    rows.append(row)
                    print(json.dumps(row), flush=True)
    if out:
        with open(out, "w") as f:
            json.dump(dict(device=torch.cuda.get_device_name(), rows=rows), f, indent=1)


def shipped_variant(sm90: Any, dim: int, causal: bool) -> tuple:
    """The launch's own knobs at this head dim and causality, as a `VARIANTS` entry."""
    key = (dim, causal)
    return (sm90.CONSUMERS[key], sm90.BLOCK_N, sm90.STAGES[dim], sm90.PINGPONG[key],
            sm90.QUERY_BUFFERS[key])  # fmt: skip


def time_variant(sm90: Any, shape: tuple, causal: bool, leaves: list, variant: tuple) -> dict:
    """One variant's forward: its time and error, or why it did not run."""
    consumers, block_n, stages, pingpong, buffers, schedule = variant
    dim = shape[3]
    tiles = (1 + buffers) * consumers * sm90.BLOCK_M * dim + 2 * stages * block_n * dim
    if 2 * tiles > 227 * 1024:
        return dict(skipped="shared memory")
    if pingpong and causal and consumers * sm90.BLOCK_M != block_n:
        return dict(skipped="causal ping-pong wants a tile's rows in one key tile")
    sm90.CONSUMERS[dim, causal], sm90.BLOCK_N, sm90.STAGES[dim] = variant[:3]
    sm90.PINGPONG[dim, causal], sm90.QUERY_BUFFERS[dim, causal] = pingpong, buffers
    sm90.SCHEDULE = None if schedule == "default" else schedule
    call = tilecraft_call(True, causal)
    with torch.no_grad():
        found = call(*leaves)
        if sm90._failed:  # the tl forward ran: the variant failed to compile
            sm90._failed.clear()
            return dict(skipped="failed")
        ref = F.scaled_dot_product_attention(*leaves, is_causal=causal)
        fwd_ms = ms(lambda: call(*leaves))
    flop = 4.0 * math.prod(shape) * shape[2] * (0.5 if causal else 1.0)
    err = (found.float() - ref.float()).abs().max().item()
    return dict(forward_ms=fwd_ms, forward_tflops=flop / fwd_ms * 1e-9, err=err)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", help="write the rows as JSON here")
    parser.add_argument("--quick", action="store_true", help="the first shape only")
    parser.add_argument("--sweep", action="store_true", help="the Gluon forward's consumers, "
                        "key tiles, ring depths, turns, query buffers and schedules at each "
                        "shape, forward only")  # fmt: skip
    parser.add_argument(
        "--schedules",
        default=",".join(SCHEDULES),
        help="the sweep's, comma-separated ('default': the launch's)",
    )
    parser.add_argument("--shapes", default="0,1,2", help="the sweep's, indices of SHAPES")
    parser.add_argument("--shipped", action="store_true", help="the sweep times only the "
                        "launch's own knobs")  # fmt: skip
    args = parser.parse_args()
    if args.sweep:
        shapes = [SHAPES[int(i)] for i in args.shapes.split(",")]
        return sweep(args.out, tuple(args.schedules.split(",")), shapes, args.shipped)
    rows = []
    for shape in SHAPES[:1] if args.quick else SHAPES:
        for causal in (False, True):
            rows += run_case(shape, causal, True)
        rows += run_case(shape, False, False)
    print(table(rows))
    if args.out:
        meta = dict(device=torch.cuda.get_device_name(), triton=triton.__version__,
                    torch=torch.__version__)  # fmt: skip
        with open(args.out, "w") as f:
            json.dump(dict(meta, rows=rows), f, indent=1)


if __name__ == "__main__":
    main()
