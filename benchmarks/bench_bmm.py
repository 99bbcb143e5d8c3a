"""Batched matrix products (examples/bmm.py): the default config, fixed configs with a
batch tile of one (written as a 2-D `tl.dot`, wgmma on Hopper) and larger (a 3-D
`tl.dot`), a tuned config, and `torch.bmm`, in bf16.

Issue 14 measured bmm 64x1024^3 at 2.74 ms with the default config against Helion's
default's 0.35 ms and torch.compile's 0.23 ms. Each row also says whether the generated
Triton of the config has a 2-D product and whether its result matches `torch.bmm`.

    python benchmarks/bench_bmm.py --out bmm.json              # on the GPU (about 1-2 min)
    python benchmarks/bench_bmm.py --smoke --out /tmp/bmm.json # CPU, tiny shapes, no tuning
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
for folder in (ROOT, ROOT / "examples"):
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))

import bmm  # noqa: E402

import tilecraft as tc  # noqa: E402

SHAPES = [(64, 1024, 1024, 1024), (32, 1024, 512, 1024)]  # batch, m, k, n
SMOKE_SHAPES = [(3, 40, 50, 30), (1, 17, 16, 9)]
# (label, config): batch tile 1 is a 2-D product; the 3-D ones are the old defaults' kind
FIXED: list[tuple[str, tc.Config | None]] = [
    ("default", None),
    ("flat 128x128x64 w4 s4", tc.Config(block_sizes=[1, 128, 128, 64], num_warps=4, num_stages=4)),
    ("flat 128x256x64 w8 s3", tc.Config(block_sizes=[1, 128, 256, 64], num_warps=8, num_stages=3)),
    ("flat 64x128x64 w4 s4", tc.Config(block_sizes=[1, 64, 128, 64], num_warps=4, num_stages=4)),
    ("3-D 8x64x32x32 w4 s3", tc.Config(block_sizes=[8, 64, 32, 32], num_warps=4, num_stages=3)),
    ("3-D 2x64x64x32 w2 s3", tc.Config(block_sizes=[2, 64, 64, 32], num_warps=2, num_stages=3)),
]
SMOKE_FIXED = [
    ("default", None),
    ("flat 16x16x16", tc.Config(block_sizes=[1, 16, 16, 16])),
    ("3-D 2x16x16x16", tc.Config(block_sizes=[2, 16, 16, 16])),
]
# `tl.dot` on two names whose loads (or zeros) are 2-D: no `[:, None, None]` anywhere
FLAT_LOAD = re.compile(r"tl\.load\([^\n]*\[:, None\] \* ")


def time_ms(fn: Callable[[], Any], gpu: bool) -> float:
    if gpu:
        from triton.testing import do_bench

        return float(do_bench(fn, warmup=10, rep=50, return_mode="median"))
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1e3


def is_flat(code: str) -> bool:
    """Whether generated code holds a 2-D product (2-D loads, no 3-D index expressions)."""
    return "[:, None, None]" not in code and bool(FLAT_LOAD.search(code)) and "tl.dot(" in code


def run_config(label: str, config: tc.Config | None, args: tuple, gpu: bool) -> dict:
    kernel = tc.kernel(bmm.bmm.fn, config=config, autotune_effort="none", cache_dir=CACHE)
    bound = kernel.bind(args)
    ran = bound.resolve(config)
    start = time.perf_counter()
    out = kernel(*args)
    if gpu:
        torch.cuda.synchronize()
    first = time.perf_counter() - start
    error = (out.float() - bmm.reference(*args).float()).abs().max().item() if out.numel() else 0
    return {
        "label": label,
        "config": repr(ran),
        "flat": is_flat(bound.to_triton_code(ran)),
        "first_call_s": round(first, 3),
        "max_error": error,
        "ms": time_ms(lambda: kernel(*args), gpu),
    }


def run_tuned(args: tuple, budget_s: float, gpu: bool) -> dict:
    # a tuning database of its own: the default rows must not meet a model trained on it
    kernel = tc.kernel(bmm.bmm.fn, cache_dir=tempfile.mkdtemp(prefix="tilecraft-bmm-tune-"))
    start = time.perf_counter()
    config = kernel.autotune(args, budget_s=budget_s)
    tune_s = time.perf_counter() - start
    bound = kernel.bind(args)
    return {
        "label": f"tuned ({budget_s:.0f} s budget)",
        "config": repr(config),
        "flat": is_flat(bound.to_triton_code(config)),
        "tune_s": round(tune_s, 1),
        "configs": (bound.tuning or {}).get("configs"),
        "ms": time_ms(lambda: kernel(*args), gpu),
    }


def run_shape(shape: tuple, smoke: bool, gpu: bool, budget_s: float) -> dict:
    dtype = torch.bfloat16 if gpu else torch.float32
    args = bmm.inputs(shape, dtype=dtype, device="cuda" if gpu else "cpu")
    batch, m, k, n = shape
    flops = 2 * batch * m * k * n
    rows = []
    for label, config in SMOKE_FIXED if smoke else FIXED:
        try:
            rows.append(run_config(label, config, args, gpu))
        except Exception as e:  # report every failure, keep going
            rows.append({"label": label, "error": f"{type(e).__name__}: {str(e)[:300]}"})
    if gpu and budget_s > 0:
        rows.append(run_tuned(args, budget_s, gpu))
    torch_ms = time_ms(lambda: torch.bmm(*args), gpu)
    rows.append({"label": "torch.bmm", "ms": torch_ms, "flat": None})
    for row in rows:
        if "ms" in row:
            row["tflops"] = round(flops / row["ms"] / 1e9, 1)
            row["vs_torch"] = round(row["ms"] / torch_ms, 2)
    return {"shape": list(shape), "dtype": str(dtype), "rows": rows}


def table(results: list[dict]) -> str:
    lines = [
        "| shape | config | ms | TFLOP/s | x torch.bmm | 2-D dot | max error | config |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for result in results:
        shape = "x".join(map(str, result["shape"]))
        for r in result["rows"]:
            if "error" in r:
                lines.append(f"| {shape} | {r['label']} | ERROR {r['error'][:80]} | | | | | |")
                continue
            error = r.get("max_error")
            lines.append(
                f"| {shape} | {r['label']} | {r['ms']:.4f} | {r['tflops']} | {r['vs_torch']} |"
                f" {r.get('flat')} | {'' if error is None else f'{error:.3g}'} |"
                f" {r.get('config', '')} |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="where to write the JSON results")
    parser.add_argument("--smoke", action="store_true", help="tiny shapes on the CPU")
    parser.add_argument("--budget", type=float, default=15.0, help="tuning seconds per shape")
    args = parser.parse_args(argv)
    gpu = torch.cuda.is_available() and not args.smoke
    shapes = SMOKE_SHAPES if args.smoke else SHAPES
    results = [run_shape(shape, args.smoke, gpu, args.budget) for shape in shapes]
    summary = {"device": torch.cuda.get_device_name() if gpu else "cpu", "results": results}
    Path(args.out).write_text(json.dumps(summary, indent=1))
    print(table(results))
    return summary


CACHE = Path(tempfile.mkdtemp(prefix="tilecraft-bmm-"))

if __name__ == "__main__":
    main()
