"""tilecraft's default tuning against Helion 1.5.0's quick effort, on the same kernels.

softmax and rms_norm at 8192x8192 bf16, matmul at 4096^3 bf16 (shapes the recorded
landscapes leave out): tuning wall time, configs tried, and the tuned kernel's time, all
in one run. Helion comes from a carried wheel.

    --learn DIR     import the landscapes in DIR into the (fresh) tuning database first,
                    so the default tuning is the fast, model-guided search
    --full S        also tune with tilecraft's full effort, capped at S seconds: the
                    reference the fast search is held to
    --no-helion     skip Helion;  --no-tilecraft  skip tilecraft (to run each on its own GPU)
    --out NAME      the JSON file's name (default tune_vs_helion.json)

Usage: python benchmarks/tune_vs_helion.py [kernel ...] [options]
(writes $OUT/tune_vs_helion.json, or benchmarks/results/ without $OUT)
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import os
import re
import sys
import time
from pathlib import Path

import torch
from triton.testing import do_bench

ROOT = Path(__file__).resolve().parents[1]
SHAPES = {"softmax": (8192, 8192), "rms_norm": (8192, 8192), "matmul": (4096, 4096, 4096)}


def example(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "examples" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def helion_kernels() -> dict:
    """The same kernels written for Helion (in their own module: Helion needs module-level
    functions)."""
    spec = importlib.util.spec_from_file_location(
        "helion_kernels", ROOT / "benchmarks" / "helion_kernels.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return {"softmax": module.softmax, "rms_norm": module.rms_norm, "matmul": module.matmul}


def run_helion(kernel, args: tuple) -> dict:
    captured = io.StringIO()
    start = time.perf_counter()
    with contextlib.redirect_stderr(captured):
        kernel(*args)
    torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    counts = re.findall(r"(\d+)\s+configs", captured.getvalue())
    ms = do_bench(lambda: kernel(*args), return_mode="median")
    return {
        "tune_s": seconds,
        "configs": int(counts[-1]) if counts else None,
        "ms": ms,
        "log_tail": captured.getvalue()[-600:],
    }


def run_tilecraft(kernel, args: tuple, **options) -> dict:
    start = time.perf_counter()
    config = kernel.autotune(args, **options)
    seconds = time.perf_counter() - start
    bound = kernel.bind(args)
    stats = getattr(bound, "tuning", {}) or {}
    ms = do_bench(lambda: kernel(*args), return_mode="median")
    return {
        "tune_s": seconds,
        "configs": stats.get("configs"),
        "failed": stats.get("failed"),
        "search": stats.get("search"),
        "ms": ms,
        "config": repr(config),
    }


def option(flag: str) -> str | None:
    """The value after `flag` on the command line, if given."""
    return sys.argv[sys.argv.index(flag) + 1] if flag in sys.argv else None


def main(names: list[str], with_helion: bool = True) -> int:
    if not torch.cuda.is_available():
        print("tune_vs_helion.py needs a GPU")
        return 0
    os.environ.setdefault("TILECRAFT_CACHE_DIR", "/tmp/tilecraft-tune")  # start cold
    learned, full = option("--learn"), option("--full")
    if learned:
        from tilecraft.cli import learn

        learn(learned)
    helion = helion_kernels() if with_helion else {}
    rows = []
    for name in names:
        module = example(name)
        args = module.inputs(shape=SHAPES[name], dtype=torch.bfloat16, device="cuda")
        row: dict = {"kernel": name}
        if "--no-tilecraft" not in sys.argv:
            row["tilecraft"] = run_tilecraft(getattr(module, name), args)
            print(name, "tilecraft", row["tilecraft"], flush=True)
        if full:
            kernel = getattr(module, name)
            row["full"] = run_tilecraft(kernel, args, effort="full", budget_s=float(full))
            print(name, "tilecraft full", row["full"], flush=True)
        if with_helion:
            row["helion"] = run_helion(helion[name], args)
            shown = {k: v for k, v in row["helion"].items() if k != "log_tail"}
            print(name, "helion", shown, flush=True)
        rows.append(row)
    out = Path(os.environ.get("OUT", ROOT / "benchmarks" / "results"))
    out.mkdir(parents=True, exist_ok=True)
    name = option("--out") or "tune_vs_helion.json"
    (out / name).write_text(json.dumps(rows, indent=1, default=str))
    for r in rows if with_helion and "--no-tilecraft" not in sys.argv else []:
        t, h = r["tilecraft"], r["helion"]
        print(
            f"| {r['kernel']} | {t['tune_s']:.1f} s, {t['configs']} configs, {t['ms']:.4f} ms "
            f"| {h['tune_s']:.1f} s, {h['configs']} configs, {h['ms']:.4f} ms "
            f"| {h['ms'] / t['ms']:.3f} | {t['tune_s'] / h['tune_s']:.2f} |"
        )
    return 0


if __name__ == "__main__":
    values = {option(f) for f in ("--learn", "--full", "--out")}
    names = [a for a in sys.argv[1:] if not a.startswith("--") and a not in values]
    sys.exit(main(names or list(SHAPES), "--no-helion" not in sys.argv))
