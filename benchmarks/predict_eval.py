"""Prediction instead of search, evaluated offline by replay on the recorded landscapes.

For each landscape (one kernel at one shape, recorded on an H200) the cost model is
trained without it, and its picks are looked up in the landscape (`Replay`: a config
that was not recorded gets its nearest recorded neighbour's time, counted as imputed):

- held-out shape: trained on every other landscape (the kernel's other shapes included),
  seeded with the best configs of the kernel's other shapes, nearest first;
- held-out kernel: trained without any landscape of this kernel, heuristic seeds only.

Reported per case, relative to the landscape's best time: the model's top pick (top-1),
the best of its top 3 (what the "predict" effort keeps), the heuristic default, and
what the untuned path runs (the top pick when the model is confident, else the default),
plus the simulated wall time of the "predict" search. Deterministic, CPU only.

Most picks are configs the landscape never recorded, so top-1 is also given with a
second lookup (`top1_w`, `top3_w`): the nearest recorded config with the tile knobs
weighted 10x (`Replay(tile_weight=...)`, closer to the truth on recorded configs). And
since top-1 moves by 0.05-0.15 when unrelated landscapes change, `--drop SEED` trains
without a random fifth of the other kernels' landscapes: run a few seeds to see the noise.

`--model rank` evaluates the LambdaMART-like ranker (`CostModel.fit(kind="rank")`)
instead of the default blend.

Usage: python benchmarks/predict_eval.py [--landscapes DIR] [--out FILE] [--drop SEED]
         [--model blend|rank]
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from search_eval import Prepared, prepare, seeds_for  # noqa: E402

from tilecraft.autotune.landscape import load_all  # noqa: E402
from tilecraft.autotune.model import KINDS, CostModel  # noqa: E402
from tilecraft.autotune.predict import judge, top_picks  # noqa: E402
from tilecraft.autotune.replay import Replay  # noqa: E402
from tilecraft.autotune.search import make_search  # noqa: E402
from tilecraft.autotune.seeds import heuristic_seeds  # noqa: E402
from tilecraft.autotune.trial import Budget  # noqa: E402

COLUMNS = ("top1", "top3", "default", "untuned", "top1_w", "top3_w")
TILE_WEIGHT = 10.0  # the second lookup's weight on the tile knobs (replay.py says why)
DROPPED = 0.2  # share of the other kernels' landscapes `--drop` leaves out of training


def train(cases: list[Prepared], kind: str = "blend") -> CostModel | None:
    """The cost model of kind `kind` (`--model`) fitted on `cases`."""
    return CostModel.fit([(p.desc, p.land.trials) for p in cases], kind=kind)


def case_result(
    target: Prepared, model: CostModel | None, seeds: list[Any], known: list[Prepared]
) -> dict[str, Any]:
    """The picks' times relative to the landscape best, and the predict search's time."""
    best = target.land.best_ms
    replay = Replay(target.land, target.space)
    weighted = Replay(target.land, target.space, tile_weight=TILE_WEIGHT)

    def relative(config: Any, lookup: Replay = replay) -> float:
        trial = lookup.lookup(config)
        return trial.time_ms / best if trial.ok and trial.time_ms else math.inf

    default = relative(target.space.default())
    out: dict[str, Any] = {"case": target.land.case.name, "default": default}
    if model is None:
        same = {c: relative(target.space.default(), weighted) for c in ("top1_w", "top3_w")}
        return {**out, **same, "top1": default, "top3": default, "untuned": default,
                "confident": False}  # fmt: skip
    started = time.perf_counter()
    picks = top_picks(model, target.desc, target.space, seeds)
    predict_ms = (time.perf_counter() - started) * 1e3
    pick = judge(model, target.desc, target.space, seeds, [p.desc for p in known])
    times = [relative(c) for c in picks]
    imputed = replay.imputed
    weighted_times = [relative(c, weighted) for c in picks]
    search_replay = Replay(target.land, target.space)
    budget = Budget(4, 10.0, clock=search_replay.clock)
    make_search(
        "predict",
        target.space,
        search_replay,
        budget,
        seeds=seeds,
        model=model,
        description=target.desc,
    ).run()
    return {
        **out,
        "top1": times[0],
        "top3": min(times),
        "top1_w": weighted_times[0],
        "top3_w": min(weighted_times),
        "untuned": relative(pick.config) if pick.confident else default,
        "confident": pick.confident,
        "distance": pick.distance,
        "margin": round(pick.margin, 3),
        "imputed_picks": imputed,
        "predict_ms": round(predict_ms, 1),
        "predict_sim_s": round(search_replay.now, 2),
        "predict_final": (search_replay.best_ms() or math.inf) / best,
    }


def evaluate(
    cases: list[Prepared], drop: int | None = None, kind: str = "blend"
) -> dict[str, list[dict[str, Any]]]:
    """Every landscape, held out by shape and by kernel; with `drop`, each model learns
    without a random `DROPPED` share of the other kernels' landscapes (seeded by `drop`)."""
    results: dict[str, list[dict[str, Any]]] = {"shape": [], "kernel": []}
    rng = random.Random(drop)
    dropped = {id(p) for p in cases if drop is not None and rng.random() < DROPPED}
    kernels = sorted({p.kernel for p in cases})
    kernel_models = {
        k: train([p for p in cases if p.kernel != k and id(p) not in dropped], kind)
        for k in kernels
    }
    for target in cases:
        others = [p for p in cases if p is not target]
        same_kernel = [p for p in others if p.kernel == target.kernel]
        learned = [p for p in others if p.kernel == target.kernel or id(p) not in dropped]
        shape = case_result(target, train(learned, kind), seeds_for(target, others), same_kernel)
        kernel = case_result(
            target, kernel_models[target.kernel], heuristic_seeds(target.space), []
        )
        results["shape"].append(shape)
        results["kernel"].append(kernel)
        print(f"{target.land.case.name}: done", flush=True)
    return results


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians, geometric means and shares within 3% and 5% of the landscape best."""
    out: dict[str, Any] = {"cases": len(rows), "confident": sum(r["confident"] for r in rows)}
    for column in COLUMNS:
        values = [r[column] for r in rows]
        finite = [v for v in values if math.isfinite(v)]
        out[column] = {
            "median": statistics.median(values),
            "geomean": math.exp(statistics.fmean(math.log(v) for v in finite)) if finite else None,
            "failed": len(values) - len(finite),
            "within_3pct": sum(v <= 1.03 for v in values),
            "within_5pct": sum(v <= 1.05 for v in values),
        }
    confident = [r for r in rows if r["confident"]]
    out["confident_top1_vs_default"] = [round(r["default"] / r["top1"], 3) for r in confident]
    out["worst_top1"] = [
        [r["case"], round(r["top1"], 3)] for r in sorted(rows, key=lambda r: -r["top1"])[:8]
    ]
    timed = [r["predict_ms"] for r in rows if "predict_ms" in r]
    out["predict_ms_median"] = statistics.median(timed) if timed else None
    sims = [r["predict_sim_s"] for r in rows if "predict_sim_s" in r]
    out["predict_sim_s_median"] = statistics.median(sims) if sims else None
    return out


def table(summaries: dict[str, dict[str, Any]]) -> str:
    lines = [
        "| held out | cases | top-1 | best of top 3 | default | untuned (confident) |"
        " top-1, weighted lookup | best of 3, weighted lookup |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for mode, s in summaries.items():

        def cell(column: str, s: dict[str, Any] = s) -> str:
            c = s[column]
            return (
                f"{c['median']:.3f} / {c['geomean']:.3f} ({c['within_3pct']}, {c['within_5pct']})"
            )

        lines.append(
            f"| {mode} | {s['cases']} | {cell('top1')} | {cell('top3')} | {cell('default')} |"
            f" {cell('untuned')} [{s['confident']}] | {cell('top1_w')} | {cell('top3_w')} |"
        )
    lines.append(
        "cells: median / geometric mean of time / landscape best (cases within 3%, within 5%);"
        " [n]: cases where the model was confident; weighted lookup: an unrecorded pick"
        f" takes the time of its nearest recorded config with the tile knobs weighted"
        f" {TILE_WEIGHT:g}x"
    )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--landscapes", default=str(ROOT / "benchmarks" / "landscapes" / "h200"))
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "predict_eval.json"))
    parser.add_argument(
        "--drop", type=int, default=None, help="train without a random fifth (this seed)"
    )
    parser.add_argument("--model", choices=KINDS, default="blend", help="the cost model's kind")
    args = parser.parse_args()
    started = time.monotonic()
    cases = [prepare(land) for land in load_all(args.landscapes)]
    results = evaluate(cases, args.drop, args.model)
    summaries = {mode: summary(rows) for mode, rows in results.items()}
    print(table(summaries))
    for mode, s in summaries.items():
        print(f"{mode}: confident top-1 speedup over default {s['confident_top1_vs_default']}")
        print(f"{mode}: predict search, simulated seconds (median) {s['predict_sim_s_median']}")
        print(f"{mode}: top 3 picks, ms (median, features and model) {s['predict_ms_median']}")
        print(f"{mode}: worst top-1 {s['worst_top1']}")
    report = {
        "summary": summaries,
        "cases": results,
        "setting": "offline replay, H200 landscapes",
        "drop": args.drop,
    }
    Path(args.out).write_text(json.dumps(report, indent=1, default=str))
    print(f"\n{len(cases)} landscapes, {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
