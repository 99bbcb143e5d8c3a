"""`tilecraft bench`: time the example kernels with their tuned configs and store the run;
`tilecraft bench --compare REF` compares a stored run with REF and exits 1 on a
regression (for CI). See autotune/regress.py for the test used."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path
from typing import Any


def add_command(sub: Any) -> None:
    """Add `bench` to the `tilecraft` parser's subparsers."""
    bench = sub.add_parser("bench", help="time the examples and store the run; or --compare")
    bench.add_argument(
        "--run",
        help="the run's name (default: the git commit); with --compare,"
        " the run compared (default: the latest stored)",
    )
    bench.add_argument("--compare", metavar="REF", help="compare the run with run REF")
    bench.add_argument(
        "--threshold",
        type=float,
        default=0.05,
        help="least relative change of the median flagged (default 0.05)",
    )
    bench.add_argument("--samples", type=int, default=10, help="timings per kernel")
    bench.add_argument("--kernels", default="", help="only these examples (comma-separated)")
    bench.add_argument("--examples", help="a folder of examples (default: the shipped ones)")
    bench.add_argument("--db", help="the benchmark database (default: the cache dir's)")


def run(args: argparse.Namespace) -> int:
    """Compare two stored runs, or time the examples and store a run."""
    path = Path(args.db) if args.db else _default_path()
    try:
        return _compare(args, path) if args.compare else _record(args, path)
    except KeyError as e:  # a run that is not stored
        raise _error(e.args[0]) from None


def _error(message: str) -> Exception:
    from tilecraft.cli import CommandError  # printed as one line, exit status 2

    return CommandError(message)


def _compare(args: argparse.Namespace, path: Path) -> int:
    from tilecraft.autotune import regress

    stored = regress.runs(path)
    new = args.run or next((r for r in reversed(stored) if r != args.compare), None)
    if new is None:
        raise KeyError(f"no run to compare with {args.compare!r} in {path}")
    changes = regress.compare(
        regress.load_run(path, args.compare), regress.load_run(path, new), args.threshold
    )
    print(f"{new} against {args.compare}:\n{regress.report(changes)}")
    regressions = [c.kernel for c in changes if c.verdict == "regression"]
    if regressions:
        print(f"tilecraft: regressions in {', '.join(regressions)}", file=sys.stderr)
        return 1
    return 0


def _record(args: argparse.Namespace, path: Path) -> int:
    import torch

    from tilecraft import demo
    from tilecraft.autotune import regress
    from tilecraft.autotune.tune import versions

    if not torch.cuda.is_available():
        raise _error("`tilecraft bench` times kernels on a GPU; none is available")
    wanted = set(filter(None, args.kernels.split(",")))
    timings: dict[str, list[float]] = {}
    for file in demo.example_files(demo.find_examples(args.examples)):
        if wanted and file.stem not in wanted:
            continue
        module = demo.load_example(file)
        inputs = module.inputs(shape=demo.default_shape(module))
        for name, kernel in demo.example_kernels(module):
            kernel.settings.autotune_quiet = True
            kernel(*inputs)  # its tuned config (tuned now if it never was)
            key = f"{file.stem}.{name}-{'x'.join(map(str, inputs[0].shape))}"
            timings[key] = _samples(kernel, inputs, args.samples)
    commit = _git_commit()
    name = args.run or commit or "unnamed"
    regress.store_run(path, name, timings, torch.cuda.get_device_name(), versions(), commit)
    print(f"tilecraft: run {name!r}: {len(timings)} kernels stored in {path}")
    return 0


def _samples(kernel: Any, inputs: tuple, samples: int) -> list[float]:
    from tilecraft import demo

    return [demo.time_ms(lambda: kernel(*inputs)) for _ in range(samples)]


def _default_path() -> Path:
    from tilecraft.autotune import regress
    from tilecraft.autotune.tune import db_path
    from tilecraft.runtime.settings import Settings

    return db_path(Settings()).with_name(regress.BENCH_DB)


def _git_commit() -> str:
    try:
        done = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return ""
    return done.stdout.strip() if done.returncode == 0 else ""
