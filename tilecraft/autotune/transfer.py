"""Shipping tuning results between machines: export a manifest's winners (and optionally
their trials) to one JSON file, import it into another cache, merge two databases.

Example::

    export_tuned(Manifest.load("manifest.json"), db, "tuned.json")   # on the tuning host
    import_tuned("tuned.json", TuningDB(default_db_path()))            # where the model runs
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tilecraft.autotune.db import TuningDB
from tilecraft.autotune.manifest import Manifest, ManifestError, read_json
from tilecraft.runtime.cache import write_private

FORMAT = "tilecraft-tuned"
FORMAT_VERSION = 1


def tuned_results(db: TuningDB, manifest: Manifest | None, trials: bool = False) -> dict[str, Any]:
    """The best configs (every hardware and version stored) of the manifest's entries (all
    entries of the database when `manifest` is None), and their trials if asked."""
    keys = [(e.fingerprint, e.spec_key) for e in manifest] if manifest is not None else [None]
    best: list[dict[str, Any]] = []
    rows: list[dict[str, Any]] = []
    for key in dict.fromkeys(keys):
        kernel, spec = key if key is not None else (None, None)
        best += db.best_rows(kernel=kernel, spec_key=spec)
        if trials:
            rows += db.trial_rows(kernel=kernel, spec_key=spec)
    body: dict[str, Any] = {"format": FORMAT, "version": FORMAT_VERSION, "best": best}
    if trials:
        body["trials"] = rows
    return body


def export_tuned(
    db: TuningDB, manifest: Manifest | None, path: Path | str, trials: bool = False
) -> dict[str, int]:
    """Write `tuned_results` to `path` (atomically); return counts of what it holds."""
    body = tuned_results(db, manifest, trials)
    write_private(Path(path), json.dumps(body, indent=1, sort_keys=True) + "\n")
    return {"best": len(body["best"]), "trials": len(body.get("trials", []))}


def import_tuned(path: Path | str, db: TuningDB) -> dict[str, int]:
    """Load an exported file into `db`: its winners (a faster stored one stays) and its
    trials (those stored already are skipped). Returns counts of what was added."""
    body = read_json(path, FORMAT, FORMAT_VERSION, "tuned-results")
    try:
        best = db.add_best_rows(body.get("best", []))
        added = db.add_trial_rows(body.get("trials", []))
    except (KeyError, TypeError) as e:
        raise ManifestError(f"{path}: a row lacks a field ({e})") from None
    return {"best": best, "trials": added}


def merge_databases(target: Path | str, source: Path | str) -> dict[str, int]:
    """Merge the tuning database at `source` into the one at `target` (no duplicates)."""
    if not Path(source).is_file():
        raise ManifestError(f"no tuning database {source}")
    with TuningDB(source) as other, TuningDB(target) as db:
        if other.in_memory or db.in_memory:
            raise ManifestError(f"cannot merge {source} into {target}: see the warning above")
        return db.merge_from(other)
