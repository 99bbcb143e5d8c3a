"""Matrix products on the GPU: every knob value checked, then bf16 speed against cuBLAS.

Usage: python benchmarks/bench_matmul.py  (writes $OUT/bench_matmul.json if OUT is set)
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from triton.testing import do_bench

import tilecraft as tc

ROOT = Path(__file__).resolve().parents[1]
KNOBS = [
    {},
    {"pid_type": "xyz"},
    {"pid_type": "persistent_blocked"},
    {"pid_type": "persistent_interleaved"},
    {"l2_groupings": [8]},
    {"loop_orders": [[1, 0]]},
    {"indexing": "block_ptr"},
    {"indexing": "tensor_descriptor"},
    {"range_num_stages": [3], "range_unroll_factors": [2]},
    {"range_flattens": [True], "range_multi_buffers": [False]},
    {"num_warps": 4, "num_stages": 4},
]
FAST = [  # hand-picked configs for large bf16 products on Hopper
    {"block_sizes": [128, 256, 64], "num_warps": 8, "num_stages": 3, "l2_groupings": [8]},
    {
        "block_sizes": [128, 256, 64],
        "num_warps": 8,
        "num_stages": 4,
        "l2_groupings": [8],
        "indexing": "tensor_descriptor",
    },
    {
        "block_sizes": [128, 128, 64],
        "num_warps": 4,
        "num_stages": 4,
        "l2_groupings": [8],
        "indexing": "tensor_descriptor",
    },
    {
        "block_sizes": [128, 256, 64],
        "num_warps": 8,
        "num_stages": 3,
        "l2_groupings": [8],
        "indexing": "tensor_descriptor",
        "pid_type": "persistent_interleaved",
    },
    {
        "block_sizes": [128, 128, 64],
        "num_warps": 8,
        "num_stages": 4,
        "l2_groupings": [8],
        "indexing": "tensor_descriptor",
        "pid_type": "persistent_interleaved",
    },
]


def example(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "examples" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    return ((out.float() - ref.float()).norm() / ref.float().norm()).item()


def check_knobs(mm) -> list[dict]:
    rows = []
    for dtype, tol in ((torch.bfloat16, 1e-2), (torch.float32, 1e-5)):
        x, y = mm.inputs(shape=(1000, 777, 555), dtype=dtype, device="cuda")
        ref = x.double() @ y.double()
        for knobs in KNOBS:
            config = tc.Config(block_sizes=[64, 64, 32], **knobs)
            try:
                err = rel_err(tc.kernel(mm.matmul.fn, config=config)(x, y), ref)
                status = "ok" if err < tol else f"FAIL err={err:.2e}"
            except Exception as e:  # keep checking the other knobs
                status, err = f"FAIL {type(e).__name__}: {str(e)[:200]}", float("nan")
            rows.append({"dtype": str(dtype), "knobs": knobs, "rel_err": err, "status": status})
            print("check", dtype, knobs, status, flush=True)
    return rows


def time_configs(mm, size: int) -> dict:
    x = torch.randn(size, size, device="cuda", dtype=torch.bfloat16)
    y = torch.randn(size, size, device="cuda", dtype=torch.bfloat16)
    flops = 2 * size**3
    ref = torch.matmul(x, y)
    result = {"size": size, "torch_ms": do_bench(lambda: torch.matmul(x, y), return_mode="median")}
    result["configs"] = []
    for knobs in FAST:
        fn = tc.kernel(mm.matmul.fn, config=tc.Config(**knobs))
        try:
            err = rel_err(fn(x, y), ref)
            ms = do_bench(lambda fn=fn: fn(x, y), return_mode="median")
        except Exception as e:
            err, ms = float("nan"), float("nan")
            print("config failed", knobs, type(e).__name__, str(e)[:300])
        result["configs"].append(
            {"knobs": knobs, "ms": ms, "rel_err": err, "tflops": flops / ms / 1e9}
        )
        print(
            size,
            knobs,
            f"{ms:.4f} ms",
            f"{flops / ms / 1e9:.0f} TFLOP/s",
            f"ratio {result['torch_ms'] / ms:.3f}",
            flush=True,
        )
    return result


def time_epilogue(size: int) -> dict:
    module = example("matmul_bias_gelu")
    x = torch.randn(size, size, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(size, size, device="cuda", dtype=torch.bfloat16)
    bias = torch.randn(size, device="cuda", dtype=torch.bfloat16)
    config = tc.Config(**FAST[1])
    fn = tc.kernel(module.matmul_bias_gelu.fn, config=config)
    err = rel_err(fn(x, w, bias), module.reference(x, w, bias))
    torch_fn = lambda: F.gelu(torch.matmul(x, w) + bias, approximate="tanh")  # noqa: E731
    compiled = torch.compile(torch_fn)
    compiled()
    return {
        "size": size,
        "rel_err": err,
        "tilecraft_ms": do_bench(lambda: fn(x, w, bias), return_mode="median"),
        "torch_ms": do_bench(torch_fn, return_mode="median"),
        "torch_compile_ms": do_bench(compiled, return_mode="median"),
    }


def main() -> int:
    if not torch.cuda.is_available():
        print("bench_matmul.py needs a GPU")
        return 0
    mm = example("matmul")
    results = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "checks": check_knobs(mm),
        "speed": [time_configs(mm, 4096), time_configs(mm, 8192)],
        "epilogue": time_epilogue(4096),
    }
    print(json.dumps(results["epilogue"]))
    out = Path(os.environ.get("OUT", ROOT / "benchmarks" / "results"))
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench_matmul.json").write_text(json.dumps(results, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
