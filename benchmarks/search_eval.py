"""Replay every search strategy on the recorded landscapes, offline and deterministically.

For each landscape (one kernel at one shape) and each strategy, the search runs against
`Replay` (recorded results, simulated wall time) and we note the best kernel time found,
relative to the best in the landscape, after N benchmarks and after T simulated seconds.
Two settings, as the tuner would meet them:

- held-out shape: the cost model is trained on every other landscape (the other shapes
  of this kernel included), and the searches are seeded with the best configs of the
  kernel's other shapes, nearest first (as the tuning database would seed them);
- held-out kernel: the model is trained without any trial of this kernel, and there are
  no seeds of it.

`--budget quick` runs each search under the quick effort's budget as tuning gives it to
the search on a GPU (64 configs; 88% of 10 s, the rest re-times the leaders) instead of
60 configs or 120 s; each table then also says, per strategy, in how many cases the
search ended at the landscape's best ("hit best") and within 1% of it, and after how many
trials it first came within 1% (median over the cases that did). Every table also sums,
over the cases, the trials of the median runs that failed and, in parentheses, those that
timed out (a compile past the timeout: 10 s of the clock).

Usage: python benchmarks/search_eval.py [--landscapes DIR] [--seeds 3] [--out FILE]
         [--strategies fast,classifier,...] [--cases softmax,matmul] [--budget quick]
         [--per-case] [--slow-share 0.25]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tilecraft.autotune.features import describe  # noqa: E402
from tilecraft.autotune.landscape import Landscape, load_all  # noqa: E402
from tilecraft.autotune.model import CostModel  # noqa: E402
from tilecraft.autotune.replay import Replay  # noqa: E402
from tilecraft.autotune.search import make_search  # noqa: E402
from tilecraft.autotune.search.common import normalize  # noqa: E402
from tilecraft.autotune.search.learned import LearnedSearch  # noqa: E402
from tilecraft.autotune.seeds import heuristic_seeds, nearest_bests  # noqa: E402
from tilecraft.autotune.space import ConfigSpace  # noqa: E402
from tilecraft.autotune.trial import Budget  # noqa: E402
from tilecraft.autotune.tune import EFFORTS, RETIME_SHARE  # noqa: E402

STRATEGIES = ("random", "pattern", "de", "classifier", "quick", "fast")
AFTER_N = (5, 10, 20, 50)
AFTER_S = (5.0, 15.0, 60.0)
MAX_CONFIGS, MAX_SECONDS = 60, 120.0
LIMITS: tuple[int, float] = (MAX_CONFIGS, MAX_SECONDS)  # the searches' budget (see --budget)


@dataclass
class Prepared:
    """A landscape with what searching it needs: its space, description and spec key."""

    land: Landscape
    space: ConfigSpace
    desc: dict[str, Any]
    spec_key: str

    @property
    def kernel(self) -> str:
        return self.land.case.function

    def best_config(self) -> Any:
        ok = [t for t in self.land.trials if t.ok and t.time_ms]
        return min(ok, key=lambda t: t.time_ms).config


def prepare(land: Landscape) -> Prepared:
    _, bound, _ = land.case.bind("meta")
    return Prepared(land, land.space(bound), describe(bound, land.hardware), bound.spec_key)


def train(cases: list[Prepared]) -> CostModel | None:
    return CostModel.fit([(p.desc, p.land.trials) for p in cases])


def seeds_for(target: Prepared, known: list[Prepared]) -> list[Any]:
    """Best configs of the same kernel at other shapes (nearest first), then heuristics."""
    same = {p.spec_key: (0.0, p.best_config()) for p in known if p.kernel == target.kernel}
    found = [normalize(target.space, c) for c in nearest_bests(same, target.spec_key)]
    return [c for c in found if c is not None] + heuristic_seeds(target.space)


def quick_budget() -> tuple[int, float]:
    """The quick effort's budget as tuning on a GPU hands it to the search: its configs,
    and its seconds less the re-timing's share."""
    preset = EFFORTS["quick"]
    return preset.max_configs, preset.max_seconds * (1 - RETIME_SHARE)


def run(
    strategy: str, target: Prepared, model: CostModel | None, seeds: list, seed: int, tuned: int
) -> dict:
    """One search on one landscape: the best relative time after N trials and T seconds."""
    replay = Replay(target.land, target.space)
    budget = Budget(*LIMITS, clock=replay.clock)
    search = make_search(
        strategy,
        target.space,
        replay,
        budget,
        seed=seed,
        seeds=seeds,
        model=model,
        description=target.desc,
        tuned_seeds=tuned,
    )
    search.run()
    best = target.land.best_ms
    return {
        "after_n": {n: _at(replay.trace, 0, n) / best for n in AFTER_N},
        "after_s": {s: _at(replay.trace, 1, s) / best for s in AFTER_S},
        "trials": len(replay.history),
        "seconds": replay.now,
        "final": (replay.best_ms() or float("inf")) / best,
        "to_1pct": _first_within(replay.trace, best * 1.01),
        "imputed": replay.imputed / max(len(replay.history), 1),
        "failed": sum(not t.ok for t in replay.history),
        "timeouts": sum(t.status == "timeout" for t in replay.history),
    }


def _first_within(trace: list[tuple[int, float, float]], limit_ms: float) -> int | None:
    """The trials spent when the best time first came within `limit_ms` (None: never)."""
    return next((row[0] for row in trace if row[2] <= limit_ms), None)


def _at(trace: list[tuple[int, float, float]], axis: int, limit: float) -> float:
    """The best time once `limit` trials (axis 0) or seconds (axis 1) were spent."""
    within = [row[2] for row in trace if row[axis] <= limit]
    return min(within, default=float("inf"))


def evaluate(
    cases: list[Prepared], targets: list[Prepared], strategies: tuple[str, ...], seeds: int
) -> dict:
    """Every strategy on every target landscape, held out from the others in `cases`."""
    results: dict[str, dict[str, list[dict]]] = {"shape": {}, "kernel": {}}
    kernels = sorted({p.kernel for p in targets})
    kernel_models = {k: train([p for p in cases if p.kernel != k]) for k in kernels}
    for target in targets:
        others = [p for p in cases if p is not target]
        tuned = len({p.spec_key for p in others if p.kernel == target.kernel})
        settings = {
            "shape": (train(others), seeds_for(target, others), tuned),
            "kernel": (kernel_models[target.kernel], heuristic_seeds(target.space), 0),
        }
        for mode, (model, start, known) in settings.items():
            for strategy in strategies:
                runs = [run(strategy, target, model, start, s, known) for s in range(seeds)]
                results[mode].setdefault(strategy, []).append(_median_run(runs, target))
        print(f"{target.land.case.name}: done", flush=True)
    return results


def _median_run(runs: list[dict], target: Prepared) -> dict:
    pick = sorted(runs, key=lambda r: r["final"])[len(runs) // 2]
    return {**pick, "case": target.land.case.name}


def table(results: dict) -> str:
    lines = []
    for mode, by_strategy in results.items():
        lines.append(f"\nheld-out {mode}: median over cases of best time / landscape best")
        head = " | ".join([f"{n} trials" for n in AFTER_N] + [f"{s:.0f} s" for s in AFTER_S])
        lines.append(
            f"| strategy | {head} | final mean | hit best | within 1% | trials to 1%"
            " | trials used | sim. seconds | failed (timeouts), all cases |"
        )
        lines.append("|---" * (len(AFTER_N) + len(AFTER_S) + 8) + "|")
        for strategy, rows in by_strategy.items():
            cells = [_median(rows, "after_n", n) for n in AFTER_N]
            cells += [_median(rows, "after_s", s) for s in AFTER_S]
            cells += _hits(rows)
            used = statistics.median(r["trials"] for r in rows)
            secs = statistics.median(r["seconds"] for r in rows)
            failed = f"{sum(r['failed'] for r in rows)} ({sum(r['timeouts'] for r in rows)})"
            lines.append(
                f"| {strategy} | {' | '.join(cells)} | {used:.0f} | {secs:.1f} | {failed} |"
            )
    return "\n".join(lines)


def _hits(rows: list[dict]) -> list[str]:
    """The mean final result, how many cases ended at the best and within 1% of it, and
    the median trials to come within 1% (over the cases that did)."""
    finals = [r["final"] for r in rows]
    reached = [r["to_1pct"] for r in rows if r.get("to_1pct") is not None]
    mean = statistics.fmean(f for f in finals if f != float("inf")) if rows else float("nan")
    return [
        f"{mean:.3f}",
        f"{sum(f <= 1.0005 for f in finals)}/{len(rows)}",
        f"{sum(f <= 1.01 for f in finals)}/{len(rows)}",
        f"{statistics.median(reached):.0f}" if reached else "none",
    ]


def per_case(results: dict) -> str:
    """Each case's final result (the median run), per held-out mode and strategy."""
    lines = []
    for mode, by_strategy in results.items():
        names = [r["case"] for r in next(iter(by_strategy.values()), [])]
        lines.append(f"\nheld-out {mode}: final best / landscape best, per case")
        lines.append(f"| case | {' | '.join(by_strategy)} |")
        lines.append("|---" * (len(by_strategy) + 1) + "|")
        for i, name in enumerate(names):
            cells = [f"{rows[i]['final']:.3f}" for rows in by_strategy.values()]
            lines.append(f"| {name} | {' | '.join(cells)} |")
    return "\n".join(lines)


def _median(rows: list[dict], field: str, key: Any) -> str:
    value = statistics.median(r[field][key] for r in rows)
    return "none" if value == float("inf") else f"{value:.3f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--landscapes", default=str(ROOT / "benchmarks" / "landscapes" / "h200"))
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--strategies", default=",".join(STRATEGIES))
    parser.add_argument("--cases", default="", help="only these kernels (function names)")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "search_eval.json"))
    parser.add_argument(
        "--budget",
        choices=("long", "quick"),
        default="long",
        help="long: 60 configs or 120 s; quick: the quick effort's (as tuning on a GPU)",
    )
    parser.add_argument("--per-case", action="store_true", help="also each case's result")
    parser.add_argument(
        "--slow-share",
        type=float,
        default=LearnedSearch.slow_share,
        help="fast: skip picks predicted to compile longer than this share of the time left"
        " (inf: never)",
    )
    args = parser.parse_args()
    global LIMITS
    LearnedSearch.slow_share = args.slow_share
    LIMITS = quick_budget() if args.budget == "quick" else (MAX_CONFIGS, MAX_SECONDS)
    started = time.monotonic()
    cases = [prepare(land) for land in load_all(args.landscapes)]
    wanted = set(filter(None, args.cases.split(",")))
    targets = [p for p in cases if not wanted or p.kernel in wanted]
    results = evaluate(cases, targets, tuple(args.strategies.split(",")), args.seeds)
    print(table(results))
    if args.per_case:
        print(per_case(results))
    Path(args.out).write_text(json.dumps(results, indent=1, default=str))
    print(f"\n{len(cases)} landscapes, {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
