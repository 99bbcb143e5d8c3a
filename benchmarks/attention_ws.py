"""tilecraft's attention forward warp-specialized by Triton (`range_warp_specializes`) on
Hopper, against its default config and SDPA's flash and cuDNN backends, in one process.

With 4 warps and a 128-row query tile, Triton 3.6's Hopper warp specialization splits the
key loop into a TMA producer and two consumer warpgroups of 64 rows each (12 warps, with
`setmaxnreg`): the schedule of FlashAttention-3 and of `attention_gluon_probe.py`, from
the same tilecraft kernel. Without a causal mask only (Triton 3.6 fails to specialize the
causal kernel's split key loops).

On an H100 with Triton 3.6 every specialized config compiles and then hangs in its first
launch (RESULTS.md, twelfth session); `--only NAME` times one config per process.

    PYTHONPATH=$PWD python benchmarks/attention_ws.py [--out PATH]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT)]

import tilecraft as tc  # noqa: E402
from tilecraft.nn.attention import _forward_default, attention_forward  # noqa: E402

SHAPES = [(4, 16, 4096, 128), (8, 32, 2048, 64), (1, 16, 16384, 128)]


def _specialized(bm: int, bn: int, stages: int, grouped: bool) -> tc.Config:
    extra = {"l2_groupings": [4]} if grouped else {}
    return tc.Config(
        block_sizes=[bm, bn],
        num_warps=4,
        num_stages=stages,
        indexing="tensor_descriptor",
        range_warp_specializes=[True],
        **extra,
    )


CONFIGS = {
    "ws 128x128 s2": _specialized(128, 128, 2, False),
    "ws 128x128 s2 grouped": _specialized(128, 128, 2, True),
    "ws 128x64 s2": _specialized(128, 64, 2, False),
    "ws 128x64 s3 grouped": _specialized(128, 64, 3, True),
}


def _time(call) -> float:  # type: ignore[no-untyped-def]
    from triton.testing import do_bench

    return do_bench(call, warmup=25, rep=100)


def _case(shape: tuple[int, int, int, int]) -> list[dict]:
    b, h, s, d = shape
    q, k, v = (torch.randn(shape, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    ref = F.scaled_dot_product_attention(q, k, v)
    flops = 4 * b * h * s * s * d
    rows: list[dict] = []
    for name, backend in (("cudnn", "CUDNN_ATTENTION"), ("flash", "FLASH_ATTENTION")):
        from torch.nn.attention import SDPBackend, sdpa_kernel

        with sdpa_kernel(getattr(SDPBackend, backend)):
            ms = _time(lambda: F.scaled_dot_product_attention(q, k, v))
        rows.append({"impl": name, "ms": ms, "tflops": flops / ms / 1e9})
    args = (q, k, v, q.new_empty(0), False, 1.0 / math.sqrt(d), 0, False)
    bound = attention_forward.bind(args)
    default = _forward_default(args) or tc.Config()
    for name, config in {"default": default, **CONFIGS}.items():
        row: dict = {"impl": name, "config": repr(config)}
        try:
            launcher = bound.compile(config)
            out = launcher(*args)[0]
            row["max_err"] = float((out.float() - ref.float()).abs().max())
            row["ms"] = _time(lambda launcher=launcher: launcher(*args))
            row["tflops"] = flops / row["ms"] / 1e9
        except Exception as e:  # noqa: BLE001 - a config that fails is recorded, not fatal
            row["error"] = f"{type(e).__name__}: {str(e)[:300]}"
        rows.append(row)
    return [{"shape": list(shape), **r} for r in rows]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=None)
    parser.add_argument("--quick", action="store_true", help="two shapes, two configs")
    parser.add_argument("--only", help="time this config alone (a hung kernel ends the process)")
    ns = parser.parse_args()
    if ns.quick:
        for name in ("ws 128x128 s2 grouped", "ws 128x64 s3 grouped"):
            del CONFIGS[name]
    if ns.only:
        for name in [n for n in CONFIGS if n != ns.only]:
            del CONFIGS[name]
    results: list[dict] = []
    for shape in SHAPES[:2] if ns.quick else SHAPES:
        rows = _case(shape)
        peers = {r["impl"]: r["tflops"] for r in rows if r["impl"] in ("cudnn", "flash")}
        for r in rows:
            ratios = " ".join(f"{r['tflops'] / t:.2f}x {p}" for p, t in peers.items())
            speed = f"{r['tflops']:6.0f} TFLOP/s {ratios}" if "tflops" in r else r["error"]
            print(f"{shape} {r['impl']:>22} {speed} err={r.get('max_err', '-')}", flush=True)
        results += rows
        if ns.out:
            Path(ns.out).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
