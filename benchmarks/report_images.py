"""The README's `tilecraft report` pictures, from recorded H200 data, on a CPU.

Builds a tuning database by replaying several searches on one recorded H200 landscape
(benchmarks/landscapes/h200/, as benchmarks/search_eval.py does: by default held-out
kernel, the cost model trained on the other kernels' landscapes and no seeds of this
kernel); each batch is stored with the replay's simulated wall time.
Then a benchmark database with a synthetic history: runs of 10 samples with 2% noise
around the landscape's best recorded time, with a planted regression. Then draws the
report and copies one picture of each kind to `--images`.

Usage: python benchmarks/report_images.py [--case softmax-4096x4096] [--out DIR]
         [--images docs/images] [--held-out kernel|shape] [--smoke]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from search_eval import prepare, seeds_for, train  # noqa: E402

from tilecraft.autotune import regress  # noqa: E402
from tilecraft.autotune.db import TuningDB  # noqa: E402
from tilecraft.autotune.landscape import load_all  # noqa: E402
from tilecraft.autotune.replay import Replay  # noqa: E402
from tilecraft.autotune.report import write_report  # noqa: E402
from tilecraft.autotune.search import make_search  # noqa: E402
from tilecraft.autotune.trial import Budget, Trial  # noqa: E402
from tilecraft.autotune.tune import tune_key  # noqa: E402

LANDSCAPES = ROOT / "benchmarks" / "landscapes" / "h200"
SEARCHES = ("fast", "quick", "de", "random")
START = 1_790_000_000.0  # the stored runs' (made-up) start times: one hour apart
# Synthetic benchmark history: each run's median relative to the first; run 4 regressed.
HISTORY = (1.0, 0.99, 1.0, 1.12, 0.99, 0.97)


def tuning_db(path: Path, case: str, searches: tuple[str, ...], held_out: str, smoke: bool) -> None:
    """Replay each search on the landscape `case` and store its trials in a database."""
    lands = load_all(LANDSCAPES)
    target = next(land for land in lands if land.case.name.startswith(case))
    prepared = prepare(target)
    others = [prepare(land) for land in (lands[:6] if smoke else lands) if land is not target]
    if held_out == "kernel":
        others = [p for p in others if p.kernel != prepared.kernel]
    model = None if smoke else train(others)
    seeds = seeds_for(prepared, others)
    _, bound, args = target.case.bind("meta")
    key = replace(tune_key(bound, args), hardware=target.hardware, versions=target.versions)
    with TuningDB(path) as db:
        for i, name in enumerate(searches):
            replay = Replay(target, prepared.space)
            record = _recorder(db, key, bound.src.tree.name, name, replay, START + 3600 * i)
            budget = Budget(60, 30.0, clock=replay.clock)
            options = {"model": model, "description": prepared.desc, "seeds": seeds}
            make_search(name, prepared.space, record, budget, seed=0, **options).run()


def _recorder(
    db: TuningDB, key: Any, kernel_name: str, search: str, replay: Replay, start: float
) -> Any:
    """An evaluate function: the replay's trials, stored with its simulated clock."""

    def evaluate(configs: list[Any]) -> list[Trial]:
        trials = replay(configs)
        created = start + replay.now
        rows = [
            {
                "created": created,
                "kernel": key.kernel,
                "kernel_name": kernel_name,
                "spec_key": key.spec_key,
                "hardware": key.hardware,
                "versions": key.versions,
                "search": search,
                "config": t.config.to_json(),
                "status": t.status,
                "time_ms": t.time_ms,
                "compile_s": t.compile_s,
                "error": t.error,
            }
            for t in trials
        ]
        db.add_trial_rows(rows)
        return trials

    return evaluate


def bench_db(path: Path, case: str, best_ms: float, hardware: str, versions: str) -> None:
    """A synthetic history of one kernel: `HISTORY`'s medians, 2% noise, 10 samples."""
    rng = np.random.default_rng(0)
    name = case.replace("-bfloat16", "")
    for i, factor in enumerate(HISTORY, start=1):
        samples = best_ms * factor * np.exp(rng.normal(0.0, 0.02, 10))
        timings = {f"{name.split('-')[0]}.{name}": [float(x) for x in samples]}
        gpu = f"{hardware} (synthetic samples)"
        regress.store_run(path, f"run-{i}", timings, gpu, versions, "")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", default="softmax-4096x4096")
    parser.add_argument("--out", default="report-images", help="databases and report")
    parser.add_argument("--images", default="", help="copy one picture of each kind here")
    parser.add_argument(
        "--held-out",
        choices=("shape", "kernel"),
        default="kernel",
        help="what the model and seeds have not seen: this shape, or any shape of the kernel",
    )
    parser.add_argument("--smoke", action="store_true", help="no cost model, two searches")
    args = parser.parse_args(argv)
    started = time.monotonic()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for stale in (out / "tuning.sqlite3", out / regress.BENCH_DB):
        stale.unlink(missing_ok=True)
    searches = SEARCHES[1:3] if args.smoke else SEARCHES
    tuning_db(out / "tuning.sqlite3", args.case, searches, args.held_out, args.smoke)
    land = next(land for land in load_all(LANDSCAPES) if land.case.name.startswith(args.case))
    bench_db(out / regress.BENCH_DB, land.case.name, land.best_ms, land.hardware, land.versions)
    report = write_report(out / "report", out / "tuning.sqlite3", out / regress.BENCH_DB)
    if args.images:
        _copy_images(report.pictures, Path(args.images))
    for picture in report.pictures:
        print(f"{picture.path}: {picture.caption}")
    print(f"{time.monotonic() - started:.0f} s")
    return {"pictures": [str(p.path) for p in report.pictures], "html": str(report.html)}


def _copy_images(pictures: list[Any], folder: Path) -> None:
    """One picture of each kind, under stable names for the README."""
    folder.mkdir(parents=True, exist_ok=True)
    for picture in pictures:
        kind = picture.path.name.split("-")[0]
        shutil.copyfile(picture.path, folder / f"report-{kind}.png")


if __name__ == "__main__":
    main()
