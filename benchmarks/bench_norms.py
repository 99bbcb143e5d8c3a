"""Row-wise kernels (softmax, rms_norm, layer_norm, cross_entropy) at 8192x8192 bf16 on a GPU.

Each example kernel runs with tilecraft's default config (no tuning) and is compared, on the
same fresh random inputs, with torch eager (the example's `reference`, and `torch.softmax`
for softmax) and `torch.compile(reference)`, after a correctness check against float32.

    python benchmarks/bench_norms.py    # JSON to $OUT/bench_norms.json or benchmarks/results/
"""

from __future__ import annotations

import datetime
import importlib.util
import json
import os
import platform
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
SHAPE = (8192, 8192)
DTYPE = torch.bfloat16
COPY_TBPS = 4.3  # device-to-device copy ceiling on the H200 (BENCHMARKING.md)
# (row label, example file, kernel name, torch eager peer: None means the example's reference)
CASES: list[tuple[str, str, str, Callable[..., Any] | None]] = [
    ("softmax", "softmax", "softmax", None),
    ("softmax vs torch.softmax", "softmax", "softmax", lambda x: torch.softmax(x, dim=1)),
    ("rms_norm", "rms_norm", "rms_norm", None),
    ("layer_norm", "layer_norm", "layer_norm", None),
    ("cross_entropy", "cross_entropy", "cross_entropy", None),
]


def load_example(name: str) -> ModuleType:
    """Import examples/NAME.py by path (tilecraft from this checkout if not installed)."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    module_name = f"_bench_example_{name}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, ROOT / "examples" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module


def bench_ms(fn: Callable[[], Any]) -> float:
    """Median time in ms over CUDA events, after warm-up."""
    import triton.testing

    return float(triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median"))


def tensors(value: Any) -> list[torch.Tensor]:
    """The tensors in a value (a tensor or a tuple of them)."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in tensors(v)]
    return []


def bytes_moved(args: tuple, out: Any) -> int:
    """Each input read once and each output written once."""
    return sum(t.numel() * t.element_size() for t in tensors(args) + tensors(out))


def rel_error(out: Any, ref: Any) -> float:
    """||out - ref|| / ||ref|| over all outputs, in float64."""
    pairs = list(zip(tensors(out), tensors(ref), strict=True))
    num = sum(float((o.double() - r.double()).norm() ** 2) for o, r in pairs)
    den = sum(float(r.double().norm() ** 2) for _, r in pairs)
    return (num / den) ** 0.5 if den else num**0.5


def as_float32(args: tuple) -> tuple:
    """The arguments with floating-point tensors in float32 (for the reference result)."""
    return tuple(
        a.float() if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args
    )


def try_time(fn: Callable[[], Any], errors: dict[str, str], key: str) -> float | None:
    """Time `fn` once it has run once; record an error under `key` instead of raising."""
    try:
        fn()
        torch.cuda.synchronize()
        return bench_ms(fn)
    except Exception as e:
        errors[key] = f"{type(e).__name__}: {e}".splitlines()[0][:200]
        traceback.print_exc()
        return None


def prepare(example: str, kernel_name: str) -> tuple[ModuleType, tuple, Callable[..., Any], dict]:
    """Fresh inputs, the default-config launcher, and the correctness numbers of one kernel."""
    module = load_example(example)
    args = module.inputs(shape=SHAPE, dtype=DTYPE, device="cuda")
    bound = getattr(module, kernel_name).bind(args)
    launcher = bound.compile()  # None: tilecraft's default config, no tuning
    out = launcher(*args)
    expected = module.reference(*as_float32(args))
    info = {
        "config": repr(bound.default_config),
        "bytes": bytes_moved(args, out),
        "rel_err": rel_error(out, expected),
    }
    return module, args, launcher, info


def measure(label: str, example: str, kernel_name: str, peer: Callable[..., Any] | None) -> dict:
    """One row of results: times, bandwidth and errors (recorded, never raised)."""
    result: dict[str, Any] = {"kernel": label, "errors": {}}
    try:
        module, args, launcher, info = prepare(example, kernel_name)
    except Exception as e:
        traceback.print_exc()
        result["errors"]["tilecraft"] = f"{type(e).__name__}: {e}".splitlines()[0][:200]
        return result
    result.update(info)
    eager = peer or module.reference
    result["eager_rel_err"] = rel_error(eager(*args), module.reference(*as_float32(args)))
    result["tilecraft_ms"] = try_time(lambda: launcher(*args), result["errors"], "tilecraft")
    result["eager_ms"] = try_time(lambda: eager(*args), result["errors"], "eager")
    compiled = torch.compile(eager)
    result["compile_ms"] = try_time(lambda: compiled(*args), result["errors"], "compile")
    if result["tilecraft_ms"]:
        result["tbps"] = result["bytes"] / (result["tilecraft_ms"] * 1e-3) / 1e12
        result["copy_fraction"] = result["tbps"] / COPY_TBPS
    return result


def _ms(r: dict, key: str) -> str:
    ms = r.get(f"{key}_ms")
    if ms is None:
        return f"error: {r['errors'].get(key, '?')}"
    return f"{ms:.3f} ({r['bytes'] / (ms * 1e-3) / 1e12:.2f} TB/s)"


def _ratio(r: dict, key: str) -> str:
    a, b = r.get("tilecraft_ms"), r.get(f"{key}_ms")
    return f"{a / b:.2f}" if a and b else "-"


def markdown(results: list[dict]) -> str:
    """The results as a markdown table."""
    lines = [
        "| kernel | tilecraft ms (TB/s, %copy) | torch eager ms | torch.compile ms "
        "| tilecraft/eager | tilecraft/compile | rel err |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in results:
        tc = _ms(r, "tilecraft")
        if "copy_fraction" in r:
            tc = tc[:-1] + f", {r['copy_fraction']:.0%})"
        err = f"{r['rel_err']:.1e}" if "rel_err" in r else "-"
        cells = [r["kernel"], tc, _ms(r, "eager"), _ms(r, "compile")]
        cells += [_ratio(r, "eager"), _ratio(r, "compile"), err]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def environment() -> dict:
    """Where and with what the numbers were taken."""
    import triton

    return {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "python": platform.python_version(),
        "shape": list(SHAPE),
        "dtype": str(DTYPE),
        "copy_tbps": COPY_TBPS,
    }


def write_json(data: dict) -> Path:
    """Save the raw results to $OUT/bench_norms.json, else benchmarks/results/."""
    folder = Path(os.environ["OUT"]) if os.environ.get("OUT") else ROOT / "benchmarks" / "results"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "bench_norms.json"
    path.write_text(json.dumps(data, indent=2) + "\n")
    return path


def main() -> int:
    """Measure every case, print the table, save the JSON."""
    if not torch.cuda.is_available():
        print("bench_norms.py needs a GPU (CUDA); none found, nothing measured.")
        return 0
    results = []
    for case in CASES:
        torch.manual_seed(0)
        results.append(measure(*case))
        print(f"measured {case[0]}", file=sys.stderr)
    env = environment()
    print(f"\n{env['device']}, torch {env['torch']}, triton {env['triton']}, {SHAPE} {DTYPE}\n")
    print(markdown(results))
    print(f"\nresults: {write_json({**env, 'results': results})}")
    return 1 if any(r["errors"] for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
