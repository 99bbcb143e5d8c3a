"""The `tilecraft` subcommands of whole-model tuning: `record`, `tune`, `export`,
`import` and `merge-db` (split from `cli` so that each file stays small)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

COMMANDS = ("record", "tune", "export", "import", "merge-db")


def add_commands(sub: Any) -> None:
    """Add the subcommands to the `tilecraft` parser's subparsers."""
    rec = sub.add_parser("record", help="run a script and record the kernels it calls")
    rec.add_argument("script", help="a Python script that runs the model (one step is enough)")
    rec.add_argument("script_args", nargs=argparse.REMAINDER, help="its arguments (after it)")
    rec.add_argument("-o", "--output", default="manifest.json", help="the manifest to write")
    tune = sub.add_parser("tune", help="tune every entry of a manifest, on every local GPU")
    tune.add_argument("manifest")
    tune.add_argument("--effort", choices=("quick", "full"))
    tune.add_argument("--search", help="a search strategy's name")
    tune.add_argument("--budget-s", type=float, help="seconds per entry")
    tune.add_argument("--max-configs", type=int, help="configs per entry")
    tune.add_argument("--workers", type=int, help="worker processes (default: one per GPU)")
    tune.add_argument("--cpu", action="store_true", help="tune under Triton's interpreter")
    tune.add_argument("--retune", action="store_true", help="tune entries tuned before too")
    tune.add_argument("--scheduler", help="a Dask scheduler's address: tune on that cluster")
    exp = sub.add_parser("export", help="write a manifest's tuned configs to one file")
    exp.add_argument("manifest", nargs="?", help="a manifest (default: every stored winner)")
    exp.add_argument("-o", "--output", default="tuned.json")
    exp.add_argument("--trials", action="store_true", help="include every trial too")
    exp.add_argument("--db", help="the tuning database (default: the cache dir's)")
    imp = sub.add_parser("import", help="load tuned configs into this cache's database")
    imp.add_argument("tuned", help="a file written by `tilecraft export`")
    imp.add_argument("--db", help="the tuning database (default: the cache dir's)")
    merge = sub.add_parser("merge-db", help="merge tuning database SOURCE into TARGET")
    merge.add_argument("target")
    merge.add_argument("source")


def run(args: argparse.Namespace) -> int:
    """Run one of `COMMANDS`; a ManifestError is printed as one line (exit status 2)."""
    from tilecraft.autotune.manifest import ManifestError

    try:
        return _DISPATCH[args.command](args)
    except ManifestError as e:
        print(f"tilecraft: {e.message}", file=sys.stderr)
        return 2


def _db(path: str | None) -> Any:
    from tilecraft.autotune.db import TuningDB, default_db_path

    return TuningDB(path or default_db_path())


def _record(args: argparse.Namespace) -> int:
    from tilecraft.autotune.manifest import record_script

    manifest = record_script(args.script, args.script_args)
    manifest.save(args.output)
    calls = sum(e.calls for e in manifest)
    print(f"tilecraft: {len(manifest)} entries ({calls} calls) written to {args.output}")
    return 0


def _tune(args: argparse.Namespace) -> int:
    from tilecraft.autotune.fleet import TuneOptions, tune_manifest
    from tilecraft.autotune.manifest import Manifest, ManifestError

    manifest = Manifest.load(args.manifest)
    options = TuneOptions(
        args.effort, args.search, args.budget_s, args.max_configs, retune=args.retune
    )
    client = None
    if args.scheduler:
        try:
            from distributed import Client
        except ImportError:
            needs = "--scheduler needs Dask: pip install 'tilecraft[cluster]'"
            raise ManifestError(needs) from None
        client = Client(args.scheduler)
    outcomes = tune_manifest(
        manifest, options, workers=args.workers, cpu=args.cpu or None, client=client
    )
    for o in outcomes:
        detail = o.error or (f"{o.best_ms:.4f} ms" if o.best_ms is not None else "")
        print(f"{o.status:8} {o.entry.ident} {detail}")
    return 1 if any(o.status == "failed" for o in outcomes) else 0


def _export(args: argparse.Namespace) -> int:
    from tilecraft.autotune.manifest import Manifest
    from tilecraft.autotune.transfer import export_tuned

    manifest = Manifest.load(args.manifest) if args.manifest else None
    with _db(args.db) as db:
        counts = export_tuned(db, manifest, args.output, trials=args.trials)
    print(f"tilecraft: {counts['best']} configs, {counts['trials']} trials -> {args.output}")
    return 0


def _import(args: argparse.Namespace) -> int:
    from tilecraft.autotune.transfer import import_tuned

    with _db(args.db) as db:
        counts = import_tuned(args.tuned, db)
        print(f"tilecraft: {counts['best']} configs, {counts['trials']} new trials -> {db.path}")
    return 0


def _merge(args: argparse.Namespace) -> int:
    from tilecraft.autotune.transfer import merge_databases

    counts = merge_databases(Path(args.target), Path(args.source))
    print(
        f"tilecraft: {counts['new_trials']} of {counts['trials']} trials were new;"
        f" {counts['best']} best configs offered"
    )
    return 0


_DISPATCH = {
    "record": _record,
    "tune": _tune,
    "export": _export,
    "import": _import,
    "merge-db": _merge,
}
