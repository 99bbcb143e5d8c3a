"""Tuning the transformer block's whole manifest on one GPU and on two (issue 17).

Records one training step of `examples/transformer_block.py` (every kernel and shape it
calls), then tunes that manifest from an empty tuning database with 1 and with 2 worker
processes (one per GPU), and once more on 2 with one worker killed mid-run. Reports wall
time, trials, each entry's best kernel time, and whether any finished trial was lost.

    python benchmarks/bench_manifest.py --budget-s 60 --max-configs 10 --runs 1,2
                                                        # on a 2-GPU machine (RESULTS.md)
    python benchmarks/bench_manifest.py --smoke         # a CPU dry run, tiny sizes

JSON goes to --out (default $OUT/bench_manifest.json, or benchmarks/results/). A table
says where each run's time went: compiling (summed over compiles, and the longest compile
of each batch, which the batch waits for), timing on the GPUs (first timings and
re-timings), and the share of the GPUs' time left idle.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sqlite3
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

os.environ.setdefault("TILECRAFT_AUTOTUNE_EFFORT", "none")  # recording must not tune
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))

from tilecraft.autotune.db import DB_NAME, TuningDB  # noqa: E402
from tilecraft.autotune.fleet import RunState, TuneOptions, tune_manifest  # noqa: E402
from tilecraft.autotune.manifest import Manifest, record  # noqa: E402


def record_step(device: str, args: argparse.Namespace) -> Manifest:
    """The manifest of one forward and backward step of the transformer block, at the sizes
    `bench_model.py` trains it (so a kept database serves that benchmark)."""
    import transformer_block as tb

    dtype = torch.bfloat16 if device == "cuda" else torch.float32  # as the model trains
    sizes = {"vocab": args.vocab, "dim": args.dim, "seq": args.seq, "heads": args.heads}
    model, _ = tb.models(seed=0, dtype=dtype, device=device, **sizes)
    tokens, targets = tb.data(batch=args.batch, seq=args.seq, vocab=args.vocab)
    with record() as manifest:
        model(tokens.to(device), targets.to(device)).backward()
    return manifest


def tune(manifest: Manifest, workers: int, args: argparse.Namespace, kill: bool) -> dict:
    """One run from an empty database; with `kill`, one worker is killed once trials land.
    With `--keep DIR`, the database of each run that kills nothing is copied to DIR (the last
    such run's stays there)."""
    cache = tempfile.mkdtemp(prefix="bench-manifest-")
    # Triton's compile cache too: a later run must not find the earlier run's binaries (the
    # workers inherit this environment)
    os.environ["TRITON_CACHE_DIR"] = str(Path(cache) / "triton")
    options = TuneOptions(
        effort=args.effort,
        budget_s=args.budget_s,
        max_configs=args.max_configs,
        cache_dir=cache,
        concurrent=args.concurrent,
    )
    db = TuningDB(Path(cache) / DB_NAME)
    killed: dict[str, Any] = {}

    def kill_once(state: RunState) -> None:
        busy = [s for s in state.slots if s.job is not None and s.proc is not None]
        if not kill or killed or not busy or db.count() < 5:
            return
        killed["trials_before"] = db.trial_rows()
        killed["worker"] = busy[0].name
        os.kill(busy[0].proc.pid, signal.SIGKILL)  # type: ignore[union-attr]

    started = time.perf_counter()
    outcomes = tune_manifest(
        manifest, options, workers=workers, cpu=args.cpu or None, on_update=kill_once
    )
    wall = time.perf_counter() - started
    after = db.trial_rows()
    result = {
        "workers": workers,
        "concurrent": args.concurrent or (1 if args.cpu else 2),  # entries per worker at once
        "wall_s": round(wall, 1),
        "trials": len(after),
        "failed_entries": sum(o.status == "failed" for o in outcomes),
        "best_ms": {o.entry.ident: o.best_ms for o in outcomes},
        "phases_s": summed([o.phases for o in outcomes]),
        "per_entry": [[o.entry.qualname, o.worker, o.phases.get("total")] for o in outcomes],
        "trials_by_kernel": by_kernel(after),
    }
    result["time_s"] = where_time_went(result["phases_s"], wall, workers)
    if args.keep and not kill:
        Path(args.keep).mkdir(parents=True, exist_ok=True)
        with (
            sqlite3.connect(Path(cache) / DB_NAME) as src,
            sqlite3.connect(Path(args.keep) / DB_NAME) as dst,
        ):
            src.backup(dst)
    if kill:
        before = killed.get("trials_before", [])
        result["killed"] = killed.get("worker")
        result["lost_trials"] = sum(row not in after for row in before)
    db.close()
    return result


def summed(phases: list[dict[str, float]]) -> dict[str, float]:
    """Each phase's seconds summed over the entries (where the tuning time went)."""
    total: dict[str, float] = {}
    for entry in phases:
        for name, seconds in entry.items():
            total[name] = round(total.get(name, 0.0) + seconds, 2)
    return total


def where_time_went(phases: dict[str, float], wall: float, gpus: int) -> dict[str, float]:
    """A run's time by kind: compiling (CPU seconds summed over compiles; the longest
    compile of each batch summed, which the batches waited for), timing (the GPUs busy:
    first timings and re-timings), the tuning process's own work (planning, searching,
    code generation), and the share of the GPUs' time (wall x GPUs) left idle."""
    busy = phases.get("timing", 0.0) + phases.get("retime", 0.0)
    return {
        "compile_cpu_s": phases.get("compile_sum", 0.0),
        "compile_waited_s": phases.get("compile_max", 0.0),
        "timing_s": round(busy, 2),
        "host_s": round(sum(phases.get(k, 0.0) for k in ("plan", "search", "codegen")), 2),
        "workers_ready_s": phases.get("workers_ready", 0.0),
        "gpu_idle_share": round(max(0.0, 1 - busy / max(wall * gpus, 1e-9)), 3),
    }


def table(runs: list[dict[str, Any]]) -> str:
    """The runs as a markdown table: wall time, trials, and where the time went."""
    head = "| run | wall s | trials | compile cpu s | compile waited s | timing s | host s"
    rows = [head + " | workers ready s | GPU idle |", "|---" * 9 + "|"]
    for run in runs:
        t = run["time_s"]
        name = f"{run['workers']} GPU" + (" (one killed)" if "killed" in run else "")
        rows.append(
            f"| {name} | {run['wall_s']} | {run['trials']} | {t['compile_cpu_s']} |"
            f" {t['compile_waited_s']} | {t['timing_s']} | {t['host_s']} |"
            f" {t['workers_ready_s']} | {t['gpu_idle_share']:.0%} |"
        )
    return "\n".join(rows)


def by_kernel(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per kernel: trials by status, and the first error of a failed one."""
    out: dict[str, dict[str, Any]] = {}
    for row in rows:
        seen = out.setdefault(row["kernel_name"], {})
        seen[row["status"]] = seen.get(row["status"], 0) + 1
        if row["error"] and row["status"] not in ("ok", "skipped"):
            seen.setdefault("first_error", row["error"][:400])
    return out


SMOKE = ["--cpu", "--budget-s", "20", "--max-configs", "2", "--dim", "16", "--seq", "8"]
SMOKE += ["--batch", "2", "--heads", "2", "--vocab", "32"]


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cpu", action="store_true", help="worker processes under the interpreter")
    p.add_argument("--smoke", action="store_true", help="a CPU dry run on tiny sizes")
    p.add_argument("--effort", default="quick")
    p.add_argument("--budget-s", type=float, default=15.0, help="seconds per entry")
    p.add_argument("--max-configs", type=int, default=None, help="configs per entry")
    p.add_argument("--concurrent", type=int, default=None, help="entries per GPU at once")
    p.add_argument("--dim", type=int, default=512)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--vocab", type=int, default=4096)
    p.add_argument("--keep", default="", help="copy the last run's database here")
    p.add_argument("--runs", default="1,2,kill", help="which runs, in order: 1, 2, kill")
    p.add_argument("--out", default="", help="the JSON file")
    argv = list(sys.argv[1:] if argv is None else argv)
    args = p.parse_args(SMOKE + argv if "--smoke" in argv else argv)
    device = "cpu" if args.cpu else "cuda"
    manifest = record_step(device, args)
    print(f"manifest: {len(manifest)} entries", file=sys.stderr)
    default_out = Path(os.environ.get("OUT") or ROOT / "benchmarks" / "results")
    out = Path(args.out) if args.out else default_out / "bench_manifest.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {
        "device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu",
        "budget_s": args.budget_s,
        "entries": [e.ident for e in manifest],
        "runs": [],
    }
    for run in args.runs.split(","):  # the JSON is written after each run: a cut run keeps some
        workers = 1 if run == "1" else 2
        report["runs"].append(tune(manifest, workers, args, kill=run == "kill"))
        walls = {r["workers"]: r["wall_s"] for r in report["runs"] if "killed" not in r}
        if 1 in walls and 2 in walls:
            report["speedup_2_over_1"] = round(walls[1] / max(walls[2], 1e-9), 2)
        out.write_text(json.dumps(report, indent=1))
    print(json.dumps({k: v for k, v in report.items() if k != "entries"}, indent=1))
    print(table(report["runs"]))
    if "speedup_2_over_1" in report:
        print(f"\n2 GPUs over 1: {report['speedup_2_over_1']}x (goal 1.8x)")
    return report


if __name__ == "__main__":
    main()
