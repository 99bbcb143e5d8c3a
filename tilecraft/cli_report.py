"""`tilecraft report`: draw tuning runs and benchmark history (autotune/report.py) as PNG
files and one HTML page; `tilecraft report --list` lists what there is to draw."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

DEFAULT_OUT = "tilecraft-report"


def add_command(sub: Any) -> None:
    """Add `report` to the `tilecraft` parser's subparsers."""
    report = sub.add_parser(
        "report",
        help="draw tuning runs and benchmark history as PNG files and an HTML page",
        description="Draw, from the tuning database, each kernel and shape's tuning (best"
        " time so far against wall time and trials, one line per search; the configs tried,"
        " by time and energy where measured) and, from the benchmark database of `tilecraft"
        " bench`, each kernel's time per run; as PNG files and one HTML page (index.html)."
        " Needs matplotlib (pip install 'tilecraft[report]').",
    )
    report.add_argument("-o", "--out", default=DEFAULT_OUT, help="output folder (%(default)s)")
    report.add_argument("--kernel", help="only this kernel (its name, e.g. softmax)")
    report.add_argument("--shape", help="only this shape, e.g. 4096x4096")
    report.add_argument(
        "--run",
        type=int,
        action="append",
        default=[],
        metavar="ID",
        help="only this tuning run (repeatable; ids from --list); by default the latest"
        " run of each search",
    )
    report.add_argument(
        "--only", choices=("tuning", "bench"), help="draw only tuning runs or benchmark history"
    )
    report.add_argument(
        "--limit", type=int, default=8, help="most kernel/shape pairs (and kernels) drawn: 8"
    )
    report.add_argument("--list", action="store_true", help="list the runs there are; draw none")
    report.add_argument("--db", help="the tuning database (default: the cache dir's)")
    report.add_argument(
        "--bench-db", help="the benchmark database (default: bench.sqlite3 beside --db)"
    )


def run(args: argparse.Namespace) -> int:
    """Draw the report, or list the runs; a ReportError (nothing to draw) is the caller's
    to print (exit status 2)."""
    from tilecraft.autotune.report import default_paths, write_report

    if args.list:
        return _list(*default_paths(args.db, args.bench_db), args.kernel, args.shape)
    report = write_report(
        args.out,
        args.db,
        args.bench_db,
        kernel=args.kernel,
        shape=args.shape,
        runs=args.run,
        limit=args.limit,
        what=args.only or "all",
    )
    for picture in report.pictures:
        print(f"{picture.path}  {picture.title}")
    for note in report.notes:
        print(f"not drawn: {note}")
    count = len(report.pictures)
    print(f"tilecraft: {count} picture{'s' * (count != 1)}; open {report.html}")
    return 0


def _list(db: Path, bench_db: Path, kernel: str | None, shape: str | None) -> int:
    """Print the tuning runs and benchmarked kernels there are; ReportError if none."""
    from tilecraft.autotune import regress
    from tilecraft.autotune.report import bench_matches
    from tilecraft.autotune.runs import read_runs
    from tilecraft.exc import ReportError

    lines, problems = [], []
    try:
        lines += [_run_line(r) for r in read_runs(db, kernel, shape)]
    except ReportError as error:
        problems.append(str(error))
    try:
        history = regress.history(bench_db)
        lines += [
            f"bench {name}: {len(runs)} runs"
            for name, runs in history.items()
            if bench_matches(name, kernel, shape)
        ]
    except ReportError as error:
        problems.append(str(error))
    if not lines:
        raise ReportError("nothing to list: " + "; ".join(problems or [f"{db} holds no runs"]))
    print("\n".join(lines))
    return 0


def _run_line(run: Any) -> str:
    best = run.best_ms()
    shown = "-" if best is None else f"{best:.4g} ms"
    return (
        f"run {run.id}: {run.label()} on {run.hardware}: {len(run.trials)} trials,"
        f" best {shown}, {run.wall_s():.1f} s"
    )
