"""Default configs (no tuning) against Helion's default rule, on the same kernel sources.

For each case, the kernel runs with tilecraft's default config and with the config that
Helion 1.5's default rule gives the same kernel (block sizes of 1024, 32, 16 or 1 by the
number of tiled dims and the size of whole-dim reductions, at least 16 for matrix-product
dims, 4 warps, 1 stage), both compiled by tilecraft and timed on the same inputs; the
first call's wall time (Triton's compile included) is recorded too, and whether a compile
outlived TILECRAFT_COMPILE_TIMEOUT. Goal (issue 14): every default within 1.5x of
Helion's, none hangs.

    python benchmarks/defaults_vs_helion.py --out defaults.json          # on the GPU, bf16
    python benchmarks/defaults_vs_helion.py --smoke --out /tmp/d.json    # CPU, tiny shapes
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
for folder in (ROOT, ROOT / "examples", ROOT / "tests"):
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))

import tilecraft as tc  # noqa: E402
from tilecraft.runtime.guard import SlowCompileWarning  # noqa: E402

GOAL = 1.5  # a default at most this many times Helion's default's time


@tc.kernel
def matmul_layernorm(
    x: torch.Tensor, y: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor
) -> torch.Tensor:
    """x @ y, then a layer norm over each output row (the whole row in one program)."""
    m, k = x.size()
    _, n = y.size()
    out = torch.empty([m, n], dtype=x.dtype, device=x.device)
    for tile_m in tc.tile(m):
        acc = tc.zeros([tile_m, n], dtype=torch.float32)
        for tile_k in tc.tile(k):
            acc = torch.addmm(acc, x[tile_m, tile_k], y[tile_k, :])
        mean = acc.mean(-1, keepdim=True)
        centered = acc - mean
        var = (centered * centered).mean(-1, keepdim=True)
        normed = centered * torch.rsqrt(var + 1e-5)
        out[tile_m, :] = (normed * weight[None, :].float() + bias[None, :].float()).to(out.dtype)
    return out


def _matmul_layernorm_inputs(shape: tuple, dtype: torch.dtype, device: str) -> tuple:
    m, k, n = shape
    return (
        torch.randn(m, k, dtype=dtype, device=device) / math.sqrt(k),
        torch.randn(k, n, dtype=dtype, device=device),
        torch.randn(n, dtype=dtype, device=device),
        torch.randn(n, dtype=dtype, device=device),
    )


def _rows(shape: tuple, dtype: torch.dtype, device: str) -> tuple:
    return (torch.randn(shape, dtype=dtype, device=device),)


def _kl_inputs(shape: tuple, dtype: torch.dtype, device: str) -> tuple:
    x = torch.randn(shape, device=device)
    return x.log_softmax(-1).to(dtype), torch.randn(shape, device=device).softmax(-1).to(dtype)


def _batched(shape: tuple, dtype: torch.dtype, device: str) -> tuple:
    b, m, k, n = shape
    return torch.randn(b, m, k, dtype=dtype, device=device), torch.randn(
        b, k, n, dtype=dtype, device=device
    )


def _example(name: str) -> Callable[[tuple, torch.dtype, str], tuple]:
    module = importlib.import_module(name)
    return lambda shape, dtype, device: module.inputs(shape=shape, dtype=dtype, device=device)


# (label, module ("examples" module, "helion_dialect", or "local"), kernel, inputs, GPU
# shape, smoke shape)
ROWS, SMALL = (8192, 8192), (33, 300)
MATMUL, SMALL_MATMUL = (4096, 4096, 4096), (40, 50, 30)
BATCHED, SMALL_BATCHED = (64, 1024, 1024, 1024), (3, 40, 50, 30)
CASES: list[tuple[str, str, str, Any, tuple, tuple]] = [
    ("add 16M", "add", "add", "example", (4096, 4096), (33, 70)),
    ("softmax", "softmax", "softmax", "example", ROWS, SMALL),
    ("rms_norm", "rms_norm", "rms_norm", "example", ROWS, SMALL),
    ("layer_norm", "layer_norm", "layer_norm", "example", ROWS, SMALL),
    ("cross_entropy", "cross_entropy", "cross_entropy", "example", (4096, 50257), SMALL),
    ("softmax_two_pass", "softmax_two_pass", "softmax_two_pass", "example", ROWS, SMALL),
    ("helion softmax_two_pass", "helion_dialect", "softmax_two_pass", _rows, ROWS, SMALL),
    ("helion kl_div", "helion_dialect", "kl_div_rows", _kl_inputs, (2048, 32768), SMALL),
    ("helion long_sum", "helion_dialect", "long_sum", _rows, (4096, 32768), SMALL),
    ("matmul", "matmul", "matmul", "example", MATMUL, SMALL_MATMUL),
    ("bmm", "bmm", "bmm", "example", BATCHED, SMALL_BATCHED),
    ("helion bmm", "helion_dialect", "bmm", _batched, BATCHED, SMALL_BATCHED),
    ("matmul_layernorm", "local", "matmul_layernorm", _matmul_layernorm_inputs,
     (4096, 4096, 1024), (40, 50, 64)),
]  # fmt: skip


def helion_default(bound: Any) -> tc.Config:
    """The config Helion 1.5's default rule gives a kernel with this spec."""
    spec = bound.spec
    reduction = math.prod(1 << max(n - 1, 0).bit_length() for n in spec.reductions)
    count = len(spec.blocks)
    if count <= 1 and reduction <= 1:
        size = 1024
    elif count <= 2 and reduction <= 128:
        size = 32
    else:
        size = 16 if reduction <= 256 else 1
    sizes = []
    for i, block in enumerate(spec.blocks):
        cap = 1 << max(block.extent - 1, 0).bit_length()
        sizes.append(max(16 if i in spec.dot_blocks else 1, min(size, cap)))
    loops = [None] * len(spec.reductions)
    return tc.Config(block_sizes=sizes, reduction_loops=loops, num_warps=4, num_stages=1)


def kernel_of(module: str, name: str) -> tc.Kernel:
    if module == "local":
        return globals()[name]
    return getattr(importlib.import_module(module), name)


def time_ms(fn: Callable[[], Any], gpu: bool) -> float:
    if gpu:
        from triton.testing import do_bench

        return float(do_bench(fn, warmup=10, rep=50, return_mode="median"))
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1e3


def run_config(fn: Callable, config: tc.Config | None, args: tuple, gpu: bool) -> dict:
    """First call (compile included) and time of `fn` as a kernel with `config`."""
    kernel = tc.kernel(fn, config=config, autotune_effort="none", cache_dir=CACHE)
    start = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", SlowCompileWarning)
        kernel(*args)
        if gpu:
            torch.cuda.synchronize()
    first = time.perf_counter() - start
    bound = kernel.bind(args)
    ran = config if config is not None else bound.default_config
    return {
        "config": repr(ran),
        "first_call_s": round(first, 3),
        "fell_back": any(issubclass(w.category, SlowCompileWarning) for w in caught),
        "ms": time_ms(lambda: kernel(*args), gpu),
    }


def run_case(case: tuple, smoke: bool, gpu: bool, dtype: torch.dtype) -> dict:
    label, module, name, make, gpu_shape, smoke_shape = case
    shape = smoke_shape if smoke else gpu_shape
    row: dict[str, Any] = {"case": label, "shape": list(shape)}
    try:
        make = _example(module) if make == "example" else make
        args = make(shape, dtype, "cuda" if gpu else "cpu")
        fn = kernel_of(module, name).fn
        ours = run_config(fn, None, args, gpu)
        helion = run_config(fn, helion_default(tc.kernel(fn).bind(args)), args, gpu)
        row.update({"tilecraft": ours, "helion_rule": helion})
        row["ratio"] = round(ours["ms"] / helion["ms"], 3)
    except Exception as e:  # report every failure, keep going
        row["error"] = f"{type(e).__name__}: {str(e)[:300]}"
    return row


def guard_check(gpu: bool) -> dict:
    """A compile cut short on purpose (a 1 ms TILECRAFT_COMPILE_TIMEOUT): the first call
    must warn, run the safe config and still be right (GPU only: CPUs do not compile)."""
    if not gpu:
        return {"skipped": "no GPU"}
    module = importlib.import_module("softmax")
    x = torch.randn(4096, 4096, device="cuda")
    kernel = tc.kernel(
        module.softmax.fn, compile_timeout_s=1e-3, autotune_effort="none", cache_dir=CACHE
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", SlowCompileWarning)
        error = (kernel(x) - torch.softmax(x, dim=1)).abs().max().item()
    fell_back = any(issubclass(w.category, SlowCompileWarning) for w in caught)
    return {"fell_back": fell_back, "max_error": error, "ok": fell_back and error < 1e-5}


def table(rows: list[dict]) -> str:
    lines = [
        "| case | shape | tilecraft default ms | Helion-rule ms | ratio | first call s | config |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['case']} | {r['shape']} | ERROR {r['error'][:80]} | | | | |")
            continue
        ours, helion = r["tilecraft"], r["helion_rule"]
        fell = " (fell back)" if ours["fell_back"] else ""
        lines.append(
            f"| {r['case']} | {'x'.join(map(str, r['shape']))} | {ours['ms']:.4f} |"
            f" {helion['ms']:.4f} | {r['ratio']:.2f} | {ours['first_call_s']:.1f}{fell} |"
            f" {ours['config']} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="where to write the JSON results")
    parser.add_argument("--smoke", action="store_true", help="tiny shapes (CPU)")
    parser.add_argument("--only", help="run the cases whose label contains this text")
    args = parser.parse_args(argv)
    gpu = torch.cuda.is_available() and not args.smoke
    dtype = torch.bfloat16 if gpu else torch.float32
    cases = [c for c in CASES if not args.only or args.only in c[0]]
    rows = [run_case(case, args.smoke, gpu, dtype) for case in cases]
    ratios = [r["ratio"] for r in rows if "ratio" in r]
    result = {
        "device": torch.cuda.get_device_name() if gpu else "cpu",
        "dtype": str(dtype),
        "rows": rows,
        "worst_ratio": max(ratios, default=None),
        "goal_met": (all(r <= GOAL for r in ratios) and len(ratios) == len(rows)) if gpu else None,
        "any_fell_back": any(r.get("tilecraft", {}).get("fell_back") for r in rows),
        "compile_timeout_check": guard_check(gpu),
    }
    Path(args.out).write_text(json.dumps(result, indent=1))
    print(table(rows))
    print(f"worst ratio {result['worst_ratio']}; goal (<= {GOAL}x) met: {result['goal_met']}")
    print(f"a compile past TILECRAFT_COMPILE_TIMEOUT: {result['compile_timeout_check']}")
    return result


CACHE = Path(tempfile.mkdtemp(prefix="tilecraft-defaults-"))

if __name__ == "__main__":
    main()
