"""tilecraft's default tuning against Helion 1.5.0's quick effort and torch.compile
(max-autotune without CUDA graphs), on the same kernel sources
(benchmarks/helion_kernels.py, run by each).

Eight kernels at bf16, at shapes the recorded landscapes leave out: five the cost model
learned from (softmax, rms_norm, layer_norm, cross_entropy, matmul) and three it never saw
(`UNSEEN`: softmax_two_pass, kl_div, long_sum). For each: the tuning's wall time, configs
tried and the tuned kernel's time; for torch.compile, the first call's wall time
(compile and autotune) and the kernel's time, of an equivalent PyTorch function.

Lanes, so that each tool has a GPU to itself on a two-GPU host, at the same time:
    --lane tilecraft    tilecraft, then torch.compile (unless --no-compile)
    --lane helion       Helion only (about 70 s per kernel: give it half the kernels per
                        10-minute call, `--kernels` or `--half 1|2`)
    --lane all          everything, one after the other (the default)
    --merge A.json B.json ...   merge lane files (by kernel) into --out and print the table

    --kernels a,b       these kernels only (names of `CASES`; positional names work too)
    --half 1|2          the first or second half of the kernels
    --learn DIR         import the landscapes in DIR into the (fresh) tuning database first,
                        so that the default tuning is the fast, model-guided search
    --full S            also tune with tilecraft's full effort, capped at S seconds
    --defaults          no tuning: each tool's default config on the same source (Helion's
                        autotune effort "none", tilecraft's heuristic default), compile
                        time of the first call and kernel time (issue 14's first goal)
    --cache DIR         tilecraft's cache and tuning database (default: a fresh temp dir)
    --smoke             CPU, tiny shapes, Triton's interpreter; Helion and torch.compile
                        are skipped (with the reason) where they cannot run
    --out NAME          the JSON file (default tune_vs_helion.json), written after each
                        kernel: a lane cut short keeps what it measured

Usage (an nvidia-h200-x2, Helion installed from its wheel), one 10-minute call per half:
    CUDA_VISIBLE_DEVICES=1 timeout 570 python benchmarks/tune_vs_helion.py --lane helion \\
        --half 1 --out helion1.json > $OUT/helion1.log 2>&1 &
    CUDA_VISIBLE_DEVICES=0 timeout 570 python benchmarks/tune_vs_helion.py --lane tilecraft \\
        --half 1 --learn benchmarks/landscapes/h200 --out tilecraft1.json > $OUT/tc1.log 2>&1 &
    wait; python benchmarks/tune_vs_helion.py --merge $OUT/helion1.json $OUT/tilecraft1.json \\
        --out half1.json
(writes under $OUT, or benchmarks/results/ without $OUT)
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import json
import math
import os
import re
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # this checkout's tilecraft, run from anywhere
UNSEEN = ("softmax_two_pass", "kl_div", "long_sum")  # no landscape of these was recorded
GOAL_TIME, GOAL_TUNING = 1.0, 0.2  # tilecraft's kernel / Helion's, its tuning time / Helion's


def _rows(shape: tuple, dtype: torch.dtype, device: str) -> tuple:
    return (torch.randn(shape, dtype=dtype, device=device),)


def _norm(*vectors: int) -> Callable[[tuple, torch.dtype, str], tuple]:
    """Rows and `vectors` per-column vectors (weight, bias)."""

    def make(shape: tuple, dtype: torch.dtype, device: str) -> tuple:
        extra = [torch.randn(shape[1], dtype=dtype, device=device) for _ in range(len(vectors))]
        return (torch.randn(shape, dtype=dtype, device=device), *extra)

    return make


def _logits(shape: tuple, dtype: torch.dtype, device: str) -> tuple:
    labels = torch.randint(0, shape[1], (shape[0],), device=device)
    return torch.randn(shape, dtype=dtype, device=device), labels


def _matrices(shape: tuple, dtype: torch.dtype, device: str) -> tuple:
    m, k, n = shape
    x = torch.randn(m, k, dtype=dtype, device=device) / math.sqrt(k)
    return x, torch.randn(k, n, dtype=dtype, device=device)


def _kl(shape: tuple, dtype: torch.dtype, device: str) -> tuple:
    log_q = torch.randn(shape, device=device).log_softmax(-1).to(dtype)
    return log_q, torch.randn(shape, device=device).softmax(-1).to(dtype)


# The PyTorch functions torch.compile gets, computing as the kernels do (in float32)
def softmax_ref(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x.float(), dim=1).to(x.dtype)


def rms_norm_ref(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    row = x.float()
    return (row * torch.rsqrt(row.pow(2).mean(-1, keepdim=True) + 1e-5) * weight.float()).to(
        x.dtype
    )


def layer_norm_ref(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    return F.layer_norm(x.float(), (x.size(1),), weight.float(), bias.float(), 1e-5).to(x.dtype)


def cross_entropy_ref(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.float(), labels)


def matmul_ref(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return x @ y


def kl_div_ref(log_q: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    p32 = p.float()
    return (p32 * (torch.log(p32.clamp(min=1e-10)) - log_q.float())).sum(-1)


def long_sum_ref(x: torch.Tensor) -> torch.Tensor:
    return x.float().sum(-1).to(x.dtype)


ROWS, SMALL = (8192, 8192), (33, 300)
# name: (function in helion_kernels.py, inputs, GPU shape, smoke shape, PyTorch function)
CASES: dict[str, tuple[str, Callable[..., tuple], tuple, tuple, Callable[..., Any]]] = {
    "softmax": ("softmax", _rows, ROWS, SMALL, softmax_ref),
    "rms_norm": ("rms_norm", _norm(1), ROWS, SMALL, rms_norm_ref),
    "layer_norm": ("layer_norm", _norm(1, 1), ROWS, SMALL, layer_norm_ref),
    "cross_entropy": ("cross_entropy", _logits, (4096, 50257), SMALL, cross_entropy_ref),
    "matmul": ("matmul", _matrices, (4096, 4096, 4096), (40, 50, 30), matmul_ref),
    "softmax_two_pass": ("softmax_two_pass", _rows, ROWS, SMALL, softmax_ref),
    "kl_div": ("kl_div_rows", _kl, (2048, 32768), SMALL, kl_div_ref),
    "long_sum": ("long_sum", _rows, (4096, 32768), SMALL, long_sum_ref),
}


def kernels(backend: str) -> ModuleType:
    """benchmarks/helion_kernels.py with `backend`'s imports ("tilecraft" or "helion"),
    registered in sys.modules (so that tools reading a kernel's source find its file)."""
    name = f"_tune_vs_helion_{backend}"
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / "helion_kernels.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    module.BACKEND = backend  # type: ignore[attr-defined]  # read as the module runs
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def time_ms(fn: Callable[[], Any], gpu: bool) -> float:
    """Median kernel time: do_bench (L2 flushed, CUDA events) on a GPU, else wall time."""
    if gpu:
        from triton.testing import do_bench

        return float(do_bench(fn, return_mode="median"))
    times = []
    for _ in range(3):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return sorted(times)[1]


def error(out: Any, expected: torch.Tensor) -> float:
    """The largest absolute difference from the PyTorch function's result."""
    return float((torch.as_tensor(out).float() - expected.float()).abs().max())


def run_tilecraft(kernel: Any, args: tuple, expected: torch.Tensor, gpu: bool, **options) -> dict:
    start = time.perf_counter()
    config = kernel.autotune(args, **options)
    seconds = time.perf_counter() - start
    stats = getattr(kernel.bind(args), "tuning", {}) or {}
    return {
        "tune_s": seconds,
        "configs": stats.get("configs"),
        "failed": stats.get("failed"),
        "search": stats.get("search"),
        "phases": stats.get("phases"),
        "ms": time_ms(lambda: kernel(*args), gpu),
        "error": error(kernel(*args), expected),
        "config": repr(config),
    }


def run_tilecraft_default(kernel: Any, args: tuple, expected: torch.Tensor, gpu: bool) -> dict:
    """The heuristic default config (no tuning, no cost model): first call and kernel time."""
    start = time.perf_counter()
    bound = kernel.bind(args)
    launch = bound.compile(bound.default_config)
    out = launch(*args)
    if gpu:
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    return {
        "first_call_s": seconds,
        "ms": time_ms(lambda: launch(*args), gpu),
        "error": error(out, expected),
        "config": repr(bound.default_config),
    }


def run_helion_default(kernel: Any, args: tuple, expected: torch.Tensor, gpu: bool) -> dict:
    """Helion's default config (autotune effort "none"): first call and kernel time."""
    kernel.settings.autotune_effort = "none"
    result = run_helion(kernel, args, expected, gpu)
    result["first_call_s"] = result.pop("tune_s")
    return result


def run_helion(kernel: Any, args: tuple, expected: torch.Tensor, gpu: bool) -> dict:
    captured = io.StringIO()
    start = time.perf_counter()
    with contextlib.redirect_stderr(captured):
        out = kernel(*args)
    if gpu:
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    log = captured.getvalue()
    counts = re.findall(r"(\d+)\s+configs", log)
    config = re.search(r"helion\.Config\((.*?)\)(?:, static_shapes|\n)", log)
    return {
        "tune_s": seconds,
        "configs": int(counts[-1]) if counts else None,
        "ms": time_ms(lambda: kernel(*args), gpu),
        "error": error(out, expected),
        "config": config.group(1) if config else None,
        "log_tail": log[-600:],
    }


def run_compile(fn: Callable[..., Any], args: tuple, expected: torch.Tensor, gpu: bool) -> dict:
    """torch.compile(mode="max-autotune-no-cudagraphs") of the PyTorch function: the first
    call's wall time (tracing, autotuning and compiling) and the compiled function's kernel
    time. Without CUDA graphs: the kernels are compared, and a graph's output is overwritten
    by the next replay (max-autotune's graphs crashed the timing loop)."""
    if not gpu:
        return {"skipped": "torch.compile's max-autotune is measured on a GPU only"}
    compiled = torch.compile(fn, mode="max-autotune-no-cudagraphs")
    start = time.perf_counter()
    out = compiled(*args)
    torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    return {
        "compile_s": seconds,
        "error": error(out, expected),
        "ms": time_ms(lambda: compiled(*args), gpu),
    }


def helion_or_reason(gpu: bool) -> tuple[ModuleType | None, str]:
    """Helion's kernels, or why they cannot run here."""
    try:
        import helion  # noqa: F401
    except Exception as e:  # noqa: BLE001 - not installed, or fails to import on this torch
        return None, f"helion not importable: {type(e).__name__}: {e}"[:300]
    if not gpu:
        return None, "Helion's autotuner is measured on a GPU only"
    return kernels("helion"), ""


def guarded(run: Callable[[], dict]) -> dict:
    """`run()`, or the error it raised (one tool failing on one kernel ends nothing)."""
    try:
        return run()
    except Exception as e:  # noqa: BLE001 - recorded in the row, the lane goes on
        return {"crashed": f"{type(e).__name__}: {e}"[:600]}


def measure_case(name: str, lane: str, opts: argparse.Namespace, gpu: bool) -> dict:
    fn_name, make, shape, small, reference = CASES[name]
    shape = small if opts.smoke else shape
    dtype = torch.bfloat16 if gpu else torch.float32
    args = make(shape, dtype, "cuda" if gpu else "cpu")
    expected = reference(*args)
    row: dict[str, Any] = {"kernel": name, "shape": list(shape), "unseen": name in UNSEEN}
    if opts.defaults:
        return {**row, **measure_defaults(fn_name, lane, args, expected, opts, gpu)}
    if lane in ("tilecraft", "all"):
        kernel = getattr(opts.tilecraft_kernels, fn_name)
        cpu = {} if gpu else {"max_configs": 2}  # the interpreter: a dry run of the path
        row["tilecraft"] = guarded(lambda: run_tilecraft(kernel, args, expected, gpu, **cpu))
        if opts.full:
            options = {"effort": "full", "budget_s": float(opts.full), **cpu}
            row["full"] = guarded(lambda: run_tilecraft(kernel, args, expected, gpu, **options))
        if not opts.no_compile:
            row["torch_compile"] = guarded(lambda: run_compile(reference, args, expected, gpu))
    if lane in ("helion", "all"):
        if opts.helion_kernels is None:
            row["helion"] = {"skipped": opts.helion_reason}
        else:
            kernel = getattr(opts.helion_kernels, fn_name)
            row["helion"] = guarded(lambda: run_helion(kernel, args, expected, gpu))
    return row


def measure_defaults(
    fn_name: str, lane: str, args: tuple, expected: Any, opts: argparse.Namespace, gpu: bool
) -> dict:
    """Each lane's default config of kernel `fn_name` (no tuning)."""
    row: dict[str, Any] = {}
    if lane in ("tilecraft", "all"):
        kernel = getattr(opts.tilecraft_kernels, fn_name)
        row["tilecraft_default"] = guarded(
            lambda: run_tilecraft_default(kernel, args, expected, gpu)
        )
    if lane in ("helion", "all"):
        if opts.helion_kernels is None:
            row["helion_default"] = {"skipped": opts.helion_reason}
        else:
            kernel = getattr(opts.helion_kernels, fn_name)
            row["helion_default"] = guarded(lambda: run_helion_default(kernel, args, expected, gpu))
    return row


def either_table(rows: list[dict]) -> str:
    """The defaults table for rows of a `--defaults` run, else the tuning table."""
    defaults = any("tilecraft_default" in r or "helion_default" in r for r in rows)
    return defaults_table(rows) if defaults else table(rows)


def defaults_table(rows: list[dict]) -> str:
    """Default configs: first call (compile) and kernel time of each tool, and the ratio."""
    lines = [
        "| kernel | tilecraft default: first call, kernel | Helion default: first call, kernel"
        " | kernel tilecraft/Helion |",
        "|---|---|---|---|",
    ]
    for r in rows:
        t, h = r.get("tilecraft_default"), r.get("helion_default")
        lines.append(
            f"| {r['kernel']} | {_cell(t, 'first_call_s')} | {_cell(h, 'first_call_s')}"
            f" | {_ratio(t, h, 'ms')} |"
        )
    return "\n".join(lines)


def selected(opts: argparse.Namespace) -> list[str]:
    names = [n for part in opts.kernels for n in part.split(",") if n] or list(CASES)
    unknown = [n for n in names if n not in CASES]
    if unknown:
        raise SystemExit(f"unknown kernel(s) {unknown}: choose from {', '.join(CASES)}")
    if opts.half:
        middle = (len(names) + 1) // 2
        names = names[:middle] if opts.half == 1 else names[middle:]
    return names


def out_path(name: str) -> Path:
    folder = Path(os.environ.get("OUT", ROOT / "benchmarks" / "results"))
    folder.mkdir(parents=True, exist_ok=True)
    return Path(name) if os.sep in name else folder / name


def merge(paths: list[str]) -> list[dict]:
    """Rows of several lane files joined by kernel, in `CASES` order."""
    rows: dict[str, dict] = {}
    for path in paths:
        for row in json.loads(Path(path).read_text())["rows"]:
            rows.setdefault(row["kernel"], {}).update(row)
    order = list(CASES)
    return sorted(rows.values(), key=lambda r: order.index(r["kernel"]))


def _cell(result: dict | None, seconds: str = "tune_s") -> str:
    if not result:
        return "-"
    if "skipped" in result or "crashed" in result:
        return "skipped" if "skipped" in result else "crashed"
    configs = f", {result['configs']} configs" if result.get("configs") is not None else ""
    return f"{result[seconds]:.1f} s{configs}, {result['ms']:.4f} ms"


def _ratio(a: dict | None, b: dict | None, key: str, key_b: str | None = None) -> str:
    if not a or not b or key not in a or (key_b or key) not in b:
        return "-"
    return f"{a[key] / b[key_b or key]:.3f}"


def table(rows: list[dict]) -> str:
    """The markdown table: times, and tilecraft's against Helion's and torch.compile's."""
    lines = [
        "| kernel | tilecraft: tuning, configs, kernel | Helion quick | torch.compile max-autotune"
        " | kernel tilecraft/Helion | tuning tilecraft/Helion | kernel tilecraft/compile |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        t, h, c = r.get("tilecraft"), r.get("helion"), r.get("torch_compile")
        label = r["kernel"] + (" (unseen)" if r.get("unseen") else "")
        lines.append(
            f"| {label} | {_cell(t)} | {_cell(h)} | {_cell(c, 'compile_s')} | {_ratio(t, h, 'ms')}"
            f" | {_ratio(t, h, 'tune_s')} | {_ratio(t, c, 'ms')} |"
        )
    return "\n".join(lines)


def goals(rows: list[dict]) -> dict[str, Any]:
    """Whether tilecraft's kernels are at most GOAL_TIME x Helion's, tuned in at most
    GOAL_TUNING x its time, on every kernel both measured (None when none was)."""
    both = [
        r for r in rows if "ms" in (r.get("tilecraft") or {}) and "ms" in (r.get("helion") or {})
    ]
    if not both:
        return {"kernel_time": None, "tuning_time": None}
    return {
        "kernel_time": all(r["tilecraft"]["ms"] <= GOAL_TIME * r["helion"]["ms"] for r in both),
        "tuning_time": all(
            r["tilecraft"]["tune_s"] <= GOAL_TUNING * r["helion"]["tune_s"] for r in both
        ),
        "kernels": [r["kernel"] for r in both],
    }


def write(rows: list[dict], opts: argparse.Namespace, gpu: bool) -> Path:
    path = out_path(opts.out)
    device = torch.cuda.get_device_name() if gpu else "cpu"
    result = {"device": device, "lane": opts.lane, "rows": rows, "goals": goals(rows)}
    path.write_text(json.dumps(result, indent=1, default=str))
    return path


def prepare(opts: argparse.Namespace, gpu: bool) -> None:
    """A fresh tuning database (and the landscapes in it), the kernels for each lane."""
    cache = opts.cache or tempfile.mkdtemp(prefix="tilecraft-tune-")
    os.environ["TILECRAFT_CACHE_DIR"] = cache  # read when the kernels are made, below
    # never Helion's cached configs (and with --defaults, never its autotuner)
    os.environ.setdefault("HELION_FORCE_AUTOTUNE", "0" if opts.defaults else "1")
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", tempfile.mkdtemp(prefix="inductor-"))
    if not gpu:
        os.environ.setdefault("TRITON_INTERPRET", "1")
        os.environ["TILECRAFT_AUTOTUNE_WORKERS"] = "0"  # no worker processes for a dry run
    if opts.learn and opts.lane != "helion":
        from tilecraft.cli import learn

        learn(opts.learn)
    opts.tilecraft_kernels = kernels("tilecraft") if opts.lane != "helion" else None
    opts.helion_kernels, opts.helion_reason = None, ""
    if opts.lane in ("helion", "all"):
        opts.helion_kernels, opts.helion_reason = helion_or_reason(gpu)


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("kernels", nargs="*", default=[])
    p.add_argument("--kernels", dest="kernel_list", default="")
    p.add_argument("--half", type=int, choices=(1, 2))
    p.add_argument("--lane", choices=("tilecraft", "helion", "all"), default="all")
    p.add_argument("--merge", nargs="+")
    p.add_argument("--learn")
    p.add_argument("--full")
    p.add_argument("--cache")
    p.add_argument("--no-compile", action="store_true")
    p.add_argument("--defaults", action="store_true", help="default configs, no tuning")
    p.add_argument("--no-helion", action="store_true", help="= --lane tilecraft")
    p.add_argument("--no-tilecraft", action="store_true", help="= --lane helion")
    p.add_argument("--smoke", action="store_true")
    p.add_argument("--out", default="tune_vs_helion.json")
    opts = p.parse_args(argv)
    opts.kernels = [*opts.kernels, opts.kernel_list]
    if opts.no_helion or opts.no_tilecraft:
        opts.lane = "tilecraft" if opts.no_helion else "helion"
    return opts


def main(argv: list[str] | None = None) -> dict:
    opts = parse(argv)
    if opts.merge:
        rows = merge(opts.merge)
        result = {"rows": rows, "goals": goals(rows), "merged": opts.merge}
        out_path(opts.out).write_text(json.dumps(result, indent=1, default=str))
        print(either_table(rows))
        print("goals:", result["goals"])
        return result
    gpu = torch.cuda.is_available() and not opts.smoke
    if not gpu and not opts.smoke:
        print("tune_vs_helion.py needs a GPU (or --smoke)")
        return {}
    names = selected(opts)
    prepare(opts, gpu)
    rows: list[dict] = []
    for name in names:
        rows.append(measure_case(name, opts.lane, opts, gpu))
        print(json.dumps(rows[-1], default=str)[:1500], flush=True)
        path = write(rows, opts, gpu)  # after each kernel: a lane cut short keeps its rows
    print(either_table(rows))
    print("wrote", path)
    return json.loads(path.read_text())


if __name__ == "__main__":
    main()
