"""Prediction instead of search, on the GPU: new shapes and kernels the model never saw.

The tuning database starts with the recorded H200 landscapes (`tilecraft learn`). For each
case (an example kernel at a shape that no landscape holds), in this order:

- untuned: the first call with effort "none" (the cost model's pick when it is
  confident, else the heuristic default): wall time of that first call (compile
  included) and the kernel's time;
- predict: `autotune(effort="predict")` (the model's top 3, compiled in parallel, timed,
  the best kept): wall time from the call to a tuned kernel, and the kernel's time;
- quick: `autotune(effort="quick")` (the fast, model-guided search): the same.

The reference ("best known") is the fastest kernel any of the three found. bf16.

    PYTHONPATH=$PWD python benchmarks/predict_gpu.py [--out FILE]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("TILECRAFT_CACHE_DIR", tempfile.mkdtemp(prefix="tc-predict-"))
os.environ["TILECRAFT_AUTOTUNE_EFFORT"] = "none"  # the first call does not tune

# (example, kernel, shape, whether the landscapes hold other shapes of this kernel)
CASES = [
    ("softmax", "softmax", (8192, 8192), True),
    ("rms_norm", "rms_norm", (8192, 8192), True),
    ("layer_norm", "layer_norm", (8192, 4096), True),
    ("cross_entropy", "cross_entropy", (4096, 32000), True),
    ("sum", "sum_rows", (8192, 8192), True),
    ("matmul", "matmul", (4096, 4096, 4096), True),
    ("bmm", "bmm", (32, 1024, 512, 1024), True),
    ("bias_gelu", "bias_gelu", (4096, 8192), True),
    ("exp", "exp", (8192, 8192), False),
    ("softmax_two_pass", "softmax_two_pass", (8192, 8192), False),
    ("linear_residual", "linear_residual", (4096, 4096, 4096), False),
]


def example(name: str):
    """An example module, imported from its file."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "examples" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def timed(fn) -> tuple[float, object]:
    """Seconds a call takes, synchronized, and its result."""
    torch.cuda.synchronize()
    start = time.perf_counter()
    result = fn()
    torch.cuda.synchronize()
    return time.perf_counter() - start, result


def kernel_ms(kernel, args: tuple) -> float:
    from triton.testing import do_bench

    return do_bench(lambda: kernel(*args), return_mode="median")


def run_case(module_name: str, kernel_name: str, shape: tuple, seen: bool) -> dict:
    module = example(module_name)
    kernel = getattr(module, kernel_name)
    args = module.inputs(shape=shape, dtype=torch.bfloat16, device="cuda")
    row: dict = {"kernel": f"{module_name}:{kernel_name}", "shape": list(shape), "seen": seen}
    first_s, _ = timed(lambda: kernel(*args))
    row["untuned"] = {"first_call_s": first_s, "ms": kernel_ms(kernel, args)}
    for effort in ("predict", "quick"):
        seconds, config = timed(lambda effort=effort: kernel.autotune(args, effort=effort))
        stats = getattr(kernel.bind(args), "tuning", {}) or {}
        row[effort] = {
            "tune_s": seconds,
            "ms": kernel_ms(kernel, args),
            "configs": stats.get("configs"),
            "search": stats.get("search"),
            "phases": stats.get("phases"),
            "config": repr(config),
        }
    best = min(row[k]["ms"] for k in ("untuned", "predict", "quick"))
    for key in ("untuned", "predict", "quick"):
        row[key]["vs_best"] = row[key]["ms"] / best
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default_out = Path(os.environ.get("OUT", ROOT / "benchmarks" / "results"))
    parser.add_argument("--out", default=str(default_out / "predict_gpu.json"))
    options = parser.parse_args()
    if not torch.cuda.is_available():
        print("predict_gpu.py needs a GPU")
        return 0
    from tilecraft.cli import learn

    learn(str(ROOT / "benchmarks" / "landscapes" / "h200"))
    rows = []
    for case in CASES:
        try:
            rows.append(run_case(*case))
        except Exception as error:  # one failing case must not lose the others
            rows.append({"kernel": case[1], "shape": list(case[2]), "error": repr(error)})
        print(json.dumps(rows[-1], default=str), flush=True)
        Path(options.out).write_text(json.dumps(rows, indent=1, default=str))
    print("| kernel | shape | seen | untuned first call | untuned | predict | quick |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        if "error" in r:
            print(f"| {r['kernel']} | {r['shape']} | error: {r['error'][:80]} |")
            continue
        u, p, q = r["untuned"], r["predict"], r["quick"]
        print(
            f"| {r['kernel']} | {'x'.join(map(str, r['shape']))} | {r['seen']} "
            f"| {u['first_call_s']:.2f} s | {u['ms']:.4f} ms ({u['vs_best']:.3f}) "
            f"| {p['tune_s']:.2f} s, {p['ms']:.4f} ms ({p['vs_best']:.3f}) "
            f"| {q['tune_s']:.1f} s, {q['ms']:.4f} ms ({q['vs_best']:.3f}) |"
        )
    print_phases(rows)
    return 0


PHASES = ("plan", "reference", "save", "workers_ready", "load", "compile_max", "timing", "retime")


def print_phases(rows: list[dict]) -> None:
    """Where each `predict` run's time went (seconds; workers_ready overlaps reference,
    save and plan, and is 0 when the warm pool of an earlier run served it)."""
    print("\n| kernel (predict) | total | " + " | ".join(PHASES) + " |")
    print("|---|---|" + "---|" * len(PHASES))
    for r in rows:
        phases = (r.get("predict") or {}).get("phases") or {}
        if phases:
            cells = " | ".join(f"{phases.get(p, 0):.2f}" for p in PHASES)
            print(f"| {r['kernel']} | {phases.get('total', 0):.2f} | {cells} |")


if __name__ == "__main__":
    sys.exit(main())
