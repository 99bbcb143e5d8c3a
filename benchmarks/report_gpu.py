"""`tilecraft report` on a GPU: tune one example kernel with several searches into a fresh
tuning database (energy per call measured through NVML: objective "edp"), then
draw the report, so the README's pictures can show measured energy.

The database first learns the recorded H200 landscapes (so "fast" has a cost model); the
shape tuned (softmax 4096x8192 by default) is not among them. Writes JSON to `--out`,
prints a markdown table, and with `--images DIR` copies one picture of each kind there
(report-tuning.png, report-configs.png). `--smoke` runs on the CPU with a tiny shape.

Usage: python benchmarks/report_gpu.py --out results/report_gpu.json [--images docs/images]
         [--searches fast,quick,de] [--budget 15] [--smoke]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="the JSON results file")
    parser.add_argument("--images", default="", help="copy one picture of each kind here")
    parser.add_argument("--report", default="", help="the report's folder (default: beside --out)")
    parser.add_argument("--searches", default="fast,quick,de")
    parser.add_argument("--budget", type=float, default=15.0, help="seconds per search")
    parser.add_argument("--shape", default="4096x8192")
    parser.add_argument("--smoke", action="store_true", help="CPU, tiny shape, 3 configs")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse(argv)
    # A fresh cache, so the database holds only this script's runs.
    cache = Path(tempfile.mkdtemp(prefix="tilecraft-report-gpu-"))
    import torch

    import tilecraft as tc
    from tilecraft import demo
    from tilecraft.autotune.report import write_report
    from tilecraft.autotune.tune import db_path

    gpu = torch.cuda.is_available() and not args.smoke
    module = demo.load_example(demo.find_examples(None) / "softmax.py")
    # A kernel of its own: the example's may be in use elsewhere with other settings.
    kernel = tc.kernel(module.softmax.fn, cache_dir=cache, autotune_quiet=True)
    db = db_path(kernel.settings)
    if not args.smoke:
        _learn_landscapes(db)
    shape = (64, 100) if args.smoke else tuple(int(n) for n in args.shape.split("x"))
    dtype = torch.bfloat16 if gpu else torch.float32
    inputs = module.inputs(shape=shape, dtype=dtype, device="cuda" if gpu else "cpu")
    options: dict[str, Any] = {"budget_s": args.budget}
    if args.smoke:
        options["max_configs"] = 3
    if gpu:
        options["objective"] = "edp"  # every trial's energy is measured (through NVML)
    rows = [_tune(kernel, inputs, name, options) for name in args.searches.split(",")]
    out = Path(args.out)
    folder = Path(args.report) if args.report else out.with_suffix("")
    report = write_report(folder, db, what="tuning")
    if args.images:
        _copy_images(report.pictures, Path(args.images))
    result = {
        "device": torch.cuda.get_device_name() if gpu else "cpu",
        "shape": list(shape),
        "objective": options.get("objective", "time"),
        "energy_measured": any(r.has_energy() for r in report.runs),
        "searches": rows,
        "pictures": [str(p.path) for p in report.pictures],
        "captions": [p.caption for p in report.pictures],
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1))
    print(_table(result))
    shutil.rmtree(cache, ignore_errors=True)
    return result


def _learn_landscapes(path: Path) -> None:
    from tilecraft.autotune.db import TuningDB
    from tilecraft.autotune.landscape import import_landscapes

    with TuningDB(path) as db:
        import_landscapes(db, ROOT / "benchmarks" / "landscapes" / "h200")


def _tune(kernel: Any, inputs: tuple, search: str, options: dict[str, Any]) -> dict[str, Any]:
    started = time.monotonic()
    kernel.autotune(inputs, search=search, **options)
    tuning = kernel.bind(inputs).tuning or {}
    return {
        "search": search,
        "seconds": round(time.monotonic() - started, 2),
        "configs": tuning.get("configs"),
        "best_ms": tuning.get("best_ms"),
    }


def _copy_images(pictures: list[Any], folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for picture in pictures[:2]:  # the latest kernel/shape: its progress and its configs
        kind = picture.path.name.split("-")[0]
        shutil.copyfile(picture.path, folder / f"report-{kind}.png")


def _table(result: dict[str, Any]) -> str:
    lines = [
        f"softmax {result['shape']} on {result['device']}, objective {result['objective']},"
        f" energy measured: {result['energy_measured']}",
        "",
        "| search | wall s | configs | best ms |",
        "|---|---|---|---|",
    ]
    for row in result["searches"]:
        best = "-" if row["best_ms"] is None else f"{row['best_ms']:.4f}"
        lines.append(f"| {row['search']} | {row['seconds']} | {row['configs']} | {best} |")
    return "\n".join(lines + ["", *result["pictures"]])


if __name__ == "__main__":
    main()
